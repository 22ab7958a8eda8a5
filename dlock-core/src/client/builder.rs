//! [`LockClientBuilder`]: every setting a client has, checked before anything connects.

use std::time::Duration;

use super::registration::check_client_name;
use super::settings::{ReplicaAcks, Settings};
use super::LockClient;
use crate::background::Background;
use crate::error::{LockError, Result};
use crate::lease::{lease_millis, MAX_COMMAND_TIMEOUT, MAX_LEASE, OVER_MAX_LEASE};
use crate::names::check_prefix;
use crate::redis::Backend;
use crate::redis::{ConnectOptions, ScriptMode, Topology, TopologyKind};
use crate::scripts::FunctionLibrary;

/// Shortest accepted watchdog timeout: renewal runs every third of it and needs room for a
/// round trip and a retry.
const MIN_WATCHDOG_TIMEOUT: Duration = Duration::from_millis(100);

/// Settings for a [`LockClient`]; finish with [`connect`](LockClientBuilder::connect).
///
/// ```
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> dlock::Result<()> {
/// # let server = dlock_tests::RedisServer::start();
/// # let redis_url = server.url();
/// use std::time::Duration;
///
/// let client = dlock::LockClient::builder()
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
    fencing_tokens: bool,
    script_mode: ScriptMode,
    client_name: Option<String>,
    describe: bool,
    check_permissions: bool,
    /// The layout version this client claims; only tests change it.
    layout_version: u32,
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
            fencing_tokens: true,
            script_mode: ScriptMode::Auto,
            client_name: None,
            describe: true,
            check_permissions: true,
            layout_version: super::layout::LAYOUT_VERSION,
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
    /// [`MAX_NAME_LEN`](crate::limits::MAX_NAME_LEN) bytes without ASCII control characters, and
    /// without `{`: dlock's own names put the prefix before a cluster hash tag
    /// (`dlock:unlock:<prefix>{tag}:<name>`), so that an ACL pattern per prefix keeps
    /// applications apart (docs/SECURITY.md); put hash tags in lock names instead.
    /// [`connect`](LockClientBuilder::connect) refuses other prefixes with
    /// [`LockError::InvalidName`].
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
    /// bounding the cost of a lost pub/sub message, and of two double faults the
    /// hand-off's messages cannot cover (two processes frozen at the head of a lock's
    /// waiters, or a releasing process that dies behind 64 dead ones: docs/PROTOCOL.md).
    /// Default 1 s.
    ///
    /// A recheck is a try, so a client with many waiting tasks spaces their rechecks out
    /// to about a thousand a second in all: each task's interval is this one, or its share
    /// of that rate (1 ms per waiting task, spread over half to one and a half times
    /// that, at most an hour), whichever is longer; for a fair lock and a waiting writer
    /// at most what keeps their queue entry alive (a third of its timeout). Each try keeps
    /// the waiter registered for three of its intervals and a second (at most a day, so
    /// an interval over 8 h lets a waiter's registration lapse before its next try: it
    /// then depends on the lock's expiry), so a release still reaches it at once. Unspaced, 100,000 waiting tasks with the default
    /// would send 100,000 tries a second, all a server can run.
    #[must_use]
    pub fn max_wait_recheck(mut self, interval: Duration) -> Self {
        self.max_wait_recheck = interval;
        self
    }

    /// The longest [`Lock::lock`](crate::Lock::lock) and [`Lock::lock_with_lease`](crate::Lock::lock_with_lease) (and `#[distributed_lock]`
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
    /// promoted will be among them, so ask for all replicas for the most safety.
    ///
    /// Watchdog renewals are confirmed the same way: a renewal counts (moves the guard's
    /// deadline) only once the replicas have it. A holder left talking to a deposed master
    /// after a failover — which goes on accepting writes for seconds — then learns of the
    /// loss by its own deadline, before the promoted replica can hand the lock to anyone
    /// else (without it, a rival was measured holding such a lock ~160–200 ms before its
    /// holder was told). The price: while fewer replicas than asked for answer (after a
    /// failover, until the old master rejoins as a replica), renewals go unconfirmed and
    /// held locks run out at their deadline.
    ///
    /// Applies to the reentrant lock, the fair lock, both sides of the read-write lock,
    /// the semaphore, the multi-lock (a same-slot set's script is followed by one `WAIT`
    /// for all its locks) and fenced writes
    /// ([`LockClient::fenced`](crate::LockClient::fenced)).
    ///
    /// It stays off by default. In a measured Sentinel failover under four workers adding
    /// 1 under the lock, 678–802 of about 10,000 acknowledged increments were lost with
    /// the old master's branch by default, 269–656 with one of two replicas asked for
    /// (0.87–0.94 × the throughput), none with both (but 0.06–0.09 × the throughput over
    /// a run that includes the ~10 s until the old master was a replica again).
    ///
    /// Not available with a Redis Cluster (`connect_to` reports [`LockError::Config`]).
    /// `replicas` must be at least 1 and `within` at least 1 ms and shorter than the
    /// command timeout.
    #[must_use]
    pub fn replica_acks(mut self, replicas: u32, within: Duration) -> Self {
        self.replica_acks = Some(ReplicaAcks { replicas, within });
        self
    }

    /// Whether every acquisition that excludes writers (the lock, the fair lock, the write
    /// lock, each lock of a multi-lock) mints a fencing token: a [`Fence`](crate::fencing::Fence)
    /// from a counter in Redis, strictly increasing per lock name across all clients, that
    /// the guard reports ([`LockGuard::fencing_token`](crate::LockGuard::fencing_token))
    /// and that storage can check to refuse a paused or cut-off holder's late write.
    /// Default `true`.
    ///
    /// `false` saves one `INCR` and one hash field per acquisition (and the `INCR`
    /// permission in the ACL): guards then report `None`. Clients of one lock may differ;
    /// a client with tokens off simply skips the counter, so the counter still grows for
    /// those with tokens on.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> dlock::Result<()> {
    /// # let server = dlock_tests::RedisServer::start();
    /// let client = dlock::LockClient::builder()
    ///     .fencing_tokens(false)
    ///     .connect(&server.url())
    ///     .await?;
    /// let guard = client.lock("orders:42").lock().await?;
    /// assert_eq!(guard.fencing_token(), None);
    /// guard.unlock().await?;
    /// # Ok(())
    /// # }
    /// ```
    #[must_use]
    pub fn fencing_tokens(mut self, enabled: bool) -> Self {
        self.fencing_tokens = enabled;
        self
    }

    /// The name of the service, shown to operators: set on the client's connections with
    /// `CLIENT SETNAME` (so `CLIENT LIST` shows it) and kept, with the host, process id
    /// and dlock version, in an expiring key (`dlock:client:<prefix>{tag}:<client id>`,
    /// rewritten every 10 s, gone 30 s after the client) that `dlock inspect` shows next
    /// to each holder. Default: `dlock-` and the first 8 characters of the client id.
    ///
    /// Printable ASCII without spaces (what Redis accepts), at most
    /// [`MAX_NAME_LEN`](crate::limits::MAX_NAME_LEN) bytes. A user whose ACL lacks
    /// `+client|setname` or the `~dlock:client:PREFIX*` pattern locks as well; only the
    /// name or the description is missing (logged at debug level).
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> dlock::Result<()> {
    /// # let server = dlock_tests::RedisServer::start();
    /// let client = dlock::LockClient::builder()
    ///     .client_name("billing")
    ///     .connect(&server.url())
    ///     .await?;
    /// assert_eq!(client.client_name(), "billing");
    /// # Ok(())
    /// # }
    /// ```
    #[must_use]
    pub fn client_name(mut self, name: impl Into<String>) -> Self {
        self.client_name = Some(name.into());
        self
    }

    /// Whether the client keeps its description (see
    /// [`client_name`](Self::client_name)) in Redis. Default `true`. A short-lived tool
    /// (the `dlock` command line) turns it off: its process ends before the deletion at
    /// drop can be sent, and the description would outlive it by up to
    /// [`REGISTRATION_TTL`](crate::limits::REGISTRATION_TTL). Its connections are still named.
    #[must_use]
    pub fn describe_client(mut self, enabled: bool) -> Self {
        self.describe = enabled;
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

    /// Whether the client checks, when it connects, that its Redis user may run every
    /// command dlock needs (one script call, which asks the server's ACL about each
    /// command without running it) and refuses to start otherwise
    /// ([`LockError::MissingCommands`], naming each). A rule that lacks one fails a script
    /// half-way, and what the script wrote before stays (a grant refused `PEXPIREAT`
    /// would leave a hold that never expires). Default `true`; turn it off only for a
    /// client that never locks, whose rule grants no write (an operator's read-only user,
    /// which the `dlock` tool's `inspect`, `list` and `watch` use).
    #[must_use]
    pub fn check_permissions(mut self, check: bool) -> Self {
        self.check_permissions = check;
        self
    }

    /// Claims another Redis layout version than this code's: for tests that start a client
    /// standing for another dlock version. Not for applications: a client claiming a
    /// version it does not lay out defeats the check it exists for.
    #[doc(hidden)]
    #[must_use]
    pub fn __layout_version(mut self, version: u32) -> Self {
        self.layout_version = version;
        self
    }

    /// How the client runs dlock's scripts: `EVALSHA` of scripts it loads, or `FCALL` of
    /// dlock's [`FunctionLibrary`] that an administrator loaded (see
    /// [`load_functions`](LockClientBuilder::load_functions)). Default
    /// [`ScriptMode::Auto`]: the library when it is loaded, scripts otherwise.
    ///
    /// [`ScriptMode::Functions`] is for an application user that may call dlock's
    /// functions and nothing else (docs/SECURITY.md has the ACL rule): such a user cannot
    /// load a script of its own, so it cannot stall the server with one.
    #[must_use]
    pub fn script_mode(mut self, mode: ScriptMode) -> Self {
        self.script_mode = mode;
        self
    }

    /// Loads this version's [`FunctionLibrary`] into `topology` with `FUNCTION LOAD
    /// REPLACE` (on every master of a cluster; replicas get it by replication), using the
    /// topology's credentials, which need `+function|load`: an administrator's set-up
    /// step, run once per deployment and dlock version before clients built with
    /// [`ScriptMode::Functions`] connect. Loading the same version again changes nothing;
    /// libraries of other versions stay loaded (remove them with `FUNCTION DELETE` once
    /// no client of that version runs). Returns the library's name.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> dlock::Result<()> {
    /// # let server = dlock_tests::RedisServer::start();
    /// # let (admin_url, app_url) = (server.url(), server.url());
    /// use dlock::{LockClient, ScriptMode, Topology};
    ///
    /// LockClient::builder()
    ///     .load_functions(&Topology::single(&admin_url))
    ///     .await?;
    /// let client = LockClient::builder()
    ///     .script_mode(ScriptMode::Functions)
    ///     .connect(&app_url)
    ///     .await?;
    /// client.lock("goods:42").lock().await?.unlock().await?;
    /// # Ok(())
    /// # }
    /// ```
    ///
    /// # Errors
    ///
    /// As for [`connect_to`](LockClientBuilder::connect_to), and [`LockError::Config`]
    /// when the server refuses the library or does not answer (no `+function|load`, a
    /// Redis before 7).
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: the library is loaded or not; nothing else is left behind.
    pub async fn load_functions(&self, topology: &Topology) -> Result<String> {
        let settings = self.validate()?;
        let options = ConnectOptions {
            connect_timeout: self.connect_timeout,
            command_timeout: settings.command_timeout,
        };
        let (backend, shown) = Backend::open(topology, options).await?;
        let library = FunctionLibrary::current();
        let mut load = redis::cmd("FUNCTION");
        load.arg("LOAD").arg("REPLACE").arg(library.code());
        backend.query::<redis::Value>(&load).await.map_err(|e| {
            LockError::Config(format!(
                "could not load dlock's function library {} into {shown}: {e}",
                library.name()
            ))
        })?;
        tracing::info!(library = library.name(), deployment = %shown, "dlock: function library loaded");
        Ok(library.name().to_owned())
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
    /// [`MAX_NAME_LEN`](crate::limits::MAX_NAME_LEN) bytes, with a control character or a `{`,
    /// and for a client name Redis would refuse,
    /// [`LockError::Config`] for a malformed address,
    /// [`LockError::Connect`] when Redis cannot be reached,
    /// [`LockError::LayoutMismatch`] when clients of another dlock version use the key
    /// prefix (the first client of a prefix records its layout version in
    /// `dlock:layout:<key prefix>`; every later one checks it),
    /// [`LockError::MissingCommands`] when the Redis user may not run a command dlock
    /// needs (see [`check_permissions`](LockClientBuilder::check_permissions)),
    /// [`LockError::FunctionLibraryMissing`] when dlock's function library is not loaded
    /// and functions are asked for (or, by default, the user may not load scripts
    /// either), and for [`replica_acks`](LockClientBuilder::replica_acks)
    /// [`LockError::Config`] with a cluster or 0 replicas and [`LockError::InvalidDuration`]
    /// for a `within` out of its bounds.
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
        let backend = Backend::connect(topology, options, &background, self.script_mode).await?;
        super::layout::check(&backend, &settings.key_prefix, self.layout_version).await?;
        if self.check_permissions {
            let acks = settings.replica_acks.is_some();
            super::permissions::check(&backend, &settings.key_prefix, acks).await?;
        }
        tracing::debug!(mode = topology.mode(), "dlock: connected");
        Ok(LockClient::start(
            backend,
            settings,
            background,
            super::deployment_identity(topology),
        ))
    }

    /// The key prefix this builder sets (for a client not connected yet).
    pub(crate) fn key_prefix_setting(&self) -> &str {
        &self.key_prefix
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
        check_prefix(&self.key_prefix)?;
        if let Some(name) = &self.client_name {
            check_client_name(name)?;
        }
        // Backoffs multiply the retry delay; a bounded one cannot overflow.
        if self.retry_delay > MAX_LEASE {
            return Err(LockError::InvalidDuration {
                what: "retry_delay",
                value: self.retry_delay,
                reason: OVER_MAX_LEASE,
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
            fencing_tokens: self.fencing_tokens,
            client_name: self.client_name.clone(),
            describe: self.describe,
        })
    }
}
