//! Liveness under everything at once: while a live client waits for a lock, the lock is
//! never takeable (free, or granted to a client that does not take it up) for longer than
//! a grant's lifetime plus a round trip, whatever cancellations, timeouts,
//! retries, kills, expiring leases, force unlocks, `min_hold`s and mixes of primitives
//! happen around it; and no two exclusive holders are ever inside at once.
//!
//! Each case draws a schedule from its seed and runs it for [`SCHEDULE`] against one real
//! Redis:
//!
//! - [`CLIENTS`] in-process clients, each a `LockClient` of its own (own connections and
//!   subscriber: a separate process as far as Redis can tell), with [`TASKS`] tasks each.
//!   They recheck a lock only every [`RECHECK`] (10 s), so a waiter that depends on its
//!   recheck timer to make progress shows as a stall of seconds. Each task draws
//!   operations at random: `lock` under a timeout, `try_lock_for` of 0-50 ms, a try
//!   cancelled while it is at Redis followed at once by a new wait, retry loops of short
//!   tries, a task aborted while it waits or holds, explicit leases of 50-300 ms that run
//!   out under their holder, `#[distributed_lock]` with `min_hold`, same-slot multi-locks
//!   over the three plain keys, and fair, read, write and semaphore acquisitions on keys
//!   of their own; holds end with or without an `.await` inside, by `unlock` or by
//!   dropping the guard.
//! - A third client force-unlocks a plain or the fair key every 150-700 ms.
//! - A worker process (`dlock-liveness`) waits for and holds the plain keys, multi-locks
//!   and the semaphore with explicit leases; it is killed with `SIGKILL` every 0.2-1.2 s
//!   (more than half the time while it waits: that leaves its client registered as a
//!   waiter of a lock it will never take), 40 % of the time after being frozen
//!   (`SIGSTOP`) for 150-500 ms, during which Redis still passes it locks, and started
//!   again.
//! - Once per case, a lull of 0.8-1.8 s (see [`Lull`]): nobody starts an operation and the
//!   worker, frozen while it waits and then killed as the lull begins, stays dead. In the
//!   crowd, a newcomer's first try
//!   takes a lock that waiters were not woken for and hides the stall; in the lull it
//!   shows at its full length.
//!
//! Every acquisition records what it waited for and when it got it on the monotonic
//! clock, the worker into a file; `dlock_tests::timeline::Report` merges the records,
//! reckons each key's holds conservatively (see the module's docs) and lists every
//! interval longer than [`TAKEABLE_BOUND`] during which the keys a waiter wanted were all
//! takeable while it waited, and every overlap of exclusive holds.
//!
//! `DLOCK_PROPTEST_CASES` sets the number of cases (default 3, 6-8 s each);
//! `DLOCK_LIVENESS_SEED=<seed>` runs the one case of that seed (the failure message names
//! it); `DLOCK_LIVENESS_RECORDS=<dir>` writes each case's merged records there.

use std::future::Future;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use dlock::{distributed_lock, Lock, LockClient, LockError, MultiLock};
use dlock_tests::liveness::{Guard, Keys, Rng, SEMAPHORE_PERMITS};
use dlock_tests::timeline::{
    instant_ns, monotonic_ns, read_file, Need, Record, Report, Timeline, What,
};
use dlock_tests::RedisServer;
use tokio::time::Instant;

/// How long a release's grant to the client it wakes lasts until extended (100 ms by
/// default): a client that does not take it up costs the others this long.
const GRANT_MS: u64 = 100;
/// One round trip to Redis and the reaction to a message, generously: on loopback it is
/// well under 10 ms.
const ROUND_TRIP_MS: u64 = 50;
/// What the records cannot see precisely. Every timestamp is taken by a task after its
/// `.await` returned, on two cores shared with the other clients, the worker, Redis and
/// whatever else the machine runs: a task polled late records an acquisition late (up to
/// tens of ms under load), which lengthens the takeable interval before it. A dropped
/// guard's lock is freed by the client's background task, and a cancelled try that took
/// the lock is given back the same way, a few ms after the records say. None of this is
/// grant or recheck time, which is what the bound is about: the bugs it exists for
/// leave a lock takeable for a recheck interval (here 10 s) or the rest of a wait.
const MEASUREMENT_SLACK_MS: u64 = 100;
/// The longest a lock may sit takeable while a client waits for it: the promise
/// (grant + round trip = 150 ms) plus the measurement slack. The same bound serves
/// the fair lock, the read-write lock (an idle lock counts as takeable for readers and
/// writers alike) and the semaphore (takeable when the permits free cover a waiter's
/// need), which hand nothing to anyone and so keep well within it.
const TAKEABLE_BOUND: Duration =
    Duration::from_millis(GRANT_MS + ROUND_TRIP_MS + MEASUREMENT_SLACK_MS);

