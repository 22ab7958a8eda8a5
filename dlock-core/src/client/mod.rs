//! [`LockClient`]: the handle an application keeps.
//!
//! The files: `LockClient` (`mod.rs`, with the tasks it starts), its builder, its validated
//! settings, the global client; `LockClient::shutdown`: waits, bounded, until every release
//! nobody awaits (dropped guards, abandoned acquisitions, local grants given back) has been
//! answered, and reports those Redis never answered (`ShutdownIncomplete`);
//! `registration.rs`: the client's name (`CLIENT SETNAME`) and its expiring description
//! (`dlock:client:<prefix>{anchor}:<client id>`: name, host, pid, version), rewritten by a
//! background task every 10 s and deleted on drop; `layout.rs` and `scripts/`: the layout
//! version recorded per key prefix and checked on connect (`LayoutMismatch`).

pub(crate) mod builder;
pub(crate) mod global;
pub(crate) mod layout;
pub(crate) mod permissions;
pub(crate) mod registration;
pub(crate) mod settings;

pub use builder::LockClientBuilder;
pub use registration::{ClientDescription, REGISTRATION_TTL};
pub(crate) use settings::Settings;

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use uuid::Uuid;

use crate::background::Background;
use crate::client::registration::client_key;
use crate::error::{LockError, Result};
use crate::redact::redact;
use crate::redis::{Backend, Topology, TopologyKind};
use crate::sync::attempt::Host;
use crate::sync::held::Held;
use crate::sync::local::LocalQueues;
use crate::sync::metrics::{Metrics, Stats};
use crate::sync::pubsub::PubSubService;
use crate::sync::release::{self, BackgroundReleases, ReleaseJob, ReleaseLog, ReleaseTiming};
use crate::sync::retry::RetryPolicy;
use crate::sync::watchdog::{self, Registry, Schedule};

