//! S2 (contended hand-off between tasks), rslock's S2, and the per-contender loop that S5
//! runs in separate processes.
//!
//! Every contender loops: acquire the one lock, `GET` the counter, `SET` it to +1, release.
//! The counter is deliberately non-atomic, so it is exact only if the lock excludes. The
//! value read also numbers the acquisitions (it is the hand-off order), and decides when to
//! stop: a contender that reads the target count releases and leaves without counting.
//!
//! The same loop runs on each exclusive dlock primitive ([`Primitive`]). With the
//! read-write lock every fourth acquisition of a contender is a write (the increment, under
//! the write lock) and the others are reads (`GET` only, under the read lock): the counter
//! still counts the writes exactly, and the reads are reported beside them.

use std::collections::HashMap;
use std::time::Duration;

use clap::ValueEnum;
use dlock::{LockClient, LockGuard};
use redis::aio::MultiplexedConnection;
use redis::AsyncCommands;
use rslock::LockManager;
use serde::{Deserialize, Serialize};
use tokio::time::Instant;

use crate::metrics::Metrics;
use crate::settings::Config;
use crate::stats::{error, machine_busy, micros, ms, now_us, percentile, process_cpu, Result};
use crate::target::{self, Target};

/// rslock's lock TTL in S2.
const RSLOCK_TTL: Duration = Duration::from_secs(10);

/// Which dlock primitive the contenders take.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Primitive {
    /// The reentrant lock (`LockClient::lock`).
    Lock,
    /// The fair lock (`LockClient::fair_lock`): granted in arrival order.
    Fair,
    /// The read-write lock (`LockClient::rw_lock`): 3 reads for every write.
    Rw,
    /// A semaphore of 1 permit (`LockClient::semaphore`).
    Semaphore,
    /// A multi-lock over 2 keys of one slot (`MultiLock::same_slot`).
    Multi,
}

impl Primitive {
    /// How often a contender writes: every `WRITE_EVERY`th acquisition of the read-write
    /// lock is a write.
    const WRITE_EVERY: u64 = 4;

    /// The contender handle for the lock called `name` of `client`.
    pub fn contender(self, client: &LockClient, name: &str) -> Contender {
        match self {
            Primitive::Lock => Contender::Dlock(Exclusive::Lock(client.lock(name))),
            Primitive::Fair => Contender::Dlock(Exclusive::Fair(client.fair_lock(name))),
            Primitive::Rw => Contender::Rw(client.rw_lock(name)),
            Primitive::Semaphore => {
                Contender::Dlock(Exclusive::Semaphore(client.semaphore(name, 1)))
            }
            Primitive::Multi => {
                let names = [format!("{{{name}}}:a"), format!("{{{name}}}:b")];
                match dlock::MultiLock::same_slot(client, &names) {
                    Ok(multi) => Contender::Multi(multi),
                    // Names built above always share a slot; an invalid name surfaces
                    // on the first acquisition instead.
                    Err(_) => Contender::Dlock(Exclusive::Lock(client.lock(name))),
                }
            }
        }
    }

    /// The name on the command line and in the worker's arguments.
    pub fn name(self) -> &'static str {
        match self {
            Primitive::Lock => "lock",
            Primitive::Fair => "fair",
            Primitive::Rw => "rw",
            Primitive::Semaphore => "semaphore",
            Primitive::Multi => "multi",
        }
    }
}

/// Whether an acquisition wrote the counter or only read it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub enum Side {
    /// Exclusive: incremented the counter.
    #[default]
    Write,
    /// Shared (read-write lock only): read the counter.
    Read,
}

/// One counted acquisition. Times are wall-clock µs, comparable across processes.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Acquisition {
    /// Counter value written: the acquisition's place in the hand-off order (1-based); for
    /// a read, the value read.
    pub seq: u64,
    /// A write (counted in the hand-off order) or a read.
    #[serde(default)]
    pub side: Side,
    /// The contender (task or process) that acquired.
    pub contender: u32,
    /// Time from asking for the lock to holding it.
    pub wait_us: u64,
    /// When the lock was held.
    pub acquired_at_us: u64,
    /// When the holder started releasing.
    pub unlock_at_us: u64,
    /// When the release call returned.
    pub released_at_us: u64,
}

/// An exclusive dlock primitive's handle.
pub enum Exclusive {
    /// The reentrant lock.
    Lock(dlock::Lock),
    /// The fair lock.
    Fair(dlock::FairLock),
    /// A semaphore of one permit.
    Semaphore(dlock::Semaphore),
}

