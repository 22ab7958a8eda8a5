//! Cluster mode from `examples/config/cluster.toml`: every lock operation, 1,000 lock
//! names over all masters, a woken waiter on each master, and a failover while locking.

use dlock_tests::failover;
use dlock_tests::topology as common;

use std::collections::HashSet;
use std::sync::Arc;
use std::time::{Duration, Instant};

use dlock_tests::RedisCluster;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cluster_mode_from_its_sample_file_and_through_a_failover() {
    let cluster = Arc::new(RedisCluster::start());
    let nodes = cluster.nodes();
    let ports: Vec<(u16, u16)> = [7000, 7001, 7002]
        .into_iter()
        .zip(nodes.iter().map(|n| n.port()))
        .collect();
    let config = common::sample("cluster", &ports, "30s");
    let fast = common::sample("cluster", &ports, "1s");
    let counter = redis::cluster::ClusterClient::new(cluster.node_urls())
        .unwrap()
        .get_async_connection()
        .await
        .unwrap();
    common::lock_suite(&config, &fast, counter, "suite:value").await;

    many_names_over_every_master(&cluster, &config).await;
    a_waiter_on_each_master_is_woken(&cluster, &config).await;
    failover_while_locking(&cluster, &config).await;
}

/// 1,000 names with and without hash tags, spread over the three masters: acquire and
/// release each, with no CROSSSLOT (or any other) error.
async fn many_names_over_every_master(cluster: &RedisCluster, config: &dlock::config::Config) {
    let client = config.build().await.unwrap();
    let mut owners = HashSet::new();
    let mut tasks = Vec::new();
    for i in 0..1000 {
        let name = match i % 4 {
            0 => format!("goods:{i}"),
            1 => format!("goods:{{{i}}}"),
            2 => format!("{{}}odd:{i}"),
            _ => format!("{{order:{}}}:line:{i}", i % 37),
        };
        owners.insert(cluster.slot_owner_port(cluster.key_slot(&format!("shop:{name}"))));
        let lock = client.lock(&name);
        tasks.push(tokio::spawn(async move {
            let guard = lock
                .lock()
                .await
                .unwrap_or_else(|e| panic!("{}: {e}", lock.name()));
            guard
                .scope(lock.try_lock())
                .await
                .unwrap()
                .unlock()
                .await
                .unwrap();
            guard
                .unlock()
                .await
                .unwrap_or_else(|e| panic!("{}: {e}", lock.name()));
        }));
    }
    for task in tasks {
        task.await.unwrap();
    }
    assert_eq!(owners.len(), 3, "the names cover all three masters");
}

/// For a lock on each master: a waiter on another client is woken by the release.
async fn a_waiter_on_each_master_is_woken(cluster: &RedisCluster, config: &dlock::config::Config) {
    let holder = config.build().await.unwrap();
    let waiter = config.build().await.unwrap();
    let mut covered = HashSet::new();
    for i in 0.. {
        let name = format!("wake:{i}");
        let owner = cluster.slot_owner_port(cluster.key_slot(&format!("shop:{name}")));
        if !covered.insert(owner) {
            continue;
        }
        let handoff = common::handoff(&holder, &waiter, &name).await;
        assert!(
            handoff <= Duration::from_millis(150),
            "waiter on master {owner} woken after {handoff:?}"
        );
        eprintln!("cluster: waiter on master {owner} woken {handoff:?} after the release");
        if covered.len() == 3 {
            break;
        }
    }
}

async fn failover_while_locking(cluster: &Arc<RedisCluster>, config: &dlock::config::Config) {
    let client = config.build().await.unwrap();
    // One hash tag: the cycled lock and the held one live in the slot that fails over.
    let name = "{failover}:cycle";
    let held = "{failover}:held";
    let slot = cluster.key_slot(&format!("shop:{name}"));
    assert_eq!(slot, cluster.key_slot(&format!("shop:{held}")));
    let load = failover::CycleLoad::start(&client, &vec![name.to_owned(); 4]);

    // A waiter of another client, subscribed on the old owner, blocked across the failover.
    // Its periodic recheck is longer than the holder's TTL (30 s lease), so it naps until
    // a message or a resubscription wakes it: only the release published on the new
    // owner, heard through a subscription that followed the slot, can wake it in time.
    let mut patient = config.clone();
    patient.lock.max_wait_recheck = Some(Duration::from_secs(60));
    let holder = client.lock(held).lock().await.unwrap();
    let lock = patient.build().await.unwrap().lock(held);
    let waiting = tokio::spawn(async move {
        let guard = lock.lock().await.unwrap();
        let at = Instant::now();
        guard.unlock().await.unwrap();
        at
    });
    tokio::time::sleep(Duration::from_millis(500)).await;

    let old_owner = cluster.slot_owner_port(slot);
    let started = Instant::now();
    let new_owner = {
        let cluster = Arc::clone(cluster);
        tokio::task::spawn_blocking(move || cluster.failover_slot(slot))
            .await
            .unwrap()
    };
    let promoted = started.elapsed();
    assert_ne!(old_owner, new_owner);

    load.wait_for_success_after(started + promoted).await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    let (cycles, window) = load.stop(started).await;
    eprintln!(
        "cluster failover: slot {slot} moved {old_owner} -> {new_owner} in {promoted:?}; longest gap between successful lock cycles: {window:?} ({cycles} cycles)"
    );

    // The waiter is woken by the release on the new owner: its sharded subscription
    // followed the slot. A missed message leaves it napping for the holder's TTL (20 s or
    // more), far past the 5 s bound; 200 ms is slack for a loaded machine.
    assert!(!waiting.is_finished(), "the waiter got a held lock");
    let released = Instant::now();
    holder.unlock().await.unwrap();
    let acquired = tokio::time::timeout(Duration::from_secs(5), waiting)
        .await
        .unwrap_or_else(|_| {
            panic!(
                "the waiter was not woken within 5 s of the release on the new owner {new_owner}"
            )
        })
        .unwrap();
    let woken = acquired.saturating_duration_since(released);
    eprintln!(
        "cluster failover: waiter woken {woken:?} after the release on the new owner {new_owner}"
    );
    assert!(
        woken <= Duration::from_millis(200),
        "waiter woken {woken:?} after the release on the new owner"
    );
}
