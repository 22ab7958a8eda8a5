//! S4: many locks held at once with watchdog renewal.
//!
//! One client (watchdog timeout `cfg.s4_watchdog`, so a renewal round every third of it)
//! takes `cfg.locks` locks without a lease and holds them for `cfg.s4_periods` renewal
//! periods, longer than the lease itself: a lock that was not renewed would expire. The
//! measuring window starts half a period after a round (rounds run at client start +
//! k × period), so it contains exactly `s4_periods` rounds. During the window only the
//! watchdog talks to Redis; `INFO commandstats` (reset at the window's start) counts its
//! calls (`EVALSHA` = client round trips) and the commands the scripts ran.
//!
//! Client memory per held lock is the growth of the process' resident set (`VmRSS` in
//! `/proc/self/status`) while the locks are taken, over the number of locks: the guards,
//! the watchdog's bookkeeping and the allocator's slack. Memory freed by an earlier run in
//! the same process may be reused, which can only make the figure smaller.

use dlock::{LockError, LockGuard};
use tokio::time::Instant;

use crate::metrics::Metrics;
use crate::settings::Config;
use crate::stats::{error, process_cpu, resident_bytes, Result};
use crate::target::{self, Target};

/// Tasks that acquire (and later release) the locks.
const WORKERS: usize = 64;

