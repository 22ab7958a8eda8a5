//! The fair lock's Redis names beside the lock's hash.

use crate::lock::keys::LockKeys;

/// The fair lock's extra names (`FairLock`), in the lock key's slot: its queue of waiters,
/// their entries' deadlines, and the start of each client's wake-up channel.
#[derive(Debug, Clone)]
pub(crate) struct FairKeys {
    /// Sorted set: waiter → place in the queue.
    pub(crate) queue: String,
    /// Sorted set: waiter → server time (ms) at which its entry dies.
    pub(crate) deadlines: String,
    /// A client's wake-up channel for this lock is this + its client id; each message
    /// names the waiter it wakes (`wake:<owner field>`).
    pub(crate) wake_prefix: String,
}

impl FairKeys {
    pub(crate) fn new(prefix: &str, name: &str) -> FairKeys {
        let base = LockKeys::new(prefix, name).helper("fair");
        FairKeys {
            queue: format!("{base}:queue"),
            deadlines: format!("{base}:deadlines"),
            wake_prefix: format!("{base}:wake:"),
        }
    }
}
