//! `churn`: S5's contention (4 processes × 4 tasks on one hot lock) with the churn of
//! production around it: acquisitions cancelled by `tokio::time::timeout` (often while
//! a try is at Redis) or by aborting their task, `try_lock_for` timeouts retried at once,
//! guards dropped instead of unlocked, explicit leases that expire, and a process
//! SIGKILLed mid-run (waiting or holding) and restarted.
//!
//! S2 and S5 show the hand-off between polite contenders. A hand-off to a waiter that
//! then goes away (cancelled, killed) is where waiting machinery stalls: the lock is free,
//! and the waiters left sleep until something wakes them, at worst their client's
//! `max_wait_recheck` (1 s by default, kept here). The figure for that is the longest
//! interval during which a lock had no holder while a live task waited for it, merged
//! from every process' events (see [`timeline`]).
//!
//! The parent starts the workers like S5 ([`worker`]: the binary re-executed with a
//! hidden subcommand, `READY` / `GO` over its pipes), kills one about every
//! [`KILL_EVERY`] (at least once per run), reading from Redis which locks the dead client
//! still holds and until when, starts it again, and stops them all at the end of
//! `--duration`.

pub mod timeline;
pub mod worker;

use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use dlock::LockClient;

use crate::metrics::Metrics;
use crate::settings::Config;
use crate::stats::{error, instant_at, monotonic_ns, nanos, percentile, Result};
use crate::target::Target;
use timeline::{Death, Life, Timeline};

/// Hot locks: S2's and S5's one. The workers take any number, but with two a process
/// more often has no task in line for the lock a hand-off stranded, its next call takes
/// it at once, and the stalls the scenario is after were rarer and shorter: the longest
/// was 136 to 917 ms over six runs even with a kill every second, against 996 to
/// 1,006 ms with one lock and a kill every 2 s.
const KEYS: u8 = 1;
/// Tasks per worker process (S5's 4 × 4 contenders).
const TASKS_PER_PROCESS: u32 = 4;
/// The workers' watchdog timeout: how long a killed holder keeps its lock. The default
/// (30 s) would leave a lock dead for most of a run; this is about waiting, not leases.
const WATCHDOG: Duration = Duration::from_secs(1);
/// A process is killed every this long (and once in a shorter run): 5 kills in 10 s
/// leave a lock free for about a second several times a run today.
const KILL_EVERY: Duration = Duration::from_secs(2);
/// How long the workers get to exit after the end of the run.
const STOP_GRACE: Duration = Duration::from_secs(10);
/// A takeable-while-waiting interval longer than this is counted: beyond any hand-off or
/// the 100 ms grant of a hand-off, a waiter was left asleep.
const STALL: Duration = Duration::from_millis(150);

/// The name of hot lock `key`.
pub fn lock_name(key: u8) -> String {
    format!("churn:{key}")
}

/// Runs the churn scenario once.
pub async fn run(target: &Target, cfg: &Config) -> Result<Metrics> {
    let dir = EventDir::create()?;
    let exe =
        std::env::current_exe().map_err(|e| error(format!("cannot find my own binary: {e}")))?;
    let spawn = |process: usize, life: usize| {
        Worker::spawn(
            &exe,
            target,
            process,
            dir.path.join(format!("{process}.{life}")),
        )
    };
    // Every worker ever started (the killed ones too), and the live one of each process.
    let mut workers: Vec<Worker> = Vec::new();
    for process in 0..cfg.processes {
        workers.push(spawn(process, 0)?);
    }
    let mut live: Vec<usize> = (0..cfg.processes).collect();
    for worker in &mut workers {
        worker.ready().await?;
    }
    let inspector = target.lock_client(None).await?;
    let start = monotonic_ns();
    let end = start + nanos(cfg.duration);
    for worker in &mut workers {
        worker.go(end)?;
    }
    for (k, at) in kill_times(start, cfg.duration).into_iter().enumerate() {
        tokio::time::sleep_until(instant_at(at)).await;
        let process = k % cfg.processes;
        workers[live[process]].kill(&inspector).await?;
        let mut next = spawn(process, k + 1)?;
        next.ready().await?;
        next.go(end)?;
        live[process] = workers.len();
        workers.push(next);
    }
    tokio::time::sleep_until(instant_at(end)).await;
    let stop_by = instant_at(end + nanos(STOP_GRACE));
    for &i in &live {
        workers[i].finish(stop_by).await?;
    }
    let lives = workers
        .iter()
        .map(Worker::life)
        .collect::<Result<Vec<Life>>>()?;
    let mut m = figures(&timeline::analyze(&lives, end), cfg.duration);
    m.note(format!(
        "churn: {} processes × {TASKS_PER_PROCESS} tasks on {KEYS} lock(s); per move 30 % \
         lock(), 25 % lock() under a 0-2 ms or 5-50 ms timeout, 25 % 1-5 try_lock_for(0-50 ms) \
         retried at once, 15 % lock() in a task aborted after 0-20 ms, 5 % a 20 ms lease held \
         40 ms; sections bare, yield_now or 1 ms sleep, 1 guard in 5 dropped; a process \
         SIGKILLed every {} and restarted; max_wait_recheck 1 s (default), watchdog {}",
        cfg.processes,
        humantime::format_duration(KILL_EVERY),
        humantime::format_duration(WATCHDOG),
    ));
    Ok(m)
}

