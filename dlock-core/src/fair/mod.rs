//! [`FairLock`]: a lock granted in the order its waiters asked for it, across processes.
//!
//! The files: `mod.rs`: `FairLock` and `LockClient::fair_lock`; `keys.rs`: `FairKeys`;
//! `acquire.rs`: a re-entry (the lock's acquire script, same hash layout), or a new waiter
//! with its own queue entry in Redis whose every try is its heartbeat, waiting on its
//! client's wake-up channel for messages naming it (recheck ≤ entry timeout / 3), its
//! `TryStep` leaving the queue when it ends without a guard; `release_ops.rs`: `one` /
//! `leave` / `undo` releases;
//! `scripts/*.lua`, each prefixed with `scripts/naps.lua` and `queue.lua` (purge of every
//! dead entry, wake the head). No local line: one Redis entry per waiting task keeps the
//! order across processes. The hash carries `'!fair'`, so the other kinds refuse it; the
//! acquire script takes a free lock with an empty queue before it checks kinds (a key that
//! exists is never free).

mod acquire;
pub(crate) mod keys;
mod release_ops;

use std::sync::Arc;
use std::time::Duration;

use crate::client::LockClient;
use crate::error::{LockError, Result};
use crate::fair::keys::FairKeys;
use crate::kind::LockKind;
use crate::lease::lease_millis;
use crate::lock::guard::LockGuard;
use crate::lock::keys::LockKeys;
use crate::names::check_text;
use crate::scripts::catalog::fair::fair_scripts;
use crate::sync::attempt::Reply;
use crate::sync::verbs::acquisition_verbs;

/// How long a queue entry lives without its waiter's heartbeat unless
/// [`FairLock::with_entry_timeout`] says otherwise.
const DEFAULT_ENTRY_TIMEOUT: Duration = Duration::from_secs(10);

/// The shortest entry timeout: the waiter's heartbeat runs at a third of it, and a
/// heartbeat needs a round trip to Redis.
const MIN_ENTRY_TIMEOUT: Duration = Duration::from_millis(30);

/// A handle to one named fair lock, from [`LockClient::fair_lock`]: the lock is granted in
/// the order waiters asked for it, across every process, one waiting task at a time.
///
/// It holds like [`Lock`](crate::Lock) (same Redis hash, reentrant inside
/// [`LockGuard::scope`], watchdog or explicit lease, same [`LockGuard`]); what differs is
/// who gets it next. Each waiting task has its own entry in a queue in Redis, so a
/// process's later waiters never overtake other processes' earlier ones. A release wakes
/// the head of the queue only, by a message naming it on its client's channel.
///
/// | method | waits | lease |
/// |---|---|---|
/// | [`lock`](FairLock::lock) | until acquired (or the client's `default_wait`) | watchdog |
/// | [`lock_with_lease`](FairLock::lock_with_lease) | until acquired (or `default_wait`) | explicit |
/// | [`try_lock`](FairLock::try_lock) | no, and never queues | watchdog |
/// | [`try_lock_for`](FairLock::try_lock_for) | up to `wait` | watchdog |
/// | [`try_lock_with_lease`](FairLock::try_lock_with_lease) | up to `wait` | explicit |
///
/// # Dead waiters
///
/// A queue entry carries its own deadline, in Redis server time: the
/// [entry timeout](FairLock::with_entry_timeout) (10 s by default, independent of the
/// lease) after its waiter's last call. A waiting task calls again at least every third of
/// it, so a live waiter keeps its place however long the holder keeps the lock, and a
/// crashed one is out of the way within the entry timeout. Every call purges every dead
/// entry, and wakes the new head when the lock is free.
///
/// A fair lock shares its name with the [`Lock`](crate::Lock) and the
/// [`ReadWriteLock`](crate::ReadWriteLock) of the same name (see
/// [`LockKind`](crate::inspect::LockKind)): an acquisition finding the name held as another kind
/// fails at once with [`LockError::KindMismatch`](crate::LockError::KindMismatch), and
/// theirs fail finding it held as a fair lock.
///
/// # Cancel safety
///
/// All acquisition methods are cancel safe: from the first call to Redis until a guard
/// exists, a dropped, timed-out or failed acquisition leaves the queue and gives back any
/// hold an unanswered call may have taken. A timed-out or failed one does so before it
/// returns; a dropped one, or one whose leave failed, through the client's background
/// releases, retried until Redis confirms.
#[derive(Clone)]
pub struct FairLock {
    client: LockClient,
    name: Arc<str>,
    keys: Arc<LockKeys>,
    fair: Arc<FairKeys>,
    /// The key, shared with the holds (the watchdog groups them by it).
    key: Arc<str>,
    entry_timeout: Duration,
}

impl LockClient {
    /// A handle to the fair lock called `name` (the key is the client's key prefix +
    /// `name`).
    ///
    /// Creating a handle does not talk to Redis; an empty name, one over
    /// [`MAX_NAME_LEN`](crate::limits::MAX_NAME_LEN) bytes or one with an ASCII control character
    /// is reported by the handle's operations as [`LockError::InvalidName`].
    pub fn fair_lock(&self, name: &str) -> FairLock {
        let prefix = &self.inner.settings.key_prefix;
        let keys = LockKeys::new(prefix, name);
        FairLock {
            client: self.clone(),
            name: name.into(),
            key: keys.key.as_str().into(),
            keys: Arc::new(keys),
            fair: Arc::new(FairKeys::new(prefix, name)),
            entry_timeout: DEFAULT_ENTRY_TIMEOUT,
        }
    }
}

