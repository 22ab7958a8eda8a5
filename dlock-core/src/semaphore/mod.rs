//! [`Semaphore`]: a counting semaphore whose permits cannot leak. Every grant of permits
//! has an id and a deadline in server time, is renewed by the watchdog while its guard
//! lives and given back when the guard goes; a grant whose holder died returns to the pool
//! by itself once its deadline passes.
//!
//! Redis layout (all in the slot a lock of the same name would have, each name in a
//! namespace of its own, see `semaphore::keys::SemKeys`):
//! - `dlock:sem:<prefix>{tag}:<name>`: hash of the live grants, `<grant>` → permits and
//!   `<grant>:t` → server-time deadline (ms); it expires with its latest deadline. Its
//!   name is also the channel on which releases and reclaims publish the permits free.
//! - `dlock:semcap:<prefix>{tag}:<name>`: the capacity, written by the first acquisition
//!   (or `set_permits`); the one key that stays when the semaphore is idle (one small
//!   string, about 100 bytes with its key).
//! - `dlock:release:<prefix>{tag}:<grant>:<op>`: release memos, as for every primitive.
//!
//! The permits held are the sum over the live grants, counted in every script: there is
//! no counter that a lost reply or a crash could leave wrong. The price is a scan of the
//! grants hash per call, O(live grants): cheap for the tens or hundreds of permits a
//! semaphore usually has, not meant for tens of thousands.
//!
//! No local line: several tasks of one process may hold permits at once, so lining them up
//! would serialise what Redis grants together. Every waiter is woken by every message and
//! re-checks, so a release of two permits (or two releases of one) reaches a waiter that
//! needs two.

mod acquire;
pub(crate) mod keys;
pub(crate) mod layout;
mod permit;
mod release_ops;

pub use permit::SemaphorePermit;

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;
use std::time::Duration;

use crate::client::LockClient;
use crate::error::{LockError, Result};
use crate::names::check_text;
use crate::scripts::catalog::semaphore::sem_scripts;
use crate::semaphore::keys::SemKeys;

/// A handle to one named semaphore, from [`LockClient::semaphore`]: at most `permits`
/// permits are granted at once, across every process that uses the name.
///
/// Cheap to clone (clones share the handle's capacity); creating it does not talk to
/// Redis. A bad name is reported as [`LockError::InvalidName`] and a handle created with 0
/// permits as [`LockError::InvalidPermits`] by every operation.
///
/// - **Leased grants.** Each acquisition of `n` permits is one grant with its own id and a
///   deadline computed by the Redis server (never a client clock). The watchdog renews it
///   while its [`SemaphorePermit`] lives; dropping or unlocking the permit gives them
///   back, and a grant whose process died returns to the pool once its lease (the
///   watchdog timeout, or the explicit lease) runs out.
/// - **Exact accounting.** A release counts once per grant: releasing twice, or after the
///   grant expired, changes nothing. The permits held never exceed the capacity, except
///   after a shrink by [`set_permits`](Semaphore::set_permits), which never revokes a live
///   grant and grants nothing until the permits held are below the new capacity.
/// - **One capacity.** The first use stores the handle's `permits` in Redis; a handle
///   whose `permits` differ from the stored capacity fails with
///   [`LockError::CapacityMismatch`] naming both, so processes that disagree are told at
///   once. Only [`set_permits`](Semaphore::set_permits) changes it.
/// - **Waiting.** Every release, reclaim and capacity change publishes; every waiter
///   re-checks on each message, and at the earliest grant deadline at the latest (a holder
///   that died sends no message). No busy polling: between those, waiters sleep.
/// - **The permit.** [`SemaphorePermit::permits`] is how many the grant holds. There is
///   no re-entry: acquiring inside a permit's [`scope`](SemaphorePermit::scope) takes new
///   permits like any other acquisition.
///
/// With [`replica_acks`](crate::LockClientBuilder::replica_acks) a grant counts once the
/// replicas confirmed it, as a lock does.
///
/// ```
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> dlock::Result<()> {
/// # let server = dlock_tests::RedisServer::start();
/// # let client = dlock::LockClient::connect(&server.url()).await?;
/// let uploads = client.semaphore("uploads", 3);
/// let two = uploads.acquire(2).await?;
/// let one = uploads.acquire(1).await?;
/// assert_eq!(uploads.available_permits().await?, 0);
/// assert!(uploads.try_acquire(1).await.unwrap_err().is_timeout()); // all 3 are taken
/// two.unlock().await?;
/// one.unlock().await?;
/// assert_eq!(uploads.available_permits().await?, 3);
/// # Ok(())
/// # }
/// ```
///
/// # Cancel safety
///
/// Every acquisition method is cancel safe: if the future is dropped while an acquire
/// script may have run (its reply was outstanding), a release of exactly that grant is
/// queued in the background, so no permit stays taken. The other methods only read, or
/// write one value (`set_permits`: dropped before Redis answered, the new capacity may or
/// may not be stored).
#[derive(Clone)]
pub struct Semaphore {
    shared: Arc<Shared>,
}

/// What the handles of one semaphore share.
pub(crate) struct Shared {
    client: LockClient,
    name: Arc<str>,
    keys: SemKeys,
    /// The grants hash, shared with the holds.
    key: Arc<str>,
    /// The capacity this handle expects in Redis; `set_permits` moves it.
    permits: AtomicU32,
    /// `set_permits` calls of this handle in flight: a waiter that finds the capacity
    /// changed meanwhile waits for the call to end rather than report a mismatch.
    setting: AtomicU32,
}

impl LockClient {
    /// A handle to the semaphore called `name` with `permits` permits (its keys are named
    /// after the client's key prefix + `name`, apart from any lock of the same name).
    ///
    /// Creating a handle does not talk to Redis; a bad name or `permits == 0` is reported
    /// by the handle's operations. Every process must create the handle with the same
    /// `permits` (see [`Semaphore`]'s "One capacity").
    pub fn semaphore(&self, name: &str, permits: u32) -> Semaphore {
        let keys = SemKeys::new(&self.inner.settings.key_prefix, name);
        Semaphore {
            shared: Arc::new(Shared {
                client: self.clone(),
                name: name.into(),
                key: keys.grants.as_str().into(),
                keys,
                permits: AtomicU32::new(permits),
                setting: AtomicU32::new(0),
            }),
        }
    }
}

impl std::fmt::Debug for Semaphore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Semaphore")
            .field("name", &self.shared.name)
            .field("key", &self.shared.key)
            .field("permits", &self.permits())
            .finish()
    }
}

