//! The reentrant lock's scripts, built once per process; the multi-lock and RedLock run them too.
//!
//! Each script is this folder's `.lua` file with the shared Lua it names spliced in (see
//! `scripts::lua_script!`); `all` is this folder's line in `scripts::every_script`.

use std::sync::OnceLock;

use crate::lock::keys::LockKeys;
use crate::scripts::{lua_script, Script, ScriptCall};

/// The reentrant lock's scripts (`lock/scripts/`); each but `renew` takes the shared
/// `scripts/clock.lua`, `scripts/naps.lua` (what waiters were told) and the lock's
/// `handoff.lua` (the waiter registry and the hand-off).
pub(crate) struct LockScripts {
    pub(crate) acquire: Script,
    pub(crate) release: Script,
    pub(crate) renew: Script,
    /// A granted hold extended to its owner's lease (see `sync::grant`).
    pub(crate) extend: Script,
    pub(crate) force_unlock: Script,
    /// The last hold is given back but the lock stays taken until its minimum hold ends
    /// (`#[distributed_lock(min_hold = "...")]`).
    pub(crate) hold_until: Script,
}

pub(crate) fn scripts() -> &'static LockScripts {
    static SCRIPTS: OnceLock<LockScripts> = OnceLock::new();
    SCRIPTS.get_or_init(|| LockScripts {
        acquire: lua_script!(
            creating,
            "lock_acquire",
            "lock/scripts/acquire.lua",
            "scripts/clock.lua",
            "scripts/naps.lua",
            "lock/scripts/handoff.lua"
        ),
        release: lua_script!(
            new,
            "lock_release",
            "lock/scripts/release.lua",
            "scripts/clock.lua",
            "scripts/naps.lua",
            "lock/scripts/handoff.lua"
        ),
        renew: lua_script!(new, "lock_renew", "lock/scripts/renew.lua"),
        extend: lua_script!(
            new,
            "lock_extend",
            "lock/scripts/extend.lua",
            "scripts/clock.lua",
            "scripts/naps.lua",
            "lock/scripts/handoff.lua"
        ),
        force_unlock: lua_script!(
            new,
            "lock_force_unlock",
            "lock/scripts/force_unlock.lua",
            "scripts/clock.lua",
            "scripts/naps.lua",
            "lock/scripts/handoff.lua"
        ),
        hold_until: lua_script!(
            new,
            "lock_hold_until",
            "lock/scripts/hold_until.lua",
            "scripts/clock.lua",
            "scripts/naps.lua",
            "lock/scripts/handoff.lua"
        ),
    })
}

/// Every script of this folder, for the client to load and the function library to hold.
pub(crate) fn all() -> Vec<&'static Script> {
    let scripts = scripts();
    vec![
        &scripts.acquire,
        &scripts.release,
        &scripts.renew,
        &scripts.extend,
        &scripts.force_unlock,
        &scripts.hold_until,
    ]
}

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