/// Runs S4 once.
pub async fn s4_watchdog(target: &Target, cfg: &Config) -> Result<Metrics> {
    let mut admin = target.connection().await?;
    let client = target.lock_client(Some(cfg.s4_watchdog)).await?;
    // The watchdog's clock starts while the client is built; rounds follow every period.
    let rounds_from = Instant::now();
    let period = cfg.s4_watchdog / 3;
    let locks = cfg.locks;

    let rss_before = resident_bytes();
    let acquire_started = Instant::now();
    let handles: Vec<_> = (0..WORKERS)
        .map(|worker| {
            let client = client.clone();
            tokio::spawn(async move {
                let mut guards = Vec::new();
                for n in (worker..locks).step_by(WORKERS) {
                    guards.push(client.lock(&format!("s4:{n}")).lock().await?);
                }
                Ok::<_, LockError>(guards)
            })
        })
        .collect();
    let mut guards: Vec<LockGuard> = Vec::with_capacity(locks);
    for handle in handles {
        guards.extend(handle.await??);
    }
    let acquire_time = acquire_started.elapsed();
    let rss_growth = resident_bytes()
        .zip(rss_before)
        .map(|(after, before)| after as f64 - before as f64);

    // Window: from half a period after the next round, for `periods` whole periods.
    let since = rounds_from.elapsed().as_secs_f64() / period.as_secs_f64();
    let window_start = rounds_from + period.mul_f64(since.floor() + 1.5);
    tokio::time::sleep_until(window_start).await;
    target::reset_stats(&mut admin).await?;
    let cpu_before = process_cpu();
    let server_before = target::server_cpu(&mut admin).await?;
    let window = period * cfg.s4_periods;
    tokio::time::sleep_until(window_start + window).await;
    let calls = target::command_calls(&mut admin).await?;
    let client_cpu = process_cpu().saturating_sub(cpu_before);
    let server_cpu = target::server_cpu(&mut admin).await? - server_before;
    let stats = target::info(&mut admin, "stats").await?;

    // Proof: every key still there, nobody lost, every release frees a held lock.
    let keys: Vec<String> = (0..locks)
        .map(|n| format!("{}s4:{n}", target.prefix()))
        .collect();
    let mut present = 0u64;
    let mut min_ttl = i64::MAX;
    for chunk in keys.chunks(1000) {
        let n: u64 = redis::cmd("EXISTS")
            .arg(chunk)
            .query_async(&mut admin)
            .await?;
        present += n;
        let mut pipe = redis::pipe();
        for key in chunk {
            pipe.pttl(key);
        }
        let ttls: Vec<i64> = pipe.query_async(&mut admin).await?;
        min_ttl = ttls.into_iter().fold(min_ttl, i64::min);
    }
    let lost = guards.iter().filter(|g| g.is_lost()).count();

    let mut batches: Vec<Vec<LockGuard>> = (0..WORKERS).map(|_| Vec::new()).collect();
    for (n, guard) in guards.into_iter().enumerate() {
        batches[n % WORKERS].push(guard);
    }
    let releases: Vec<_> = batches
        .into_iter()
        .map(|batch| {
            tokio::spawn(async move {
                let mut not_held = 0u64;
                for guard in batch {
                    match guard.unlock().await {
                        Ok(()) => {}
                        Err(LockError::NotHeld { .. }) => not_held += 1,
                        Err(e) => return Err(e),
                    }
                }
                Ok(not_held)
            })
        })
        .collect();
    let mut not_held = 0;
    for handle in releases {
        not_held += handle.await??;
    }

    let count = |name: &str| calls.get(name).copied().unwrap_or(0);
    let instrumentation = count("info") + count("config|resetstat");
    let commands: u64 = calls.values().sum::<u64>() - instrumentation;
    let periods = f64::from(cfg.s4_periods);
    let expired_stat: u64 = stats
        .get("expired_keys")
        .and_then(|v| v.parse().ok())
        .ok_or_else(|| error("INFO stats has no expired_keys"))?;
    let expired = locks as u64 - present;

    let mut m = Metrics::default();
    m.add(
        "round_trips_per_period",
        "client round trips (EVALSHA) per renewal period",
        count("evalsha") as f64 / periods,
        1,
    );
    m.add(
        "commands_per_period",
        "Redis commands per renewal period (scripts' included)",
        commands as f64 / periods,
        0,
    );
    m.add("locks", "locks held", locks as f64, 0);
    m.add("period_s", "renewal period (s)", period.as_secs_f64(), 2);
    m.add("periods", "periods in the window", periods, 0);
    m.add(
        "client_cpu_ms_per_period",
        "client CPU per period (ms)",
        client_cpu.as_secs_f64() * 1e3 / periods,
        2,
    );
    m.add(
        "client_cpu_pct",
        "client CPU (% of one core)",
        client_cpu.as_secs_f64() / window.as_secs_f64() * 100.0,
        2,
    );
    m.add(
        "server_cpu_ms_per_period",
        "server CPU per period (ms)",
        server_cpu * 1e3 / periods,
        2,
    );
    m.add(
        "server_cpu_us_per_renewal",
        "server CPU per lock renewed (µs)",
        server_cpu * 1e6 / periods / cfg.locks as f64,
        2,
    );
    m.add(
        "acquire_all_s",
        "time to acquire all locks (s)",
        acquire_time.as_secs_f64(),
        2,
    );
    m.add(
        "client_bytes_per_lock",
        "client memory per held lock (VmRSS growth / locks, bytes)",
        rss_growth.map_or(f64::NAN, |bytes| bytes / locks as f64),
        0,
    );
    m.add(
        "min_remaining_lease_ms",
        "lowest remaining lease after the window (ms)",
        if min_ttl == i64::MAX {
            f64::NAN
        } else {
            min_ttl as f64
        },
        0,
    );
    m.add_max("expired", "locks expired (worst run)", expired as f64);
    m.add_max(
        "expired_keys_stat",
        "INFO expired_keys in the window (worst run)",
        expired_stat as f64,
    );
    m.add_max(
        "lost_guards",
        "guards reporting loss (worst run)",
        lost as f64,
    );
    m.add_max(
        "not_held_on_unlock",
        "unlocks finding the lock gone (worst run)",
        not_held as f64,
    );
    m.note(format!(
        "S4: watchdog timeout {} (lease), window {} = {} periods, longer than the lease",
        humantime::format_duration(cfg.s4_watchdog),
        humantime::format_duration(window),
        cfg.s4_periods
    ));
    if !target.is_own_server() {
        m.note("S4 on --redis-url: CONFIG RESETSTAT was run; other clients' traffic counts too");
    }
    Ok(m)
}