/// Counts one `set_permits` call in flight for as long as it lives (also when the call is
/// cancelled or fails).
struct Setting<'a>(&'a AtomicU32);

impl<'a> Setting<'a> {
    fn new(count: &'a AtomicU32) -> Setting<'a> {
        count.fetch_add(1, Ordering::AcqRel);
        Setting(count)
    }
}

impl Drop for Setting<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::AcqRel);
    }
}

/// What the `available` script answers: the stored capacity (-1: none stored yet) and the
/// permits held by live grants, or the type found at a key of another type.
enum State {
    Counts(i64, i64),
    WrongType(String),
}

impl redis::FromRedisValue for State {
    fn from_redis_value(value: redis::Value) -> std::result::Result<State, redis::ParsingError> {
        match value {
            redis::Value::Array(_) => {
                let (capacity, held) = <(i64, i64)>::from_redis_value(value)?;
                Ok(State::Counts(capacity, held))
            }
            other => {
                let text = String::from_redis_value(other)?;
                match text.strip_prefix("wrongtype:") {
                    Some(found) => Ok(State::WrongType(found.to_owned())),
                    None => Err(format!("unexpected reply from a dlock script: {text:?}").into()),
                }
            }
        }
    }
}

impl Semaphore {
    /// The semaphore's name, without the key prefix.
    pub fn name(&self) -> &str {
        &self.shared.name
    }

    /// The Redis key of the grants hash (`dlock:sem:<key prefix>{tag}:<name>`).
    pub fn key(&self) -> &str {
        &self.shared.key
    }