impl std::fmt::Debug for FairLock {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FairLock")
            .field("name", &self.name)
            .field("key", &self.keys.key)
            .field("entry_timeout", &self.entry_timeout)
            .finish()
    }
}

impl FairLock {
    /// The lock's name, without the key prefix.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The Redis key of the lock hash (key prefix + name).
    pub fn key(&self) -> &str {
        &self.keys.key
    }

    /// How long a queue entry of this handle's waiters lives without its waiter's
    /// heartbeat (default 10 s). A waiting task renews its entry every third of it (or
    /// every `max_wait_recheck` of the client, if shorter), so it bounds how long a crashed
    /// waiter holds up the ones behind it, and costs one call to Redis per third per
    /// waiting task.
    ///
    /// Checked when used: under 30 ms or over [`MAX_LEASE`](crate::limits::MAX_LEASE), every
    /// acquisition reports [`LockError::InvalidDuration`].
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> dlock::Result<()> {
    /// # let server = dlock_tests::RedisServer::start();
    /// # let client = dlock::LockClient::connect(&server.url()).await?;
    /// use std::time::Duration;
    /// let lock = client.fair_lock("payouts").with_entry_timeout(Duration::from_secs(2));
    /// lock.lock().await?.unlock().await?;
    /// # Ok(())
    /// # }
    /// ```
    pub fn with_entry_timeout(mut self, timeout: Duration) -> FairLock {
        self.entry_timeout = timeout;
        self
    }

    acquisition_verbs!("FairLock", LockGuard, "FairLock#cancel-safety");

    /// Whether anyone holds the lock.
    ///
    /// # Errors
    ///
    /// Redis errors.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: it only reads.
    pub async fn is_locked(&self) -> Result<bool> {
        self.check_name()?;
        self.client
            .inner
            .backend
            .query(redis::cmd("EXISTS").arg(&self.keys.key))
            .await
            .map_err(|e| e.into_lock_error(&self.name, "check"))
    }

    /// How many waiters are queued and alive (their entry's deadline, in Redis server
    /// time, has not passed): for operators and tests. A holder is not counted.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> dlock::Result<()> {
    /// # let server = dlock_tests::RedisServer::start();
    /// # let client = dlock::LockClient::connect(&server.url()).await?;
    /// let lock = client.fair_lock("report");
    /// let guard = lock.lock().await?;
    /// let waiter = tokio::spawn({
    ///     let lock = lock.clone();
    ///     async move { lock.lock().await?.unlock().await }
    /// });
    /// while lock.queue_len().await? == 0 {
    ///     tokio::time::sleep(std::time::Duration::from_millis(5)).await;
    /// }
    /// guard.unlock().await?;
    /// waiter.await.expect("the waiter panicked")?;
    /// assert_eq!(lock.queue_len().await?, 0);
    /// # Ok(())
    /// # }
    /// ```
    ///
    /// # Errors
    ///
    /// Redis errors.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: it only reads.
    pub async fn queue_len(&self) -> Result<usize> {
        self.check_name()?;
        let mut invocation = fair_scripts().queue_len.prepare_invoke();
        invocation.key(&self.fair.deadlines);
        self.client
            .inner
            .backend
            .invoke(&invocation)
            .await
            .map_err(|e| e.into_lock_error(&self.name, "check"))
    }

    /// Deletes the lock whoever holds it and wakes the head of the queue. Returns whether
    /// a lock was deleted. The former holder's guard finds out at its next renewal, and
    /// its `unlock` reports [`LockError::NotHeld`]. Queue entries stay: the waiters keep
    /// their order.
    ///
    /// # Errors
    ///
    /// [`LockError::KindMismatch`] when the name is held as a lock or a read-write lock;
    /// [`LockError::WrongType`] when the key holds another type of value (application
    /// data, which is left alone); Redis errors.
    ///
    /// # Cancel safety
    ///
    /// If cancelled after the command was sent, the lock may or may not have been deleted.
    pub async fn force_unlock(&self) -> Result<bool> {
        self.check_name()?;
        let inner = &self.client.inner;
        let mut invocation = fair_scripts().force_unlock.prepare_invoke();
        invocation
            .key(&self.keys.key)
            .key(&self.fair.queue)
            .key(&self.fair.deadlines)
            .arg(&self.fair.wake_prefix)
            .arg(inner.backend.publish_command());
        // The shared reply grammar: an integer is the number of locks deleted.
        let reply: Reply = inner
            .backend
            .invoke(&invocation)
            .await
            .map_err(|e| e.into_lock_error(&self.name, "force-unlock"))?;
        let deleted = match reply {
            Reply::Busy { wait_ms, .. } => wait_ms == 1,
            other => return Err(other.refusal(&self.name, "force-unlock", LockKind::Fair)),
        };
        tracing::info!(lock = %self.name, deleted, "dlock: force unlock (fair)");
        Ok(deleted)
    }

    /// Names are checked when used, so that `client.fair_lock(name)` stays infallible.
    fn check_name(&self) -> Result<()> {
        if self.name.is_empty() {
            return Err(LockError::invalid_name(
                "lock name",
                "",
                "a lock name must not be empty".to_owned(),
            ));
        }
        check_text("lock name", &self.name)
    }

    /// The entry timeout in ms, checked like a lease plus its own lower bound.
    fn entry_millis(&self) -> Result<u64> {
        if self.entry_timeout < MIN_ENTRY_TIMEOUT {
            return Err(LockError::InvalidDuration {
                what: "entry_timeout",
                value: self.entry_timeout,
                reason: "shorter than 30ms; a waiter renews its queue entry every third of it, which takes a round trip to Redis",
            });
        }
        lease_millis("entry_timeout", self.entry_timeout)
    }
}
