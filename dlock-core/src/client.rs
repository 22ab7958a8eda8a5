//! [`LockClient`]: the handle an application keeps, and its builder.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::mpsc;
use uuid::Uuid;

use crate::error::{LockError, Result};
use crate::lease::{lease_millis, MAX_LEASE};
use crate::lock::{check_text, Lock};
use crate::redis::{Backend, ConnectOptions};
use crate::redis::{Topology, TopologyKind};
use crate::sync::background::Background;
use crate::sync::held::Held;
use crate::sync::local::LocalQueues;
use crate::sync::metrics::{Metrics, Stats};
use crate::sync::pubsub::PubSubService;
use crate::sync::release::ReleaseTiming;
use crate::sync::release::{self, ReleaseJob, ReleaseLog};
use crate::sync::retry::RetryPolicy;
use crate::sync::watchdog::{self, Registry, Schedule};

/// Shortest accepted watchdog timeout: renewal runs every third of it and needs room for a
/// round trip and a retry.
const MIN_WATCHDOG_TIMEOUT: Duration = Duration::from_millis(100);

/// Longest accepted command timeout: 60 s. Every release leaves a memo in Redis for three
/// command timeouts (see `Settings::memo_ttl`), so an unbounded timeout would keep memos
/// (and re-entry markers) for as long as it says; a Redis answer that takes a minute is an
/// outage, not a slow command.
pub const MAX_COMMAND_TIMEOUT: Duration = Duration::from_secs(60);

