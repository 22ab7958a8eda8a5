//! Many waiters on many different locks (2,000 each; 10,000 took the test machine seconds
//! for the waiters' own first tries): the client's one subscriber connection subscribes
//! their unlock channels in batches, so thousands of waiters are subscribed within a few
//! hundred milliseconds (one command per channel took seconds and left most waiters on
//! their recheck timer), their channels are gone soon after they leave, and a waiter whose
//! subscription was part of a batch is woken by the release.
//!
//! The oracle is the server's own view: `PUBSUB CHANNELS` (or `PUBSUB SHARDCHANNELS` on
//! every cluster node) counts the unlock channels actually subscribed.

use std::collections::HashSet;
use std::sync::Arc;
use std::time::{Duration, Instant};

use dlock::{LockClient, LockError, LockGuard, Topology};
use dlock_tests::commandstats::parse_command_calls;
use dlock_tests::{RedisCluster, RedisServer};
use redis::aio::MultiplexedConnection;
use tokio::task::JoinSet;

/// How long every waiter waits: past the subscription and release phases, short enough
/// for the test to stay well under 30 s.
const WAIT: Duration = Duration::from_secs(6);
/// The waiters' recheck: far beyond `WAIT`, so only an unlock message can wake them in
/// time.
const RECHECK: Duration = Duration::from_secs(60);
/// The holder's lease: no watchdog, and no expiry during the test.
const LEASE: Duration = Duration::from_secs(60);
/// How often the server's channel count is read.
const POLL: Duration = Duration::from_millis(5);

/// The unlock channels subscribed on the server(s).
struct Channels {
    nodes: Vec<MultiplexedConnection>,
    sharded: bool,
}

impl Channels {
    async fn count(&mut self) -> usize {
        let subcommand = if self.sharded {
            "SHARDCHANNELS"
        } else {
            "CHANNELS"
        };
        let mut total = 0;
        for node in &mut self.nodes {
            let names: Vec<String> = redis::cmd("PUBSUB")
                .arg(subcommand)
                .arg("dlock:unlock:*")
                .query_async(node)
                .await
                .unwrap();
            total += names.len();
        }
        total
    }

    /// The scripts (`EVALSHA`, `EVAL`) the servers ran so far: each waiter's try is one.
    async fn scripts(&mut self) -> u64 {
        let mut total = 0;
        for node in &mut self.nodes {
            let info: String = redis::cmd("INFO")
                .arg("commandstats")
                .query_async(node)
                .await
                .unwrap();
            let calls = parse_command_calls(&info);
            total += calls.get("evalsha").copied().unwrap_or(0)
                + calls.get("eval").copied().unwrap_or(0);
        }
        total
    }

    /// When exactly `wanted` channels were seen subscribed, or `None` if not within
    /// `limit`; and the last count seen.
    async fn reach(&mut self, wanted: usize, limit: Duration) -> (Option<Instant>, usize) {
        let started = Instant::now();
        loop {
            let count = self.count().await;
            if count == wanted {
                return (Some(Instant::now()), count);
            }
            if started.elapsed() > limit {
                return (None, count);
            }
            tokio::time::sleep(POLL).await;
        }
    }
}

/// The bounds one deployment must meet.
struct Bounds {
    /// From the last waiter's start until every channel is subscribed.
    subscribed: Duration,
    /// From the last waiter's exit until no channel is left.
    gone: Duration,
    /// From the start of the releases until the last woken waiter has the lock. A waiter
    /// that missed its wake-up sleeps to its 60 s recheck and times out at 6 s, which
    /// fails on its own; this bounds how promptly a thousand are served (2.2 s seen on a
    /// cluster beside two busy loops on two cores).
    woken: Duration,
}

