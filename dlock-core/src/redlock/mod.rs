//! RedLock: one lock over N independent Redis servers, held while a majority grants it.
//!
//! Each server keeps the reentrant lock's hash (`lock/scripts/`): the owner field is shared
//! by all servers for one round, and each server is reached through its own single-server
//! [`LockClient`]. See [`RedLockClient`] for what the algorithm does and does not promise.

mod guard;
mod node;
mod server;

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use futures_util::future::join_all;
use futures_util::stream::{FuturesUnordered, StreamExt};
use redis::IntoConnectionInfo;
use tokio::time::Instant;
use uuid::Uuid;

pub use guard::RedLockGuard;
use server::Server;

use crate::client::{LockClient, LockClientBuilder};
use crate::error::{LockError, Result};
use crate::kind::LockKind;
use crate::lease::lease_millis;
use crate::lock::keys::LockKeys;
use crate::names::check_text;
use crate::sync::attempt::Reply;
use crate::sync::observe::{self, Label};
use crate::sync::verbs::{acquisition_verbs, Acquire};

/// A lock over N independent Redis servers (the Redlock algorithm of the Redis
/// documentation): an acquisition asks every server at once, each with a short timeout,
/// and holds the lock when a majority granted it with validity left.
///
/// ```
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> dlock::Result<()> {
/// # let servers: Vec<_> = (0..3).map(|_| dlock_tests::RedisServer::start()).collect();
/// # let urls: Vec<String> = servers.iter().map(|s| s.url()).collect();
/// use dlock::{LockClient, redlock::RedLockClient};
///
/// // Three or five servers that share nothing (no replication, no cluster).
/// let redlock = RedLockClient::connect(LockClient::builder(), &urls).await?;
/// assert_eq!((redlock.nodes(), redlock.quorum()), (3, 2));
/// let guard = redlock.lock("invoice:7").lock().await?;
/// // ... the critical section, until guard.deadline() at the latest ...
/// guard.unlock().await?; // still held on a majority, or NotHeld
/// # Ok(())
/// # }
/// ```
///
/// # The algorithm
///
/// - **Acquisition**: one owner id per round, the same on every server. The acquire script
///   runs on all servers concurrently, each call bounded by the per-server timeout:
///   5 % of the lease, at most the server client's command timeout, at least 1 ms. The
///   round succeeds when a majority ([`quorum`](RedLockClient::quorum) = n / 2 + 1)
///   granted it and validity is left: lease − elapsed − drift > 0, with a clock-drift
///   allowance of 1 % of the lease + 2 ms. The guard's [`deadline`](RedLockGuard::deadline)
///   is the round's start + lease − drift.
/// - **A failed round** (no majority, or no validity left) is released on every server,
///   the ones that did not answer included (their call may have been applied), then tried
///   again after a random 50-250 ms while the wait budget lasts. No guard is ever handed
///   out already expired: a majority granted too late is [`LockError::ValidityExpired`].
/// - **Renewal**: without an explicit lease the guard renews every third of the lease on
///   every server and counts confirmations; a majority moves the deadline to the round's
///   start + lease − drift. A majority answering "not held" marks the guard lost at once;
///   servers that do not answer are asked again until the deadline passes, and then the
///   guard is lost. A renewal a majority confirmed also takes the hold again on the
///   servers where it was gone (one restarted without its data, one connected since),
///   so that each of them counts again toward the majority. An explicit lease is never
///   renewed.
/// - **Release** goes to every server; a server where the lock is already gone counts as
///   released, and one that cannot be reached gets the release again in the background.
///   `unlock` is done once the hold is gone from a majority (given back, or never written
///   there: a round ends once a majority granted), and fails only when too few servers
///   answered to know.
/// - **Not reentrant**: every acquisition is a new owner, so a task that takes a RedLock it
///   already holds waits for itself until its wait budget runs out.
///
/// # What it guarantees, and what it does not
///
/// While a guard is before its deadline, no other RedLock owner holds a majority of the
/// same servers, *provided* the servers' clocks advance at about the same rate as this
/// process's (no clock jumps: no stepping NTP, no manual changes), no server loses its data
/// while the lock is held (a server restarted without persistence forgets the lock and can
/// grant it again: restart crashed servers only after the longest lease), and the process
/// does not pause between a check of the deadline and the work it protects.
///
/// Kleppmann ("How to do distributed locking", 2016) showed that pauses, network delays
/// and clock jumps break those assumptions and that Redlock's random owner id is no fencing
/// token; antirez answered that the check of the elapsed time covers delays during the
/// acquisition and that bounded clock rates are a reasonable assumption. Both agree that a
/// lock with a lease cannot by itself protect against a holder that acts after its lease
/// ran out: when correctness matters (money, not just efficiency), the protected storage
/// must check a fencing token (a number that only grows with each acquisition) and refuse
/// writes with an older one. RedLock hands out no such token.
///
/// # Nodes
///
/// Each node is a [`LockClient`] on one server (a single-server topology); its settings
/// (key prefix, command timeout, retries, credentials, TLS) apply to that server. The
/// watchdog timeout, default wait and failover wait of the first node (of the builder,
/// with [`connect`](RedLockClient::connect)) are the RedLock's.
///
/// [`connect`](RedLockClient::connect) creates the RedLock while a minority of its
/// servers is down: those are connected in the background and counted from the moment
/// they answer ([`connected_nodes`](RedLockClient::connected_nodes)). A RedLock waits by
/// rounds, never for unlock messages, so its servers' clients open no subscriber
/// connection.
#[derive(Clone)]
pub struct RedLockClient {
    inner: Arc<Shared>,
}

struct Shared {
    servers: Vec<Server>,
    timing: Timing,
    /// The first half of every owner field this RedLock writes.
    id: Uuid,
    next_owner: AtomicU64,
    /// A pause in ms between a round's last answer and its validity check: only tests set
    /// it, to stand for a process stalled at that moment.
    stall_after_round_ms: AtomicU64,
}

/// The settings of the RedLock itself (its servers' clients have their own).
struct Timing {
    watchdog_timeout: Duration,
    default_wait: Option<Duration>,
    failover_wait: Duration,
}

impl Timing {
    fn of(client: &LockClient) -> Timing {
        let settings = &client.inner.settings;
        Timing {
            watchdog_timeout: settings.watchdog_timeout,
            default_wait: settings.default_wait,
            failover_wait: settings.failover_wait,
        }
    }
}

impl std::fmt::Debug for RedLockClient {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let servers: Vec<String> = self
            .inner
            .servers
            .iter()
            .map(|server| {
                let state = if server.client().is_some() {
                    ""
                } else {
                    " (connecting)"
                };
                format!("{}{state}", crate::redact::redact(server.address()))
            })
            .collect();
        f.debug_struct("RedLockClient")
            .field("id", &self.inner.id)
            .field("servers", &servers)
            .field("quorum", &self.quorum())
            .finish()
    }
}