/// How long each case draws new operations; operations in progress then finish.
const SCHEDULE: Duration = Duration::from_secs(5);
/// Operations started this long before a quiet spell (the lull or the end of the
/// schedule) are drawn to make it bite: see [`Actor::quiet_soon`].
const APPROACH: Duration = Duration::from_millis(400);
/// How long the operations in progress at the end of the schedule may take to finish
/// (every wait is bounded at 5 s, every hold at half a second): past it a task is hung.
const DRAIN: Duration = Duration::from_secs(15);
/// In-process clients. Four of four tasks each (S5's contention) rather than three of
/// two: with the smaller crowd twelve cases never met a grantee whose lease was shorter
/// than its grant, which with the larger one showed an overlap in 3 of 12 cases (a grant
/// extension that shortened the grant's expiry under a guard still counting on it).
const CLIENTS: usize = 4;
/// Tasks per in-process client (they line up in the client's local line).
const TASKS: usize = 4;
/// Every client's `max_wait_recheck`: long, so that reliance on it shows.
const RECHECK: Duration = Duration::from_secs(10);
/// The seed the cases' seeds are drawn from when `DLOCK_LIVENESS_SEED` is not set: the
/// same schedules on every run.
const BASE_SEED: u64 = 0x6c69_7665_6e65_7373;
const SEED_ENV: &str = "DLOCK_LIVENESS_SEED";
const RECORDS_ENV: &str = "DLOCK_LIVENESS_RECORDS";
const WORKER: &str = env!("CARGO_BIN_EXE_dlock-liveness");

fn ms(rng: &mut Rng, lo: u64, hi: u64) -> Duration {
    Duration::from_millis(rng.between(lo, hi))
}

async fn slow_recheck(url: &str) -> LockClient {
    LockClient::builder()
        .max_wait_recheck(RECHECK)
        .connect(url)
        .await
        .expect("connect")
}

/// An acquisition's shape: how long it waits, its explicit lease, and when its caller
/// cancels it (drops the future) if it still waits.
struct Shape {
    wait: Duration,
    lease: Option<Duration>,
    cancel: Option<Duration>,
}

/// The body of the `min_hold` functions: records when it got the lock, holds a while, and
/// records its end (the attribute releases right after, before the function returns).
struct Body {
    timeline: Arc<Timeline>,
    who: String,
    hold: Duration,
    acquired_at: AtomicU64,
}

impl Body {
    async fn run(&self) {
        let at = monotonic_ns();
        self.acquired_at.store(at, Ordering::SeqCst);
        self.timeline
            .record_at(at, &self.who, What::Acquired { deadline_ns: None });
        if !self.hold.is_zero() {
            tokio::time::sleep(self.hold).await;
        }
        self.timeline.record(&self.who, What::ReleaseStart);
    }
}

const BRIEF_MIN_HOLD: Duration = Duration::from_millis(120);
const LONG_MIN_HOLD: Duration = Duration::from_millis(400);

#[distributed_lock(key = "<name>", min_hold = "120ms", wait = "4s", client = client)]
async fn brief_min_hold(client: &LockClient, name: &str, body: &Body) -> Result<(), LockError> {
    body.run().await;
    Ok(())
}

#[distributed_lock(key = "<name>", min_hold = "400ms", wait = "4s", client = client)]
async fn long_min_hold(client: &LockClient, name: &str, body: &Body) -> Result<(), LockError> {
    body.run().await;
    Ok(())
}

/// The record of a wait: `op` for reports, the `keys` taken at once, what of each, and
/// the explicit lease.
fn wanted(op: &str, keys: &[&str], need: Need, lease: Option<Duration>) -> What {
    What::Wait {
        op: op.to_owned(),
        keys: keys.iter().map(|k| (*k).to_owned()).collect(),
        need,
        lease_ms: lease.map(|l| l.as_millis() as u64),
    }
}

/// Where a task that may be aborted is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Phase {
    Waiting,
    /// Holding since this moment.
    Holding(u64),
    Done,
}

/// One task of an in-process client.
struct Actor {
    client: LockClient,
    keys: Keys,
    name: String,
    timeline: Arc<Timeline>,
    rng: Rng,
    until: Instant,
    lull: Lull,
}

