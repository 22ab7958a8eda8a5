//! What [`Lock::inspect`](crate::Lock::inspect) reports: the public snapshot types.

use std::time::Duration;

use crate::client::ClientDescription;
use crate::kind::LockKind;
use crate::rw::layout::ReadWriteMode;

/// A snapshot of one lock name in Redis, from [`Lock::inspect`](crate::Lock::inspect). Each part is read by its
/// own command, so a lock that changes meanwhile may show parts of two moments.
///
/// The fields every kind has (`holders`, `remaining_lease`, `subscribers`...) are filled
/// for each; [`read_write`](LockInfo::read_write) and [`semaphore`](LockInfo::semaphore)
/// add what only that kind has, so that a tool that knows only locks still shows who
/// holds a read-write lock or a semaphore's permits.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct LockInfo {
    /// The lock name (without the key prefix).
    pub name: String,
    /// Which primitive the name's keys belong to.
    pub kind: LockKind,
    /// The Redis key of the lock hash (a semaphore's: its grants hash).
    pub key: String,
    /// Who holds the lock: one entry per owner (a reentrant lock has at most one; a
    /// read-write lock's readers and writer, holds = read + write holds; a semaphore's
    /// grants, holds = permits).
    pub holders: Vec<LockHolder>,
    /// Time until the lock expires; `None` when nobody holds it.
    pub remaining_lease: Option<Duration>,
    /// The finished holder whose `min_hold` (of `#[distributed_lock]`) keeps the lock
    /// taken until it expires, if any: the lock is busy though nobody holds it.
    pub kept_for_min_hold: Option<Participant>,
    /// The waiters registered for the lock, longest-waiting first: each waiting task's
    /// owner field and its client (a client with two waiting tasks shows twice). Locks
    /// only: a fair lock's waiters are its [`fair_queue`](LockInfo::fair_queue), and
    /// read-write locks and semaphores keep no registry.
    pub waiting_clients: Vec<Participant>,
    /// Tasks waiting in their client's local line for the lock, behind a task of their
    /// own client that holds it or waits in Redis: Redis' registry does not see them
    /// (each client goes to Redis with one task at a time). One entry per client that has
    /// any, as the first task of its line last reported it (when it checked the holder:
    /// 20 ms into each hold, then after every message for the lock and every recheck), so
    /// up to a recheck interval old. Locks only.
    pub local_lines: Vec<LocalLine>,
    /// How many connections listen for the lock's messages: for a lock, on the wake
    /// channel of each client that waits for it or holds it (one per client: its waiters
    /// share its subscription) and on its unlock channel; for the other kinds, on their
    /// channel.
    pub subscribers: u64,
    /// A fair lock's queue of waiting tasks, in order: each entry's owner field and
    /// client. Empty for other locks.
    pub fair_queue: Vec<Participant>,
    /// The last fencing token minted for this lock's counter, which every lock name with
    /// the same cluster slot anchor shares; `None` before the first one.
    pub fencing_counter: Option<u64>,
    /// A read-write lock's readers, writer and waiting writers; `None` for other kinds.
    pub read_write: Option<ReadWriteInfo>,
    /// A semaphore's capacity and grants; `None` for other kinds.
    pub semaphore: Option<SemaphoreInfo>,
}

/// A client's local line for a lock, in [`LockInfo::local_lines`].
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct LocalLine {
    /// The client (its `id` is the client id).
    pub client: Participant,
    /// How many of its tasks wait in the line.
    pub tasks: u64,
}

/// One owner of a lock, in [`LockInfo::holders`].
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct LockHolder {
    /// The owner field (`<client id>:<n>`) and its client.
    pub owner: Participant,
    /// How many holds the owner has (re-entries count).
    pub holds: u64,
    /// The fencing token of the owner's hold, when its client minted one.
    pub fence: Option<u64>,
}

/// What only a read-write lock has, in [`LockInfo::read_write`]. Owners whose deadline
/// passed (dropped by the next script that touches the lock) are left out, as every
/// script leaves them out.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct ReadWriteInfo {
    /// Whether readers or a writer hold it.
    pub mode: ReadWriteMode,
    /// The owners with read holds; `holds` is their read holds.
    pub readers: Vec<OwnerHold>,
    /// The owner with write holds, if any; `holds` is its write holds.
    pub writer: Option<OwnerHold>,
    /// The writers waiting (new readers wait behind them), with the time until each
    /// entry lapses if its writer stops trying.
    pub waiting_writers: Vec<OwnerHold>,
}

/// One owner's part of a read-write lock or one grant of a semaphore, with its own lease:
/// in these primitives each owner's hold ends on its own server-time deadline.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct OwnerHold {
    /// The owner field (a semaphore's grant id) and its client.
    pub owner: Participant,
    /// Read holds, write holds or permits, as the containing field says (0 for a waiting
    /// writer).
    pub holds: u64,
    /// Time until this owner's deadline (server time).
    pub remaining_lease: Duration,
    /// The fencing token of a writer's hold, when its client minted one.
    pub fence: Option<u64>,
}

/// What only a semaphore has, in [`LockInfo::semaphore`]. Grants whose deadline passed
/// (reclaimed by the next script that touches the semaphore) are left out and count as
/// free, as every script counts them.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct SemaphoreInfo {
    /// The key of the capacity (the grants hash is [`LockInfo::key`]).
    pub capacity_key: String,
    /// The stored capacity; `None` while grants exist without it (someone deleted it).
    pub capacity: Option<u64>,
    /// The live grants: `holds` is each grant's permits.
    pub grants: Vec<OwnerHold>,
    /// The permits the live grants hold.
    pub taken: u64,
    /// Capacity − taken (0 while a shrink left more taken than the capacity).
    pub available: u64,
}

/// An id found in a lock (an owner field or a client id) and the description its client
/// registered, when it is still there.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Participant {
    /// The id as Redis holds it.
    pub id: String,
    /// The client id in it (the part before the first `:`).
    pub client_id: String,
    /// What the client says about itself; `None` when it never registered (a user
    /// without the `dlock:client:` key pattern) or is gone.
    pub client: Option<ClientDescription>,
}