/// The fewest servers a RedLock accepts: with two, one failure stops every acquisition.
const MIN_NODES: usize = 3;

/// Refuses fewer than [`MIN_NODES`] servers.
fn check_count(servers: usize) -> Result<()> {
    if servers < MIN_NODES {
        return Err(LockError::Config(format!(
            "a RedLock needs at least {MIN_NODES} independent Redis servers (5 is typical), got {servers}"
        )));
    }
    Ok(())
}

/// Refuses two servers on one address: one server would count twice toward the majority.
fn check_distinct(addresses: &[String]) -> Result<()> {
    for (i, address) in addresses.iter().enumerate() {
        if let Some(first) = addresses[..i].iter().position(|seen| seen == address) {
            return Err(LockError::Config(format!(
                "RedLock nodes {first} and {i} are the same server {}; each node must be an independent server",
                crate::redact::redact(address)
            )));
        }
    }
    Ok(())
}

/// The shortest lease: a lease must leave validity after the clock-drift allowance
/// (1 % + 2 ms) and a round trip.
const MIN_LEASE: Duration = Duration::from_millis(10);

/// Random pause between two rounds, so that competing clients do not keep splitting the
/// servers between them.
const RETRY_JITTER: (Duration, Duration) = (Duration::from_millis(50), Duration::from_millis(250));