impl Actor {
    async fn run(mut self) {
        let mut op = 0;
        while Instant::now() < self.until {
            self.lull.sit_out().await;
            let who = format!("{}#{op}", self.name);
            op += 1;
            self.step(&who).await;
        }
    }

    fn record(&self, who: &str, what: What) {
        self.timeline.record(who, what);
    }

    fn shape(&mut self, lease_percent: u64, cancel_percent: u64) -> Shape {
        let wait = ms(&mut self.rng, 0, 3000);
        let lease = self
            .rng
            .chance(lease_percent)
            .then(|| ms(&mut self.rng, 50, 300));
        let cancel = self
            .rng
            .chance(cancel_percent)
            .then(|| Duration::from_micros(self.rng.between(0, 3_000_000)));
        Shape {
            wait,
            lease,
            cancel,
        }
    }

    /// Waits for `acquisition` as `who`, recorded as `wait` (see [`wanted`]), cancelled
    /// after `cancel` if given, and records how it went.
    async fn acquire(
        &self,
        who: &str,
        wait: What,
        cancel: Option<Duration>,
        acquisition: impl Future<Output = Result<Guard, LockError>>,
    ) -> Option<Guard> {
        let explicit_lease = matches!(
            &wait,
            What::Wait {
                lease_ms: Some(_),
                ..
            }
        );
        self.record(who, wait);
        let outcome = match cancel {
            Some(after) => tokio::time::timeout(after, acquisition).await.ok(),
            None => Some(acquisition.await),
        };
        match outcome {
            Some(Ok(guard)) => {
                let deadline_ns = explicit_lease.then(|| instant_ns(guard.deadline()));
                self.record(who, What::Acquired { deadline_ns });
                Some(guard)
            }
            Some(Err(e)) => {
                self.record(who, What::GaveUp);
                if !e.is_timeout() {
                    eprintln!("{who}: {e}");
                }
                None
            }
            None => {
                self.record(who, What::GaveUp);
                None
            }
        }
    }

    /// Runs `take(wait, lease)` in `shape` as `who` (recorded as `what(lease)`), then holds
    /// what it got as [`Actor::finish`] does (`long`ly for the keys few tasks visit).
    async fn shaped<F>(
        &mut self,
        who: &str,
        shape: Shape,
        what: impl FnOnce(Option<Duration>) -> What,
        long: bool,
        take: impl FnOnce(Duration, Option<Duration>) -> F,
    ) where
        F: Future<Output = Result<Guard, LockError>>,
    {
        let Shape {
            wait,
            lease,
            cancel,
        } = shape;
        let guard = self
            .acquire(who, what(lease), cancel, take(wait, lease))
            .await;
        self.finish(who, guard, lease, long).await;
    }

    /// Holds (not at all, a little, or a while; `long`ly for the keys few tasks visit, so
    /// that their waiters meet holders) and gives the lock back by `unlock` or by dropping
    /// the guard.
    async fn hold(&mut self, who: &str, guard: Guard, long: bool) {
        let hold = match (self.rng.between(0, 9), long) {
            (0..=2, _) => Duration::ZERO,
            (_, true) => ms(&mut self.rng, 50, 400),
            (3..=7, false) => ms(&mut self.rng, 1, 40),
            (_, false) => ms(&mut self.rng, 40, 200),
        };
        if !hold.is_zero() {
            tokio::time::sleep(hold).await;
        }
        self.give_back(who, guard).await;
    }

    async fn give_back(&mut self, who: &str, guard: Guard) {
        if self.rng.chance(75) {
            self.record(who, What::ReleaseStart);
            // After a force unlock or an expired lease this reports the lock not held.
            let _ = guard.unlock().await;
            self.record(who, What::Released);
        } else {
            // Inside until here: the background release may run at once.
            self.record(who, What::ReleaseStart);
            drop(guard);
            self.record(who, What::Dropped);
        }
    }

    /// With an explicit lease, half the time the holder keeps its guard past the lease:
    /// the lock expires under it while others wait.
    async fn finish(
        &mut self,
        who: &str,
        guard: Option<Guard>,
        lease: Option<Duration>,
        long: bool,
    ) {
        let Some(guard) = guard else { return };
        match lease {
            Some(lease) if self.rng.chance(50) => {
                let overstay = ms(&mut self.rng, 0, 150);
                tokio::time::sleep(lease + overstay).await;
                self.give_back(who, guard).await;
            }
            _ => self.hold(who, guard, long).await,
        }
    }

