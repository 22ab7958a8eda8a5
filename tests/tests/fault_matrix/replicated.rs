//! The faults of replicated deployments, each applied to every primitive at once: a
//! Sentinel failover with default settings and with `replica_acks`, a cluster slot
//! failover.

use std::time::{Duration, Instant};

use dlock::fencing::Fence;
use dlock::{LockClient, LockClientBuilder, LockError, Topology};
use dlock_tests::primitive::{Held, Primitive};
use dlock_tests::{RedisCluster, RedisSentinelGroup};

use crate::support::{
    any_exists, assert_kept_and_handed_off, builder, cells, name, Cell, LossWatch, Rival,
};

/// A wake-up across a failover: the subscriber follows the master or the slot.
const FAILOVER_WAKE_LIMIT: Duration = Duration::from_millis(200);

async fn connect_to(builder: LockClientBuilder, topology: &Topology) -> LockClient {
    builder
        .connect_to(topology)
        .await
        .unwrap_or_else(|e| panic!("cannot connect: {e}"))
}

/// After a failover: each hold kept, on the new master (`connection`), still exclusive;
/// its release wakes the rival within `FAILOVER_WAKE_LIMIT`.
async fn assert_kept_on(
    fault: &str,
    label: &str,
    cells: Vec<Cell>,
    holders: &LockClient,
    connection: &mut redis::Connection,
) {
    for (primitive, ..) in &cells {
        let keys = primitive.keys(holders, &name(fault, *primitive));
        assert!(
            any_exists(connection, &keys),
            "{primitive} {label}: not on the new master"
        );
    }
    assert_kept_and_handed_off(label, cells, FAILOVER_WAKE_LIMIT).await;
}

/// `SENTINEL FAILOVER` with every primitive held, default settings. Holds with a 5 s
/// watchdog are kept on the new master and still exclude; their releases wake the rivals.
/// Holds with a 1 s watchdog may lapse during the failover: then a rival may take them,
/// but never before their holder was told.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sentinel_failover() {
    let _cpu = crate::support::sharing_cpu().await;
    let group = RedisSentinelGroup::start();
    let topology = Topology::sentinel(group.master_name(), group.sentinel_urls());
    let holders = connect_to(
        builder().watchdog_timeout(Duration::from_secs(5)),
        &topology,
    )
    .await;
    let brief = connect_to(
        builder().watchdog_timeout(Duration::from_secs(1)),
        &topology,
    )
    .await;
    let rivals = connect_to(builder(), &topology).await;
    let kept = cells(
        &holders,
        &rivals,
        "sentinel",
        Duration::from_secs(30),
        Duration::from_secs(30),
    )
    .await;
    let lapsing = cells(
        &brief,
        &rivals,
        "sentinel-brief",
        Duration::from_secs(30),
        Duration::from_secs(6),
    )
    .await;
    group.wait_replicated();
    let started = Instant::now();
    let new_master = group.failover();
    println!(
        "matrix sentinel_failover: failover took {:?}",
        started.elapsed()
    );
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let mut connection = group.server_on_port(new_master).unwrap().connection();
    assert_kept_on(
        "sentinel",
        "sentinel_failover",
        kept,
        &holders,
        &mut connection,
    )
    .await;
    for (primitive, held, watch, rival) in lapsing {
        let outcome = lapse(primitive, held, watch, rival, Order::Measured).await;
        println!("matrix {primitive} sentinel_failover (1 s watchdog): {outcome}");
    }
}

/// Whether a lapsed hold's holder must be told before a rival takes it.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Order {
    /// Asserted: renewals count only once replicas confirmed them (`replica_acks`).
    Asserted,
    /// Measured and reported: with default settings a holder renewing on the deposed
    /// master is told only when it reaches the new one (a documented risk).
    Measured,
}

