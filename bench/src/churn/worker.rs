//! The hidden `churn-worker` subcommand: one process of the churn scenario.
//!
//! Its tasks share one `LockClient` and take the scenario's hot locks the ways production
//! code does, not only `lock()` + `unlock()`: under a short `tokio::time::timeout`, with
//! `try_lock_for` retried at once after each timeout, in a task that gets aborted, and now
//! and then with a short explicit lease held past its end; the critical section awaits or
//! not, and one guard in five is dropped instead of unlocked.
//!
//! Every event is appended to the events file as it happens, one `write` each, so that a
//! SIGKILL loses at most the event being written. Like S5's worker it prints `READY
//! <client id>`, then waits for `GO <end>` on stdin (`end` on the shared monotonic clock);
//! it stops at `end` by itself.

use std::fs::File;
use std::io::{BufRead, Write};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use dlock::{Lock, LockClient, LockGuard};

use super::timeline::{Event, What};
use crate::cli::ChurnWorkerArgs;
use crate::stats::{error, instant_at, monotonic_ns, nanos, Result};

/// The explicit lease of an expiring hold, and how long that hold keeps the guard: the
/// lock expires halfway, with nobody releasing it.
const SHORT_LEASE: Duration = Duration::from_millis(20);
/// How long a `try_lock_with_lease` for an expiring hold waits.
const SHORT_LEASE_WAIT: Duration = Duration::from_millis(50);

/// Runs one churn worker until the end the parent sends.
pub async fn run(args: ChurnWorkerArgs) -> Result<()> {
    let client = LockClient::builder()
        .key_prefix(args.prefix.clone())
        .watchdog_timeout(args.watchdog)
        .connect(&args.redis_url)
        .await?;
    let log = Arc::new(EventLog::create(&args.events)?);
    let mut out = std::io::stdout();
    writeln!(out, "READY {}", client.id())?;
    out.flush()?;
    let end = read_go().await?;

    let locks: Arc<[Lock]> = (0..args.keys)
        .map(|key| client.lock(&super::lock_name(key)))
        .collect();
    let seed = monotonic_ns() ^ (u64::from(std::process::id()) << 32);
    let tasks: Vec<_> = (0..args.tasks)
        .map(|task| {
            let dice = Dice::new(seed ^ u64::from(task));
            tokio::spawn(churn(Arc::clone(&locks), Arc::clone(&log), dice, end))
        })
        .collect();
    // Tasks still waiting or holding at the end are dropped there: the parent counts their
    // events only up to the end.
    tokio::time::sleep_until(instant_at(end)).await;
    for task in &tasks {
        task.abort();
    }
    for task in tasks {
        match task.await {
            Ok(outcome) => outcome?,
            Err(e) if e.is_cancelled() => {}
            Err(e) => return Err(error(format!("churn task: {e}"))),
        }
    }
    if log.failed.load(Ordering::Relaxed) {
        return Err(error(format!(
            "could not write every event to {}",
            args.events.display()
        )));
    }
    Ok(())
}

/// The end of the run, from the parent's `GO <end>` line.
async fn read_go() -> Result<u64> {
    let line = tokio::task::spawn_blocking(|| {
        let mut line = String::new();
        std::io::stdin().lock().read_line(&mut line).map(|_| line)
    })
    .await
    .map_err(|e| error(format!("stdin reader: {e}")))??;
    line.trim()
        .strip_prefix("GO ")
        .and_then(|end| end.parse().ok())
        .ok_or_else(|| error(format!("churn worker: expected GO <end>, got {line:?}")))
}

/// One task: moves on random hot locks until the end.
async fn churn(locks: Arc<[Lock]>, log: Arc<EventLog>, mut dice: Dice, end: u64) -> Result<()> {
    while monotonic_ns() < end {
        let key = dice.below(locks.len() as u64) as u8;
        let lock = &locks[usize::from(key)];
        // Weights (%): the patient callers whose waits the scenario is about, and around
        // them the churn that disturbs the hand-offs they wait for.
        match dice.below(100) {
            0..30 => patient(lock, &log, key, &mut dice).await?,
            30..55 => impatient(lock, &log, key, &mut dice).await?,
            55..80 => retrying(lock, &log, key, &mut dice).await?,
            80..95 => aborted(lock, &log, key, &mut dice).await?,
            _ => expiring(lock, &log, key).await?,
        }
    }
    Ok(())
}

