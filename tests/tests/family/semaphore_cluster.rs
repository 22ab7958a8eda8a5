//! The semaphore on a Redis Cluster: every key of a semaphore in one slot (names with and
//! without hash tags), renewal by the watchdog, and a 2-permit waiter woken through
//! sharded pub/sub after two single releases.

#[allow(dead_code)] // the shared lock suite; this file uses only its config helper
use dlock_tests::topology as common;

use std::time::{Duration, Instant};

use dlock_tests::RedisCluster;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_semaphore_works_on_a_cluster() {
    let cluster = RedisCluster::start();
    let ports: Vec<(u16, u16)> = [7000, 7001, 7002]
        .into_iter()
        .zip(cluster.nodes().iter().map(|n| n.port()))
        .collect();
    let config = common::sample("cluster", &ports, "30s");
    let a = config.build().await.unwrap();
    let b = config.build().await.unwrap();
    for name in ["uploads", "uploads:{7}", "{}odd", "a{b}}c"] {
        let (sem_a, sem_b) = (a.semaphore(name, 2), b.semaphore(name, 2));
        let first = sem_a.acquire(1).await.unwrap();
        let second = sem_a.acquire(1).await.unwrap();
        assert_eq!(sem_b.available_permits().await.unwrap(), 0, "{name}");
        let waiter = tokio::spawn({
            let sem = sem_b.clone();
            async move { sem.try_acquire_for(2, Duration::from_secs(10)).await }
        });
        tokio::time::sleep(Duration::from_millis(300)).await;
        first.unlock().await.unwrap();
        tokio::time::sleep(Duration::from_millis(200)).await;
        assert!(!waiter.is_finished(), "{name}: one permit is not two");
        let released = Instant::now();
        second.unlock().await.unwrap();
        let both = waiter.await.unwrap().unwrap();
        let latency = released.elapsed();
        assert!(
            latency < Duration::from_millis(500),
            "{name}: woke after {latency:?}"
        );
        assert_eq!(both.held_permits().await.unwrap(), 2, "{name}");
        both.unlock().await.unwrap();
        assert_eq!(sem_a.available_permits().await.unwrap(), 2, "{name}");
    }
}
