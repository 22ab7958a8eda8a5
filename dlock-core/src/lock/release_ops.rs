//! The reentrant lock's releases, as operations for the shared release machinery
//! (`sync::release`): which hold goes, under which memo.

use std::sync::Arc;

use crate::names::LockKeys;
use crate::scripts::scripts;
use crate::sync::release::{ReleaseJob, ReleaseOp};

/// Which hold a release gives back, with the operation id that makes it count once.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ReleaseKind {
    /// A guard gives back its own hold; `op` names the release's memo.
    Hold { op: u64 },
    /// An acquisition by a fresh owner was abandoned with its outcome unknown. No guard of
    /// that owner exists, so every hold it has is that acquisition's: all go.
    Owner { op: u64 },
    /// A re-entry was abandoned with its outcome unknown: its hold goes if its marker
    /// (acquisition `op`) shows it was applied.
    Reentry { op: u64 },
}

/// The release of `kind` for the owner `field` of the lock `name` (see
/// `scripts/release.lua`: mode `one`, `all` or `undo`).
pub(crate) fn release_job(
    name: &Arc<str>,
    keys: &LockKeys,
    field: &str,
    kind: ReleaseKind,
) -> ReleaseJob {
    let (mode, once_key) = match kind {
        ReleaseKind::Hold { op } => ("one", keys.memo(field, op)),
        // Idempotent without a memo; the lock key fills the slot (same slot as every key).
        ReleaseKind::Owner { .. } => ("all", keys.key.clone()),
        ReleaseKind::Reentry { op } => ("undo", keys.marker(field, op)),
    };
    ReleaseJob {
        name: Arc::clone(name),
        op: ReleaseOp {
            script: &scripts().release,
            keys: vec![keys.key.clone(), keys.channel.clone(), once_key],
            args: vec![field.to_owned(), mode.to_owned()],
            finds_nothing_once_done: true,
        },
        label: None,
    }
}