/// When to kill: as many times as `KILL_EVERY` fits in the run (at least once), spread
/// evenly over it.
fn kill_times(start: u64, duration: Duration) -> Vec<u64> {
    let kills = (duration.as_nanos() / KILL_EVERY.as_nanos()).max(1) as u64;
    let step = nanos(duration) / (kills + 1);
    (1..=kills).map(|k| start + k * step).collect()
}

/// The scenario's figures from its timeline.
fn figures(t: &Timeline, duration: Duration) -> Metrics {
    let ms = |ns: u64| ns as f64 / 1e6;
    let longest = t.takeable.first().copied().unwrap_or(0);
    let stalls = t.takeable.iter().filter(|&&ns| ns > nanos(STALL)).count();
    let mut m = Metrics::default();
    m.add(
        "acquisitions_per_s",
        "acquisitions/s (all processes)",
        t.waits.len() as f64 / duration.as_secs_f64(),
        0,
    );
    for (key, label, p) in [
        (
            "wait_p50_ms",
            "wait of a successful acquisition p50 (ms)",
            50.0,
        ),
        (
            "wait_p99_ms",
            "wait of a successful acquisition p99 (ms)",
            99.0,
        ),
        (
            "wait_p999_ms",
            "wait of a successful acquisition p99.9 (ms)",
            99.9,
        ),
        (
            "wait_max_ms",
            "wait of a successful acquisition max (ms)",
            100.0,
        ),
    ] {
        m.add(key, label, ms(percentile(&t.waits, p)), 3);
    }
    m.add(
        "wait_clear_p999_ms",
        "wait p99.9 of the acquisitions no killed holder's lease held up (ms)",
        ms(percentile(&t.waits_clear, 99.9)),
        3,
    );
    m.add(
        "takeable_max_ms",
        "longest interval a lock was free while a task waited (ms)",
        ms(longest),
        1,
    );
    m.add(
        "takeable_over_150ms",
        "intervals a lock was free while a task waited, over 150 ms",
        stalls as f64,
        0,
    );
    m.add(
        "acquisitions",
        "successful acquisitions",
        t.waits.len() as f64,
        0,
    );
    m.add(
        "timed_out",
        "try_lock_for calls that timed out",
        t.timed_out as f64,
        0,
    );
    m.add(
        "cancelled",
        "acquisitions cancelled (timeout fired, task aborted)",
        t.cancelled as f64,
        0,
    );
    m.add("kills", "processes killed", t.kills as f64, 0);
    m.add(
        "kills_busy",
        "processes killed while waiting or holding",
        t.kills_busy as f64,
        0,
    );
    m.add(
        "kills_holding",
        "processes killed while their client held a lock in Redis",
        t.kills_holding as f64,
        0,
    );
    m
}

/// A temporary directory for the events files, removed on drop.
struct EventDir {
    path: PathBuf,
}

impl EventDir {
    fn create() -> Result<EventDir> {
        let run = uuid::Uuid::new_v4().simple().to_string();
        let path = std::env::temp_dir().join(format!("dlock-bench-churn-{}", &run[..8]));
        std::fs::create_dir_all(&path)
            .map_err(|e| error(format!("cannot create {}: {e}", path.display())))?;
        Ok(EventDir { path })
    }
}

impl Drop for EventDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.path);
    }
}

/// One worker process (one life of a process number); killed on drop if still running, so
/// that no error path leaves one behind.
struct Worker {
    process: usize,
    child: Child,
    events: PathBuf,
    /// Its `LockClient`'s id, from its `READY` line.
    client_id: String,
    death: Option<Death>,
}

impl Worker {
    fn spawn(exe: &Path, target: &Target, process: usize, events: PathBuf) -> Result<Worker> {
        let child = Command::new(exe)
            .arg("churn-worker")
            .args(["--redis-url", target.url(), "--prefix", target.prefix()])
            .args(["--keys", &KEYS.to_string()])
            .args(["--tasks", &TASKS_PER_PROCESS.to_string()])
            .args([
                "--watchdog",
                &humantime::format_duration(WATCHDOG).to_string(),
            ])
            .arg("--events")
            .arg(&events)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .map_err(|e| error(format!("cannot start churn worker {process}: {e}")))?;
        Ok(Worker {
            process,
            child,
            events,
            client_id: String::new(),
            death: None,
        })
    }