/// One contender's handle on the lock.
pub enum Contender {
    /// dlock: `lock()` waits by pub/sub, with the watchdog lease.
    Dlock(Exclusive),
    /// dlock's read-write lock: reads, and a write every [`Primitive::WRITE_EVERY`].
    Rw(dlock::ReadWriteLock),
    /// dlock's multi-lock: both keys or none.
    Multi(dlock::MultiLock),
    /// rslock: `acquire_no_guard` retries `lock` (3 tries, up to 200 ms random pause
    /// between tries) until it succeeds.
    Rslock {
        /// The shared lock manager.
        manager: LockManager,
        /// The lock's key.
        key: String,
    },
}

enum Holding {
    Dlock(LockGuard),
    Permit(dlock::SemaphorePermit),
    Multi(dlock::MultiGuard),
    Rslock(rslock::Lock),
}

impl Contender {
    /// What the contender's `n`th acquisition (0-based) does.
    fn side(&self, n: u64) -> Side {
        match self {
            Contender::Rw(_) if n % Primitive::WRITE_EVERY != Primitive::WRITE_EVERY - 1 => {
                Side::Read
            }
            _ => Side::Write,
        }
    }

    async fn acquire(&self, side: Side) -> Result<Holding> {
        match self {
            Contender::Dlock(Exclusive::Lock(lock)) => Ok(Holding::Dlock(lock.lock().await?)),
            Contender::Dlock(Exclusive::Fair(lock)) => Ok(Holding::Dlock(lock.lock().await?)),
            Contender::Dlock(Exclusive::Semaphore(semaphore)) => {
                Ok(Holding::Permit(semaphore.acquire(1).await?))
            }
            Contender::Multi(multi) => Ok(Holding::Multi(multi.lock().await?)),
            Contender::Rw(rw) => Ok(Holding::Dlock(match side {
                Side::Read => rw.read().lock().await?,
                Side::Write => rw.write().lock().await?,
            })),
            Contender::Rslock { manager, key } => Ok(Holding::Rslock(
                manager.acquire_no_guard(key.as_str(), RSLOCK_TTL).await?,
            )),
        }
    }

    async fn release(&self, holding: Holding) -> Result<()> {
        match (self, holding) {
            (_, Holding::Dlock(guard)) => guard.unlock().await?,
            (_, Holding::Permit(permit)) => permit.unlock().await?,
            (_, Holding::Multi(guard)) => guard.unlock().await?,
            (Contender::Rslock { manager, .. }, Holding::Rslock(lock)) => {
                manager.unlock(&lock).await
            }
            (Contender::Dlock(_) | Contender::Rw(_) | Contender::Multi(_), Holding::Rslock(_)) => {
                return Err(error("mismatched lock kinds"))
            }
        }
        Ok(())
    }
}

/// One contender's loop until the counter reaches `total`; returns its acquisitions.
pub async fn contend(
    contender: Contender,
    mut conn: MultiplexedConnection,
    counter: String,
    total: u64,
    id: u32,
) -> Result<Vec<Acquisition>> {
    let mut done = Vec::new();
    for n in 0.. {
        let side = contender.side(n);
        let asked = Instant::now();
        let holding = contender.acquire(side).await?;
        let wait = asked.elapsed();
        let acquired_at_us = now_us();
        let value: Option<u64> = conn.get(&counter).await?;
        let value = value.unwrap_or(0);
        if value >= total {
            contender.release(holding).await?;
            return Ok(done);
        }
        let seq = match side {
            Side::Write => {
                let () = conn.set(&counter, value + 1).await?;
                value + 1
            }
            Side::Read => value,
        };
        let unlock_at_us = now_us();
        contender.release(holding).await?;
        done.push(Acquisition {
            seq,
            side,
            contender: id,
            wait_us: micros(wait),
            acquired_at_us,
            unlock_at_us,
            released_at_us: now_us(),
        });
    }
    Ok(done)
}

/// S2 with a dlock primitive: `cfg.s2_tasks` tasks sharing one client.
pub async fn s2_dlock(target: &Target, cfg: &Config, primitive: Primitive) -> Result<Metrics> {
    let client = target.lock_client(None).await?;
    let contenders = (0..cfg.s2_tasks)
        .map(|_| primitive.contender(&client, "s2"))
        .collect();
    in_tasks(target, cfg, contenders).await
}

