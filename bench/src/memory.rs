//! `memory`: what S1's loop leaves behind in Redis. 64 tasks cycle lock + unlock on their
//! own keys for [`Config::memory_duration`]; `INFO memory`'s `used_memory` is read before,
//! every second while running (the peak), and right after the last cycle. Whatever a
//! release keeps after the lock is gone (release memos, per-release keys) shows up as
//! growth, since the held locks themselves are all released at the end.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use redis::aio::MultiplexedConnection;
use tokio::time::Instant;

use crate::metrics::Metrics;
use crate::settings::Config;
use crate::stats::{error, Result};
use crate::target::{self, Target};

/// How often the peak is sampled.
const SAMPLE_EVERY: Duration = Duration::from_secs(1);

/// `used_memory` in bytes.
async fn used_memory(conn: &mut MultiplexedConnection) -> Result<f64> {
    target::info(conn, "memory")
        .await?
        .get("used_memory")
        .and_then(|v| v.parse::<f64>().ok())
        .ok_or_else(|| error("INFO memory has no used_memory"))
}

/// Runs the memory scenario once.
pub async fn run(target: &Target, cfg: &Config) -> Result<Metrics> {
    let client = target.lock_client(None).await?;
    let mut admin = target.connection().await?;
    let before = used_memory(&mut admin).await?;
    let keys_before = dbsize(&mut admin).await?;

    let stop = Arc::new(AtomicBool::new(false));
    let started = Instant::now();
    let tasks: Vec<_> = (0..cfg.s1_tasks)
        .map(|task| {
            let lock = client.lock(&format!("mem:{task}"));
            let stop = stop.clone();
            tokio::spawn(async move {
                let mut cycles = 0u64;
                while !stop.load(Ordering::Relaxed) {
                    lock.lock().await?.unlock().await?;
                    cycles += 1;
                }
                Ok::<u64, dlock::LockError>(cycles)
            })
        })
        .collect();

    let mut peak = before;
    let deadline = started + cfg.memory_duration;
    while Instant::now() < deadline {
        tokio::time::sleep(SAMPLE_EVERY.min(deadline - Instant::now())).await;
        peak = peak.max(used_memory(&mut admin).await?);
    }
    stop.store(true, Ordering::Relaxed);
    let mut cycles = 0;
    for task in tasks {
        cycles += task.await.map_err(|e| error(format!("S1 task: {e}")))??;
    }
    let elapsed = started.elapsed().as_secs_f64();
    let after = used_memory(&mut admin).await?;
    let keys_after = dbsize(&mut admin).await?;
    peak = peak.max(after);

    let mb = |bytes: f64| bytes / 1e6;
    let mut m = Metrics::default();
    m.add(
        "growth_mb",
        "used_memory growth, end − start (MB)",
        mb(after - before),
        2,
    );
    m.add(
        "peak_growth_mb",
        "used_memory growth at the peak, sampled every second (MB)",
        mb(peak - before),
        2,
    );
    m.add(
        "used_before_mb",
        "used_memory at the start (MB)",
        mb(before),
        2,
    );
    m.add("used_after_mb", "used_memory at the end (MB)", mb(after), 2);
    m.add(
        "keys_left",
        "keys left at the end − keys at the start",
        keys_after - keys_before,
        0,
    );
    m.add("cycles_per_s", "cycles/s", cycles as f64 / elapsed, 0);
    m.add("seconds", "duration (s)", elapsed, 1);
    m.note(format!(
        "memory: S1's loop ({} tasks, own key each, lock + unlock) for {}; all locks are \
         released at the end, so growth is what releases leave behind",
        cfg.s1_tasks,
        humantime::format_duration(cfg.memory_duration)
    ));
    if !target.is_own_server() {
        m.note("memory: measured on a shared server (--redis-url): other clients' keys count too");
    }
    Ok(m)
}

async fn dbsize(conn: &mut MultiplexedConnection) -> Result<f64> {
    let n: u64 = redis::cmd("DBSIZE").query_async(conn).await?;
    Ok(n as f64)
}
