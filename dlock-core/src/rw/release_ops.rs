//! The read-write lock's releases, as operations for the shared release machinery
//! (`sync::release`): which hold goes, under which memo.

use std::sync::Arc;

use super::{Kind, Shared};
use crate::scripts::catalog::rw::rw_scripts;
use crate::sync::release::{ReleaseJob, ReleaseOp};

/// Which hold a release gives back, with the operation id that makes it count once.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum ReleaseKind {
    /// A guard gives back its own hold; `op` names the release's memo.
    Hold { op: u64 },
    /// An acquisition by a fresh owner was abandoned (its outcome unknown, or a writer
    /// gave up waiting): every hold of its kind is that acquisition's, and a writer leaves
    /// the waiting writers.
    Withdraw { op: u64 },
    /// A re-entry was abandoned with its outcome unknown: its hold goes if its marker
    /// (acquisition `op`) shows it was applied.
    Reentry { op: u64 },
}

/// The release of `release` for `owner`'s hold of `kind` (see `scripts/release.lua`).
pub(super) fn release_job(
    lock: &Shared,
    owner: &str,
    kind: Kind,
    release: ReleaseKind,
) -> ReleaseJob {
    let field = kind.field(owner);
    let keys = &lock.keys;
    let (mode, once_key) = match release {
        ReleaseKind::Hold { op } => ("one", keys.memo(&field, op)),
        ReleaseKind::Withdraw { op } => ("withdraw", keys.memo(&field, op)),
        ReleaseKind::Reentry { op } => ("undo", keys.marker(&field, op)),
    };
    ReleaseJob {
        name: Arc::clone(&lock.name),
        op: ReleaseOp::new(
            &rw_scripts().release,
            &[
                &keys.key,
                &lock.writers,
                &keys.channel,
                &once_key,
                &keys.naps,
            ],
            &[owner, kind.as_str(), mode],
            false,
        ),
        label: None,
        counted: true,
    }
}