/// What became of a hold with a 1 s watchdog across a failover: kept, or lapsed — then
/// its holder must have been told, and (`Order::Asserted`) no later than a rival took it.
async fn lapse(
    primitive: Primitive,
    held: Held,
    watch: LossWatch,
    rival: Rival,
    order: Order,
) -> String {
    match rival.held().await {
        Ok((acquired_at, rival_held)) => {
            rival_held.unlock().await.unwrap();
            let (told_at, _) = watch.await.unwrap().unwrap_or_else(|| {
                panic!("{primitive}: a rival took a hold whose holder was never told")
            });
            if order == Order::Asserted {
                assert!(
                    told_at <= acquired_at,
                    "{primitive}: a rival held it {:?} before its holder was told",
                    told_at - acquired_at
                );
            }
            if told_at <= acquired_at {
                format!(
                    "lapsed, holder told {:?} before a rival took it",
                    acquired_at - told_at
                )
            } else {
                format!(
                    "lapsed, a rival took it {:?} BEFORE its holder was told",
                    told_at - acquired_at
                )
            }
        }
        Err(LockError::Timeout { .. }) => {
            if held.is_lost() {
                assert!(
                    watch.await.unwrap().is_some(),
                    "{primitive}: lost but not told"
                );
                "lapsed, holder told, no rival got it within its wait".to_owned()
            } else {
                "kept".to_owned()
            }
        }
        Err(e) => panic!("{primitive}: rival failed: {e}"),
    }
}

/// `replica_acks(2, 200ms)` on a Sentinel deployment. With both replicas stopped, every
/// primitive's acquisition is refused with `NotReplicated` and leaves nothing on the
/// master; the control, the same acquisitions without `replica_acks`, are granted (a hold
/// no replica has). With the replicas back, every hold is confirmed by both, survives a
/// failover and still excludes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sentinel_failover_with_replica_acks() {
    let _cpu = crate::support::sharing_cpu().await;
    let group = RedisSentinelGroup::start();
    let topology = Topology::sentinel(group.master_name(), group.sentinel_urls());
    let acks = builder()
        .replica_acks(2, Duration::from_millis(200))
        .watchdog_timeout(Duration::from_secs(5));
    let holders = connect_to(acks, &topology).await;
    let brief = connect_to(
        builder()
            .replica_acks(2, Duration::from_millis(200))
            .watchdog_timeout(Duration::from_secs(1)),
        &topology,
    )
    .await;
    let one_ack = builder().replica_acks(1, Duration::from_millis(200));
    let brief_rivals = connect_to(one_ack, &topology).await;
    let unconfirmed = connect_to(builder(), &topology).await;
    let rivals = connect_to(builder(), &topology).await;
    let master = group.current_master_port();
    let replicas: Vec<_> = group
        .servers()
        .iter()
        .filter(|server| server.port() != master)
        .collect();
    for replica in &replicas {
        replica.pause();
    }
    let mut connection = group.master_server().connection();
    let attempts: Vec<_> = Primitive::ALL
        .iter()
        .map(|&primitive| {
            let holders = holders.clone();
            tokio::spawn(async move {
                let name = name("acks-cut", primitive);
                let started = Instant::now();
                let outcome = primitive
                    .acquire(&holders, &name, Duration::ZERO, None)
                    .await
                    .map(drop);
                (primitive, name, outcome, started.elapsed())
            })
        })
        .collect();
    let mut refusals = Vec::new();
    for attempt in attempts {
        refusals.push(attempt.await.unwrap());
    }
    for (primitive, cut_name, outcome, took) in refusals {
        assert!(
            matches!(outcome, Err(LockError::NotReplicated { .. })),
            "{primitive}: with both replicas stopped: {outcome:?}"
        );
        assert!(
            !any_exists(&mut connection, &primitive.keys(&holders, &cut_name)),
            "{primitive}: a refused acquisition left its hold"
        );
        let control = primitive
            .acquire(
                &unconfirmed,
                &name("acks-control", primitive),
                Duration::ZERO,
                None,
            )
            .await
            .expect("without replica_acks the hold is granted");
        control.unlock().await.unwrap();
        println!("matrix {primitive} sentinel_replica_acks: replicas stopped: NotReplicated after {took:?}, nothing left; control without acks granted");
    }
    for replica in &replicas {
        replica.resume();
    }
    group.wait_replicated();
    let kept = cells(
        &holders,
        &rivals,
        "acks",
        Duration::from_secs(30),
        Duration::from_secs(30),
    )
    .await;
    let lapsing = cells(
        &brief,
        &brief_rivals,
        "acks-brief",
        Duration::from_secs(30),
        Duration::from_secs(6),
    )
    .await;
    group.failover();
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let new_master = group.current_master_port();
    let mut connection = group.server_on_port(new_master).unwrap().connection();
    assert_kept_on(
        "acks",
        "sentinel_replica_acks",
        kept,
        &holders,
        &mut connection,
    )
    .await;
    for (primitive, held, watch, rival) in lapsing {
        let outcome = lapse(primitive, held, watch, rival, Order::Asserted).await;
        println!("matrix {primitive} sentinel_replica_acks (1 s watchdog): {outcome}");
    }
}

