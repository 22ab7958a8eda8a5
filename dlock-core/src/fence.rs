//! [`Fence`]: the fencing token of one acquisition.

use std::fmt;

/// A fencing token: a number minted by Redis, in the acquire script, for every new holder
/// of a lock, and larger than every token handed out for that lock before.
///
/// A lease lock cannot stop a holder that pauses past its lease (a stall, `SIGSTOP`, a
/// slow disk) or loses the lock in an asynchronous failover: it wakes up and writes
/// anyway, after another holder did. The token lets the storage tell: each write carries
/// the writer's token, and the storage refuses a token lower than the highest it has
/// seen for that record. Tokens order the holders of one lock only; compare tokens of the
/// same lock.
///
/// A re-entry shares its outer hold's token, so an inner section's write never makes
/// the outer section's later write look stale.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Fence(u64);

impl Fence {
    /// A token from its number: one read back from storage, say. Tokens handed out by
    /// dlock start at 1.
    pub fn new(token: u64) -> Fence {
        Fence(token)
    }

    /// The token as a number, for storage that keeps it (a `fence` column, say).
    pub fn get(self) -> u64 {
        self.0
    }
}

impl fmt::Display for Fence {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.fmt(f)
    }
}

impl From<Fence> for u64 {
    fn from(fence: Fence) -> u64 {
        fence.0
    }
}