    /// Takes `n` permits, waiting as long as it takes (or the client's `default_wait`);
    /// the watchdog keeps the grant alive while the permit lives.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> dlock::Result<()> {
    /// # let server = dlock_tests::RedisServer::start();
    /// # let client = dlock::LockClient::connect(&server.url()).await?;
    /// let pool = client.semaphore("db-connections", 4);
    /// let permit = pool.acquire(2).await?;
    /// assert_eq!(permit.permits(), 2);
    /// assert_eq!(pool.available_permits().await?, 2);
    /// permit.unlock().await?;
    /// assert_eq!(pool.available_permits().await?, 4);
    /// # Ok(())
    /// # }
    /// ```
    ///
    /// # Errors
    ///
    /// [`LockError::InvalidPermits`] at once for `n == 0`, `n` over the capacity or a
    /// handle of 0 permits; [`LockError::CapacityMismatch`] when Redis stores another
    /// capacity; [`LockError::TooManyHolders`] at once when the semaphore has
    /// [`MAX_HOLDERS`](crate::limits::MAX_HOLDERS) grants already (it does not wait for
    /// one to leave); [`LockError::WrongType`] when a key holds application data;
    /// [`LockError::Redis`] / [`LockError::CommandTimeout`] when Redis fails (after riding
    /// out a failover for up to the client's `failover_wait`); [`LockError::Timeout`]
    /// only when the client has a `default_wait`.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: see [the notes on `Semaphore`](Semaphore#cancel-safety).
    pub async fn acquire(&self, n: u32) -> Result<SemaphorePermit> {
        let wait = self.default_wait();
        self.acquire_permits(n, wait, None, None).await
    }

