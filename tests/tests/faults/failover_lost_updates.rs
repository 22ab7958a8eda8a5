//! What a Sentinel failover costs the data a lock protects, with and without
//! `replica_acks`: four workers (two clients) each take a lock, add 1 to a counter with a
//! fenced write, and release, while `SENTINEL FAILOVER` moves the master. Every write the
//! old master acknowledged after its replicas stopped following it is thrown away with
//! its branch: the lost updates are the increments acknowledged to a worker minus the
//! counter's final value on the new master.
//!
//! CI runs one failover per setting; `DLOCK_FAILOVER_ROUNDS=3` runs three. The settings
//! (default, `replica_acks(1, 200ms)`, `replica_acks(2, 200ms)`: all of the group's
//! replicas) run in the same test, one after the other, on the same group: the ratio of
//! their throughput is the cost of the acknowledgements.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use dlock::{LockClient, LockError, Topology};
use dlock_tests::RedisSentinelGroup;

/// Failovers per setting: `DLOCK_FAILOVER_ROUNDS`, else 1.
fn rounds() -> usize {
    std::env::var("DLOCK_FAILOVER_ROUNDS")
        .ok()
        .and_then(|value| value.parse().ok())
        .filter(|&n| n > 0)
        .unwrap_or(1)
}

/// What one setting's run measured.
#[derive(Debug)]
struct Run {
    /// Increments a worker was told were applied.
    acknowledged: u64,
    /// The counter on the master at the end.
    kept: u64,
    /// Acquisitions per second over the run.
    rate: f64,
    /// Acquisitions that failed (refused, timed out, not replicated) and were retried.
    failed: u64,
    /// Increments whose outcome a worker never learnt (the call failed): each may or may
    /// not have been applied.
    unconfirmed: u64,
    /// Increments refused as stale (a token below one the key has seen: the promoted
    /// replica's token counter was behind): never applied.
    stale: u64,
}

/// The name of a setting's keys: `plain` or `acks<n>`.
fn setting(acks: Option<u32>) -> String {
    acks.map_or_else(|| "plain".to_owned(), |n| format!("acks{n}"))
}

async fn clients(group: &RedisSentinelGroup, acks: Option<u32>) -> [LockClient; 2] {
    let topology = Topology::sentinel(group.master_name(), group.sentinel_urls());
    let connect = || {
        let mut builder = LockClient::builder()
            .command_timeout(Duration::from_millis(500))
            .failover_wait(Duration::from_secs(15))
            .key_prefix(format!("{}:", setting(acks)));
        if let Some(replicas) = acks {
            builder = builder.replica_acks(replicas, Duration::from_millis(200));
        }
        builder.connect_to(&topology)
    };
    [connect().await.unwrap(), connect().await.unwrap()]
}

/// Four workers on `clients` until `rounds` failovers are done (each after the replicas
/// caught up and a second of work).
async fn run(group: &RedisSentinelGroup, acks: Option<u32>, rounds: usize) -> Run {
    let clients = clients(group, acks).await;
    let counter = format!("counter:{}", setting(acks));
    let stop = Arc::new(AtomicBool::new(false));
    let acknowledged = Arc::new(AtomicU64::new(0));
    let acquired = Arc::new(AtomicU64::new(0));
    let failed = Arc::new(AtomicU64::new(0));
    let unconfirmed = Arc::new(AtomicU64::new(0));
    let stale = Arc::new(AtomicU64::new(0));
    let mut workers = Vec::new();
    for worker in 0..4 {
        let client = clients[worker % 2].clone();
        let (stop, acknowledged, acquired, failed, unconfirmed, stale) = (
            Arc::clone(&stop),
            Arc::clone(&acknowledged),
            Arc::clone(&acquired),
            Arc::clone(&failed),
            Arc::clone(&unconfirmed),
            Arc::clone(&stale),
        );
        let counter = counter.clone();
        workers.push(tokio::spawn(async move {
            let lock = client.lock("stock");
            let fenced = client.fenced();
            while !stop.load(Ordering::Relaxed) {
                let guard = match lock.try_lock_for(Duration::from_secs(2)).await {
                    Ok(guard) => guard,
                    Err(_) => {
                        failed.fetch_add(1, Ordering::Relaxed);
                        tokio::time::sleep(Duration::from_millis(20)).await;
                        continue;
                    }
                };
                acquired.fetch_add(1, Ordering::Relaxed);
                let token = guard.fencing_token().expect("tokens are on");
                match fenced.incr_by(&counter, 1, token).await {
                    Ok(_) => {
                        acknowledged.fetch_add(1, Ordering::Relaxed);
                    }
                    Err(LockError::StaleToken { .. }) => {
                        stale.fetch_add(1, Ordering::Relaxed);
                    }
                    Err(_) => {
                        unconfirmed.fetch_add(1, Ordering::Relaxed);
                    }
                }
                let _ = guard.unlock().await;
            }
        }));
    }
    let started = Instant::now();
    for round in 0..rounds {
        tokio::task::block_in_place(|| group.wait_replicated());
        tokio::time::sleep(Duration::from_secs(1)).await;
        let old = group.current_master_port();
        let new = tokio::task::block_in_place(|| group.failover());
        assert_ne!(old, new, "round {round}");
        tokio::time::sleep(Duration::from_secs(2)).await;
    }
    // Let the clients settle on the last master before counting.
    tokio::task::block_in_place(|| group.wait_replicated());
    stop.store(true, Ordering::Relaxed);
    for worker in workers {
        worker.await.unwrap();
    }
    let elapsed = started.elapsed();
    let kept: Option<u64> = redis::cmd("GET")
        .arg(&counter)
        .query(&mut group.master_server().connection())
        .unwrap();
    Run {
        acknowledged: acknowledged.load(Ordering::Relaxed),
        kept: kept.unwrap_or(0),
        rate: acquired.load(Ordering::Relaxed) as f64 / elapsed.as_secs_f64(),
        failed: failed.load(Ordering::Relaxed),
        unconfirmed: unconfirmed.load(Ordering::Relaxed),
        stale: stale.load(Ordering::Relaxed),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn failover_lost_updates_with_and_without_replica_acks() {
    let group = RedisSentinelGroup::start();
    let rounds = rounds();
    let mut runs = Vec::new();
    for acks in [None, Some(1), Some(2)] {
        let run = run(&group, acks, rounds).await;
        eprintln!(
            "failover lost updates, {} over {rounds} failover(s): {} of {} acknowledged increments missing ({:.0} acquisitions/s, {} failed acquisitions, {} writes refused as stale, {} unconfirmed)",
            acks.map_or_else(|| "default settings".to_owned(), |n| format!("replica_acks({n}, 200ms)")),
            run.acknowledged.saturating_sub(run.kept),
            run.acknowledged,
            run.rate,
            run.failed,
            run.stale,
            run.unconfirmed,
        );
        runs.push(run);
    }
    eprintln!(
        "failover lost updates: acquisition rate with replica_acks(1) / (2) vs default: {:.2} / {:.2}",
        runs[1].rate / runs[0].rate,
        runs[2].rate / runs[0].rate
    );
    // The counter never holds more than was acknowledged or left unconfirmed (each
    // increment counts once, retries included), and every run did work.
    for run in &runs {
        assert!(run.kept <= run.acknowledged + run.unconfirmed, "{run:?}");
        assert!(run.acknowledged > 0, "{run:?}");
    }
}
