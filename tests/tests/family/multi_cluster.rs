//! The multi-lock on a Redis Cluster: same-slot mode with `{tag}` names runs its one
//! script on the tag's master, cross-slot names are refused with the slots the cluster
//! computes, and sequential mode takes locks on several masters; waiters on both are woken
//! by the (sharded) unlock messages.

use std::time::{Duration, Instant};

use dlock::{LockClient, LockError, MultiLock, Topology};
use dlock_tests::RedisCluster;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn both_modes_lock_wait_and_release_on_a_cluster() {
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

    // Cross-slot names: refused before Redis, with the slots the cluster itself computes.
    let names = ["goods:1", "goods:2", "goods:3"];
    let LockError::CrossSlot { keys } = MultiLock::same_slot(&a, names).unwrap_err() else {
        panic!("cross-slot names must be refused");
    };
    for (key, slot) in &keys {
        assert_eq!(*slot, cluster.key_slot(key), "{key}");
    }
    assert_eq!(keys.len(), 3);
    let masters: std::collections::HashSet<u16> = keys
        .iter()
        .map(|(_, slot)| cluster.slot_owner_port(*slot))
        .collect();
    assert!(masters.len() > 1, "the names should span masters: {keys:?}");

    let same_slot = |client: &LockClient| {
        MultiLock::same_slot(client, ["order:{42}:items", "order:{42}:payment"]).unwrap()
    };
    let sequential = |client: &LockClient| {
        MultiLock::sequential(names.iter().map(|name| client.lock(name))).unwrap()
    };
    for (held_by_a, wanted_by_b) in [
        (same_slot(&a), same_slot(&b)),
        (sequential(&a), sequential(&b)),
    ] {
        let guard = held_by_a.lock().await.unwrap();
        assert!(wanted_by_b.try_lock().await.unwrap_err().is_timeout());
        let waiter = tokio::spawn(async move {
            let guard = wanted_by_b
                .try_lock_for(Duration::from_secs(10))
                .await
                .unwrap();
            let at = Instant::now();
            guard.unlock().await.unwrap();
            at
        });
        tokio::time::sleep(Duration::from_millis(300)).await;
        let released = Instant::now();
        guard.unlock().await.unwrap();
        let woken = waiter.await.unwrap();
        let latency = woken.saturating_duration_since(released);
        eprintln!(
            "{:?}: woken {latency:?} after the release",
            held_by_a.names()
        );
        // Woken by the unlock message: the recheck (1 s, started 300 ms before the
        // release) would come 700 ms after it, the lease 30 s after.
        assert!(latency < Duration::from_millis(250), "{latency:?}");
        for name in held_by_a.names() {
            assert!(!a.lock(name).is_locked().await.unwrap(), "{name}");
        }
    }
}
