//! [`MultiLock`]: several locks taken all or nothing, in one script or one after another.
//!
//! The files: `mod.rs`: `MultiLock`, `LockClient::multi_lock`, its two modes and the
//! canonical order (the client's stable `deployment` identity — its configured addresses
//! and database, not the random id — then the key); `acquire.rs`: sequential, each lock
//! through `Lock::acquire` under one wait budget, giving back what it took on failure and
//! keeping explicit-lease holds alive while later ones are awaited; same-slot, one script
//! over N lock hashes in the lock's layout (prefixed with the lock's `handoff.lua`) that
//! answers which lock blocks, registers the owner as that lock's waiter (the `Waiter`
//! listens on its wake channel) and passes on a lock given to it that it cannot take
//! yet, run by a `TryStep` whose cleanup is the lock's `withdraw` release for each of the N
//! locks; a same-slot set goes the sequential way inside a scope holding one of its locks;
//! `guard.rs`: `MultiGuard`, one `LockGuard` per lock (`lost` = the first loss, `scope` =
//! `sync::owner::scope_all`, `unlock` → `NotHeld` or `PartialUnlock`); `scripts/`. No keys of
//! its own: renewed and released by the lock's scripts.

mod acquire;
mod guard;

pub use guard::MultiGuard;

use std::sync::Arc;

use crate::client::LockClient;
use crate::error::{LockError, Result};
use crate::lock::Lock;
use crate::names::slot_of;
use crate::sync::verbs::acquisition_verbs;

