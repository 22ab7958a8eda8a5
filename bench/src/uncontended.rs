//! S1 (uncontended lock + unlock), S3 (the same through `#[distributed_lock]`) and
//! rslock's S1: many tasks, each cycling its own key as fast as it can.

use std::time::Duration;

use dlock::{
    distributed_lock,
    redlock::{RedLock, RedLockClient},
    Lock, LockClient, LockError, MultiLock, Semaphore,
};
use dlock_tests::RedisServer;
use rslock::LockManager;
use tokio::time::Instant;

use crate::cycle::Cycle;
use crate::floor::{Floor, FloorCycle, FloorScripts};
use crate::metrics::Metrics;
use crate::settings::Config;
use crate::stats::{machine_busy, micros, ms, percentile, process_cpu, Result};
use crate::target::{self, Target};

/// Lease of rslock's locks (it has no watchdog); long enough never to matter.
const RSLOCK_TTL: Duration = Duration::from_secs(10);

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

/// S1 from a client that mints no fencing tokens (no `INCR`, no token field): compared
/// with S1 in the same run, the cost of minting.
pub async fn s1_unfenced(target: &Target, cfg: &Config) -> Result<Metrics> {
    let client = LockClient::builder()
        .key_prefix(target.prefix().to_owned())
        .fencing_tokens(false)
        .connect(target.url())
        .await?;
    let cycles = (0..cfg.s1_tasks)
        .map(|task| DlockCycle {
            lock: client.lock(&format!("s1u:{task}")),
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

/// S1 with the lean floor's scripts from a bare redis-rs client (see `floor`): compared
/// with S1 in the same run, what dlock's scripts and client add.
pub async fn s1_floor(target: &Target, cfg: &Config) -> Result<Metrics> {
    let mut conn = target.connection().await?;
    let scripts = FloorScripts::new(Floor::Lean);
    scripts.load(&mut conn).await?;
    let client_id = uuid::Uuid::new_v4().to_string();
    let cycles = (0..cfg.s1_tasks)
        .map(|task| FloorCycle {
            conn: conn.clone(),
            scripts: scripts.clone(),
            key: format!("{}s1f:{task}", target.prefix()),
            owner_prefix: format!("{client_id}:{task}"),
            cycles: 0,
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

/// The rest of the lock family in S1: what one cycle takes and gives back.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Family {
    /// A multi-lock over this many keys sharing a cluster slot: one script.
    MultiSameSlot(usize),
    /// A multi-lock over this many keys in different slots: one lock after another.
    MultiSequential(usize),
    /// One permit of a semaphore of 4 (one semaphore per task).
    Semaphore,
    /// A RedLock over 5 independent servers.
    RedLock,
}

impl Family {
    /// Servers a RedLock spans.
    pub const REDLOCK_SERVERS: usize = 5;

    /// The `implementation` column.
    pub fn implementation(self) -> &'static str {
        match self {
            Family::MultiSameSlot(2) => "dlock-multi-2-slot",
            Family::MultiSameSlot(_) => "dlock-multi-5-slot",
            Family::MultiSequential(2) => "dlock-multi-2-seq",
            Family::MultiSequential(_) => "dlock-multi-5-seq",
            Family::Semaphore => "dlock-semaphore",
            Family::RedLock => "dlock-redlock-5",
        }
    }
}

/// A multi-lock cycle: `lock()` then `unlock()` of every key.
struct MultiCycle {
    multi: MultiLock,
}

impl Cycle for MultiCycle {
    async fn cycle(&mut self) -> Result<()> {
        self.multi.lock().await?.unlock().await?;
        Ok(())
    }
}

/// A semaphore cycle: one permit, then give it back.
struct SemaphoreCycle {
    semaphore: Semaphore,
}

impl Cycle for SemaphoreCycle {
    async fn cycle(&mut self) -> Result<()> {
        self.semaphore.acquire(1).await?.unlock().await?;
        Ok(())
    }
}

/// A RedLock cycle: a quorum acquisition, then a release on every server.
struct RedLockCycle {
    lock: RedLock,
}

impl Cycle for RedLockCycle {
    async fn cycle(&mut self) -> Result<()> {
        self.lock.lock().await?.unlock().await?;
        Ok(())
    }
}

/// S1 with another primitive of the family; compare with S1 (the lock) in the same run.
pub async fn s1_family(target: &Target, cfg: &Config, family: Family) -> Result<Metrics> {
    let client = target.lock_client(None).await?;
    let tasks = 0..cfg.s1_tasks;
    match family {
        Family::MultiSameSlot(keys) | Family::MultiSequential(keys) => {
            let same_slot = matches!(family, Family::MultiSameSlot(_));
            let mut cycles = Vec::new();
            for task in tasks {
                let names: Vec<String> = (0..keys)
                    .map(|key| match same_slot {
                        true => format!("{{s1:{task}}}:{key}"),
                        false => format!("s1:{task}:{key}"),
                    })
                    .collect();
                let multi = match same_slot {
                    true => MultiLock::same_slot(&client, &names)?,
                    false => MultiLock::sequential(names.iter().map(|name| client.lock(name)))?,
                };
                cycles.push(MultiCycle { multi });
            }
            let mut m = drive(target, cfg, cycles).await?;
            m.note(format!(
                "{keys} keys per multi-lock, {}",
                if same_slot {
                    "one slot (one script)"
                } else {
                    "different slots (one lock after another)"
                }
            ));
            Ok(m)
        }
        Family::Semaphore => {
            let cycles = tasks
                .map(|task| SemaphoreCycle {
                    semaphore: client.semaphore(&format!("s1:{task}"), 4),
                })
                .collect();
            drive(target, cfg, cycles).await
        }
        Family::RedLock => {
            // The target is one of the quorum; the others are fresh servers of this run.
            let others = start_servers(Family::REDLOCK_SERVERS - 1).await?;
            let mut urls = vec![target.url().to_owned()];
            urls.extend(others.iter().map(RedisServer::url));
            let builder = LockClient::builder().key_prefix(target.prefix().to_owned());
            let redlock = RedLockClient::connect(builder, &urls).await?;
            let cycles = tasks
                .map(|task| RedLockCycle {
                    lock: redlock.lock(&format!("s1:{task}")),
                })
                .collect();
            let mut m = drive_with(target, &urls[1..], cfg, cycles).await?;
            m.note(format!(
                "{} servers on this machine; server CPU is theirs together",
                Family::REDLOCK_SERVERS
            ));
            drop(others);
            Ok(m)
        }
    }
}

/// Starts `count` throw-away servers.
async fn start_servers(count: usize) -> Result<Vec<RedisServer>> {
    tokio::task::spawn_blocking(move || {
        std::panic::catch_unwind(|| (0..count).map(|_| RedisServer::start()).collect())
    })
    .await
    .map_err(|e| crate::stats::error(format!("starting redis-server: {e}")))?
    .map_err(|_| crate::stats::error("could not start the RedLock servers (see the message above)"))
}

/// Runs every cycle in its own task: `cfg.warmup` untimed, then `cfg.duration` measured.
async fn drive<C: Cycle>(target: &Target, cfg: &Config, cycles: Vec<C>) -> Result<Metrics> {
    drive_with(target, &[], cfg, cycles).await
}

/// [`drive`] when the cycles also use the servers at `others` (a RedLock's): their CPU
/// counts as server CPU, not as other processes' load.
async fn drive_with<C: Cycle>(
    target: &Target,
    others: &[String],
    cfg: &Config,
    cycles: Vec<C>,
) -> Result<Metrics> {
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

    let mut admins = vec![target.connection().await?];
    for url in others {
        admins.push(target::connect(url).await?);
    }
    tokio::time::sleep_until(measure_from).await;
    let cpu_before = process_cpu();
    let machine_before = machine_busy();
    let server_before = servers_cpu(&mut admins).await?;
    let mut latencies = Vec::new();
    for handle in handles {
        latencies.extend(handle.await??);
    }
    let elapsed = measure_from.elapsed();
    let client_cpu = process_cpu().saturating_sub(cpu_before);
    let server_cpu = servers_cpu(&mut admins).await? - server_before;
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

/// CPU seconds the servers behind `admins` have used together.
async fn servers_cpu(admins: &mut [redis::aio::MultiplexedConnection]) -> Result<f64> {
    let mut total = 0.0;
    for admin in admins {
        total += target::server_cpu(admin).await?;
    }
    Ok(total)
}