    /// Whether a quiet spell (the lull, or the end of the schedule) is about to begin.
    fn quiet_soon(&self) -> bool {
        let soon = Instant::now() + APPROACH;
        (Instant::now() < self.lull.start && self.lull.start <= soon) || self.until <= soon
    }

    async fn step(&mut self, who: &str) {
        let plain = self.rng.pick(&self.keys.plain).clone();
        let lock = self.client.lock(&plain);
        let x = Need::Exclusive;
        // Going into a quiet spell, mostly patient waiters (arm 0) and leases that run out
        // in it (arm 19): what the quiet shows.
        let arm = match (self.quiet_soon(), self.rng.between(0, 3)) {
            (true, 0 | 1) => 0,
            (true, 2) => 19,
            _ => self.rng.between(0, 99),
        };
        match arm {
            // `lock()`, given up by its caller after 0.3-5 s: a patient waiter, whose
            // stall shows its whole length.
            0..=9 => {
                let cancel = ms(&mut self.rng, 300, 5000);
                let fut = async { lock.lock().await.map(Guard::One) };
                let guard = self
                    .acquire(who, wanted("lock", &[&plain], x, None), Some(cancel), fut)
                    .await;
                self.finish(who, guard, None, false).await;
            }
            // A short try.
            10..=18 => {
                let wait = ms(&mut self.rng, 0, 50);
                let fut = async { lock.try_lock_for(wait).await.map(Guard::One) };
                let guard = self
                    .acquire(who, wanted("try_for", &[&plain], x, None), None, fut)
                    .await;
                self.finish(who, guard, None, false).await;
            }
            // An explicit lease, often outlived.
            19..=25 => {
                let wait = ms(&mut self.rng, 0, 3000);
                let lease = ms(&mut self.rng, 50, 300);
                let fut = async { lock.try_lock_with_lease(wait, lease).await.map(Guard::One) };
                let guard = self
                    .acquire(who, wanted("lease", &[&plain], x, Some(lease)), None, fut)
                    .await;
                self.finish(who, guard, Some(lease), false).await;
            }
            // A try cancelled while it is (probably) at Redis, and often a new wait at
            // once: the caller's retry after a timeout.
            26..=35 => {
                let cancel = Duration::from_micros(self.rng.between(0, 3000));
                let fut = async {
                    lock.try_lock_for(Duration::from_secs(2))
                        .await
                        .map(Guard::One)
                };
                let guard = self
                    .acquire(
                        who,
                        wanted("cancelled", &[&plain], x, None),
                        Some(cancel),
                        fut,
                    )
                    .await;
                self.finish(who, guard, None, false).await;
                if self.rng.chance(60) {
                    let again = format!("{who}r");
                    let wait = ms(&mut self.rng, 100, 4000);
                    let fut = async { lock.try_lock_for(wait).await.map(Guard::One) };
                    let guard = self
                        .acquire(&again, wanted("again", &[&plain], x, None), None, fut)
                        .await;
                    self.finish(&again, guard, None, false).await;
                }
            }
            // A retry loop of short tries: one wait, from the first try to the last.
            36..=42 => {
                let waits: Vec<Duration> = (0..self.rng.between(2, 8))
                    .map(|_| ms(&mut self.rng, 0, 50))
                    .collect();
                let fut = async {
                    let mut outcome = Err(LockError::Timeout {
                        name: plain.clone(),
                        waited: Duration::ZERO,
                        permits: None,
                    });
                    for wait in waits {
                        outcome = lock.try_lock_for(wait).await;
                        if !matches!(&outcome, Err(e) if e.is_timeout()) {
                            break;
                        }
                    }
                    outcome.map(Guard::One)
                };
                let guard = self
                    .acquire(who, wanted("retry", &[&plain], x, None), None, fut)
                    .await;
                self.finish(who, guard, None, false).await;
            }
            43..=47 => self.aborted(who, lock, &plain).await,
            48..=53 => self.min_hold(who, &plain).await,
            54..=62 => {
                let mut names = self.keys.plain.to_vec();
                if self.rng.chance(50) {
                    names.remove(self.rng.between(0, 2) as usize);
                }
                let refs: Vec<&str> = names.iter().map(String::as_str).collect();
                let multi = MultiLock::same_slot(&self.client, &names).expect("one slot");
                let shape = self.shape(30, 20);
                let what = |lease| wanted("multi", &refs, x, lease);
                self.shaped(who, shape, what, false, |wait, lease| async move {
                    match lease {
                        Some(lease) => multi.try_lock_with_lease(wait, lease).await,
                        None => multi.try_lock_for(wait).await,
                    }
                    .map(Guard::Multi)
                })
                .await;
            }
            63..=72 => {
                let fair = self.client.fair_lock(&self.keys.fair);
                let shape = self.shape(30, 25);
                let key = self.keys.fair.clone();
                let what = |lease| wanted("fair", &[&key], x, lease);
                self.shaped(who, shape, what, true, |wait, lease| async move {
                    match lease {
                        Some(lease) => fair.try_lock_with_lease(wait, lease).await,
                        None => fair.try_lock_for(wait).await,
                    }
                    .map(Guard::One)
                })
                .await;
            }
            73..=82 => {
                let rw = self.client.rw_lock(&self.keys.rw);
                let (side, need) = if self.rng.chance(60) {
                    ("read", Need::Shared)
                } else {
                    ("write", Need::Exclusive)
                };
                let shape = self.shape(30, 20);
                let key = self.keys.rw.clone();
                let what = |lease| wanted(side, &[&key], need, lease);
                self.shaped(who, shape, what, true, |wait, lease| async move {
                    match (need, lease) {
                        (Need::Shared, Some(lease)) => {
                            rw.read().try_lock_with_lease(wait, lease).await
                        }
                        (Need::Shared, None) => rw.read().try_lock_for(wait).await,
                        (_, Some(lease)) => rw.write().try_lock_with_lease(wait, lease).await,
                        (_, None) => rw.write().try_lock_for(wait).await,
                    }
                    .map(Guard::One)
                })
                .await;
            }
            83..=93 => {
                let semaphore = self
                    .client
                    .semaphore(&self.keys.semaphore, SEMAPHORE_PERMITS);
                let n = self.rng.between(1, 2) as u32;
                let shape = self.shape(30, 20);
                let key = self.keys.semaphore.clone();
                let need = Need::Permits {
                    n,
                    of: SEMAPHORE_PERMITS,
                };
                let what = |lease| wanted("sem", &[&key], need, lease);
                self.shaped(who, shape, what, true, |wait, lease| async move {
                    match lease {
                        Some(lease) => semaphore.try_acquire_with_lease(n, wait, lease).await,
                        None => semaphore.try_acquire_for(n, wait).await,
                    }
                    .map(Guard::Permit)
                })
                .await;
            }
            _ => tokio::time::sleep(ms(&mut self.rng, 0, 80)).await,
        }
    }