/// Waiters vs wake-ups: `clients` separate `LockClient`s (each its own connections and
/// pub/sub subscription), one task each, S2's loop on one shared key for
/// `cfg.acquisitions` counted acquisitions. Reports what a release costs Redis:
/// commands (`INFO commandstats`, reset at the start) and acquire scripts sent (the
/// clients' `acquire_attempts`), per release (every acquisition, counted or the last one
/// of each contender, is released once).
pub async fn wakeups(target: &Target, cfg: &Config, clients: usize) -> Result<Metrics> {
    let mut handles = Vec::with_capacity(clients);
    for _ in 0..clients {
        handles.push(target.lock_client(None).await?);
    }
    let contenders = handles
        .iter()
        .map(|client| Primitive::Lock.contender(client, "wakeups"))
        .collect();
    let attempts_before: u64 = handles.iter().map(|c| c.stats().acquire_attempts).sum();
    let mut admin = target.connection().await?;
    target::reset_stats(&mut admin).await?;
    let mut m = in_tasks(target, cfg, contenders).await?;
    let calls = target::command_calls(&mut admin).await?;
    let attempts = handles
        .iter()
        .map(|c| c.stats().acquire_attempts)
        .sum::<u64>()
        - attempts_before;

    let count = |name: &str| calls.get(name).copied().unwrap_or(0);
    let acquisitions = m.get("acquisitions").unwrap_or(0.0) as u64;
    // Every contender also takes the lock once more to read the target count and leave.
    let releases = acquisitions + clients as u64;
    // Not the lock's: the measurement's INFO and CONFIG calls, and the critical section of
    // `contend`'s loop: GET + SET per counted acquisition, one last GET per contender
    // (it reads the target count and leaves), and `in_tasks`' final GET of the counter.
    let instrumentation = count("info") + count("config|resetstat");
    let critical = 2 * acquisitions + clients as u64 + 1;
    let all = calls.values().sum::<u64>().saturating_sub(instrumentation);
    let per_release = |n: u64| n as f64 / releases.max(1) as f64;
    m.add(
        "lock_commands_per_release",
        "Redis commands per release, the lock's (scripts' included)",
        per_release(all.saturating_sub(critical)),
        2,
    );
    m.add(
        "commands_per_release",
        "Redis commands per release, all (critical section's GET + SET included)",
        per_release(all),
        2,
    );
    m.add(
        "attempts_per_release",
        "acquire scripts per release (each lock() call's own first try included)",
        per_release(attempts),
        2,
    );
    // Every `lock()` call tries once as it starts, whoever holds the lock; the tries after
    // that are the ones a release (a wake-up) or a recheck causes: the herd, if any.
    m.add(
        "woken_attempts_per_release",
        "acquire tries after a wait per release (beyond each call's first try)",
        per_release(attempts.saturating_sub(releases)),
        2,
    );
    m.add(
        "clients",
        "waiting clients (one task each)",
        clients as f64,
        0,
    );
    Ok(m)
}

/// S2 with rslock: `cfg.s2_tasks` tasks sharing one `LockManager`.
pub async fn s2_rslock(target: &Target, cfg: &Config) -> Result<Metrics> {
    let manager = LockManager::new(vec![target.url().to_owned()]);
    let key = format!("{}rslock:s2", target.prefix());
    let contenders = (0..cfg.s2_tasks)
        .map(|_| Contender::Rslock {
            manager: manager.clone(),
            key: key.clone(),
        })
        .collect();
    let mut m = in_tasks(target, cfg, contenders).await?;
    m.note(
        "rslock cannot wait for a lock: its `acquire` retries `lock` (3 attempts with a random \
         0-200 ms pause between them) until one succeeds; that is what S2 measures for rslock",
    );
    Ok(m)
}