/// A connection to Redis that hands out distributed locks.
///
/// Cheap to clone (an `Arc` inside); clones share connections, the subscriber, the
/// watchdog and the client id. Build one per process with [`LockClient::connect`] or
/// [`LockClient::builder`] and keep it for the life of the application. Building a client
/// spawns background tasks, so it must happen inside a Tokio runtime.
///
/// ```
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> dlock_core::Result<()> {
/// # let server = dlock_tests::RedisServer::start();
/// # let redis_url = server.url();
/// let client = dlock_core::LockClient::connect(&redis_url).await?;
/// let guard = client.lock("goods:42").lock().await?;
/// // ... the critical section ...
/// guard.unlock().await?;
/// # Ok(())
/// # }
/// ```
///
/// ## Behavior
///
/// - **Storage**: one Redis hash per lock, `<key_prefix><name>`, field
///   `<client-id>:<owner-id>`, value the owner's hold count (one per live guard); all
///   changes are Lua scripts.
/// - **Reentrancy** follows the call chain, not the thread: see
///   [`LockGuard::scope`](crate::LockGuard::scope). Outside a scope every acquisition is a
///   new owner, so two concurrent futures never share a lock by accident. Every guard
///   gives back its own hold; the lock is free when the owner's last hold is given back.
/// - **Lease**: with an explicit lease the key expires after it and is never renewed.
///   Without one the key gets the watchdog timeout (default 30 s) and the client renews it
///   every third of that while the guard lives. A re-entry never stretches an explicit
///   lease unless it asks for a longer explicit lease itself.
/// - **Waiting** uses pub/sub: a waiter sleeps until a release is published, the holder's
///   TTL runs out, or `max_wait_recheck` passes, whichever is first. No busy polling.
///   Tasks of one client that want the same lock line up locally, first come first
///   served; only the first in line talks to Redis, and a release hands the lock to the
///   next local task without a pub/sub round trip. The line never outlasts the holder's
///   hold: when its lease runs out, it is force-unlocked or its guard is found lost, the
///   next local task gets the lock as soon as a task of another process would.
/// - **Connection loss**: commands are bounded by `command_timeout`; the connection
///   reconnects by itself; renewal keeps retrying, and a guard whose local deadline
///   (last confirmed acquire or renewal + lease) passes is reported lost even if Redis is
///   unreachable, so the holder learns before anyone else can take the lock.
/// - **Runtimes**: a client keeps working on whatever Tokio runtime uses it; when the
///   runtime that built it shuts down, its connections are reopened and its background
///   tasks restarted on the next one that calls it.
/// - **Dropping**: the client lives while a handle (clones, [`Lock`](crate::Lock)s,
///   guards) does. When the last one goes, pending releases are still sent; then every
///   connection (to Redis and to the sentinels) is closed and every task ends, within
///   milliseconds.
#[derive(Clone)]
pub struct LockClient {
    pub(crate) inner: Arc<ClientInner>,
}

pub(crate) struct ClientInner {
    pub(crate) id: Uuid,
    pub(crate) settings: Settings,
    pub(crate) backend: Backend,
    pub(crate) pubsub: PubSubService,
    pub(crate) registry: Arc<Registry>,
    pub(crate) local: Arc<LocalQueues<Held>>,
    pub(crate) metrics: Arc<Metrics>,
    releases: mpsc::UnboundedSender<ReleaseJob>,
    /// Recent releases, replayed on a new master after a Sentinel failover.
    pub(crate) release_log: Arc<ReleaseLog>,
    /// The tasks above run on; restarted on the caller's runtime when theirs is gone.
    background: Background,
    next_owner: AtomicU64,
    next_op: AtomicU64,
}

/// Validated settings of a client.
#[derive(Debug, Clone)]
pub(crate) struct Settings {
    pub(crate) watchdog_timeout: Duration,
    pub(crate) key_prefix: String,
    pub(crate) command_timeout: Duration,
    pub(crate) max_wait_recheck: Duration,
    pub(crate) failover_wait: Duration,
    pub(crate) default_wait: Option<Duration>,
    pub(crate) retry_attempts: u32,
    pub(crate) retry_delay: Duration,
    pub(crate) replica_acks: Option<ReplicaAcks>,
}

/// How many replicas must confirm an acquisition, and how long to wait for them.
#[derive(Debug, Clone, Copy)]
pub(crate) struct ReplicaAcks {
    pub(crate) replicas: u32,
    pub(crate) within: Duration,
}

impl Settings {
    /// How long a release memo (or re-entry marker) lives in Redis: long enough to cover
    /// every retry of one release (see `release.lua`), at most 3 × 60 s + 1 s with the
    /// bounded command timeout.
    pub(crate) fn memo_ttl(&self) -> Duration {
        self.command_timeout * 3 + Duration::from_secs(1)
    }

    /// How calls of this client are retried.
    pub(crate) fn retry(&self) -> RetryPolicy {
        RetryPolicy {
            attempts: self.retry_attempts,
            delay: self.retry_delay,
            within: self.command_timeout,
        }
    }

    /// How releases of this client are retried and remembered.
    pub(crate) fn release_timing(&self) -> ReleaseTiming {
        ReleaseTiming {
            retry: self.retry(),
            memo_ttl: self.memo_ttl(),
        }
    }
}

impl LockClient {
    /// Connects to the Redis server at `url` with default settings.
    ///
    /// `url` is `redis://[user:password@]host:port[/db]`, or `rediss://` for TLS when the
    /// `redis` crate's TLS support is enabled.
    ///
    /// # Errors
    ///
    /// [`LockError::Config`] for a malformed address, [`LockError::Connect`] when the
    /// server cannot be reached within the connect timeout.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: a cancelled connect leaves nothing behind.
    pub async fn connect(url: &str) -> Result<LockClient> {
        LockClient::builder().connect(url).await
    }

    /// Starts building a client with non-default settings.
    pub fn builder() -> LockClientBuilder {
        LockClientBuilder::default()
    }

    /// A handle to the lock called `name` (the key is the client's key prefix + `name`).
    ///
    /// Creating a handle does not talk to Redis; an empty name, one over
    /// [`MAX_NAME_LEN`](crate::MAX_NAME_LEN) bytes or one with an ASCII control character
    /// is reported by the handle's operations as [`LockError::InvalidName`].
    pub fn lock(&self, name: &str) -> Lock {
        Lock::new(self.clone(), name)
    }

    /// This client's id: the first half of every owner field it writes.
    pub fn id(&self) -> Uuid {
        self.inner.id
    }

    /// The watchdog timeout: the lease of locks taken without an explicit one.
    pub fn watchdog_timeout(&self) -> Duration {
        self.inner.settings.watchdog_timeout
    }

    /// Counters and the acquisition-latency histogram since the client was built, for
    /// export to a metrics system.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> dlock_core::Result<()> {
    /// # let server = dlock_tests::RedisServer::start();
    /// # let client = dlock_core::LockClient::connect(&server.url()).await?;
    /// client.lock("report").lock().await?.unlock().await?;
    /// let stats = client.stats();
    /// assert_eq!((stats.acquired, stats.released), (1, 1));
    /// # Ok(())
    /// # }
    /// ```
    pub fn stats(&self) -> Stats {
        self.inner.metrics.snapshot()
    }

    /// The prefix put in front of every lock name to form its Redis key.
    pub fn key_prefix(&self) -> &str {
        &self.inner.settings.key_prefix
    }
}

impl std::fmt::Debug for LockClient {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LockClient")
            .field("id", &self.inner.id)
            .field("settings", &self.inner.settings)
            .finish_non_exhaustive()
    }
}

