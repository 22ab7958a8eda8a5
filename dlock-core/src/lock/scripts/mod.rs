//! Calls of the reentrant lock's scripts (the `.lua` files of this folder, built in
//! `scripts::catalog::lock`): what an acquisition and a grant's extension send.

use crate::lock::keys::LockKeys;
use crate::scripts::catalog::lock::scripts;
use crate::scripts::ScriptCall;

/// What an acquire call is, besides the lock's keys and the owner.
pub(crate) struct AcquireArgs<'a> {
    /// The lease in ms (for a re-entry, 0 leaves the expiry as it is).
    pub(crate) lease_ms: u64,
    /// `'1'`: a fresh grant mints a fencing token.
    pub(crate) fence: &'a str,
    /// How long the registry lives past a busy try's registration; 0 registers nothing.
    pub(crate) registry_ms: u64,
    /// The client's publish command.
    pub(crate) publish: &'a str,
    /// A re-entry's marker and the marker's lifetime in ms; `None` for a fresh owner.
    pub(crate) reentry: Option<(&'a str, u64)>,
}

/// A call of the acquire script (`acquire.lua`) for the owner `field` of the lock `keys`:
/// one shape for every caller (the lock, the fair lock's re-entry, RedLock's nodes). A
/// fresh owner's call, the common one, passes no re-entry marker: every key and argument
/// costs the server a Lua string per call.
pub(crate) fn acquire_call(keys: &LockKeys, field: &str, args: AcquireArgs<'_>) -> ScriptCall {
    let mut call = scripts().acquire.prepare_invoke();
    call.key(&keys.key)
        .key(&*keys.fence)
        .key(&keys.channel)
        .key(&keys.naps)
        .arg(args.lease_ms)
        .arg(field)
        .arg(args.fence)
        .arg(args.registry_ms)
        // Whether an earlier try may have registered the owner: set by its try step.
        .arg("0")
        .arg(args.publish);
    if let Some((marker, marker_ms)) = args.reentry {
        call.key(marker).arg(marker_ms);
    }
    call
}

/// A call of the extend script (`extend.lua`) for the granted hold of `field` on the lock
/// `keys`, to `lease_ms`.
pub(crate) fn extend_call(
    keys: &LockKeys,
    field: &str,
    lease_ms: u64,
    publish: &str,
) -> ScriptCall {
    let mut call = scripts().extend.prepare_invoke();
    call.key(&keys.key)
        .key(&keys.channel)
        .key(&keys.naps)
        .arg(lease_ms)
        .arg(field)
        .arg(publish);
    call
}