/// `lock()`, waiting as long as it takes.
async fn patient(lock: &Lock, log: &Arc<EventLog>, key: u8, dice: &mut Dice) -> Result<()> {
    let asking = log.ask(key);
    let guard = lock.lock().await?;
    section(asking.acquired(guard, false), dice).await
}

/// `lock()` under `tokio::time::timeout`: half the budgets are under 2 ms and fire within
/// the call's first round trip (while its try is at Redis, when it is first in its
/// process' line); the others (5-50 ms) while it waits.
async fn impatient(lock: &Lock, log: &Arc<EventLog>, key: u8, dice: &mut Dice) -> Result<()> {
    let budget = if dice.below(2) == 0 {
        Duration::from_micros(dice.below(2_000))
    } else {
        Duration::from_millis(5 + dice.below(46))
    };
    let asking = log.ask(key);
    match tokio::time::timeout(budget, lock.lock()).await {
        Ok(guard) => section(asking.acquired(guard?, false), dice).await,
        // `asking` is dropped: the wait was cancelled.
        Err(_) => Ok(()),
    }
}

/// `try_lock_for` with a wait of 0-50 ms, called again at once after each timeout, 1 to 5
/// calls in all.
async fn retrying(lock: &Lock, log: &Arc<EventLog>, key: u8, dice: &mut Dice) -> Result<()> {
    for _ in 0..=dice.below(5) {
        let wait = Duration::from_millis(dice.below(51));
        let asking = log.ask(key);
        match lock.try_lock_for(wait).await {
            Ok(guard) => return section(asking.acquired(guard, false), dice).await,
            Err(e) if e.is_timeout() => asking.timed_out(),
            Err(e) => return Err(e.into()),
        }
    }
    Ok(())
}

/// A patient acquisition and its section in a task of their own, aborted after 0-20 ms:
/// while waiting, holding or unlocking.
async fn aborted(lock: &Lock, log: &Arc<EventLog>, key: u8, dice: &mut Dice) -> Result<()> {
    let after = Duration::from_micros(dice.below(20_000));
    let (lock, log, mut own) = (lock.clone(), Arc::clone(log), dice.fork());
    let task = tokio::spawn(async move { patient(&lock, &log, key, &mut own).await });
    tokio::time::sleep(after).await;
    task.abort();
    match task.await {
        Ok(outcome) => outcome,
        Err(e) if e.is_cancelled() => Ok(()),
        Err(e) => Err(error(format!("aborted acquisition: {e}"))),
    }
}

/// A hold with a short explicit lease, kept past it: the lock expires instead of being
/// released, and the late `unlock` finds it gone.
async fn expiring(lock: &Lock, log: &Arc<EventLog>, key: u8) -> Result<()> {
    let asking = log.ask(key);
    match lock
        .try_lock_with_lease(SHORT_LEASE_WAIT, SHORT_LEASE)
        .await
    {
        Ok(guard) => {
            let held = asking.acquired(guard, true);
            tokio::time::sleep(SHORT_LEASE * 2).await;
            match held.unlock().await {
                Err(e) if !e.is_not_held() => Err(e.into()),
                _ => Ok(()),
            }
        }
        Err(e) if e.is_timeout() => {
            asking.timed_out();
            Ok(())
        }
        Err(e) => Err(e.into()),
    }
}

/// The critical section: nothing, a `yield_now` or a 1 ms sleep; then `unlock()`, or for
/// one hold in five the guard dropped (released in the background).
async fn section(held: Holding, dice: &mut Dice) -> Result<()> {
    match dice.below(3) {
        0 => {}
        1 => tokio::task::yield_now().await,
        _ => tokio::time::sleep(Duration::from_millis(1)).await,
    }
    if dice.below(5) == 0 {
        drop(held);
        return Ok(());
    }
    Ok(held.unlock().await?)
}