impl RedLockClient {
    /// A RedLock over `nodes`, one [`LockClient`] per independent server, each built on a
    /// single-server topology ([`LockClient::connect`] or
    /// [`LockClientBuilder::connect`]).
    ///
    /// # Errors
    ///
    /// [`LockError::Config`] for fewer than 3 nodes, a node on a Sentinel or cluster
    /// topology (its master moves, so it is no independent server), or two nodes on the
    /// same address (one server would count twice toward the majority). Two addresses that
    /// name one server differently (`localhost` and `127.0.0.1`) are not detected.
    pub fn new(nodes: Vec<LockClient>) -> Result<RedLockClient> {
        check_count(nodes.len())?;
        let timing = Timing::of(&nodes[0]);
        let mut servers = Vec::with_capacity(nodes.len());
        for (i, node) in nodes.into_iter().enumerate() {
            let Some(address) = node.inner.backend.direct_address() else {
                return Err(LockError::Config(format!(
                    "RedLock node {i} is a Sentinel or cluster client; each RedLock node must be one independent server (a single-server topology)"
                )));
            };
            servers.push(Server::connected(node, address));
        }
        let addresses: Vec<String> = servers.iter().map(|s| s.address().to_owned()).collect();
        check_distinct(&addresses)?;
        Ok(RedLockClient::of(servers, timing))
    }

    /// Connects to every server in `urls` (concurrently) with `builder`'s settings.
    ///
    /// A minority of the servers may be down or unreachable: the RedLock is created with
    /// the majority that answered, and each server that did not is connected in the
    /// background (retried with back-off, from 100 ms up to every 5 s) and counted in
    /// rounds from the moment it answers. Until then a round counts it as failed, as it
    /// would a server that went down later.
    ///
    /// # Errors
    ///
    /// [`LockError::Config`] for fewer than 3 URLs, a bad address or two URLs naming one
    /// server; the first connection error when fewer than a majority answered
    /// ([`LockError::Connect`]); any other error of a server that answered (a missing
    /// function library, another layout version) at once.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: the clients connected so far are dropped.
    pub async fn connect(builder: LockClientBuilder, urls: &[String]) -> Result<RedLockClient> {
        check_count(urls.len())?;
        let addresses = urls
            .iter()
            .map(|url| {
                url.as_str()
                    .into_connection_info()
                    .map(|info| info.addr().to_string())
                    .map_err(|e| {
                        LockError::Config(format!(
                            "RedLock server URL {}: {e}",
                            crate::redact::redact(url)
                        ))
                    })
            })
            .collect::<Result<Vec<String>>>()?;
        check_distinct(&addresses)?;
        let quorum = urls.len() / 2 + 1;
        let outcomes = join_all(urls.iter().map(|url| builder.clone().connect(url))).await;
        let answered = outcomes.iter().filter(|outcome| outcome.is_ok()).count();
        let mut first_error = None;
        let mut servers = Vec::with_capacity(urls.len());
        let mut pending = Vec::new();
        let mut timing = None;
        for (i, (outcome, address)) in outcomes.into_iter().zip(addresses).enumerate() {
            match outcome {
                Ok(client) => {
                    timing.get_or_insert_with(|| Timing::of(&client));
                    servers.push(Server::connected(client, address));
                }
                Err(error @ LockError::Connect { .. }) => {
                    first_error.get_or_insert(error);
                    servers.push(Server::pending(
                        address,
                        builder.key_prefix_setting().to_owned(),
                    ));
                    pending.push(i);
                }
                Err(error) => return Err(error),
            }
        }
        let (Some(timing), true) = (timing, answered >= quorum) else {
            return Err(first_error
                .unwrap_or_else(|| LockError::Config("no RedLock server answered".to_owned())));
        };
        let redlock = RedLockClient::of(servers, timing);
        for i in pending {
            tracing::warn!(server = %crate::redact::redact(redlock.inner.servers[i].address()), "dlock: RedLock server unreachable at start; connecting in the background");
            server::connect_in_background(
                Arc::downgrade(&redlock.inner),
                i,
                builder.clone(),
                urls[i].clone(),
            );
        }
        Ok(redlock)
    }