/// A cluster slot failover (`CLUSTER FAILOVER` on the replica of the master serving every
/// cell's slot) with every primitive held (5 s watchdog): each hold kept on the new owner
/// and exclusive, each release wakes its rival through sharded pub/sub. Fenced increments
/// before and after the failover all count, and a token below the highest is refused. A
/// lock with a task of the holder's client waiting next in line: after the failover the
/// release, on the new owner, gives it to that task (a larger token), which holds it while
/// another client's waiter is still kept out.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cluster_slot_failover() {
    let _cpu = crate::support::sharing_cpu().await;
    let cluster = RedisCluster::start();
    let topology = Topology::cluster(cluster.node_urls());
    let holders = connect_to(
        builder().watchdog_timeout(Duration::from_secs(5)),
        &topology,
    )
    .await;
    let rivals = connect_to(builder(), &topology).await;
    let kept = cells(
        &holders,
        &rivals,
        "cluster",
        Duration::from_secs(30),
        Duration::from_secs(30),
    )
    .await;
    let local_name = "{matrix-cluster}:local-line";
    let first = holders.lock(local_name).lock().await.unwrap();
    let next = {
        let lock = holders.lock(local_name);
        tokio::spawn(async move { lock.lock().await.unwrap() })
    };
    let outsider = {
        let lock = rivals.lock(local_name);
        tokio::spawn(async move { lock.try_lock_for(Duration::from_secs(30)).await })
    };
    let token = kept[0].1.fencing_token().expect("a lock's token");
    let fenced = holders.fenced();
    let counter = "{matrix-cluster}:counter";
    for _ in 0..10 {
        fenced.incr_by(counter, 1, Fence::new(token)).await.unwrap();
    }
    let slot = cluster.key_slot(counter);
    let started = Instant::now();
    let new_owner = cluster.failover_slot(slot);
    println!(
        "matrix cluster_slot_failover: slot {slot} moved in {:?}",
        started.elapsed()
    );
    tokio::time::sleep(Duration::from_millis(1000)).await;
    for _ in 0..10 {
        fenced
            .incr_by(counter, 1, Fence::new(token + 1))
            .await
            .unwrap();
    }
    let mut connection = cluster.node_on_port(new_owner).unwrap().connection();
    let value: i64 = redis::cmd("GET")
        .arg(counter)
        .query(&mut connection)
        .unwrap();
    assert_eq!(value, 20, "fenced increments across the slot failover");
    let stale = fenced.incr_by(counter, 1, Fence::new(token)).await;
    assert!(
        matches!(stale, Err(LockError::StaleToken { .. })),
        "a lower token after the failover: {stale:?}"
    );
    println!("matrix fenced cluster_slot_failover: 20 of 20 increments on the new owner, the older token refused");

    // The local line's hand-off, made by a release on the new owner.
    let first_token = first.fencing_token().expect("a lock's token");
    first.unlock().await.unwrap();
    let next = tokio::time::timeout(Duration::from_secs(5), next)
        .await
        .expect("the next task of the line holds the lock after the failover")
        .unwrap();
    assert!(next.fencing_token() > Some(first_token), "the token grew");
    let fields: Vec<String> = redis::cmd("HKEYS")
        .arg(local_name)
        .query(&mut connection)
        .unwrap();
    assert_eq!(
        fields.len(),
        2,
        "one hold and its token on the new owner: {fields:?}"
    );
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert!(
        !outsider.is_finished(),
        "another client took the given lock"
    );
    let released_at = Instant::now();
    next.unlock().await.unwrap();
    outsider
        .await
        .unwrap()
        .expect("the other client's waiter gets the lock")
        .unlock()
        .await
        .unwrap();
    println!(
        "matrix lock local_hand_off cluster_slot_failover: given on the new owner; the other client held it {:?} after the next task's release",
        released_at.elapsed()
    );
    assert_kept_on(
        "cluster",
        "cluster_slot_failover",
        kept,
        &holders,
        &mut connection,
    )
    .await;
}
