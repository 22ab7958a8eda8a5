//! The read-write lock on a Redis Cluster: every key and channel of a lock in its slot
//! (names with and without hash tags), readers sharing, a writer waiting, a downgrade
//! waking a reader through sharded pub/sub.

#[allow(dead_code)] // the shared lock suite; this file uses only its config helper
use dlock_tests::topology as common;

use std::time::{Duration, Instant};

use dlock_tests::RedisCluster;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_read_write_lock_works_on_a_cluster() {
    let cluster = RedisCluster::start();
    let ports: Vec<(u16, u16)> = [7000, 7001, 7002]
        .into_iter()
        .zip(cluster.nodes().iter().map(|n| n.port()))
        .collect();
    let config = common::sample("cluster", &ports, "30s");
    let a = config.build().await.unwrap();
    let b = config.build().await.unwrap();
    for name in ["report", "report:{7}", "{}odd", "a{b}}c"] {
        let (rw_a, rw_b) = (a.rw_lock(name), b.rw_lock(name));
        let first = rw_a.read().try_lock().await.unwrap();
        let second = rw_b.read().try_lock().await.unwrap();
        // A waiting writer (an entry in its own zset, in the lock's slot) holds readers back.
        let writer = tokio::spawn({
            let rw = rw_b.clone();
            async move { rw.write().try_lock_for(Duration::from_secs(10)).await }
        });
        tokio::time::sleep(Duration::from_millis(300)).await;
        assert!(
            rw_a.read().try_lock().await.unwrap_err().is_timeout(),
            "{name}"
        );
        first.unlock().await.unwrap();
        second.unlock().await.unwrap();
        let write = writer.await.unwrap().unwrap();
        let downgraded = write.scope(rw_b.read().lock()).await.unwrap();
        let reader = tokio::spawn({
            let rw = rw_a.clone();
            async move {
                let guard = rw.read().lock().await.unwrap();
                (guard, Instant::now())
            }
        });
        tokio::time::sleep(Duration::from_millis(300)).await;
        let released = Instant::now();
        write.unlock().await.unwrap();
        let (guard, at) = reader.await.unwrap();
        assert!(
            at - released < Duration::from_millis(200),
            "{name}: reader woke after {:?}",
            at - released
        );
        guard.unlock().await.unwrap();
        downgraded.unlock().await.unwrap();
        assert!(!rw_a.is_locked().await.unwrap(), "{name}");
    }
}