    /// A RedLock over `servers` (on distinct addresses, see [`check_distinct`]).
    fn of(servers: Vec<Server>, timing: Timing) -> RedLockClient {
        RedLockClient {
            inner: Arc::new(Shared {
                servers,
                timing,
                id: Uuid::new_v4(),
                next_owner: AtomicU64::new(1),
                stall_after_round_ms: AtomicU64::new(0),
            }),
        }
    }

    /// How many servers the RedLock uses.
    pub fn nodes(&self) -> usize {
        self.inner.servers.len()
    }

    /// How many servers are connected (the others are connected in the background, see
    /// [`connect`](RedLockClient::connect)).
    pub fn connected_nodes(&self) -> usize {
        self.inner
            .servers
            .iter()
            .filter(|server| server.client().is_some())
            .count()
    }

    /// Makes every round pause `stall` between its last answer and its validity check,
    /// as a process stalled at that moment would: for tests of
    /// [`LockError::ValidityExpired`] only.
    #[doc(hidden)]
    pub fn __stall_after_round(&self, stall: Duration) {
        let millis = u64::try_from(stall.as_millis()).unwrap_or(u64::MAX);
        self.inner
            .stall_after_round_ms
            .store(millis, Ordering::Relaxed);
    }

    /// How many servers must grant (or renew) the lock: a majority, n / 2 + 1.
    pub fn quorum(&self) -> usize {
        self.inner.servers.len() / 2 + 1
    }

    /// A handle to the lock called `name` (each server's key is its client's key prefix +
    /// `name`). Nothing is sent yet; a bad name is reported by the handle's operations as
    /// [`LockError::InvalidName`].
    pub fn lock(&self, name: &str) -> RedLock {
        let keys = self
            .inner
            .servers
            .iter()
            .map(|server| LockKeys::new(server.key_prefix(), name))
            .collect();
        RedLock {
            client: self.clone(),
            name: name.into(),
            keys: Arc::new(keys),
        }
    }

    /// The owner field of one round: new for every round, so that a late background
    /// release of a failed round can never remove a later round's hold.
    fn next_field(&self) -> Arc<str> {
        let owner = self.inner.next_owner.fetch_add(1, Ordering::Relaxed);
        format!("{}:{owner}", self.inner.id).into()
    }
}

/// How long one server may take to answer one call of a round on `node`.
fn per_node_timeout(node: &LockClient, lease: Duration) -> Duration {
    (lease / 20)
        .min(node.inner.settings.command_timeout)
        .max(Duration::from_millis(1))
}

/// How long one server may take to confirm a release. A release has no validity to
/// protect, so a short lease must not make it fail on a busy machine (5 % of a 50 ms
/// lease is 2.5 ms); a floor of 100 ms still keeps a dead server from holding up
/// `unlock` for a whole command timeout.
fn release_timeout(node: &LockClient, lease: Duration) -> Duration {
    per_node_timeout(node, lease)
        .max(Duration::from_millis(100))
        .min(node.inner.settings.command_timeout)
}

/// The clock-drift allowance for `lease`: 1 % + 2 ms.
fn drift(lease: Duration) -> Duration {
    lease / 100 + Duration::from_millis(2)
}

/// A uniformly random pause in `RETRY_JITTER` (a v4 UUID's random bits are enough here).
fn jitter() -> Duration {
    let (low, high) = RETRY_JITTER;
    let span = (high - low).as_micros() as u64;
    let random = Uuid::new_v4().as_u128() as u64;
    low + Duration::from_micros(random % span.max(1))
}

