//! Fault scenario 6: a critical section ten times longer than the watchdog timeout, while
//! busy threads keep both cores saturated. The watchdog must keep renewing in time: the
//! lock is never lost, its lease never runs low, and a rival polling all along never gets
//! in.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use dlock_core::{LockClient, LockError};
use dlock_tests::RedisServer;

/// Spinning threads: twice the machine's cores (at least 4).
fn burn_cpu(stop: &Arc<AtomicBool>) -> Vec<std::thread::JoinHandle<u64>> {
    let threads = std::thread::available_parallelism().map_or(2, |n| n.get()) * 2;
    (0..threads.max(4))
        .map(|_| {
            let stop = Arc::clone(stop);
            std::thread::spawn(move || {
                let mut spins = 0u64;
                while !stop.load(Ordering::Relaxed) {
                    spins = std::hint::black_box(spins.wrapping_add(1));
                }
                spins
            })
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ten_watchdog_timeouts_under_cpu_load_never_lost_or_shared() {
    let server = RedisServer::start();
    let watchdog = Duration::from_secs(1);
    let hold = watchdog * 10;
    let holder = LockClient::builder()
        .watchdog_timeout(watchdog)
        .connect(&server.url())
        .await
        .unwrap();
    let rival = LockClient::connect(&server.url()).await.unwrap();

    let stop = Arc::new(AtomicBool::new(false));
    let burners = burn_cpu(&stop);
    let guard = holder.lock("long-hold").lock().await.unwrap();
    let started = Instant::now();
    let lost = guard.lost();

    // The rival polls every 50 ms; an admin connection samples the lease every 100 ms.
    let rival_polls = async {
        let mut attempts = 0u32;
        while started.elapsed() < hold {
            match rival.lock("long-hold").try_lock().await {
                Err(LockError::Timeout { .. }) => attempts += 1,
                Ok(_) => panic!(
                    "the rival got the lock {:?} into the hold",
                    started.elapsed()
                ),
                Err(error) => panic!("rival: {error}"),
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        attempts
    };
    let lease_samples = async {
        let mut admin = server
            .client()
            .get_multiplexed_async_connection()
            .await
            .unwrap();
        let mut lowest = i64::MAX;
        while started.elapsed() < hold {
            let pttl: i64 = redis::cmd("PTTL")
                .arg("long-hold")
                .query_async(&mut admin)
                .await
                .unwrap();
            lowest = lowest.min(pttl);
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        lowest
    };
    let (attempts, lowest_pttl) = tokio::select! {
        results = async { tokio::join!(rival_polls, lease_samples) } => results,
        error = lost => panic!("lost {:?} into the hold: {error}", started.elapsed()),
    };
    stop.store(true, Ordering::Relaxed);
    let spins: u64 = burners.into_iter().map(|t| t.join().unwrap()).sum();
    assert!(!guard.is_lost());
    let renewals = holder.stats().renewals;
    guard.unlock().await.unwrap();

    println!(
        "scenario 6: held {:?} (10 × the 1 s watchdog) with {spins} busy-loop spins competing; {renewals} renewals, lowest lease seen {lowest_pttl} ms, rival refused {attempts} times",
        started.elapsed()
    );
    assert!(
        lowest_pttl > 0,
        "the lease ran out (PTTL {lowest_pttl}) during the hold"
    );
    assert!(
        renewals >= 10,
        "only {renewals} renewals in 10 s (period 333 ms)"
    );
    assert!(attempts > 50, "the rival only tried {attempts} times");
}