    /// `lock()` in a task of its own, aborted after 0-300 ms: while it waits, or while
    /// it holds (its guard is dropped with the task), or while it releases.
    async fn aborted(&mut self, who: &str, lock: Lock, key: &str) {
        let abort_after = ms(&mut self.rng, 0, 300);
        let hold = ms(&mut self.rng, 0, 100);
        self.record(who, wanted("aborted", &[key], Need::Exclusive, None));
        let phase = Arc::new(Mutex::new(Phase::Waiting));
        let task = tokio::spawn({
            let (phase, timeline, who) = (
                Arc::clone(&phase),
                Arc::clone(&self.timeline),
                who.to_owned(),
            );
            async move {
                match tokio::time::timeout(Duration::from_secs(2), lock.lock()).await {
                    Ok(Ok(guard)) => {
                        {
                            let mut phase = phase.lock().unwrap();
                            let at = monotonic_ns();
                            timeline.record_at(at, &who, What::Acquired { deadline_ns: None });
                            *phase = Phase::Holding(at);
                        }
                        tokio::time::sleep(hold).await;
                        timeline.record(&who, What::ReleaseStart);
                        let _ = guard.unlock().await;
                        let mut phase = phase.lock().unwrap();
                        timeline.record(&who, What::Released);
                        *phase = Phase::Done;
                    }
                    _ => {
                        let mut phase = phase.lock().unwrap();
                        timeline.record(&who, What::GaveUp);
                        *phase = Phase::Done;
                    }
                }
            }
        });
        tokio::time::sleep(abort_after).await;
        let before = monotonic_ns();
        task.abort();
        let _ = task.await;
        let after = monotonic_ns();
        let phase = *phase.lock().unwrap();
        match phase {
            Phase::Waiting => self.timeline.record_at(before, who, What::GaveUp),
            // Dropped with the task (also while its unlock was under way). The abort
            // takes effect at the task's next `.await`: one running on another thread
            // may acquire after `before`.
            Phase::Holding(since) => {
                self.timeline
                    .record_at(before.max(since), who, What::ReleaseStart);
                self.timeline.record_at(after, who, What::Dropped);
            }
            Phase::Done => {}
        }
    }