/// A handle to one named RedLock, from [`RedLockClient::lock`]. Cheap to clone; creating it
/// does not talk to Redis.
///
/// | method | waits | lease |
/// |---|---|---|
/// | [`lock`](RedLock::lock) | until acquired (or the first node's `default_wait`) | renewed |
/// | [`lock_with_lease`](RedLock::lock_with_lease) | until acquired (or `default_wait`) | explicit |
/// | [`try_lock`](RedLock::try_lock) | one round | renewed |
/// | [`try_lock_for`](RedLock::try_lock_for) | up to `wait` | renewed |
/// | [`try_lock_with_lease`](RedLock::try_lock_with_lease) | up to `wait` | explicit |
///
/// ```
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> dlock::Result<()> {
/// # let servers: Vec<_> = (0..3).map(|_| dlock_tests::RedisServer::start()).collect();
/// # let urls: Vec<String> = servers.iter().map(|s| s.url()).collect();
/// # let redlock = dlock::redlock::RedLockClient::connect(dlock::LockClient::builder(), &urls).await?;
/// let lock = redlock.lock("invoice:7");
/// let guard = lock.lock().await?;
/// assert!(lock.is_locked().await?);
/// guard.unlock().await?;
/// assert!(!lock.is_locked().await?);
/// # Ok(())
/// # }
/// ```
///
/// # Errors
///
/// Besides a busy lock's [`LockError::Timeout`]: [`LockError::NoQuorum`] when too many
/// servers failed (after the wait budget, or after the first node's `failover_wait`
/// without one), [`LockError::ValidityExpired`] when the last round won too late,
/// [`LockError::WrongType`] when a server's key holds other data.
///
/// # Cancel safety
///
/// All acquisition methods are cancel safe: dropping the future while a round is in flight
/// queues a release of that round on every server (in each server client's background
/// release task, retried until the server answers).
#[derive(Clone)]
pub struct RedLock {
    client: RedLockClient,
    name: Arc<str>,
    /// The lock's keys on each server, in node order.
    keys: Arc<Vec<LockKeys>>,
}

impl std::fmt::Debug for RedLock {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RedLock")
            .field("name", &self.name)
            .field("nodes", &self.client.nodes())
            .finish()
    }
}

/// A round that won: its owner field and the end of its validity.
struct Won {
    field: Arc<str>,
    deadline: Instant,
}

/// The acquisition, traced and measured (`sync::observe`).
impl Acquire for RedLock {
    type Guard = RedLockGuard;

    /// The first server's client's `default_wait`.
    fn default_wait(&self) -> Option<Duration> {
        self.client.inner.timing.default_wait
    }

    async fn acquire(
        &self,
        wait: Option<Duration>,
        lease: Option<Duration>,
        template: Option<&'static str>,
    ) -> Result<RedLockGuard> {
        let label = Label {
            kind: "redlock",
            template,
        };
        let acquisition = self.acquire_unobserved(wait, lease);
        observe::acquisition(label, &self.name, wait, acquisition).await
    }
}

/// Why a round did not win.
enum Failure {
    /// Fewer than a majority granted, and enough servers answered for that to mean the
    /// lock is held elsewhere.
    Busy,
    /// Too many servers failed or did not answer in time for a majority to grant it.
    NoQuorum { granted: usize, unreachable: usize },
    /// A majority granted, but too late: no validity left.
    Expired { elapsed: Duration },
}

impl RedLock {
    /// The lock's name, without any key prefix.
    pub fn name(&self) -> &str {
        &self.name
    }

    acquisition_verbs!("RedLock", RedLockGuard, "RedLock#cancel-safety");

    /// Whether a majority of the servers has the lock key (held by anyone).
    ///
    /// # Errors
    ///
    /// [`LockError::NoQuorum`] when too many servers fail to answer for the answer to be
    /// known.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: it only reads.
    pub async fn is_locked(&self) -> Result<bool> {
        self.check_name()?;
        let started = Instant::now();
        let answers = join_all(
            self.nodes()
                .map(|(node, keys)| node::exists(node, keys, node.inner.settings.command_timeout)),
        )
        .await;
        let present = answers.iter().filter(|a| matches!(a, Ok(true))).count();
        let failed = answers.iter().filter(|a| a.is_err()).count();
        let quorum = self.client.quorum();
        if present >= quorum {
            Ok(true)
        } else if present + failed < quorum {
            Ok(false)
        } else {
            Err(self.no_quorum(present, failed, started.elapsed()))
        }
    }