impl ClientInner {
    pub(crate) fn next_owner(&self) -> u64 {
        self.next_owner.fetch_add(1, Ordering::Relaxed)
    }

    pub(crate) fn next_op(&self) -> u64 {
        self.next_op.fetch_add(1, Ordering::Relaxed)
    }

    pub(crate) fn id_bits(&self) -> u128 {
        self.id.as_u128()
    }

    /// Restarts background tasks whose runtime shut down, on the current runtime. Called
    /// by every operation that relies on them (acquire, release).
    pub(crate) fn keep_running(&self) {
        self.background.keep_running();
    }

    /// Hands a release to the background task; never blocks, works outside a runtime.
    pub(crate) fn release_in_background(&self, job: ReleaseJob) {
        self.keep_running();
        // The receiver lives as long as any clone of the client (this one included).
        let _ = self.releases.send(job);
    }
}

/// Settings for a [`LockClient`]; finish with [`connect`](LockClientBuilder::connect).
///
/// ```
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> dlock_core::Result<()> {
/// # let server = dlock_tests::RedisServer::start();
/// # let redis_url = server.url();
/// use std::time::Duration;
///
/// let client = dlock_core::LockClient::builder()
///     .key_prefix("shop:")
///     .watchdog_timeout(Duration::from_secs(10))
///     .connect(&redis_url)
///     .await?;
/// assert_eq!(client.lock("goods:42").key(), "shop:goods:42");
/// # Ok(())
/// # }
/// ```
#[derive(Debug, Clone)]
pub struct LockClientBuilder {
    watchdog_timeout: Duration,
    key_prefix: String,
    command_timeout: Duration,
    connect_timeout: Duration,
    max_wait_recheck: Duration,
    failover_wait: Duration,
    default_wait: Option<Duration>,
    retry_attempts: u32,
    retry_delay: Duration,
    replica_acks: Option<ReplicaAcks>,
}

impl Default for LockClientBuilder {
    fn default() -> Self {
        LockClientBuilder {
            watchdog_timeout: Duration::from_secs(30),
            key_prefix: String::new(),
            command_timeout: Duration::from_secs(3),
            connect_timeout: Duration::from_secs(5),
            max_wait_recheck: Duration::from_secs(1),
            failover_wait: Duration::from_secs(10),
            default_wait: None,
            retry_attempts: 3,
            retry_delay: Duration::from_millis(50),
            replica_acks: None,
        }
    }
}

impl LockClientBuilder {
    /// Lease of locks taken without an explicit one; renewed every third of it.
    /// Default 30 s, at least 100 ms.
    #[must_use]
    pub fn watchdog_timeout(mut self, timeout: Duration) -> Self {
        self.watchdog_timeout = timeout;
        self
    }

    /// Prefix of every lock key, e.g. `"shop:"`. Default: none. Like a lock name, at most
    /// [`MAX_NAME_LEN`](crate::MAX_NAME_LEN) bytes without ASCII control characters.
    #[must_use]
    pub fn key_prefix(mut self, prefix: impl Into<String>) -> Self {
        self.key_prefix = prefix.into();
        self
    }

    /// Longest wait for one Redis answer. Default 3 s, between 1 ms and
    /// [`MAX_COMMAND_TIMEOUT`] (60 s).
    #[must_use]
    pub fn command_timeout(mut self, timeout: Duration) -> Self {
        self.command_timeout = timeout;
        self
    }

    /// Longest wait for the first connection. Default 5 s.
    #[must_use]
    pub fn connect_timeout(mut self, timeout: Duration) -> Self {
        self.connect_timeout = timeout;
        self
    }

    /// A waiter re-checks the lock at least this often even without an unlock message,
    /// bounding the cost of a lost pub/sub message. Default 1 s.
    #[must_use]
    pub fn max_wait_recheck(mut self, interval: Duration) -> Self {
        self.max_wait_recheck = interval;
        self
    }

    /// The longest [`Lock::lock`] and [`Lock::lock_with_lease`] (and `#[distributed_lock]`
    /// without `wait`) wait before failing with [`LockError::Timeout`]. Default `None`:
    /// they wait as long as it takes.
    #[must_use]
    pub fn default_wait(mut self, wait: Option<Duration>) -> Self {
        self.default_wait = wait;
        self
    }

    /// How long an acquisition that may wait (everything but `try_lock`) keeps trying
    /// through Redis errors, such as a failover or a reconnect, before it reports the
    /// error; never longer than its own wait. Default 10 s; zero reports the first error.
    #[must_use]
    pub fn failover_wait(mut self, wait: Duration) -> Self {
        self.failover_wait = wait;
        self
    }

    /// Before an acquisition counts, require `replicas` replicas to confirm it within
    /// `within` (Redis `WAIT`, on the connection that ran the acquire script). Default: off.
    /// That connection is one of up to 16 the client opens for this alone: a pending
    /// `WAIT` blocks its connection, and must not delay the client's other commands.
    ///
    /// Replication is asynchronous: a lock written to a master that fails before a
    /// replica has it is gone after the failover, and another client can take it. With
    /// this set, such an acquisition is released again and reported as
    /// [`LockError::NotReplicated`] (`try_lock`), or retried like a Redis outage
    /// (`lock`, `try_lock_for`; see [`failover_wait`](Self::failover_wait)). It costs one
    /// round trip to the replicas per acquisition. It narrows the window rather than
    /// closing it: `WAIT` confirms that replicas received the lock, not that the one
    /// promoted will be among them, so ask for all replicas for the most safety. Renewals
    /// are not waited for.
    ///
    /// Not available with a Redis Cluster (`connect_to` reports [`LockError::Config`]).
    /// `replicas` must be at least 1 and `within` between 1 ms and the command timeout.
    #[must_use]
    pub fn replica_acks(mut self, replicas: u32, within: Duration) -> Self {
        self.replica_acks = Some(ReplicaAcks { replicas, within });
        self
    }

    /// How often a call that failed on a dropped or refused connection is retried, within
    /// one command timeout. Default 3; 0 disables retries.
    #[must_use]
    pub fn retry_attempts(mut self, attempts: u32) -> Self {
        self.retry_attempts = attempts;
        self
    }

    /// Pause before the second retry, doubled for each further one (the first retry
    /// follows the failure at once, on the replacement connection). Default 50 ms, at most
    /// 366 days.
    #[must_use]
    pub fn retry_delay(mut self, delay: Duration) -> Self {
        self.retry_delay = delay;
        self
    }

    /// Validates the settings, connects to the Redis server at `url` and starts the
    /// client's background tasks (subscriber, watchdog, background release).
    ///
    /// # Errors
    ///
    /// [`LockError::InvalidDuration`] for a watchdog timeout outside 100 ms..=366 days, a
    /// zero timeout / recheck interval, a command timeout over 60 s or a retry delay over
    /// 366 days,
    /// [`LockError::InvalidName`] for a key prefix over
    /// [`MAX_NAME_LEN`](crate::MAX_NAME_LEN) bytes or with a control character,
    /// [`LockError::Config`] for a malformed address,
    /// [`LockError::Connect`] when Redis cannot be reached.
    ///
    /// # Panics
    ///
    /// Outside a Tokio runtime (it spawns tasks).
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: a cancelled connect leaves nothing behind.
    pub async fn connect(self, url: &str) -> Result<LockClient> {
        self.connect_to(&Topology::single(url)).await
    }

    /// Like [`connect`](LockClientBuilder::connect), for any deployment: a master with
    /// replicas, a Sentinel group or a Cluster (see [`Topology`]).
    ///
    /// # Errors
    ///
    /// As for [`connect`](LockClientBuilder::connect); for Sentinel, also when no sentinel
    /// knows the master.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: a cancelled connect leaves nothing behind.
    ///
    /// # Panics
    ///
    /// Outside a Tokio runtime (it spawns tasks).
    pub async fn connect_to(self, topology: &Topology) -> Result<LockClient> {
        let settings = self.validate()?;
        let options = ConnectOptions {
            connect_timeout: self.connect_timeout,
            command_timeout: settings.command_timeout,
        };
        if settings.replica_acks.is_some() && matches!(topology.kind, TopologyKind::Cluster { .. })
        {
            return Err(LockError::Config(
                "replica_acks is not supported with a Redis Cluster: WAIT cannot follow the acquire script there; remove it or use Sentinel".to_owned(),
            ));
        }
        let background = Background::default();
        let backend = Backend::connect(topology, options, &background).await?;
        tracing::debug!(mode = topology.mode(), "dlock: connected");
        Ok(LockClient::start(backend, settings, background))
    }

    fn validate(&self) -> Result<Settings> {
        let lease_ms = lease_millis("watchdog_timeout", self.watchdog_timeout)?;
        if self.watchdog_timeout < MIN_WATCHDOG_TIMEOUT {
            return Err(LockError::InvalidDuration {
                what: "watchdog_timeout",
                value: self.watchdog_timeout,
                reason: "shorter than 100ms; renewal runs every third of it and needs time for a round trip",
            });
        }
        debug_assert!(lease_ms >= 100);
        check_text("key prefix", &self.key_prefix)?;
        // Backoffs multiply the retry delay; a bounded one cannot overflow.
        if self.retry_delay > MAX_LEASE {
            return Err(LockError::InvalidDuration {
                what: "retry_delay",
                value: self.retry_delay,
                reason: "longer than the maximum of 366 days",
            });
        }
        if self.command_timeout > MAX_COMMAND_TIMEOUT {
            return Err(LockError::InvalidDuration {
                what: "command_timeout",
                value: self.command_timeout,
                reason: "longer than the maximum of 60s; release memos live three command timeouts in Redis",
            });
        }
        for (what, value) in [
            ("command_timeout", self.command_timeout),
            ("connect_timeout", self.connect_timeout),
            ("max_wait_recheck", self.max_wait_recheck),
        ] {
            if value.as_millis() == 0 {
                return Err(LockError::InvalidDuration {
                    what,
                    value,
                    reason: "must be at least 1ms",
                });
            }
        }
        if let Some(acks) = self.replica_acks {
            if acks.replicas == 0 {
                return Err(LockError::Config(
                    "replica_acks needs at least 1 replica; leave it out to not wait for replicas"
                        .to_owned(),
                ));
            }
            if acks.within.as_millis() == 0 || acks.within >= self.command_timeout {
                return Err(LockError::InvalidDuration {
                    what: "replica_acks wait",
                    value: acks.within,
                    reason: "must be at least 1ms and shorter than the command timeout",
                });
            }
        }
        Ok(Settings {
            watchdog_timeout: self.watchdog_timeout,
            key_prefix: self.key_prefix.clone(),
            command_timeout: self.command_timeout,
            max_wait_recheck: self.max_wait_recheck,
            failover_wait: self.failover_wait,
            default_wait: self.default_wait,
            retry_attempts: self.retry_attempts,
            retry_delay: self.retry_delay,
            replica_acks: self.replica_acks,
        })
    }
}

impl LockClient {
    fn start(backend: Backend, settings: Settings, background: Background) -> LockClient {
        let registry = Arc::new(Registry::default());
        let metrics = Arc::new(Metrics::default());
        let (releases, queue) = mpsc::unbounded_channel();
        let release_log = Arc::new(ReleaseLog::new(
            backend.is_sentinel(),
            release::replay_window(settings.memo_ttl()),
        ));
        {
            let queue = Arc::new(tokio::sync::Mutex::new(queue));
            let (backend, timing) = (backend.clone(), settings.release_timing());
            let (metrics, log) = (Arc::clone(&metrics), Arc::clone(&release_log));
            background.start("background releases", move || {
                release::run_background(
                    Arc::clone(&queue),
                    backend.clone(),
                    timing,
                    Arc::clone(&metrics),
                    Arc::clone(&log),
                )
            });
        }
        if backend.is_sentinel() {
            let (backend, timing) = (backend.clone(), settings.release_timing());
            let log = Arc::downgrade(&release_log);
            background.start("release replay", move || {
                release::replay_after_failover(backend.clone(), timing, log.clone())
            });
        }
        {
            let (registry, backend) = (Arc::downgrade(&registry), backend.clone());
            let schedule = Schedule {
                lease: settings.watchdog_timeout,
                retry_delay: settings.retry_delay,
            };
            let metrics = Arc::clone(&metrics);
            background.start_until_dropped("watchdog", move || {
                watchdog::run(
                    registry.clone(),
                    backend.clone(),
                    schedule,
                    Arc::clone(&metrics),
                )
            });
        }
        let pubsub = PubSubService::start(
            backend.clone(),
            settings.retry_delay,
            settings.command_timeout,
            &background,
        );
        let id = Uuid::new_v4();
        tracing::debug!(client = %id, "dlock: client started");
        LockClient {
            inner: Arc::new(ClientInner {
                id,
                settings,
                backend,
                pubsub,
                registry,
                local: Arc::default(),
                metrics,
                releases,
                release_log,
                background,
                next_owner: AtomicU64::new(1),
                next_op: AtomicU64::new(1),
            }),
        }
    }
}