    /// A `#[distributed_lock]` function with `min_hold`, sometimes cancelled by its caller.
    async fn min_hold(&mut self, who: &str, key: &str) {
        let long = self.rng.chance(50);
        let body = Body {
            timeline: Arc::clone(&self.timeline),
            who: who.to_owned(),
            hold: ms(&mut self.rng, 0, 150),
            acquired_at: AtomicU64::new(0),
        };
        let cancel = self.rng.chance(25).then(|| ms(&mut self.rng, 0, 4000));
        let op = if long {
            "min_hold_400ms"
        } else {
            "min_hold_120ms"
        };
        self.record(who, wanted(op, &[key], Need::Exclusive, None));
        let call = async {
            if long {
                long_min_hold(&self.client, key, &body).await
            } else {
                brief_min_hold(&self.client, key, &body).await
            }
        };
        let called = monotonic_ns();
        let outcome = match cancel {
            Some(after) => tokio::time::timeout(after, call).await.ok(),
            None => Some(call.await),
        };
        let now = monotonic_ns();
        let acquired_at = body.acquired_at.load(Ordering::SeqCst);
        if acquired_at == 0 {
            self.timeline.record_at(now, who, What::GaveUp);
            return;
        }
        let min_hold = if long { LONG_MIN_HOLD } else { BRIEF_MIN_HOLD };
        let until_ns = acquired_at + min_hold.as_nanos() as u64;
        self.timeline
            .record_at(now, who, What::HeldUntil { until_ns });
        if outcome.is_some() {
            self.timeline.record_at(now, who, What::Released);
        } else {
            // Cancelled in the body: the guard went when the timeout fired, not before.
            let fired = cancel.map_or(now, |after| called + after.as_nanos() as u64);
            self.timeline
                .record_at(fired.max(acquired_at), who, What::ReleaseStart);
            self.timeline.record_at(now, who, What::Dropped);
        }
    }
}

/// A quiet spell in the middle of a case: nobody starts an operation and the worker is
/// dead, so the waits in progress are on their own. A wake-up lost then is not covered up
/// by a newcomer's fresh try, and a stall shows its whole length (up to the waiter's
/// deadline or its recheck).
#[derive(Debug, Clone, Copy)]
struct Lull {
    start: Instant,
    end: Instant,
}

impl Lull {
    fn draw(rng: &mut Rng, from: Instant) -> Lull {
        let start = from + ms(rng, 1500, 3000);
        Lull {
            start,
            end: start + ms(rng, 800, 1800),
        }
    }

    fn contains(&self, at: Instant) -> bool {
        (self.start..self.end).contains(&at)
    }

    /// Waits out the lull if it is on.
    async fn sit_out(&self) {
        if self.contains(Instant::now()) {
            tokio::time::sleep_until(self.end).await;
        }
    }
}

/// Force-unlocks a plain or the fair key every 150-700 ms, as an operator would.
async fn force_unlocks(
    client: LockClient,
    keys: Keys,
    timeline: Arc<Timeline>,
    mut rng: Rng,
    until: Instant,
    lull: Lull,
) {
    while Instant::now() < until {
        tokio::time::sleep(ms(&mut rng, 150, 700)).await;
        lull.sit_out().await;
        let fair = rng.chance(25);
        let key = if fair {
            keys.fair.clone()
        } else {
            rng.pick(&keys.plain).clone()
        };
        timeline.record("force", What::ForceStart { key: key.clone() });
        let outcome = if fair {
            client.fair_lock(&key).force_unlock().await
        } else {
            client.lock(&key).force_unlock().await
        };
        timeline.record("force", What::ForceEnd { key: key.clone() });
        if let Err(e) = outcome {
            eprintln!("force unlock of {key}: {e}");
        }
    }
}

/// A running worker process; killed when dropped (a test that panics leaves none).
struct Worker {
    name: String,
    out: PathBuf,
    child: Option<Child>,
}

impl Worker {
    fn start(url: &str, tag: &str, name: String, dir: &Path, seed: u64) -> Worker {
        let out = dir.join(format!("{name}.txt"));
        let child = Command::new(WORKER)
            .args(["--url", url, "--tag", tag, "--process", &name])
            .arg("--seed")
            .arg(seed.to_string())
            .arg("--out")
            .arg(&out)
            .args(["--exit-after", "60s"])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .spawn()
            .expect("start dlock-liveness");
        Worker {
            name,
            out,
            child: Some(child),
        }
    }