/// A connection to Redis that hands out distributed locks.
///
/// Cheap to clone (an `Arc` inside); clones share connections, the subscriber, the
/// watchdog and the client id. Build one per process with [`LockClient::connect`] or
/// [`LockClient::builder`] and keep it for the life of the application. Building a client
/// spawns background tasks, so it must happen inside a Tokio runtime.
///
/// ```
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> dlock::Result<()> {
/// # let server = dlock_tests::RedisServer::start();
/// # let redis_url = server.url();
/// let client = dlock::LockClient::connect(&redis_url).await?;
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
/// - **Waiting** uses pub/sub: a waiter sleeps until a release hands it the lock or wakes
///   it, the holder's TTL runs out (or a `min_hold` ends), or `max_wait_recheck` passes,
///   whichever is first. No busy polling. A release hands a lock to one waiter whose
///   client still listens, and a grant its owner no longer wants is given back, so a
///   live waiter gets a free lock within 100 ms plus a round trip;
///   `max_wait_recheck` only covers a message Redis lost.
/// - **Kinds**: a name is held as one of [`Lock`](crate::Lock) (and
///   [`MultiLock`](crate::MultiLock)), [`FairLock`](crate::FairLock) or
///   [`ReadWriteLock`](crate::ReadWriteLock) at a time; the others fail with
///   [`LockError::KindMismatch`](crate::LockError::KindMismatch).
///   [`Semaphore`](crate::Semaphore)s have names of their own.
///   Tasks of one client that want the same lock line up locally, first come first
///   served; only the first in line talks to Redis, and a release gives the lock to the
///   next local task in the same script call, so that task holds it without a round trip
///   of its own. The line never outlasts the holder's
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
///   milliseconds. A process that exits right after its work calls
///   [`shutdown`](LockClient::shutdown) first, so that those releases reach Redis.
#[derive(Clone)]
pub struct LockClient {
    pub(crate) inner: Arc<ClientInner>,
}

pub(crate) struct ClientInner {
    pub(crate) id: Uuid,
    /// `id` as text: the first half of every owner field, and the name under which the
    /// client waits in lock waiter registries.
    pub(crate) id_text: Arc<str>,
    /// Which Redis deployment this client talks to, described the same way in every
    /// process configured alike (see [`deployment_identity`]); unlike `id`, which is random.
    pub(crate) deployment: String,
    /// The name on the client's connections and in its description.
    name: Arc<str>,
    /// Where the client's description lives (`registration`); `None` when it keeps none.
    registration_key: Option<String>,
    pub(crate) settings: Settings,
    pub(crate) backend: Backend,
    pub(crate) pubsub: PubSubService,
    pub(crate) registry: Arc<Registry>,
    pub(crate) local: Arc<LocalQueues<Held>>,
    pub(crate) metrics: Arc<Metrics>,
    releases: BackgroundReleases,
    /// Recent releases, replayed on a new master after a Sentinel failover.
    pub(crate) release_log: Arc<ReleaseLog>,
    /// The tasks above run on; restarted on the caller's runtime when theirs is gone.
    background: Background,
    next_owner: AtomicU64,
    next_op: AtomicU64,
}

impl LockClient {
    /// Connects to the Redis server at `url` with default settings.
    ///
    /// `url` is `redis://[user:password@]host:port[/db]`, or `rediss://` for TLS when the
    /// `redis` crate's TLS support is enabled.
    ///
    /// # Errors
    ///
    /// [`LockError::Config`](crate::LockError::Config) for a malformed address,
    /// [`LockError::Connect`](crate::LockError::Connect) when the server cannot be reached
    /// within the connect timeout, and the set-up errors of
    /// [`LockClientBuilder::connect`](crate::LockClientBuilder::connect):
    /// [`LockError::LayoutMismatch`](crate::LockError::LayoutMismatch),
    /// [`LockError::MissingCommands`](crate::LockError::MissingCommands) and
    /// [`LockError::FunctionLibraryMissing`](crate::LockError::FunctionLibraryMissing).
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

    /// This client's id: the first half of every owner field it writes.
    pub fn id(&self) -> Uuid {
        self.inner.id
    }

    /// The name this client gives its connections (`CLIENT SETNAME`) and shows operators
    /// next to its locks: [`LockClientBuilder::client_name`], by default `dlock-` and the
    /// first 8 characters of [`id`](LockClient::id).
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> dlock::Result<()> {
    /// # let server = dlock_tests::RedisServer::start();
    /// let client = dlock::LockClient::connect(&server.url()).await?;
    /// assert_eq!(client.client_name(), format!("dlock-{}", &client.id().to_string()[..8]));
    /// # Ok(())
    /// # }
    /// ```
    pub fn client_name(&self) -> &str {
        &self.inner.name
    }

    /// The watchdog timeout: the lease of locks taken without an explicit one.
    pub fn watchdog_timeout(&self) -> Duration {
        self.inner.settings.watchdog_timeout
    }

    /// Counters and the acquisition-latency histogram since the client was built, for
    /// export to a metrics system. The `metrics` feature records labelled metrics through
    /// the `metrics` facade instead (see the crate's `# Metrics`).
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> dlock::Result<()> {
    /// # let server = dlock_tests::RedisServer::start();
    /// # let client = dlock::LockClient::connect(&server.url()).await?;
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

    /// Waits until everything this client still owes Redis is done, so that a process
    /// that exits right after leaves nothing behind: the releases of dropped guards, the
    /// cleanups of acquisitions that ended without a guard (their waiter registrations,
    /// queue entries and waiting-writer entries, and any hold an unanswered try took),
    /// and the hand-offs that reached this client after its waiter had stopped. Each of
    /// these runs in the background as soon as it is queued; without `shutdown`, a
    /// process that exits first leaves them to expire (a lock or a grant lapses
    /// with its lease; a registration is passed over once the client is gone).
    ///
    /// Call it when the application no longer acquires or holds locks through this client
    /// (unlock or drop every guard first): a guard still alive keeps its lock, and a task
    /// still waiting keeps its place. The client stays usable afterwards.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> dlock::Result<()> {
    /// # let server = dlock_tests::RedisServer::start();
    /// let client = dlock::LockClient::connect(&server.url()).await?;
    /// let guard = client.lock("nightly-report").lock().await?;
    /// drop(guard); // released in the background...
    /// client.shutdown().await?; // ...and done before the process exits
    /// assert!(!client.lock("nightly-report").is_locked().await?);
    /// # Ok(())
    /// # }
    /// ```
    ///
    /// # Errors
    ///
    /// [`LockError::ShutdownIncomplete`] when one of them is still unanswered after two
    /// command timeouts and a second (it goes on in the background while the process
    /// runs), or the release of a dropped guard gave up without Redis' answer since the
    /// client was built (or since the last `shutdown`): what it would have given back
    /// lapses with its lease. The cleanup of an acquisition that ended without a guard
    /// (during an outage, say) is owed nothing when it gives up: its tries may never have
    /// reached Redis, and a hold one took lapses with its lease; after a healed outage,
    /// `shutdown` is `Ok` unless a guard's release was lost.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: it only waits.
    pub async fn shutdown(&self) -> Result<()> {
        let inner = &self.inner;
        inner.keep_running();
        let bound = inner
            .settings
            .command_timeout
            .saturating_mul(2)
            .saturating_add(Duration::from_secs(1));
        let started = std::time::Instant::now();
        let settled = tokio::time::timeout(bound, inner.releases.settled()).await;
        let (pending, failed) = (inner.releases.pending(), inner.releases.take_failed());
        if settled.is_ok() && failed == 0 {
            tracing::debug!(client = %inner.id, "dlock: client settled");
            return Ok(());
        }
        Err(LockError::ShutdownIncomplete {
            pending,
            failed,
            waited: Duration::from_millis(started.elapsed().as_millis() as u64),
        })
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

/// A description of the deployment `topology` points at, stable across processes and
/// restarts: its addresses (passwords redacted; sentinels and cluster seeds sorted) and
/// database. Orders the locks of a [`MultiLock`](crate::MultiLock) over several clients,
/// so that every process configured alike takes them in the same order. Two spellings of
/// one server (`localhost` and `127.0.0.1`) are two deployments here: processes must be
/// configured with the same addresses for the order to agree.
pub(crate) fn deployment_identity(topology: &Topology) -> String {
    let sorted = |urls: &[String]| {
        let mut urls: Vec<String> = urls.iter().map(|url| redact(url)).collect();
        urls.sort();
        urls.join(",")
    };
    let database = topology.auth.database.unwrap_or(0);
    match &topology.kind {
        TopologyKind::Single { address } => format!("single {} db {database}", redact(address)),
        TopologyKind::MasterReplicas { master, .. } => {
            format!("master {} db {database}", redact(master))
        }
        TopologyKind::Sentinel {
            master_name,
            sentinels,
        } => format!(
            "sentinel {master_name} via {} db {database}",
            sorted(sentinels)
        ),
        TopologyKind::Cluster { nodes } => format!("cluster {}", sorted(nodes)),
    }
}

/// `<client id>:<n>` with one allocation when it fits in [`OWNER_FIELD_ROOM`] (a client
/// id is a UUID, 36 bytes, and `n` at most 20 digits: it always does).
fn owner_field(client_id: &str, n: u64) -> Arc<str> {
    use std::io::Write;
    let mut room = [0u8; OWNER_FIELD_ROOM];
    let mut rest = &mut room[..];
    if write!(rest, "{client_id}:{n}").is_ok() {
        let written = OWNER_FIELD_ROOM - rest.len();
        if let Ok(field) = std::str::from_utf8(&room[..written]) {
            return Arc::from(field);
        }
    }
    format!("{client_id}:{n}").into()
}

/// Room on the stack for an owner field (see [`owner_field`]).
const OWNER_FIELD_ROOM: usize = 64;

impl Drop for ClientInner {
    fn drop(&mut self) {
        if let Some(key) = &self.registration_key {
            registration::unregister(&self.backend, key);
        }
    }
}

impl ClientInner {
    pub(crate) fn next_owner(&self) -> u64 {
        self.next_owner.fetch_add(1, Ordering::Relaxed)
    }

    /// A new owner's field, `<client id>:<n>` with the next `n`: every acquisition makes
    /// one, so it is written on the stack and copied once, into its `Arc` (a `format!`
    /// and the `Arc` made from it were two allocations).
    pub(crate) fn new_owner_field(&self) -> Arc<str> {
        owner_field(&self.id_text, self.next_owner())
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
        self.releases.send(job);
    }
}

impl Host for ClientInner {
    fn backend(&self) -> &Backend {
        &self.backend
    }

    fn retry(&self) -> RetryPolicy {
        self.settings.retry()
    }

    fn replica_acks(&self) -> Option<(u32, Duration)> {
        self.settings
            .replica_acks
            .map(|acks| (acks.replicas, acks.within))
    }

    fn metrics(&self) -> &Metrics {
        &self.metrics
    }

    fn release_timing(&self) -> ReleaseTiming {
        self.settings.release_timing()
    }

    fn release_in_background(&self, job: ReleaseJob) {
        ClientInner::release_in_background(self, job);
    }

    fn record_release(&self, job: &ReleaseJob) {
        self.release_log.record(job);
    }
}

impl LockClient {
    fn start(
        backend: Backend,
        settings: Settings,
        background: Background,
        deployment: String,
    ) -> LockClient {
        let registry = Arc::new(Registry::default());
        let metrics = Arc::new(Metrics::default());
        let (releases, queue) = BackgroundReleases::new();
        let release_log = Arc::new(ReleaseLog::new(
            backend.is_sentinel(),
            release::replay_window(settings.memo_ttl()),
        ));
        {
            let (backend, timing) = (backend.clone(), settings.release_timing());
            let (metrics, log) = (Arc::clone(&metrics), Arc::clone(&release_log));
            background.start("background releases", move || {
                release::run_background(
                    queue.clone(),
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
                replica_acks: settings
                    .replica_acks
                    .map(|acks| (acks.replicas, acks.within)),
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
        let id = Uuid::new_v4();
        let id_text: Arc<str> = id.to_string().into();
        let name: Arc<str> = match &settings.client_name {
            Some(name) => name.as_str().into(),
            None => registration::default_client_name(&id_text).into(),
        };
        backend.name_connections(&name);
        let registration_key = settings
            .describe
            .then(|| client_key(&settings.key_prefix, &id_text));
        {
            let (backend, name) = (backend.clone(), Arc::clone(&name));
            let description = registration_key
                .as_deref()
                .map(|key| registration::Description {
                    key: key.into(),
                    text: registration::ClientDescription::of_this_process(&name)
                        .encode()
                        .into(),
                });
            background.start_until_dropped("registration", move || {
                registration::run(backend.clone(), Arc::clone(&name), description.clone())
            });
        }
        let pubsub = PubSubService::start(
            backend.clone(),
            releases.clone(),
            settings.retry_delay,
            settings.command_timeout,
            &background,
        );
        let local = Arc::new(LocalQueues::new(releases.clone()));
        tracing::debug!(client = %id, "dlock: client started");
        LockClient {
            inner: Arc::new(ClientInner {
                id,
                id_text,
                deployment,
                name,
                registration_key,
                settings,
                backend,
                pubsub,
                registry,
                local,
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

#[cfg(test)]
mod tests {
    use super::owner_field;

    #[test]
    fn an_owner_field_is_the_client_id_and_the_number() {
        let id = uuid::Uuid::new_v4().to_string();
        for n in [0, 7, 1_000_000, u64::MAX] {
            assert_eq!(&*owner_field(&id, n), format!("{id}:{n}"));
        }
        // Longer than the room on the stack (no client id is): written all the same.
        let long = "x".repeat(100);
        assert_eq!(&*owner_field(&long, 42), format!("{long}:42"));
    }
}
