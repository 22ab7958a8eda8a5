//! Every lock operation through a client built from `examples/config/master_slave.toml`;
//! the locks live on the master and reach the replicas by replication.

use dlock_tests::topology as common;

use dlock_tests::RedisReplicaSet;
use redis::Commands;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn master_slave_mode_from_its_sample_file() {
    let set = RedisReplicaSet::start(2);
    let ports = [
        (6379, set.master.port()),
        (6380, set.replicas[0].port()),
        (6381, set.replicas[1].port()),
    ];
    let config = common::sample("master_slave", &ports, "30s");
    let fast = common::sample("master_slave", &ports, "1s");
    let counter = set
        .master
        .client()
        .get_multiplexed_async_connection()
        .await
        .unwrap();
    common::lock_suite(&config, &fast, counter, "suite:value").await;

    // Writes went to the master: a held lock shows up there and, replicated, on replicas.
    let client = config.build().await.unwrap();
    let guard = client.lock("replicated").lock().await.unwrap();
    set.wait_replicated();
    for server in std::iter::once(&set.master).chain(&set.replicas) {
        let exists: bool = server.connection().exists("shop:replicated").unwrap();
        assert!(exists, "lock missing on port {}", server.port());
    }
    guard.unlock().await.unwrap();
}

/// The master/replicas topology has no automatic failover (README, "What each mode does
/// under failover"): with the master unresponsive (stopped with SIGSTOP, its replica up
/// and in sync), an acquisition fails once `failover_wait` is spent, with an error that
/// names the master; once the master answers again, the same client locks again. (The
/// tries the client sent meanwhile wait in the master's socket and run when it resumes:
/// what they took is withdrawn, or the last acquisition would wait out a 30 s hold.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_the_master_down_locks_are_unavailable_until_it_is_back() {
    use std::time::{Duration, Instant};

    use dlock::{ErrorKind, LockClient, Topology};

    let set = RedisReplicaSet::start(1);
    let topology = Topology::master_replicas(set.master_url(), set.replica_urls());
    let client = LockClient::builder()
        .failover_wait(Duration::from_secs(1))
        .command_timeout(Duration::from_millis(500))
        .connect_to(&topology)
        .await
        .unwrap();
    client
        .lock("ms-down")
        .lock()
        .await
        .unwrap()
        .unlock()
        .await
        .unwrap();

    set.master.pause();
    let started = Instant::now();
    let outcome = client
        .lock("ms-down")
        .try_lock_for(Duration::from_secs(30))
        .await;
    let took = started.elapsed();
    set.master.resume();
    let error = match outcome {
        Ok(_) => panic!("locked with the master down (on a replica?)"),
        Err(error) => error,
    };
    eprintln!("master down: failed after {took:?}: {error}");
    assert_eq!(error.kind(), ErrorKind::Unavailable, "{error}");
    assert!(
        error.to_string().contains(&set.master.port().to_string()),
        "the error does not name the master: {error}"
    );
    // failover_wait (1 s) plus a command timeout (0.5 s), with room for a loaded machine;
    // far under the 30 s the call would have waited for a release.
    assert!(took < Duration::from_secs(5), "failed after {took:?}");

    let guard = client
        .lock("ms-down")
        .try_lock_for(Duration::from_secs(10))
        .await
        .expect("the master is back: the lock works again");
    guard.unlock().await.unwrap();
}