async fn in_tasks(target: &Target, cfg: &Config, contenders: Vec<Contender>) -> Result<Metrics> {
    let conn = target.connection().await?;
    let counter = format!("{}s2:counter", target.prefix());
    let participants = contenders.len();
    let total = cfg.acquisitions;
    let mut admin = target.connection().await?;
    let server_before = target::server_cpu(&mut admin).await?;
    let cpu_before = process_cpu();
    let machine_before = machine_busy();
    let started = std::time::Instant::now();
    let start_us = now_us();
    let handles: Vec<_> = contenders
        .into_iter()
        .enumerate()
        .map(|(id, contender)| {
            let conn = conn.clone();
            let counter = counter.clone();
            tokio::spawn(contend(contender, conn, counter, total, id as u32))
        })
        .collect();
    let joined = tokio::time::timeout(
        cfg.contended_timeout,
        futures_util::future::join_all(handles),
    )
    .await
    .map_err(|_| {
        error(format!(
            "{total} acquisitions did not finish within {}",
            humantime::format_duration(cfg.contended_timeout)
        ))
    })?;
    let mut events = Vec::new();
    for result in joined {
        events.extend(result??);
    }
    let elapsed = started.elapsed().as_secs_f64();
    let client_cpu = process_cpu().saturating_sub(cpu_before).as_secs_f64();
    let server_cpu = target::server_cpu(&mut admin).await? - server_before;
    let machine = machine_busy()
        .zip(machine_before)
        .map(|(after, before)| after - before);
    let final_value: Option<u64> = admin.get(&counter).await?;
    let mut m = analyze(
        events,
        start_us,
        total,
        participants,
        final_value.unwrap_or(0),
    );
    m.add(
        "client_cpu_pct",
        "client CPU (% of one core)",
        client_cpu / elapsed * 100.0,
        0,
    );
    m.add(
        "server_cpu_pct",
        "server CPU (% of one core)",
        server_cpu / elapsed * 100.0,
        0,
    );
    m.add(
        "server_cpu_us_per_acquisition",
        "server CPU per acquisition, its GET and SET included (µs)",
        server_cpu * 1e6 / total as f64,
        1,
    );
    m.add(
        "other_cpu_pct",
        "CPU used by other processes (% of one core)",
        machine.map_or(f64::NAN, |busy| {
            (busy - client_cpu - server_cpu).max(0.0) / elapsed * 100.0
        }),
        0,
    );
    Ok(m)
}