    /// Takes `n` permits, waiting as long as it takes (or `default_wait`); the grant ends
    /// after `lease` and is not renewed.
    ///
    /// # Errors
    ///
    /// [`LockError::InvalidDuration`] for a lease under 1 ms or over
    /// [`MAX_LEASE`](crate::limits::MAX_LEASE) (nothing is sent to Redis); otherwise as
    /// [`acquire`](Semaphore::acquire).
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: see [the notes on `Semaphore`](Semaphore#cancel-safety).
    pub async fn acquire_with_lease(&self, n: u32, lease: Duration) -> Result<SemaphorePermit> {
        let wait = self.default_wait();
        self.acquire_permits(n, wait, Some(lease), None).await
    }

    /// One attempt at `n` permits, no waiting; the watchdog keeps the grant alive.
    ///
    /// # Errors
    ///
    /// [`LockError::Timeout`] when fewer than `n` permits are free now; otherwise as
    /// [`acquire`](Semaphore::acquire).
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: see [the notes on `Semaphore`](Semaphore#cancel-safety).
    pub async fn try_acquire(&self, n: u32) -> Result<SemaphorePermit> {
        self.acquire_permits(n, Some(Duration::ZERO), None, None)
            .await
    }

    /// Waits up to `wait` for `n` permits; the watchdog keeps the grant alive.
    ///
    /// # Errors
    ///
    /// [`LockError::Timeout`] when `wait` passes first; otherwise as
    /// [`acquire`](Semaphore::acquire).
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: see [the notes on `Semaphore`](Semaphore#cancel-safety).
    pub async fn try_acquire_for(&self, n: u32, wait: Duration) -> Result<SemaphorePermit> {
        self.acquire_permits(n, Some(wait), None, None).await
    }

    /// Waits up to `wait` for `n` permits; the grant ends after `lease` and is not
    /// renewed.
    ///
    /// # Errors
    ///
    /// [`LockError::Timeout`] when `wait` passes first; [`LockError::InvalidDuration`] for
    /// a bad lease; otherwise as [`acquire`](Semaphore::acquire).
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: see [the notes on `Semaphore`](Semaphore#cancel-safety).
    pub async fn try_acquire_with_lease(
        &self,
        n: u32,
        wait: Duration,
        lease: Duration,
    ) -> Result<SemaphorePermit> {
        self.acquire_permits(n, Some(wait), Some(lease), None).await
    }

    /// The permits free now: the capacity minus the permits of live grants (0 while a
    /// shrink left more held than the capacity). Grants whose deadline passed are
    /// reclaimed first, by server time, and waiters are told if any were.
    ///
    /// # Errors
    ///
    /// [`LockError::InvalidName`], [`LockError::InvalidPermits`] for a handle of 0
    /// permits, [`LockError::WrongType`], Redis errors.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: a dropped call at most reclaims expired grants, which any call does.
    pub async fn available_permits(&self) -> Result<u32> {
        let (capacity, held) = self.state().await?;
        Ok(capacity.saturating_sub(held))
    }

    /// The capacity stored in Redis, or the handle's `permits` when none is stored yet
    /// (the first acquisition stores them).
    ///
    /// # Errors
    ///
    /// As [`available_permits`](Semaphore::available_permits).
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: see [`available_permits`](Semaphore::available_permits).
    pub async fn total_permits(&self) -> Result<u32> {
        Ok(self.state().await?.0)
    }

    /// Sets the capacity in Redis: the only way it changes. This handle (and its clones)
    /// adopt it; handles elsewhere created with the old number fail with
    /// [`LockError::CapacityMismatch`] until they are created with the new one.
    ///
    /// Growing wakes the waiters at once. Shrinking below the permits held is allowed: no
    /// live grant is revoked, and nothing is granted until enough permits come back.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> dlock::Result<()> {
    /// # let server = dlock_tests::RedisServer::start();
    /// # let client = dlock::LockClient::connect(&server.url()).await?;
    /// let workers = client.semaphore("workers", 2);
    /// workers.set_permits(5).await?;
    /// assert_eq!(workers.total_permits().await?, 5);
    /// let stale = client.semaphore("workers", 2);
    /// assert!(matches!(
    ///     stale.acquire(1).await,
    ///     Err(dlock::LockError::CapacityMismatch { handle: 2, stored: 5, .. })
    /// ));
    /// # Ok(())
    /// # }
    /// ```
    ///
    /// # Errors
    ///
    /// [`LockError::InvalidPermits`] for `permits == 0` (a semaphore that can never grant
    /// would make every waiter wait forever); [`LockError::InvalidName`];
    /// [`LockError::WrongType`]; Redis errors.
    ///
    /// # Cancel safety
    ///
    /// Dropped before Redis answered, the new capacity may or may not be stored, and this
    /// handle keeps its old `permits`: call it again.
    pub async fn set_permits(&self, permits: u32) -> Result<()> {
        self.check_name()?;
        if permits == 0 {
            return Err(self.invalid_permits(0, 0));
        }
        let inner = &self.shared.client.inner;
        let mut invocation = sem_scripts().set_permits.prepare_invoke();
        invocation
            .key(&self.shared.keys.grants)
            .key(&self.shared.keys.capacity)
            .arg(permits)
            .arg(inner.backend.publish_command());
        let setting = Setting::new(&self.shared.setting);
        let reply: String = inner
            .backend
            .invoke(&invocation)
            .await
            .map_err(|e| e.into_lock_error(&self.shared.name, "set the capacity of"))?;
        if let Some(found) = reply.strip_prefix("wrongtype:") {
            return Err(self.wrong_type(found.to_owned()));
        }
        self.shared.permits.store(permits, Ordering::Release);
        drop(setting);
        Ok(())
    }

    /// The stored capacity (or the handle's) and the permits held, after reclaiming.
    async fn state(&self) -> Result<(u32, u32)> {
        let permits = self.checked_permits()?;
        let inner = &self.shared.client.inner;
        let mut invocation = sem_scripts().available.prepare_invoke();
        invocation
            .key(&self.shared.keys.grants)
            .key(&self.shared.keys.capacity)
            .arg(inner.backend.publish_command());
        let state: State = inner
            .backend
            .invoke(&invocation)
            .await
            .map_err(|e| e.into_lock_error(&self.shared.name, "check"))?;
        match state {
            State::Counts(capacity, held) => {
                let capacity = u32::try_from(capacity).unwrap_or(permits);
                Ok((capacity, u32::try_from(held).unwrap_or(u32::MAX)))
            }
            State::WrongType(found) => Err(self.wrong_type(found)),
        }
    }

    /// The handle's capacity, once the name and the capacity are known to be usable.
    fn checked_permits(&self) -> Result<u32> {
        self.check_name()?;
        match self.permits() {
            0 => Err(self.invalid_permits(0, 0)),
            permits => Ok(permits),
        }
    }

    /// The wait of a call that names none: the client's `default_wait`.
    pub(crate) fn default_wait(&self) -> Option<Duration> {
        self.shared.client.inner.settings.default_wait
    }

    fn permits(&self) -> u32 {
        self.shared.permits.load(Ordering::Acquire)
    }

    /// Names are checked when used, so that `client.semaphore(name, n)` stays infallible.
    fn check_name(&self) -> Result<()> {
        if self.shared.name.is_empty() {
            return Err(LockError::invalid_name(
                "lock name",
                "",
                "a semaphore name must not be empty".to_owned(),
            ));
        }
        check_text("lock name", &self.shared.name)
    }

    fn invalid_permits(&self, asked: u32, capacity: u32) -> LockError {
        LockError::InvalidPermits {
            name: self.shared.name.to_string(),
            asked,
            capacity,
        }
    }

    fn wrong_type(&self, found: String) -> LockError {
        LockError::WrongType {
            name: self.shared.name.to_string(),
            found,
        }
    }
}