/// The process' events file, appended to one event per `write`.
struct EventLog {
    file: File,
    /// The number of the next acquisition call.
    next: AtomicU64,
    /// An event could not be written: the run's figures would be wrong.
    failed: AtomicBool,
}

impl EventLog {
    fn create(path: &std::path::Path) -> Result<EventLog> {
        let file = std::fs::OpenOptions::new()
            .append(true)
            .create(true)
            .open(path)
            .map_err(|e| error(format!("cannot open {}: {e}", path.display())))?;
        Ok(EventLog {
            file,
            next: AtomicU64::new(0),
            failed: AtomicBool::new(false),
        })
    }

    fn write(&self, at: u64, n: u64, key: u8, what: What) {
        let event = Event { at, n, key, what };
        let written = serde_json::to_vec(&event).map(|mut line| {
            line.push(b'\n');
            (&self.file).write_all(&line)
        });
        if !matches!(written, Ok(Ok(()))) {
            self.failed.store(true, Ordering::Relaxed);
        }
    }

    /// An acquisition call begins.
    fn ask(self: &Arc<Self>, key: u8) -> Asking {
        let n = self.next.fetch_add(1, Ordering::Relaxed);
        self.write(monotonic_ns(), n, key, What::Asked);
        Asking {
            log: Arc::clone(self),
            n,
            key,
            open: true,
        }
    }
}

/// An acquisition call in progress; dropped without an outcome, it was cancelled.
struct Asking {
    log: Arc<EventLog>,
    n: u64,
    key: u8,
    open: bool,
}

impl Asking {
    /// The call returned `guard`; `leased` when it has an explicit lease (its end, if it
    /// comes first, ends the hold).
    fn acquired(mut self, guard: LockGuard, leased: bool) -> Holding {
        let now = monotonic_ns();
        self.open = false;
        self.log.write(now, self.n, self.key, What::Acquired);
        let lease_end = leased.then(|| {
            now + nanos(
                guard
                    .deadline()
                    .saturating_duration_since(std::time::Instant::now()),
            )
        });
        Holding {
            end: HoldEnd {
                log: Arc::clone(&self.log),
                n: self.n,
                key: self.key,
                lease_end,
            },
            guard,
        }
    }

    /// `try_lock_for` returned its timeout.
    fn timed_out(mut self) {
        self.open = false;
        self.log
            .write(monotonic_ns(), self.n, self.key, What::TimedOut);
    }
}

impl Drop for Asking {
    fn drop(&mut self) {
        if self.open {
            self.log
                .write(monotonic_ns(), self.n, self.key, What::Cancelled);
        }
    }
}

/// A held lock; the hold ends when this is dropped (instead of unlocked), or when
/// `unlock` returns.
struct Holding {
    // Declared first, dropped first: the hold ends as the guard is dropped.
    end: HoldEnd,
    guard: LockGuard,
}

impl Holding {
    async fn unlock(self) -> dlock::Result<()> {
        let Holding { end, guard } = self;
        let outcome = guard.unlock().await;
        drop(end);
        outcome
    }
}

/// Records the end of a hold when dropped: now, or the end of the explicit lease if that
/// came first. Also dropped when the task is aborted while unlocking.
struct HoldEnd {
    log: Arc<EventLog>,
    n: u64,
    key: u8,
    lease_end: Option<u64>,
}

impl Drop for HoldEnd {
    fn drop(&mut self) {
        let now = monotonic_ns();
        let at = self.lease_end.map_or(now, |end| end.min(now));
        self.log.write(at, self.n, self.key, What::Released);
    }
}

/// A small xorshift generator: the moves need variety, not quality.
struct Dice(u64);

impl Dice {
    fn new(seed: u64) -> Dice {
        // splitmix64 of the seed: nearby seeds (task numbers) start far apart; never 0.
        let mut z = seed.wrapping_add(0x9E37_79B9_7F4A_7C15);
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        Dice((z ^ (z >> 31)) | 1)
    }

    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }

    /// A number in `0..n` (`n` > 0).
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }

    /// A generator of its own, for a spawned task.
    fn fork(&mut self) -> Dice {
        Dice::new(self.next())
    }
}