    /// Each connected server's client with the lock's keys there. A server connected in
    /// the background joins from the next call: nothing of this lock was ever sent to it
    /// before, so it has nothing to release.
    fn nodes(&self) -> impl Iterator<Item = (&LockClient, &LockKeys)> {
        self.client
            .inner
            .servers
            .iter()
            .zip(self.keys.iter())
            .filter_map(|(server, keys)| server.client().map(|client| (client, keys)))
    }

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

    fn no_quorum(&self, granted: usize, unreachable: usize, waited: Duration) -> LockError {
        LockError::NoQuorum {
            name: self.name.to_string(),
            granted,
            unreachable,
            nodes: self.client.nodes(),
            quorum: self.client.quorum(),
            waited,
        }
    }

    /// Rounds until one wins or the wait budget (`None`: none) is spent; `lease: None`
    /// renews the first node's watchdog timeout.
    async fn acquire_unobserved(
        &self,
        wait: Option<Duration>,
        lease: Option<Duration>,
    ) -> Result<RedLockGuard> {
        self.check_name()?;
        let renewed = lease.is_none();
        let lease = lease.unwrap_or(self.client.inner.timing.watchdog_timeout);
        let lease_ms = lease_millis("lease", lease)?;
        if lease < MIN_LEASE {
            return Err(LockError::InvalidDuration {
                what: "lease",
                value: lease,
                reason: "a RedLock lease must be at least 10 ms, so that validity is left after the clock-drift allowance (1 % + 2 ms) and a round trip",
            });
        }
        for (node, _) in self.nodes() {
            node.inner.keep_running();
        }
        let started = Instant::now();
        let give_up_at = wait.and_then(|wait| started.checked_add(wait));
        let failover_wait = self.client.inner.timing.failover_wait;
        let mut unreachable_since: Option<Instant> = None;
        loop {
            let failure = match self.round(lease, lease_ms, give_up_at).await? {
                Ok(won) => {
                    tracing::debug!(lock = %self.name, owner = %won.field, waited = ?started.elapsed(), "dlock: RedLock acquired");
                    return Ok(RedLockGuard::new(
                        self.clone(),
                        won.field,
                        lease,
                        renewed,
                        won.deadline,
                    ));
                }
                Err(failure) => failure,
            };
            let now = Instant::now();
            let delay = jitter();
            let spent = give_up_at.is_some_and(|at| now + delay >= at);
            let stuck = match failure {
                Failure::NoQuorum { .. } => {
                    now.duration_since(*unreachable_since.get_or_insert(now)) >= failover_wait
                }
                _ => {
                    unreachable_since = None;
                    false
                }
            };
            if spent || stuck {
                let waited = started.elapsed();
                tracing::debug!(lock = %self.name, ?waited, "dlock: RedLock not acquired");
                return Err(match failure {
                    Failure::Busy => LockError::Timeout {
                        name: self.name.to_string(),
                        waited: wait.unwrap_or(waited),
                        permits: None,
                    },
                    Failure::NoQuorum {
                        granted,
                        unreachable,
                    } => self.no_quorum(granted, unreachable, waited),
                    Failure::Expired { elapsed } => LockError::ValidityExpired {
                        name: self.name.to_string(),
                        lease,
                        elapsed,
                    },
                });
            }
            tokio::time::sleep(delay).await;
        }
    }