/// Several locks held together: all or none of them, as one guard.
///
/// [`LockClient::multi_lock`] builds one over names of one client and picks the mode;
/// the two modes can also be chosen explicitly, and the sequential one takes locks of
/// different Redis deployments (different [`LockClient`]s):
///
/// - **Same-slot** ([`MultiLock::same_slot`]): every name on one client and every key in
///   one cluster slot (give them a common hash tag: `order:{42}:items`,
///   `order:{42}:payment`). One script takes them all or none, atomically; keys in
///   different slots are refused at construction ([`LockError::CrossSlot`]). Inside the
///   scope of a guard of one of them the locks are taken one after another instead, as
///   sequential mode does (so that one is re-entered). On a client with `replica_acks`
///   the script is followed by one `WAIT` that confirms every lock it took.
/// - **Sequential** ([`MultiLock::sequential`]): any locks. They are taken one after the
///   other in one canonical order, sorted by deployment, then by key, so that two
///   multi-locks over overlapping sets can never wait for each other in a cycle: whoever
///   holds the first lock both want proceeds. The deployment is identified by its
///   configured addresses and database (not by the random client id), so every process
///   configured alike uses the same order; configure every process with the same
///   addresses (`127.0.0.1` and `localhost` are two deployments to the ordering).
///
/// Either way each lock is a plain reentrant lock in Redis (the same hash as
/// [`LockClient::lock`] of that name), so a multi-lock and a single lock of one of its
/// names exclude each other, and each lock is renewed, released and reported lost on its
/// own. [`names`](MultiLock::names) gives the order in which they are taken.
///
/// ```
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> dlock::Result<()> {
/// # let server = dlock_tests::RedisServer::start();
/// # let client = dlock::LockClient::connect(&server.url()).await?;
/// let transfer = client.multi_lock(["account:{bank}:7", "account:{bank}:3"])?;
/// assert_eq!(transfer.names(), ["account:{bank}:3", "account:{bank}:7"]);
/// let guard = transfer.lock().await?;
/// assert!(client.lock("account:{bank}:7").is_locked().await?);
/// guard.unlock().await?;
/// # Ok(())
/// # }
/// ```
///
/// # Waiting and leases
///
/// | method | waits | lease |
/// |---|---|---|
/// | [`lock`](MultiLock::lock) | until acquired (or the first client's `default_wait`) | watchdog |
/// | [`lock_with_lease`](MultiLock::lock_with_lease) | until acquired (or `default_wait`) | explicit |
/// | [`try_lock`](MultiLock::try_lock) | no | watchdog |
/// | [`try_lock_for`](MultiLock::try_lock_for) | up to `wait`, for the whole set | watchdog |
/// | [`try_lock_with_lease`](MultiLock::try_lock_with_lease) | up to `wait`, for the whole set | explicit |
///
/// With the watchdog, every lock is renewed by its client's watchdog, in one batch per
/// client and slot. With an explicit lease in sequential mode, the locks taken first are
/// kept alive while the later ones are awaited (renewed to the lease every third of it),
/// and when the last one is taken every earlier one whose expiry is more than a
/// twentieth of the lease sooner is renewed once more: every lock then expires about
/// `lease` after the whole set was held, none early.
///
/// # Cancel safety
///
/// Every acquisition is all or nothing for the caller, cancellation included: when it
/// fails, times out or its future is dropped, every lock it took, or may have taken (a
/// script sent whose reply never came), is released: in the foreground on failure, by the
/// client's background task when the future is dropped, retried until Redis confirms.
#[derive(Clone, Debug)]
pub struct MultiLock {
    /// In canonical order, without duplicates.
    locks: Arc<[Lock]>,
    mode: Mode,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Mode {
    /// One after the other, in canonical order, through each lock's own acquisition.
    Sequential,
    /// All at once by one script: every lock on one client, one cluster slot.
    SameSlot,
}

impl LockClient {
    /// A multi-lock over the locks `names` of this client: taken by one script, all at
    /// once, when every key is in one cluster slot (names with a common hash tag:
    /// `order:{42}:items`, `order:{42}:payment`), else one after another in the canonical
    /// order. Duplicates are merged.
    ///
    /// The choice follows the keys' cluster slots on every topology, so that a set behaves
    /// the same on a single server as on a cluster: [`MultiLock::same_slot`] for a set in
    /// one slot, [`MultiLock::sequential`] otherwise. Both exclude a single lock of
    /// one of the names and never deadlock against a multi-lock over an overlapping set.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> dlock::Result<()> {
    /// # let server = dlock_tests::RedisServer::start();
    /// # let client = dlock::LockClient::connect(&server.url()).await?;
    /// let transfer = client.multi_lock(["account:7", "account:3"])?;
    /// assert_eq!(transfer.names(), ["account:3", "account:7"]);
    /// let guard = transfer.lock().await?;
    /// guard.unlock().await?;
    /// # Ok(())
    /// # }
    /// ```
    ///
    /// # Errors
    ///
    /// [`LockError::InvalidName`] for an empty set or an invalid name.
    pub fn multi_lock<S: AsRef<str>>(
        &self,
        names: impl IntoIterator<Item = S>,
    ) -> Result<MultiLock> {
        let names: Vec<S> = names.into_iter().collect();
        match MultiLock::same_slot(self, &names) {
            Err(LockError::CrossSlot { .. }) => {
                MultiLock::sequential(names.iter().map(|name| self.lock(name.as_ref())))
            }
            chosen => chosen,
        }
    }
}

impl MultiLock {
    /// Sequential mode over any locks, on any clients: taken one after the other in
    /// canonical order (deployment, then key), each through the lock's own acquisition
    /// (the local line, re-entry inside a [`scope`](crate::LockGuard::scope) of it,
    /// waiting on its unlock messages). Duplicates (same deployment and same key) are
    /// merged.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> dlock::Result<()> {
    /// # let server = dlock_tests::RedisServer::start();
    /// # let client = dlock::LockClient::connect(&server.url()).await?;
    /// use dlock::MultiLock;
    ///
    /// let both = MultiLock::sequential([client.lock("b"), client.lock("a"), client.lock("b")])?;
    /// assert_eq!(both.names(), ["a", "b"]);
    /// both.lock().await?.unlock().await?;
    /// # Ok(())
    /// # }
    /// ```
    ///
    /// # Errors
    ///
    /// [`LockError::InvalidName`] for an empty set or an invalid name.
    pub fn sequential(locks: impl IntoIterator<Item = Lock>) -> Result<MultiLock> {
        let mut locks: Vec<Lock> = locks.into_iter().collect();
        for lock in &locks {
            lock.check_name()?;
        }
        locks.sort_by(|a, b| canonical(a).cmp(&canonical(b)));
        locks.dedup_by(|a, b| canonical(a) == canonical(b));
        MultiLock::new(locks, Mode::Sequential)
    }

    /// Same-slot mode: the locks `names` on `client`, every key in one cluster slot,
    /// taken all at once by one script. Duplicates are merged.
    ///
    /// The script does not use the client's local line (a line per key, and one
    /// acquisition would need to head all of them at once): it competes in Redis with
    /// the head of each line, as a task of another process would. Inside a
    /// [`scope`](crate::LockGuard::scope) that already holds one of the locks, the set is
    /// taken the sequential way instead, so that the held lock is re-entered rather than
    /// waited for.
    ///
    /// # Errors
    ///
    /// [`LockError::InvalidName`] for an empty set or an invalid name;
    /// [`LockError::CrossSlot`] (every key with its slot) when the keys are in more than
    /// one cluster slot, on any deployment: what a single server allows, a cluster would
    /// refuse.
    pub fn same_slot<S: AsRef<str>>(
        client: &LockClient,
        names: impl IntoIterator<Item = S>,
    ) -> Result<MultiLock> {
        let mut locks = Vec::new();
        for name in names {
            let lock = client.lock(name.as_ref());
            lock.check_name()?;
            locks.push(lock);
        }
        locks.sort_by(|a, b| a.key().cmp(b.key()));
        locks.dedup_by(|a, b| a.key() == b.key());
        let slots: Vec<(String, u16)> = locks
            .iter()
            .map(|lock| {
                let slot = u16::try_from(slot_of(lock.key().as_bytes())).unwrap_or(u16::MAX);
                (lock.key().to_owned(), slot)
            })
            .collect();
        if slots.iter().any(|(_, slot)| *slot != slots[0].1) {
            return Err(LockError::CrossSlot { keys: slots });
        }
        MultiLock::new(locks, Mode::SameSlot)
    }

    fn new(locks: Vec<Lock>, mode: Mode) -> Result<MultiLock> {
        if locks.is_empty() {
            return Err(LockError::invalid_name(
                "lock name",
                "",
                "a multi-lock needs at least one lock".to_owned(),
            ));
        }
        Ok(MultiLock {
            locks: locks.into(),
            mode,
        })
    }

    /// The lock names (without the key prefix) in the order they are taken: the
    /// canonical order.
    pub fn names(&self) -> Vec<&str> {
        self.locks.iter().map(Lock::name).collect()
    }

    acquisition_verbs!("MultiLock", MultiGuard, "MultiLock#cancel-safety");

    /// The first lock's client: its `default_wait` bounds the whole set's wait.
    pub(super) fn first_client(&self) -> &LockClient {
        self.locks[0].client()
    }
}

/// The canonical order of sequential mode: the deployment's stable identity, then the key.
fn canonical(lock: &Lock) -> (&str, &str) {
    (&lock.client().inner.deployment, lock.key())
}