    /// Whether its last record is a wait still in progress.
    fn waiting(&self) -> bool {
        let text = std::fs::read_to_string(&self.out).unwrap_or_default();
        text.lines()
            .next_back()
            .is_some_and(|line| line.split_whitespace().nth(2) == Some("wait"))
    }

    /// `SIGKILL`, recorded; an error when it had exited by itself.
    /// With `frozen_for`, it is first frozen that long (`SIGSTOP`: its connections stay
    /// open, so Redis still passes it locks it never takes); the kill is recorded at the
    /// freeze, after which it does nothing.
    fn kill(mut self, timeline: &Timeline, frozen_for: Option<Duration>) -> Result<(), String> {
        let mut child = self.child.take().expect("running");
        let exited = child.try_wait().ok().flatten();
        let before = monotonic_ns();
        if let (Some(pause), None) = (frozen_for, exited) {
            let pid = rustix::process::Pid::from_raw(child.id() as i32).expect("a child's pid");
            if rustix::process::kill_process(pid, rustix::process::Signal::STOP).is_ok() {
                std::thread::sleep(pause);
            }
        }
        let _ = child.kill();
        let _ = child.wait();
        let after = monotonic_ns();
        timeline.record_at(
            before,
            "killer",
            What::Killed {
                process: self.name.clone(),
                after_ns: after,
            },
        );
        match exited {
            Some(status) => Err(format!("worker {} exited by itself: {status}", self.name)),
            None => Ok(()),
        }
    }
}

