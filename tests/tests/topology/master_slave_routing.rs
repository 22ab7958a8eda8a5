//! Guards the promise of the master/replicas topology that replicas are never read (nor
//! written): every command dlock sends, reads included (`is_locked`, `remaining_lease`,
//! `hold_count`, `is_held`, the waiter's holder checks), goes to the master.
//!
//! The oracle is on the servers: across a run of every lock operation, each replica must
//! accept no new connection (its `total_connections_received` is unchanged; the test's
//! own connection to it was opened before) and run none of the commands a client of
//! dlock sends (per `INFO commandstats`), while the master ran each of them. A control at
//! the end sends one read to a replica the way a misrouted client would and checks that
//! the oracle sees it.

use std::collections::BTreeMap;
use std::time::Duration;

use dlock::{LockClient, Topology};
use dlock_tests::commandstats::parse_command_calls;
use dlock_tests::RedisReplicaSet;
use redis::aio::MultiplexedConnection;

/// Commands a dlock client sends (connection set-up, scripts, reads, waiting); none of
/// them reaches a replica through replication (scripts replicate as their effects).
/// `SELECT` is left out: the master's replication stream sends it too.
const CLIENT_COMMANDS: &[&str] = &[
    "hello",
    "client|setinfo",
    "client|setname",
    "script|load",
    "evalsha",
    "eval",
    "exists",
    "hget",
    "hexists",
    "pttl",
    "subscribe",
    "ssubscribe",
    "unsubscribe",
];

/// What the oracle reads from one server.
#[derive(Debug, Clone, PartialEq)]
struct Counters {
    connections_received: u64,
    calls: BTreeMap<String, u64>,
}

impl Counters {
    async fn read(conn: &mut MultiplexedConnection) -> Counters {
        let stats: String = redis::cmd("INFO")
            .arg("stats")
            .query_async(conn)
            .await
            .unwrap();
        let connections_received = stats
            .lines()
            .find_map(|line| line.strip_prefix("total_connections_received:"))
            .and_then(|n| n.trim().parse().ok())
            .expect("total_connections_received in INFO stats");
        let commandstats: String = redis::cmd("INFO")
            .arg("commandstats")
            .query_async(conn)
            .await
            .unwrap();
        let calls = parse_command_calls(&commandstats).into_iter().collect();
        Counters {
            connections_received,
            calls,
        }
    }

    /// Calls of `command` since `before`.
    fn delta(&self, before: &Counters, command: &str) -> u64 {
        let of = |c: &Counters| c.calls.get(command).copied().unwrap_or(0);
        of(self) - of(before)
    }

    /// The client commands that ran since `before`, with their counts.
    fn client_commands_since(&self, before: &Counters) -> Vec<(&'static str, u64)> {
        CLIENT_COMMANDS
            .iter()
            .map(|command| (*command, self.delta(before, command)))
            .filter(|(_, calls)| *calls > 0)
            .collect()
    }
}

async fn connection(url: &str) -> MultiplexedConnection {
    redis::Client::open(url)
        .unwrap()
        .get_multiplexed_async_connection()
        .await
        .unwrap()
}