/// Turns the acquisitions of all contenders into the S2 / S5 figures.
pub fn analyze(
    events: Vec<Acquisition>,
    start_us: u64,
    total: u64,
    participants: usize,
    final_counter: u64,
) -> Metrics {
    let (reads, mut events): (Vec<Acquisition>, Vec<Acquisition>) =
        events.into_iter().partition(|e| e.side == Side::Read);
    events.sort_by_key(|e| e.seq);
    let sequence_ok =
        events.len() as u64 == total && events.iter().zip(1..).all(|(e, n)| e.seq == n);
    let counter_ok = sequence_ok && final_counter == total;
    let end_us = events
        .iter()
        .map(|e| e.released_at_us)
        .max()
        .unwrap_or(start_us);
    let elapsed_s = end_us.saturating_sub(start_us) as f64 / 1e6;

    let mut waits: Vec<u64> = events.iter().map(|e| e.wait_us).collect();
    waits.sort_unstable();
    let mut handoffs: Vec<u64> = events
        .windows(2)
        .filter(|w| w[1].seq == w[0].seq + 1)
        .map(|w| w[1].acquired_at_us.saturating_sub(w[0].unlock_at_us))
        .collect();
    handoffs.sort_unstable();
    let mut holds: Vec<u64> = events
        .iter()
        .map(|e| e.unlock_at_us.saturating_sub(e.acquired_at_us))
        .collect();
    holds.sort_unstable();
    let mut unlocks: Vec<u64> = events
        .iter()
        .map(|e| e.released_at_us.saturating_sub(e.unlock_at_us))
        .collect();
    unlocks.sort_unstable();
    let same = events
        .windows(2)
        .filter(|w| w[0].contender == w[1].contender)
        .count();

    let contested = contested_runs(&events);

    let mut per: HashMap<u32, u64> = HashMap::new();
    for e in &events {
        *per.entry(e.contender).or_default() += 1;
    }
    let counts: Vec<u64> = (0..participants as u32)
        .map(|id| per.get(&id).copied().unwrap_or(0))
        .collect();
    let mean = events.len() as f64 / participants.max(1) as f64;
    let min = counts.iter().copied().min().unwrap_or(0) as f64;
    let max = counts.iter().copied().max().unwrap_or(0) as f64;

    let mut m = Metrics::default();
    m.add(
        "acquisitions_per_s",
        "acquisitions/s",
        events.len() as f64 / elapsed_s,
        0,
    );
    m.add(
        "wait_p50_ms",
        "wait p50 (ms)",
        ms(percentile(&waits, 50.0)),
        3,
    );
    m.add(
        "wait_p99_ms",
        "wait p99 (ms)",
        ms(percentile(&waits, 99.0)),
        3,
    );
    m.add(
        "wait_max_ms",
        "wait max (ms)",
        ms(percentile(&waits, 100.0)),
        3,
    );
    m.add(
        "handoff_p50_ms",
        "hand-off unlock → next acquire p50 (ms)",
        ms(percentile(&handoffs, 50.0)),
        3,
    );
    m.add(
        "handoff_p99_ms",
        "hand-off unlock → next acquire p99 (ms)",
        ms(percentile(&handoffs, 99.0)),
        3,
    );
    m.add(
        "per_acquisition_ms",
        "time per acquisition, elapsed / count (ms)",
        elapsed_s * 1e3 / events.len().max(1) as f64,
        3,
    );
    m.add(
        "hold_p50_ms",
        "critical section (GET + SET) p50 (ms)",
        ms(percentile(&holds, 50.0)),
        3,
    );
    m.add(
        "unlock_p50_ms",
        "unlock call p50 (ms)",
        ms(percentile(&unlocks, 50.0)),
        3,
    );
    m.add(
        "per_contender_min",
        "acquisitions per contender, min",
        min,
        0,
    );
    m.add(
        "per_contender_max",
        "acquisitions per contender, max",
        max,
        0,
    );
    m.add(
        "per_contender_mean",
        "acquisitions per contender, mean",
        mean,
        1,
    );
    m.add("min_over_mean", "fairness: min / mean", min / mean, 2);
    m.add(
        "same_holder_pct",
        "next holder = previous holder (%)",
        same as f64 / events.len().saturating_sub(1).max(1) as f64 * 100.0,
        1,
    );
    m.add(
        "longest_run",
        "longest run of consecutive sections by one contender while another waits",
        contested.longest as f64,
        0,
    );
    m.add(
        "back_to_releaser_pct",
        "hand-offs back to the releasing contender while another waits (%)",
        if contested.handoffs == 0 {
            f64::NAN
        } else {
            contested.back_to_releaser as f64 / contested.handoffs as f64 * 100.0
        },
        1,
    );
    if !reads.is_empty() {
        let mut read_waits: Vec<u64> = reads.iter().map(|e| e.wait_us).collect();
        read_waits.sort_unstable();
        m.add(
            "reads_per_s",
            "read acquisitions/s",
            reads.len() as f64 / elapsed_s,
            0,
        );
        m.add(
            "read_wait_p99_ms",
            "read wait p99 (ms)",
            ms(percentile(&read_waits, 99.0)),
            3,
        );
        m.add(
            "read_overlap_max",
            "most reads held at once",
            most_at_once(&reads) as f64,
            0,
        );
    }
    m.add("elapsed_s", "elapsed (s)", elapsed_s, 2);
    m.add("contenders", "contenders", participants as f64, 0);
    m.add(
        "acquisitions",
        "acquisitions counted",
        events.len() as f64,
        0,
    );
    m.add_min(
        "counter",
        "counter after the run (worst run)",
        final_counter as f64,
    );
    m.add_min(
        "counter_ok",
        "counter check: 1 = exact (worst run)",
        if counter_ok { 1.0 } else { 0.0 },
    );
    m
}

/// How the lock passes between contenders while more than one wants it.
#[derive(Debug, Default, PartialEq, Eq)]
struct Contested {
    /// The longest run of consecutive sections (in hand-off order) by one contender,
    /// counting only sections during which another contender was waiting.
    longest: u64,
    /// Releases at which another contender was waiting.
    handoffs: u64,
    /// Of those, the ones after which the releasing contender took the lock again.
    back_to_releaser: u64,
}

/// Runs of one contender while others wait, from `sections` in hand-off order.
///
/// A contender waits from its `lock()` call (`acquired_at_us − wait_us`) until it holds
/// the lock. A section counts towards a run only if another contender waited during it;
/// a section nobody else waited through ends the run (nobody was kept out). Times are
/// wall-clock, comparable across processes.
fn contested_runs(sections: &[Acquisition]) -> Contested {
    let waits: Vec<(u32, u64, u64)> = sections
        .iter()
        .map(|e| {
            (
                e.contender,
                e.acquired_at_us.saturating_sub(e.wait_us),
                e.acquired_at_us,
            )
        })
        .collect();
    // Whether a contender other than `me` was waiting at some point in `from..to`.
    let other_waits = |me: u32, from: u64, to: u64| {
        waits
            .iter()
            .any(|&(who, start, end)| who != me && start < to && end > from)
    };
    let mut out = Contested::default();
    let mut run = 0;
    for (i, e) in sections.iter().enumerate() {
        let contested = other_waits(e.contender, e.acquired_at_us, e.unlock_at_us);
        let same = i > 0 && sections[i - 1].contender == e.contender;
        run = match (contested, same) {
            (false, _) => 0,
            (true, true) => run + 1,
            (true, false) => 1,
        };
        out.longest = out.longest.max(run);
        if let Some(next) = sections.get(i + 1) {
            let at = e.unlock_at_us;
            if other_waits(e.contender, at, at.saturating_add(1)) {
                out.handoffs += 1;
                if next.contender == e.contender {
                    out.back_to_releaser += 1;
                }
            }
        }
    }
    out
}