    /// Waits for `READY <client id>`.
    async fn ready(&mut self) -> Result<()> {
        let stdout = self
            .child
            .stdout
            .take()
            .ok_or_else(|| error("churn worker stdout not captured"))?;
        let line = tokio::task::spawn_blocking(move || {
            let mut line = String::new();
            BufReader::new(stdout).read_line(&mut line).map(|_| line)
        })
        .await
        .map_err(|e| error(format!("churn worker reader: {e}")))??;
        self.client_id = line
            .trim()
            .strip_prefix("READY ")
            .ok_or_else(|| {
                error(format!(
                    "churn worker {} did not get ready (said {line:?})",
                    self.process
                ))
            })?
            .to_owned();
        Ok(())
    }

    /// Starts the worker's tasks, until `end`.
    fn go(&mut self, end: u64) -> Result<()> {
        let stdin = self
            .child
            .stdin
            .as_mut()
            .ok_or_else(|| error("churn worker stdin not captured"))?;
        writeln!(stdin, "GO {end}")?;
        stdin.flush()?;
        Ok(())
    }

    /// SIGKILLs the worker and notes its death: when, and which hot locks its client still
    /// holds in Redis (read through `inspector` right after), until when.
    async fn kill(&mut self, inspector: &LockClient) -> Result<()> {
        self.child.kill()?;
        self.child.wait()?;
        let at = monotonic_ns();
        let mut leases = Vec::new();
        for key in 0..KEYS {
            let lock = inspector.lock(&lock_name(key));
            let held = lock
                .holders()
                .await?
                .iter()
                .any(|holder| holder.owner.client_id == self.client_id);
            if !held {
                continue;
            }
            if let Some(left) = lock.remaining_lease().await? {
                leases.push((key, monotonic_ns() + nanos(left)));
            }
        }
        self.death = Some(Death { at, leases });
        Ok(())
    }

    /// Waits until `by` for the worker to exit by itself, successfully.
    async fn finish(&mut self, by: tokio::time::Instant) -> Result<()> {
        loop {
            if let Some(status) = self.child.try_wait()? {
                if !status.success() {
                    return Err(error(format!(
                        "churn worker {} exited with {status}",
                        self.process
                    )));
                }
                return Ok(());
            }
            if tokio::time::Instant::now() >= by {
                return Err(error(format!(
                    "churn worker {} did not stop within {} of the end",
                    self.process,
                    humantime::format_duration(STOP_GRACE)
                )));
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// The worker's events and death. A SIGKILL may cut its last line short.
    fn life(&self) -> Result<Life> {
        let text = std::fs::read_to_string(&self.events)
            .map_err(|e| error(format!("cannot read {}: {e}", self.events.display())))?;
        let lines: Vec<&str> = text.lines().collect();
        let mut events = Vec::with_capacity(lines.len());
        for (i, line) in lines.iter().enumerate() {
            match serde_json::from_str(line) {
                Ok(event) => events.push(event),
                Err(_) if self.death.is_some() && i + 1 == lines.len() => {}
                Err(e) => {
                    return Err(error(format!(
                        "bad event in {}: {e}: {line:?}",
                        self.events.display()
                    )))
                }
            }
        }
        Ok(Life {
            events,
            death: self.death.clone(),
        })
    }
}

impl Drop for Worker {
    fn drop(&mut self) {
        // Our own child, by handle; a no-op once it was reaped.
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kills_are_spread_over_the_run_at_least_once() {
        let ms = |n: u64| nanos(Duration::from_millis(n));
        assert_eq!(
            kill_times(0, Duration::from_secs(10)),
            (1..=5).map(|k| k * (ms(10_000) / 6)).collect::<Vec<_>>()
        );
        assert_eq!(kill_times(7, Duration::from_secs(2)), [7 + ms(1_000)]);
        assert_eq!(kill_times(0, Duration::from_millis(500)), [ms(250)]);
    }

    #[test]
    fn stalls_are_the_intervals_over_150_ms() {
        let ms = |n: u64| nanos(Duration::from_millis(n));
        let t = Timeline {
            waits: vec![ms(1), ms(2), ms(900)],
            takeable: vec![ms(900), ms(151), ms(150), ms(3)],
            ..Timeline::default()
        };
        let m = figures(&t, Duration::from_secs(3));
        assert_eq!(m.get("acquisitions_per_s"), Some(1.0));
        assert_eq!(m.get("wait_max_ms"), Some(900.0));
        assert_eq!(m.get("takeable_max_ms"), Some(900.0));
        assert_eq!(m.get("takeable_over_150ms"), Some(2.0));
    }
}