    /// One round: the acquire script on every server at once for a new owner; a round
    /// that does not win is released on every server (in the background). A round still
    /// open at `give_up_at` (when that is after its start: a single try has its whole
    /// round) ends there, with the answers it has: the wait bounds the acquisition, even
    /// while servers do not answer.
    async fn round(
        &self,
        lease: Duration,
        lease_ms: u64,
        give_up_at: Option<Instant>,
    ) -> Result<std::result::Result<Won, Failure>> {
        let mut round = Round {
            lock: self,
            field: self.client.next_field(),
            pending: true,
        };
        let start = Instant::now();
        let mut calls: FuturesUnordered<_> = self
            .nodes()
            .map(|(node, keys)| {
                node::bounded(
                    node,
                    per_node_timeout(node, lease),
                    node::acquire(node, keys, &round.field, lease_ms),
                )
            })
            .collect();
        let quorum = self.client.quorum();
        let (mut granted, mut answered) = (0, 0);
        // The round ends as soon as its outcome is known: a majority granted, or a
        // majority answered and too few calls are left for a grant (the lock is busy).
        // Waiting for the rest would make every round last a per-server timeout while one
        // server is down, and competing clients' rounds would then overlap and split the
        // servers between them. A call given up here may still be applied: the guard's
        // release (or this round's, if it lost) goes to every server.
        let cut_at = give_up_at.filter(|at| *at > start);
        loop {
            let answer = match cut_at {
                Some(at) => match tokio::time::timeout_at(at, calls.next()).await {
                    Ok(answer) => answer,
                    Err(_) => break,
                },
                None => calls.next().await,
            };
            let Some(answer) = answer else {
                break;
            };
            match answer {
                Ok(reply) if reply.is_granted() => {
                    granted += 1;
                    answered += 1;
                }
                Ok(Reply::Busy { .. }) => answered += 1,
                Ok(Reply::WrongType { found, .. }) => {
                    return Err(LockError::WrongType {
                        name: self.name.to_string(),
                        found,
                    })
                }
                Ok(Reply::OtherKind { found, .. }) => {
                    return Err(LockError::KindMismatch {
                        name: self.name.to_string(),
                        requested: LockKind::Lock,
                        found,
                    })
                }
                Ok(other) => {
                    tracing::debug!(lock = %self.name, reply = ?other, "dlock: unexpected reply from a RedLock server");
                }
                Err(error) => {
                    tracing::debug!(lock = %self.name, %error, "dlock: RedLock server failed in a round");
                }
            }
            if granted >= quorum || (answered >= quorum && granted + calls.len() < quorum) {
                break;
            }
        }
        let stall = self
            .client
            .inner
            .stall_after_round_ms
            .load(Ordering::Relaxed);
        if stall > 0 {
            tokio::time::sleep(Duration::from_millis(stall)).await;
        }
        let elapsed = start.elapsed();
        drop(calls);
        if granted >= quorum {
            // Validity = lease − elapsed − drift must be positive: a majority that answered
            // too late may already have let the lock expire on some servers.
            let spent = elapsed + drift(lease);
            if spent < lease {
                round.pending = false;
                return Ok(Ok(Won {
                    field: Arc::clone(&round.field),
                    deadline: start + (lease - drift(lease)),
                }));
            }
            tracing::warn!(lock = %self.name, ?elapsed, ?lease, "dlock: RedLock granted by a majority with no validity left; releasing");
            return Ok(Err(Failure::Expired { elapsed }));
        }
        // Enough servers answered for a free lock to be won: it is held elsewhere.
        Ok(Err(if answered >= quorum {
            Failure::Busy
        } else {
            Failure::NoQuorum {
                granted,
                unreachable: self.client.nodes() - answered,
            }
        }))
    }

    /// Releases the owner `field` on every server in the background.
    fn release_everywhere_in_background(&self, field: &str) {
        for (node, keys) in self.nodes() {
            node.inner
                .release_in_background(node::release_of(&self.name, keys, field));
        }
    }
}

/// One round's owner while its outcome is open: unless it won, dropping it (a failed round,
/// a cancelled acquisition, an error) releases it on every server.
struct Round<'a> {
    lock: &'a RedLock,
    field: Arc<str>,
    pending: bool,
}

impl Drop for Round<'_> {
    fn drop(&mut self) {
        if self.pending {
            self.lock.release_everywhere_in_background(&self.field);
        }
    }
}
