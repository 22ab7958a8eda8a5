//! The semaphore's release, as an operation for the shared release machinery
//! (`sync::release`): which grant goes back, under which memo.

use std::sync::Arc;

use super::Shared;
use crate::scripts::catalog::semaphore::sem_scripts;
use crate::sync::release::{ReleaseJob, ReleaseOp};

/// The release of `grant` under operation `op` (see `scripts/release.lua`). A guard's
/// release and the clean-up of an abandoned acquisition are the same operation: the
/// script gives back exactly the grant's permits, once, whoever asks first.
pub(super) fn release_job(sem: &Shared, grant: &str, op: u64) -> ReleaseJob {
    ReleaseJob {
        name: Arc::clone(&sem.name),
        op: ReleaseOp::new(
            &sem_scripts().release,
            &[
                &sem.keys.grants,
                &sem.keys.capacity,
                &sem.keys.lock.memo(grant, op),
            ],
            &[grant],
            false,
        ),
        label: None,
        counted: true,
    }
}
