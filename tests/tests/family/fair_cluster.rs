//! The fair lock on a Redis Cluster: its queue keys and wake-up channels share the lock
//! key's slot (sharded pub/sub), so waiting, waking and releasing work there.

use std::time::{Duration, Instant};

use dlock::{LockClient, Topology};
use dlock_tests::RedisCluster;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_fair_lock_queues_wakes_and_releases_on_a_cluster() {
    let cluster = RedisCluster::start();
    let topology = Topology::cluster(cluster.node_urls());
    let connect = || async {
        LockClient::builder()
            .key_prefix("shop:")
            .connect_to(&topology)
            .await
            .unwrap()
    };
    let (a, b) = (connect().await, connect().await);
    // Names with and without a hash tag, and one whose braces are no tag.
    for name in ["goods:1", "goods:{7}", "{}odd"] {
        let lock = a.fair_lock(name).with_entry_timeout(Duration::from_secs(3));
        let holder = lock.lock().await.unwrap();
        let mut waiters = Vec::new();
        for id in 0..3 {
            let client = if id % 2 == 0 { &a } else { &b };
            let waiting = client
                .fair_lock(name)
                .with_entry_timeout(Duration::from_secs(3));
            waiters.push(tokio::spawn(async move {
                let guard = waiting.lock().await.unwrap();
                let at = Instant::now();
                guard.unlock().await.unwrap();
                (id, at)
            }));
            let started = Instant::now();
            while lock.queue_len().await.unwrap() < id + 1 {
                assert!(
                    started.elapsed() < Duration::from_secs(10),
                    "{name}: not queued"
                );
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
        }
        // Let the waiters settle into their 1 s re-tries: a prompt grant is a wake-up.
        tokio::time::sleep(Duration::from_millis(200)).await;
        let released = Instant::now();
        holder.unlock().await.unwrap();
        let mut grants = Vec::new();
        for waiter in waiters {
            grants.push(
                tokio::time::timeout(Duration::from_secs(10), waiter)
                    .await
                    .expect("granted")
                    .unwrap(),
            );
        }
        grants.sort_by_key(|(_, at)| *at);
        let order: Vec<usize> = grants.iter().map(|(id, _)| *id).collect();
        assert_eq!(order, [0, 1, 2], "{name}");
        let all = grants[2].1 - released;
        assert!(
            all < Duration::from_millis(500),
            "{name}: three hand-offs took {all:?}: the wake-ups did not arrive"
        );
        assert!(!lock.is_locked().await.unwrap());
        assert_eq!(lock.queue_len().await.unwrap(), 0);
    }
}
