//! S1 (uncontended lock + unlock), S3 (the same through `#[distributed_lock]`) and
//! rslock's S1: many tasks, each cycling its own key as fast as it can.

use std::future::Future;
use std::time::Duration;

use dlock_core::{distributed_lock, Lock, LockClient, LockError};
use rslock::LockManager;
use tokio::time::Instant;

use crate::metrics::Metrics;
use crate::plan::Config;
use crate::stats::{machine_busy, micros, ms, percentile, process_cpu, Result};
use crate::target::{self, Target};

/// Lease of rslock's locks (it has no watchdog); long enough never to matter.
const RSLOCK_TTL: Duration = Duration::from_secs(10);

/// One lock + unlock of some implementation.
pub trait Cycle: Send + 'static {
    /// Takes and releases the task's lock once.
    fn cycle(&mut self) -> impl Future<Output = Result<()>> + Send;
}

/// S1: `lock()` (watchdog lease) then `unlock()` on a handle made once per task.
struct DlockCycle {
    lock: Lock,
}

impl Cycle for DlockCycle {
    async fn cycle(&mut self) -> Result<()> {
        let guard = self.lock.lock().await?;
        guard.unlock().await?;
        Ok(())
    }
}

/// S3's annotated function: its body is empty, so all that runs is what the attribute
/// generates (key formatting, lock handle, acquire, scope, release).
#[distributed_lock(key = "s3:<id>", client = client)]
async fn locked_noop(client: &LockClient, id: u64) -> std::result::Result<(), LockError> {
    Ok(())
}

/// S3: one call of the annotated function.
struct MacroCycle {
    client: LockClient,
    id: u64,
}

impl Cycle for MacroCycle {
    async fn cycle(&mut self) -> Result<()> {
        locked_noop(&self.client, self.id).await?;
        Ok(())
    }
}

/// rslock's S1: `lock(resource, ttl)` then `unlock(&lock)`.
struct RslockCycle {
    manager: LockManager,
    key: String,
}

impl Cycle for RslockCycle {
    async fn cycle(&mut self) -> Result<()> {
        let lock = self.manager.lock(self.key.as_str(), RSLOCK_TTL).await?;
        self.manager.unlock(&lock).await;
        Ok(())
    }
}

/// S1 with dlock.
pub async fn s1_dlock(target: &Target, cfg: &Config) -> Result<Metrics> {
    let client = target.lock_client(None).await?;
    let cycles = (0..cfg.s1_tasks)
        .map(|task| DlockCycle {
            lock: client.lock(&format!("s1:{task}")),
        })
        .collect();
    drive(target, cfg, cycles).await
}

/// S3: S1 through the annotated function.
pub async fn s3_macro(target: &Target, cfg: &Config) -> Result<Metrics> {
    let client = target.lock_client(None).await?;
    let cycles = (0..cfg.s1_tasks)
        .map(|task| MacroCycle {
            client: client.clone(),
            id: task as u64,
        })
        .collect();
    drive(target, cfg, cycles).await
}

/// S1 with rslock (one `LockManager` shared by all tasks, as dlock's one client is).
pub async fn s1_rslock(target: &Target, cfg: &Config) -> Result<Metrics> {
    let manager = LockManager::new(vec![target.url().to_owned()]);
    let cycles = (0..cfg.s1_tasks)
        .map(|task| RslockCycle {
            manager: manager.clone(),
            key: format!("{}rslock:s1:{task}", target.prefix()),
        })
        .collect();
    let mut m = drive(target, cfg, cycles).await?;
    m.note(format!(
        "rslock: `lock(key, {}s)` + `unlock(&lock)`, one LockManager for all tasks",
        RSLOCK_TTL.as_secs()
    ));
    Ok(m)
}

/// Runs every cycle in its own task: `cfg.warmup` untimed, then `cfg.duration` measured.
async fn drive<C: Cycle>(target: &Target, cfg: &Config, cycles: Vec<C>) -> Result<Metrics> {
    let tasks = cycles.len();
    let started = Instant::now();
    let measure_from = started + cfg.warmup;
    let until = measure_from + cfg.duration;
    let handles: Vec<_> = cycles
        .into_iter()
        .map(|mut op| {
            tokio::spawn(async move {
                let mut latencies = Vec::new();
                loop {
                    let began = Instant::now();
                    if began >= until {
                        return Ok::<_, crate::stats::Error>(latencies);
                    }
                    op.cycle().await?;
                    if began >= measure_from {
                        latencies.push(micros(began.elapsed()));
                    }
                }
            })
        })
        .collect();

    let mut admin = target.connection().await?;
    tokio::time::sleep_until(measure_from).await;
    let cpu_before = process_cpu();
    let machine_before = machine_busy();
    let server_before = target::server_cpu(&mut admin).await?;
    let mut latencies = Vec::new();
    for handle in handles {
        latencies.extend(handle.await??);
    }
    let elapsed = measure_from.elapsed();
    let client_cpu = process_cpu().saturating_sub(cpu_before);
    let server_cpu = target::server_cpu(&mut admin).await? - server_before;
    let machine = machine_busy()
        .zip(machine_before)
        .map(|(after, before)| after - before);
    latencies.sort_unstable();

    let cycles = latencies.len() as f64;
    let mut m = Metrics::default();
    m.add(
        "cycles_per_s",
        "lock + unlock cycles/s",
        cycles / elapsed.as_secs_f64(),
        0,
    );
    m.add(
        "cycle_p50_ms",
        "cycle latency p50 (ms)",
        ms(percentile(&latencies, 50.0)),
        3,
    );
    m.add(
        "cycle_p99_ms",
        "cycle latency p99 (ms)",
        ms(percentile(&latencies, 99.0)),
        3,
    );
    m.add("cycles", "cycles measured", cycles, 0);
    m.add("tasks", "tasks (one key each)", tasks as f64, 0);
    m.add(
        "client_cpu_us_per_cycle",
        "client CPU per cycle (µs)",
        micros(client_cpu) as f64 / cycles,
        2,
    );
    m.add(
        "server_cpu_us_per_cycle",
        "server CPU per cycle (µs)",
        server_cpu * 1e6 / cycles,
        2,
    );
    m.add(
        "client_cpu_pct",
        "client CPU (% of one core)",
        client_cpu.as_secs_f64() / elapsed.as_secs_f64() * 100.0,
        0,
    );
    m.add(
        "server_cpu_pct",
        "server CPU (% of one core)",
        server_cpu / elapsed.as_secs_f64() * 100.0,
        0,
    );
    m.add(
        "other_cpu_pct",
        "CPU used by other processes (% of one core)",
        machine.map_or(f64::NAN, |busy| {
            (busy - client_cpu.as_secs_f64() - server_cpu).max(0.0) / elapsed.as_secs_f64() * 100.0
        }),
        0,
    );
    Ok(m)
}
