//! The fair lock's releases, as operations for the shared release machinery
//! (`sync::release`): which hold or queue entry goes, under which memo.

use std::sync::Arc;

use crate::fair::keys::FairKeys;
use crate::lock::keys::LockKeys;
use crate::scripts::catalog::fair::fair_scripts;
use crate::sync::release::{ReleaseJob, ReleaseOp};

/// What a fair release gives back, with the operation id that makes it count once.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum FairRelease {
    /// A guard gives back its own hold; `op` names the release's memo.
    Hold { op: u64 },
    /// An acquisition that will not produce a guard (dropped, timed out, failed) leaves:
    /// its queue entry goes, and any hold an unanswered try may have taken.
    Leave { op: u64 },
    /// A re-entry was abandoned with its outcome unknown: its hold goes if its marker
    /// (acquisition `op`) shows it was applied.
    Undo { op: u64 },
}

/// The release of `kind` for the owner `field` (see `scripts/release.lua`).
pub(super) fn release_job(
    name: &Arc<str>,
    keys: &LockKeys,
    fair: &FairKeys,
    field: &str,
    kind: FairRelease,
) -> ReleaseJob {
    let (mode, once_key) = match kind {
        FairRelease::Hold { op } => ("one", keys.memo(field, op)),
        FairRelease::Leave { op } => ("leave", keys.memo(field, op)),
        FairRelease::Undo { op } => ("undo", keys.marker(field, op)),
    };
    ReleaseJob {
        name: Arc::clone(name),
        op: ReleaseOp::new(
            &fair_scripts().release,
            &[
                &keys.key,
                &fair.queue,
                &fair.deadlines,
                &once_key,
                &keys.naps,
            ],
            &[field, mode, &fair.wake_prefix],
            false,
        ),
        label: None,
        counted: true,
    }
}