impl Drop for Worker {
    fn drop(&mut self) {
        if let Some(child) = &mut self.child {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// Runs, kills and restarts worker processes until `until`, none during the lull (the
/// one running when it begins is killed then); returns their record files and what went
/// wrong with them.
fn kill_workers(
    url: &str,
    tag: &str,
    dir: &Path,
    timeline: &Timeline,
    mut rng: Rng,
    until: std::time::Instant,
    lull: Lull,
) -> (Vec<PathBuf>, Vec<String>) {
    let now = std::time::Instant::now;
    let (lull_start, lull_end) = (lull.start.into_std(), lull.end.into_std());
    let (mut files, mut problems) = (Vec::new(), Vec::new());
    let mut started = 0;
    while now() < until {
        if (lull_start..lull_end).contains(&now()) {
            std::thread::sleep(lull_end.saturating_duration_since(now()));
            continue;
        }
        let worker = Worker::start(url, tag, format!("w{started}"), dir, rng.next_u64());
        started += 1;
        files.push(worker.out.clone());
        let mut kill_at = (now() + ms(&mut rng, 200, 1200)).min(until);
        if now() < lull_start {
            kill_at = kill_at.min(lull_start);
        }
        std::thread::sleep(kill_at.saturating_duration_since(now()));
        if rng.chance(60) || kill_at == lull_start || kill_at == until {
            // Kill it while it waits: its client stays registered as a waiter. Always
            // so before the lull and the end of the schedule, when nobody comes to take
            // a lock passed to it.
            let give_up = now() + Duration::from_millis(600);
            while !worker.waiting() && now() < give_up {
                std::thread::sleep(Duration::from_millis(2));
            }
            std::thread::sleep(ms(&mut rng, 0, 40));
        }
        // Sometimes frozen first, for longer than a grant; always as the lull
        // begins, when a lock passed to it holds up the waiters left the longest.
        let frozen_for = (kill_at == lull_start || rng.chance(40)).then(|| ms(&mut rng, 150, 500));
        if let Err(problem) = worker.kill(timeline, frozen_for) {
            problems.push(problem);
        }
        std::thread::sleep(ms(&mut rng, 0, 200));
    }
    (files, problems)
}

/// One case: the schedule of `seed` on keys of their own.
async fn run_case(server: &RedisServer, case: usize, seed: u64) -> Result<Report, String> {
    let tag = format!("lv{case}");
    let keys = Keys::new(&tag);
    let dir = tempfile::tempdir().expect("temporary directory");
    let timeline = Arc::new(Timeline::new());
    let mut rng = Rng::new(seed);
    let url = server.url();
    let mut clients = Vec::new();
    for _ in 0..CLIENTS {
        clients.push(slow_recheck(&url).await);
    }
    let forcer = slow_recheck(&url).await;

    let origin = monotonic_ns();
    let until = Instant::now() + SCHEDULE;
    let lull = Lull::draw(&mut rng, Instant::now());
    let killer = {
        let (url, tag, dir) = (url.clone(), tag.clone(), dir.path().to_owned());
        let (timeline, rng, until) = (Arc::clone(&timeline), rng.fork(), until.into_std());
        std::thread::spawn(move || kill_workers(&url, &tag, &dir, &timeline, rng, until, lull))
    };
    let mut tasks = Vec::new();
    for (c, client) in clients.iter().enumerate() {
        for t in 0..TASKS {
            let actor = Actor {
                client: client.clone(),
                keys: keys.clone(),
                name: format!("c{c}.t{t}"),
                timeline: Arc::clone(&timeline),
                rng: rng.fork(),
                until,
                lull,
            };
            tasks.push(tokio::spawn(actor.run()));
        }
    }
    tasks.push(tokio::spawn(force_unlocks(
        forcer.clone(),
        keys.clone(),
        Arc::clone(&timeline),
        rng.fork(),
        until,
        lull,
    )));

    let mut problems = Vec::new();
    let drained_by = until + DRAIN;
    for task in tasks {
        let abort = task.abort_handle();
        match tokio::time::timeout_at(drained_by, task).await {
            Ok(Ok(())) => {}
            Ok(Err(e)) => problems.push(format!("a task failed: {e}")),
            Err(_) => {
                abort.abort();
                problems.push(format!(
                    "a task was still running {DRAIN:?} after the schedule"
                ));
            }
        }
    }
    let (files, worker_problems) = tokio::task::spawn_blocking(move || killer.join())
        .await
        .expect("join the killer")
        .expect("the killer thread");
    problems.extend(worker_problems);

    let mut events = timeline.events();
    for file in &files {
        events.extend(read_file(file)?);
    }
    if let Some(records) = std::env::var_os(RECORDS_ENV) {
        let mut sorted = events.clone();
        sorted.sort_by_key(|e| e.at_ns);
        let text: String = sorted.iter().map(|e| format!("{e}\n")).collect();
        let path = Path::new(&records).join(format!("case-{case}-{seed:#x}.txt"));
        std::fs::write(&path, text).map_err(|e| format!("{}: {e}", path.display()))?;
    }
    if !problems.is_empty() {
        return Err(problems.join("\n"));
    }
    Ok(Report::analyze(&events, origin, TAKEABLE_BOUND))
}

/// The seeds to run: `DLOCK_LIVENESS_SEED` alone, else `DLOCK_PROPTEST_CASES` (default 3)
/// drawn from [`BASE_SEED`].
fn seeds() -> Vec<u64> {
    if let Ok(seed) = std::env::var(SEED_ENV) {
        let parsed = match seed.strip_prefix("0x") {
            Some(hex) => u64::from_str_radix(hex, 16),
            None => seed.parse(),
        };
        return vec![parsed.unwrap_or_else(|_| panic!("{SEED_ENV}={seed:?} is not a number"))];
    }
    let mut base = Rng::new(BASE_SEED);
    (0..dlock_tests::proptest_cases(3))
        .map(|_| base.next_u64())
        .collect()
}

#[test]
fn no_lock_sits_takeable_while_a_client_waits_for_it() {
    let server = RedisServer::start();
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let seeds = seeds();
    let mut failures = Vec::new();
    for (case, &seed) in seeds.iter().enumerate() {
        let started = std::time::Instant::now();
        let outcome = runtime.block_on(run_case(&server, case, seed));
        let took = started.elapsed();
        match outcome {
            Ok(report) => {
                eprintln!("case {case} ({SEED_ENV}={seed:#x}, {took:.1?}): {report}");
                if !report.is_clean() {
                    failures.push(format!("case {case} ({SEED_ENV}={seed:#x}): {report}"));
                }
            }
            Err(problem) => {
                eprintln!("case {case} ({SEED_ENV}={seed:#x}, {took:.1?}): {problem}");
                failures.push(format!("case {case} ({SEED_ENV}={seed:#x}): {problem}"));
            }
        }
    }
    assert!(
        failures.is_empty(),
        "{} of {} cases failed: a lock sat takeable for more than {TAKEABLE_BOUND:?} while a client waited for it, or exclusive holds overlapped\n{}",
        failures.len(),
        seeds.len(),
        failures.join("\n")
    );
}