/// Every operation of the API, against a master/replicas topology.
async fn every_operation(client: &LockClient, rival: &LockClient) {
    let lock = client.lock("routing");
    assert!(!lock.is_locked().await.unwrap());
    assert_eq!(lock.remaining_lease().await.unwrap(), None);

    let guard = lock.lock().await.unwrap();
    assert!(lock.is_locked().await.unwrap());
    assert!(lock.remaining_lease().await.unwrap().is_some());
    assert_eq!(guard.hold_count().await.unwrap(), 1);
    assert!(guard.is_held().await.unwrap());
    let in_scope = guard
        .scope(async {
            let inner = lock.lock().await.unwrap();
            let counts = (
                lock.hold_count().await.unwrap(),
                lock.is_held().await.unwrap(),
            );
            inner.unlock().await.unwrap();
            counts
        })
        .await;
    assert_eq!(in_scope, (2, true));
    // Renewals: the watchdog (300 ms) renews every 100 ms.
    tokio::time::sleep(Duration::from_millis(450)).await;
    assert!(!guard.is_lost());

    // A waiter of the same client (watches the holder) and one of another client
    // (subscribes, re-tries on the unlock message); each gives the lock back once it got
    // it, one by dropping its guard (background release).
    let local = client.lock("routing");
    let local = tokio::spawn(async move {
        let guard = local.try_lock_for(Duration::from_secs(5)).await.unwrap();
        tokio::time::sleep(Duration::from_millis(20)).await;
        drop(guard);
    });
    let remote = rival.lock("routing");
    let remote = tokio::spawn(async move {
        let guard = remote.try_lock_for(Duration::from_secs(5)).await.unwrap();
        tokio::time::sleep(Duration::from_millis(20)).await;
        guard.unlock().await.unwrap();
    });
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert!(rival
        .lock("routing")
        .try_lock()
        .await
        .unwrap_err()
        .is_timeout());
    guard.unlock().await.unwrap();
    local.await.unwrap();
    remote.await.unwrap();

    let forced = rival.lock("routing").lock().await.unwrap();
    assert!(client.lock("routing").force_unlock().await.unwrap());
    assert!(forced.unlock().await.unwrap_err().is_not_held());

    let leased = client
        .lock("leased")
        .lock_with_lease(Duration::from_secs(5))
        .await
        .unwrap();
    assert!(client
        .lock("leased")
        .try_lock_with_lease(Duration::from_millis(50), Duration::from_secs(1))
        .await
        .unwrap_err()
        .is_timeout());
    leased.unlock().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn master_replicas_never_sends_anything_to_a_replica() {
    let set = RedisReplicaSet::start(2);
    let mut master = connection(&set.master_url()).await;
    let mut replicas = Vec::new();
    for url in set.replica_urls() {
        replicas.push(connection(&url).await);
    }
    let master_before = Counters::read(&mut master).await;
    let mut replicas_before = Vec::new();
    for replica in &mut replicas {
        replicas_before.push(Counters::read(replica).await);
    }

    let topology = Topology::master_replicas(set.master_url(), set.replica_urls());
    let client = LockClient::builder()
        .watchdog_timeout(Duration::from_millis(300))
        .connect_to(&topology)
        .await
        .unwrap();
    let rival = LockClient::builder().connect_to(&topology).await.unwrap();
    every_operation(&client, &rival).await;
    // Let the background release and the last renewals land.
    // (No `wait_replicated`: it opens connections to the replicas.)
    tokio::time::sleep(Duration::from_millis(200)).await;

    let master_after = Counters::read(&mut master).await;
    let on_master = master_after.client_commands_since(&master_before);
    for command in ["evalsha", "exists", "hget", "hexists", "pttl", "subscribe"] {
        assert!(
            master_after.delta(&master_before, command) > 0,
            "the master ran no {command}: the oracle does not see dlock's commands ({on_master:?})"
        );
    }
    for (index, (replica, before)) in replicas.iter_mut().zip(&replicas_before).enumerate() {
        let after = Counters::read(replica).await;
        assert_eq!(
            after.connections_received,
            before.connections_received,
            "replica {index} ({}) accepted {} connection(s) during the run",
            set.replicas[index].port(),
            after.connections_received - before.connections_received
        );
        let ran = after.client_commands_since(before);
        assert!(
            ran.is_empty(),
            "replica {index} ({}) ran client commands: {ran:?}",
            set.replicas[index].port()
        );
    }
    eprintln!("master ran {on_master:?}; the replicas none of them, and accepted no connection");

    // Control: one read sent to a replica on a new connection is seen by the oracle.
    let before = Counters::read(&mut replicas[0]).await;
    let mut misrouted = connection(&set.replica_urls()[0]).await;
    let _: bool = redis::cmd("EXISTS")
        .arg("routing")
        .query_async(&mut misrouted)
        .await
        .unwrap();
    let after = Counters::read(&mut replicas[0]).await;
    assert_eq!(after.connections_received - before.connections_received, 1);
    assert_eq!(after.delta(&before, "exists"), 1);
}