/// The largest number of `sections` held at the same time (acquired .. unlock).
fn most_at_once(sections: &[Acquisition]) -> usize {
    // Ends sort before starts at the same instant: touching sections do not overlap.
    let mut edges: Vec<(u64, i8)> = sections
        .iter()
        .flat_map(|e| [(e.acquired_at_us, 1), (e.unlock_at_us, -1)])
        .collect();
    edges.sort_unstable();
    let (mut now, mut most) = (0i64, 0i64);
    for (_, step) in edges {
        now += i64::from(step);
        most = most.max(now);
    }
    usize::try_from(most).unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn acq(seq: u64, contender: u32, at: u64) -> Acquisition {
        Acquisition {
            seq,
            side: Side::Write,
            contender,
            wait_us: 100 * seq,
            acquired_at_us: at,
            unlock_at_us: at + 50,
            released_at_us: at + 60,
        }
    }

    #[test]
    fn analysis_orders_by_counter_and_checks_it() {
        let events = vec![acq(2, 1, 1_100), acq(1, 0, 1_000), acq(3, 0, 1_200)];
        let m = analyze(events.clone(), 1_000, 3, 2, 3);
        assert_eq!(m.get("counter_ok"), Some(1.0));
        assert_eq!(m.get("handoff_p50_ms"), Some(0.05));
        assert_eq!(m.get("per_contender_min"), Some(1.0));
        assert_eq!(m.get("per_contender_max"), Some(2.0));
        assert_eq!(
            analyze(events.clone(), 1_000, 3, 2, 2).get("counter_ok"),
            Some(0.0)
        );
        let mut duplicate = events;
        duplicate[0].seq = 1;
        assert_eq!(
            analyze(duplicate, 1_000, 3, 2, 3).get("counter_ok"),
            Some(0.0)
        );
    }

    #[test]
    fn runs_count_only_while_another_contender_waits() {
        // Contender 0 holds 1..=4 back to back (at 1,000, 1,100, ...; 50 µs each).
        // Contender 1 asks at 1,120 (during section 2) and gets the lock at 1,400
        // (section 5); contender 2 never waits during them.
        let mut events: Vec<Acquisition> = (1..=4).map(|n| acq(n, 0, 900 + 100 * n)).collect();
        let mut late = acq(5, 1, 1_400);
        late.wait_us = 280;
        events.push(late);
        let c = contested_runs(&events);
        // Sections 2 (1,100..1,150), 3 and 4 overlap contender 1's wait; 1 does not.
        assert_eq!(c.longest, 3);
        // Releases of 2, 3 and 4 happen while 1 waits; after 2 and 3 the lock went back
        // to 0, after 4 to the waiter.
        assert_eq!((c.handoffs, c.back_to_releaser), (3, 2));
        // Nobody waiting: no run, no contested hand-off.
        let alone: Vec<Acquisition> = (1..=4).map(|n| acq(n, 0, 900 + 100 * n)).collect();
        assert_eq!(contested_runs(&alone), Contested::default());
    }

    #[test]
    fn reads_are_reported_apart_from_the_counted_writes() {
        let read = |at| Acquisition {
            side: Side::Read,
            ..acq(1, 1, at)
        };
        // Two reads overlap (1,000..1,050 and 1,020..1,070); a third touches none.
        let events = vec![acq(1, 0, 900), read(1_000), read(1_020), read(1_200)];
        let m = analyze(events, 900, 1, 2, 1);
        assert_eq!(
            m.get("counter_ok"),
            Some(1.0),
            "reads are not counted writes"
        );
        assert_eq!(m.get("read_overlap_max"), Some(2.0));
        assert!(m.get("reads_per_s").is_some_and(|r| r > 0.0));
    }
}