/// `n` waiters of `client`, each on its own lock held by `holder`: all are subscribed in
/// time; the waiters of the first half of the locks, released, acquire promptly; the
/// others time out; then every channel is gone in time.
async fn many_waiters(
    holder: &LockClient,
    client: &LockClient,
    mut channels: Channels,
    prefix: &str,
    n: usize,
    bounds: Bounds,
) {
    let names: Vec<String> = (0..n).map(|i| format!("{prefix}:{i}")).collect();
    let taking_started = Instant::now();
    let mut taking = JoinSet::new();
    for name in &names {
        let lock = holder.lock(name);
        taking.spawn(async move { lock.lock_with_lease(LEASE).await.unwrap() });
    }
    let mut held: Vec<LockGuard> = taking.join_all().await;
    eprintln!("{n} locks taken in {:?}", taking_started.elapsed());
    assert_eq!(channels.count().await, 0, "a channel before any waiter");

    let scripts_before = channels.scripts().await;
    let mut waiters = JoinSet::new();
    for name in &names {
        let lock = client.lock(name);
        let name = name.clone();
        waiters.spawn(async move {
            let outcome = lock.try_lock_for(WAIT).await;
            let at = Instant::now();
            let outcome = match outcome {
                Ok(guard) => {
                    guard.unlock().await.unwrap();
                    Ok(at)
                }
                Err(error) => Err(error),
            };
            // The subscription is dropped with the acquisition: the waiter has left.
            (name, outcome, Instant::now())
        });
    }
    // Every waiter has found its lock busy (and subscribes) once the server ran one try
    // script per waiter: the time until then is the waiters' own, not the subscriber's.
    let spawned = Instant::now();
    while channels.scripts().await < scripts_before + n as u64 {
        assert!(
            spawned.elapsed() < WAIT / 2,
            "the waiters' tries take too long"
        );
        tokio::time::sleep(POLL).await;
    }
    let last_tried = Instant::now();
    let (subscribed, seen) = channels.reach(n, WAIT / 2).await;
    let subscribed = subscribed.map(|at| at - last_tried);
    eprintln!(
        "{n} waiters: tried after {:?}, all subscribed {subscribed:?} later (seen {seen})",
        last_tried - spawned
    );
    let subscribed = subscribed
        .unwrap_or_else(|| panic!("only {seen} of {n} channels {:?} after the tries", WAIT / 2));
    assert!(
        subscribed < bounds.subscribed,
        "{n} channels subscribed after {subscribed:?} (limit {:?})",
        bounds.subscribed
    );

    let released: HashSet<String> = held[..n / 2]
        .iter()
        .map(|guard| guard.name().to_owned())
        .collect();
    let releases_started = Instant::now();
    let mut releasing = JoinSet::new();
    for guard in held.drain(..n / 2) {
        releasing.spawn(async move { guard.unlock().await.unwrap() });
    }
    releasing.join_all().await;

    let mut last_woken = releases_started;
    let mut last_left = releases_started;
    for (name, outcome, left) in waiters.join_all().await {
        last_left = last_left.max(left);
        match outcome {
            Ok(at) => {
                assert!(released.contains(&name), "{name} acquired while held");
                last_woken = last_woken.max(at);
            }
            Err(LockError::Timeout { .. }) => {
                assert!(
                    !released.contains(&name),
                    "{name} was released but its waiter timed out"
                );
            }
            Err(error) => panic!("{name}: {error}"),
        }
    }
    let woken = last_woken - releases_started;
    eprintln!("{} released: the last waiter woke after {woken:?}", n / 2);
    assert!(
        woken < bounds.woken,
        "the last released lock's waiter acquired {woken:?} after the releases began (limit {:?})",
        bounds.woken
    );

    let (gone, left) = channels.reach(0, Duration::from_secs(5)).await;
    let gone = gone.map(|at| at - last_left);
    eprintln!("channels gone after {gone:?} (left {left})");
    let gone = gone.unwrap_or_else(|| panic!("{left} channels left 5 s after the waiters"));
    assert!(
        gone < bounds.gone,
        "channels gone {gone:?} after the last waiter left (limit {:?})",
        bounds.gone
    );
    for guard in held {
        guard.unlock().await.unwrap();
    }
}

/// A connection for `PUBSUB`, without the default response timeout: under thousands of
/// waiters' scripts a listing may take longer than half a second.
async fn counting_connection(server: &RedisServer) -> MultiplexedConnection {
    let config = redis::AsyncConnectionConfig::new().set_response_timeout(None);
    server
        .client()
        .get_multiplexed_async_connection_with_config(&config)
        .await
        .unwrap()
}

async fn waiting_client(url_or_topology: Result<&str, &Topology>) -> LockClient {
    let builder = LockClient::builder().max_wait_recheck(RECHECK);
    match url_or_topology {
        Ok(url) => builder.connect(url).await.unwrap(),
        Err(topology) => builder.connect_to(topology).await.unwrap(),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn thousands_of_waiters_are_subscribed_and_unsubscribed_in_batches() {
    let server = RedisServer::start();
    let holder = LockClient::connect(&server.url()).await.unwrap();
    let client = Arc::new(waiting_client(Ok(&server.url())).await);
    let channels = Channels {
        nodes: vec![counting_connection(&server).await],
        sharded: false,
    };
    many_waiters(
        &holder,
        &client,
        channels,
        "batch",
        2_000,
        Bounds {
            subscribed: Duration::from_millis(1_000),
            gone: Duration::from_millis(1_000),
            woken: Duration::from_millis(4_000),
        },
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sharded_waiters_over_many_slots_are_subscribed_in_batches() {
    let cluster = RedisCluster::start();
    let topology = Topology::cluster(cluster.node_urls());
    let holder = LockClient::builder().connect_to(&topology).await.unwrap();
    let client = waiting_client(Err(&topology)).await;
    let mut nodes = Vec::new();
    for node in cluster.nodes() {
        nodes.push(counting_connection(node).await);
    }
    let channels = Channels {
        nodes,
        sharded: true,
    };
    many_waiters(
        &holder,
        &client,
        channels,
        "sharded",
        2_000,
        Bounds {
            subscribed: Duration::from_millis(2_500),
            gone: Duration::from_millis(1_000),
            woken: Duration::from_millis(4_000),
        },
    )
    .await;
}
