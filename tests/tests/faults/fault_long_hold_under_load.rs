//! Fault scenario 6: a critical section ten times longer than the watchdog timeout, while
//! busy threads keep both cores saturated. The watchdog must keep renewing in time: the
//! lock is never lost, its lease never runs low, and a rival polling all along never gets
//! in.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use dlock::{LockClient, LockError};
use dlock_tests::RedisServer;

/// Spinning threads: twice the machine's cores (at least 4).
fn burn_cpu(stop: &Arc<AtomicBool>) -> Vec<std::thread::JoinHandle<u64>> {
    let threads = std::thread::available_parallelism().map_or(2, |n| n.get()) * 2;
    (0..threads.max(4))
        .map(|_| {
            let stop = Arc::clone(stop);
            std::thread::Builder::new()
                .name("burner".into())
                .spawn(move || {
                    let mut spins = 0u64;
                    while !stop.load(Ordering::Relaxed) {
                        spins = std::hint::black_box(spins.wrapping_add(1));
                    }
                    spins
                })
                .unwrap()
        })
        .collect()
}

/// One field of `/proc/self/task/*/schedstat` summed over the process's threads, the
/// burners or the others: field 0 is the time spent on a CPU, field 1 the time spent
/// runnable but waiting for one.
fn schedstat(field: usize, burners: bool) -> Duration {
    let mut total = 0u64;
    for task in std::fs::read_dir("/proc/self/task").unwrap().flatten() {
        let name = std::fs::read_to_string(task.path().join("comm")).unwrap_or_default();
        if (name.trim_end() == "burner") != burners {
            continue;
        }
        let stat = std::fs::read_to_string(task.path().join("schedstat")).unwrap_or_default();
        total += stat
            .split_whitespace()
            .nth(field)
            .and_then(|ns| ns.parse::<u64>().ok())
            .unwrap_or(0);
    }
    Duration::from_nanos(total)
}

/// Time the threads other than the burners (the runtime's workers, the test's own thread)
/// spent waiting for a CPU: the scheduler delay the burners cause.
fn run_delay_outside_burners() -> Duration {
    schedstat(1, false)
}

/// Time the burners spent on a CPU.
fn burners_on_cpu() -> Duration {
    schedstat(0, true)
}

/// The machine's CPU time so far, from the first line of `/proc/stat` (in clock ticks):
/// busy (every state but idle and waiting for I/O) and in all.
fn machine_cpu() -> (u64, u64) {
    let stat = std::fs::read_to_string("/proc/stat").unwrap();
    let ticks: Vec<u64> = stat
        .lines()
        .next()
        .unwrap()
        .split_whitespace()
        .skip(1)
        .map(|n| n.parse().unwrap())
        .collect();
    let total: u64 = ticks.iter().sum();
    let idle = ticks[3] + ticks.get(4).copied().unwrap_or(0);
    (total - idle, total)
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
    let delay_before = run_delay_outside_burners();
    let machine_before = machine_cpu();
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
    // How late 10 ms timers fire on the runtime: the delay the watchdog's own timer sees.
    let timer_lateness = async {
        let mut worst = Duration::ZERO;
        let mut total = Duration::ZERO;
        while started.elapsed() < hold {
            let slept_at = Instant::now();
            tokio::time::sleep(Duration::from_millis(10)).await;
            let late = slept_at.elapsed().saturating_sub(Duration::from_millis(10));
            worst = worst.max(late);
            total += late;
        }
        (worst, total)
    };
    let (attempts, lowest_pttl, (worst_late, total_late)) = tokio::select! {
        results = async { tokio::join!(rival_polls, lease_samples, timer_lateness) } => results,
        error = lost => panic!("lost {:?} into the hold: {error}", started.elapsed()),
    };
    let run_delay = run_delay_outside_burners().saturating_sub(delay_before);
    let burned = burners_on_cpu();
    let burned_for = started.elapsed();
    let machine_after = machine_cpu();
    let busy = (machine_after.0 - machine_before.0) as f64
        / (machine_after.1 - machine_before.1).max(1) as f64;
    stop.store(true, Ordering::Relaxed);
    let spins: u64 = burners.into_iter().map(|t| t.join().unwrap()).sum();
    assert!(!guard.is_lost());
    let renewals = holder.stats().renewals;
    guard.unlock().await.unwrap();

    let cores = std::thread::available_parallelism().map_or(2, |n| n.get());
    println!(
        "scenario 6: held {:?} (10 × the 1 s watchdog) with {spins} busy-loop spins competing; {renewals} renewals, lowest lease seen {lowest_pttl} ms, rival refused {attempts} times; the burners ran {burned:?} on {cores} cores in {burned_for:?} (the machine busy {:.0}%), the other threads waited {run_delay:?} for a CPU, 10 ms timers late by up to {worst_late:?} ({total_late:?} in all)",
        started.elapsed(),
        busy * 100.0
    );
    // The load was real: (nearly) every core was busy for the whole hold, so the runtime's
    // threads only ran when the scheduler took a core from a burner or from whatever else
    // the machine runs. Either the burners kept the cores busy, or the machine was busy as
    // a whole: other jobs take the cores the burners then cannot get, and starve the
    // runtime all the same. (`/proc/stat` counts every CPU of the machine, which in a
    // container can be more than this process may use: then only the burners' own time
    // shows the load.) How long the runtime's threads then waited depends on how often
    // they woke up; it is printed, not bounded.
    let saturated = burned_for.mul_f64(cores as f64 * 0.75);
    assert!(
        burned >= saturated || busy >= 0.75,
        "the burners ran only {burned:?} of {cores} cores × {burned_for:?}, and the machine's cores were busy {:.0}% of the hold: no starvation",
        busy * 100.0
    );
    assert!(
        run_delay > Duration::ZERO,
        "no thread ever waited for a CPU"
    );
    // Renewed in time: a renewal every 333 ms keeps at least 667 ms of a 1 s lease; one
    // period late would leave a third of it.
    assert!(
        lowest_pttl > (watchdog / 3).as_millis() as i64,
        "the lease fell to {lowest_pttl} ms during the hold"
    );
    // One renewal per 333 ms period over the hold: 30, less one for the round in flight
    // at the end and one for slippage.
    let expected = (started.elapsed().as_millis() / (watchdog / 3).as_millis()) as u64;
    assert!(
        renewals + 2 >= expected,
        "{renewals} renewals in {:?}, expected {expected} (period 333 ms)",
        started.elapsed()
    );
    assert!(attempts > 50, "the rival only tried {attempts} times");
}
