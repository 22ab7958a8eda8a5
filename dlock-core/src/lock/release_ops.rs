//! The reentrant lock's releases, as operations for the shared release machinery
//! (`sync::release`): which hold goes, under which memo, and what a waiter that stops
//! waiting gives back.

use std::borrow::Cow;
use std::sync::Arc;

use crate::lock::keys::LockKeys;
use crate::scripts::catalog::lock::scripts;
use crate::sync::release::{ReleaseJob, ReleaseOp};

/// Which hold a release gives back, with the operation id that makes it count once.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ReleaseKind {
    /// A guard gives back its own hold; `op` names the release's memo.
    Hold { op: u64 },
    /// An acquisition by a fresh owner ended without a guard (cancelled, timed out,
    /// failed, or a task a release gave the lock to stopped waiting before it learnt so,
    /// a `withdraw` its client's local line sends, see `sync::local`). No guard of that owner exists, so every hold it has
    /// is that acquisition's: all go, the owner leaves the waiter registry, and a lock left
    /// free goes to the next waiter.
    Withdraw,
    /// A hand-off reached an owner that no longer waits on this client (it stopped, or
    /// took the lock by a try of its own before the message came): it leaves the waiter
    /// registry, and a free lock goes to the next waiter. Its holds, if any, belong to its
    /// guard and stay.
    Leave,
    /// A re-entry was abandoned with its outcome unknown: its hold goes if its marker
    /// (acquisition `op`) shows it was applied.
    Reentry { op: u64 },
}

/// The release of `kind` for the owner `field` of the lock `name` (see
/// `scripts/release.lua`: mode `one`, `withdraw`, `leave` or `undo`).
pub(crate) fn release_job(
    name: &Arc<str>,
    keys: &LockKeys,
    field: &str,
    kind: ReleaseKind,
) -> ReleaseJob {
    // `withdraw` and `leave` are idempotent without a memo; the lock key fills the slot (same
    // slot as every key).
    let (mode, once_key): (_, Cow<'_, str>) = match kind {
        ReleaseKind::Hold { op } => ("one", keys.memo(field, op).into()),
        ReleaseKind::Withdraw => ("withdraw", keys.key.as_str().into()),
        ReleaseKind::Leave => ("leave", keys.key.as_str().into()),
        ReleaseKind::Reentry { op } => ("undo", keys.marker(field, op).into()),
    };
    ReleaseJob {
        name: Arc::clone(name),
        op: ReleaseOp::new(
            &scripts().release,
            &[&keys.key, &keys.channel, &once_key, &keys.naps],
            &[field, mode],
            true,
        )
        // A release that may give the lock away mints the token of whoever gets it.
        .with_hand_off_key(&keys.fence)
        // Its mode is its second argument; in mode `leave` it goes on telling waiters.
        .passing_on_with_leave(1),
        label: None,
        counted: true,
    }
}
