//! Releasing a hold: a primitive's release script with safe retries, in the foreground
//! ([`LockGuard::unlock`](crate::LockGuard::unlock)) or in the background (dropped guards,
//! abandoned acquisitions), and replayed on a new master after a Sentinel failover.
//!
//! The primitive says what to run (a [`ReleaseOp`]); this module runs it until Redis
//! answers, records it for replay, and reports the outcome.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

use crate::fence::Fence;
use crate::scripts::{Script, ScriptCall};
use tokio::sync::{mpsc, watch, Notify};
use tokio::time::Instant;

use crate::redis::{Backend, CallError};
use crate::sync::metrics::Metrics;
use crate::sync::observe::{self, Label};
use crate::sync::retry::RetryPolicy;

/// What the script reported.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Released {
    /// The owner did not hold the lock.
    NotHeld,
    /// The lock is free now; who gets it next.
    Free(NextHolder),
    /// The owner still holds it this many times.
    StillHeld(u32),
}

/// Whom a freed lock goes to, as the lock's release script decided it from its waiter
/// registry and the releasing client's [`NextInLine`]. Other primitives' releases wake
/// their waiters themselves and always report [`NextHolder::Anyone`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum NextHolder {
    /// Nobody else waits: whoever asks first.
    Anyone,
    /// The release gave the lock to the client's next task (the [`NextInLine`]'s
    /// [`NextTask`]): it holds it now, with its lease from the release's send and its
    /// fencing token (`fence`, with fencing on). `others_wait`: other clients' waiters
    /// wait too (they were not told).
    ThisClient {
        others_wait: bool,
        fence: Option<Fence>,
    },
    /// The lock went to the longest-waiting live waiter (given to it); this client's next task, if any, finds it taken and waits in
    /// line behind the others.
    Another,
    /// With `replica_acks`, the replicas did not confirm the release in time: it may have
    /// given the lock to the client's next task, which does not count on it. A task still
    /// waiting tries itself (its try finds the hold); one that stopped waiting gets it
    /// given back.
    Unconfirmed,
}

/// What a releasing client tells the lock's release script about its own waiting tasks,
/// so that the script can give the lock to the client's next task or pass it on.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct NextInLine {
    /// The task of this client that waits for the lock next, if any.
    pub(crate) next: Option<NextTask>,
    /// That task may have it even if other clients wait (the bound on consecutive local
    /// hand-offs is not reached).
    pub(crate) keep: bool,
    /// Other clients' waiters may wait: the hold being released was taken only after a
    /// wait. The release then passes the op's hand-off key (the lock's token counter), so
    /// that the lock it gives to one of them carries a fencing token; the common,
    /// uncontended release passes no such key.
    pub(crate) contended: bool,
}

impl NextInLine {
    /// Nothing of the client waits: the lock goes to the longest-waiting client.
    pub(crate) const NONE: NextInLine = NextInLine {
        next: None,
        keep: false,
        contended: false,
    };
}

/// A task waiting in the client's local line, as a release may give it the lock: the
/// owner field of its acquisition (which has not tried in Redis) and what its own try
/// would ask for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct NextTask {
    pub(crate) field: Arc<str>,
    pub(crate) lease_ms: u64,
    /// Its hold gets a fencing token.
    pub(crate) fence: bool,
}

/// How releases are retried, and how long their memos live.
#[derive(Debug, Clone, Copy)]
pub(crate) struct ReleaseTiming {
    pub(crate) retry: RetryPolicy,
    pub(crate) memo_ttl: Duration,
    /// How long a lock given to a waiting client lasts until that client extends it.
    pub(crate) grant: Duration,
    /// How many replicas must confirm a lock given to the client's next task, and within
    /// how long (`replica_acks`, as its acquisition would be); `None`: none.
    pub(crate) replica_acks: Option<(u32, Duration)>,
}

/// One primitive's release: its script with keys and arguments.
///
/// Every release script follows one contract, so that this module can run, retry and
/// replay any of them:
/// - it counts once per operation: a memo key among `keys` remembers the outcome, so a
///   retry (or a replay on a new master) answers from it instead of applying again; or,
///   for an op declared [`finds_nothing_once_done`](ReleaseOp::finds_nothing_once_done),
///   the release is idempotent by itself and leaves nothing of the owner's behind;
/// - after the primitive's own arguments it receives four more: the memo's lifetime in
///   ms, the command that announces a release (`publish`, `spublish` in a cluster), how
///   long a lock passed on is given to its next holder until it extends it, in ms, and `'0'` on the
///   op's first send (which cannot find its own memo, so a script may skip the lookup) or
///   `'1'` on a retry or a replay; then, only when the client has a task waiting next
///   (the [`NextInLine`]), four more: that task's owner field, `'1'`/`'0'` (it may keep the
///   lock while others wait), its lease in ms and `'1'`/`'0'` (it gets a fencing token);
///   and after its keys the op's hand-off key (the lock's: its fencing counter) then, or
///   when the hold was contended ([`NextInLine::contended`]). Every key and argument of a
///   call costs the server a Lua string before the script runs, so the common release,
///   uncontended with no task waiting next, sends none of them; scripts without a waiter
///   registry ignore the hand-off;
/// - it answers with an integer: the owner's holds left (0: the lock is free now), or a
///   negative number when the owner held nothing; a lock freed of the owner may also
///   answer `{0, 'given' | 'kept', token?}` or `{0, 'passed'}` (see [`NextHolder`]).
#[derive(Clone)]
pub(crate) struct ReleaseOp {
    /// The script's call with the op's keys and its own arguments: each send adds the
    /// contract's to a copy.
    call: ScriptCall,
    /// The key a release that may give the lock away needs besides the op's keys (the
    /// lock's fencing counter, for the token of whoever gets it): sent with a task waiting
    /// next, or when other clients' waiters may wait ([`NextInLine::contended`]).
    hand_off_key: Option<Arc<str>>,
    /// The script keeps no memo when it gives back the owner's last hold, because that
    /// release leaves nothing of the owner's: a retry that finds nothing of the owner's
    /// reports the first attempt's success (its reply was lost) rather than "not held".
    pub(crate) finds_nothing_once_done: bool,
    /// Where the op's mode argument is, for a script whose answer may say that waiters
    /// were left untold (the lock's: see `lock/scripts/handoff.lua`): the same call in
    /// mode `leave` goes on telling them.
    pass_on_mode: Option<usize>,
}

impl ReleaseOp {
    /// The release of `script` with `keys` and the op's own `args`, written into one
    /// call once (a job is made with every guard, and sent from a copy of it).
    pub(crate) fn new(
        script: &'static Script,
        keys: &[&str],
        args: &[&str],
        finds_nothing_once_done: bool,
    ) -> ReleaseOp {
        let mut call = script.prepare_invoke();
        for key in keys {
            call.key(*key);
        }
        for arg in args {
            call.arg(*arg);
        }
        ReleaseOp {
            call,
            hand_off_key: None,
            finds_nothing_once_done,
            pass_on_mode: None,
        }
    }

    /// A release whose script may answer that waiters were left untold: the op's own
    /// argument `mode_at` is its mode, and the call in mode `leave` goes on telling them
    /// (see [`release`]).
    pub(crate) fn passing_on_with_leave(mut self, mode_at: usize) -> ReleaseOp {
        self.pass_on_mode = Some(mode_at);
        self
    }

    /// A release that may give the lock away also passes `key`, after the op's keys (see
    /// the contract above).
    pub(crate) fn with_hand_off_key(mut self, key: &Arc<str>) -> ReleaseOp {
        self.hand_off_key = Some(Arc::clone(key));
        self
    }
}

/// A primitive's release for one of its owners (by owner field) that stopped waiting:
/// its `leave` (it leaves the waiters; holds it may have are its guard's) or its
/// `withdraw` (every hold it may have goes too). Made once per lock handle, called by
/// the client's subscriber for a message no waiter here takes (`sync::pubsub`), and by
/// the local line for a lock a release gave a task that stopped waiting (`sync::local`).
pub(crate) type OwnerRelease = Arc<dyn Fn(&str) -> ReleaseJob + Send + Sync>;

/// One release to perform, with the lock name it is logged under.
#[derive(Clone)]
pub(crate) struct ReleaseJob {
    pub(crate) name: Arc<str>,
    pub(crate) op: ReleaseOp,
    /// The labels of the guard giving the lock back, for a failure's metric; `None` for
    /// the release of an acquisition that ended without a guard.
    pub(crate) label: Option<Label>,
    /// It gives back a guard's hold, and is counted in the client's statistics; the
    /// cleanup of an acquisition that ended without a guard (see `sync::attempt`) is not.
    pub(crate) counted: bool,
}

impl ReleaseJob {
    /// This job, not counted in the client's statistics: the cleanup of an acquisition
    /// that ended without a guard, or of a waiter that no longer waits.
    pub(crate) fn uncounted(mut self) -> ReleaseJob {
        self.counted = false;
        self
    }
}

/// Runs the release script, retrying transient failures with the same memo so that a
/// retry cannot turn a successful release into "not held".
pub(crate) async fn release(
    backend: &Backend,
    timing: ReleaseTiming,
    job: &ReleaseJob,
    next_in_line: NextInLine,
    send: Sending,
) -> Result<Released, CallError> {
    let (mut invocation, again) = release_call(backend, timing, job, &next_in_line, send);
    let next_task = next_in_line.next.as_ref();
    let started = Instant::now();
    let mut failures = 0;
    loop {
        if failures == 1 {
            invocation.set_arg(again, "1");
        }
        let reply = match timing.replica_acks.filter(|_| next_task.is_some()) {
            // Boxed: only a client with `replica_acks` and a task waiting comes here.
            Some(acks) => Box::pin(confirmed(backend, &job.name, &invocation, acks)).await,
            None => backend.invoke::<Reply>(&invocation).await,
        };
        match reply {
            Ok(Reply(outcome, next, untold)) => {
                if untold {
                    Box::pin(pass_on(backend, timing, job, &invocation)).await;
                }
                let released = released(job, outcome, next, failures > 0);
                tracing::debug!(lock = %job.name, ?released, "dlock: released");
                return Ok(released);
            }
            Err(error) => match timing.retry.retry_after(&error, failures, started) {
                Some(delay) => {
                    failures += 1;
                    tracing::debug!(lock = %job.name, %error, "dlock: release failed; retrying");
                    tokio::time::sleep(delay).await;
                }
                None => return Err(error),
            },
        }
    }
}

/// The call of `job`'s release script, with the client's timings, the first-send flag
/// (`send`) and the task of this client next in line (its hold written by the release),
/// and the place of the first-send flag among its arguments, which a retry sets.
fn release_call(
    backend: &Backend,
    timing: ReleaseTiming,
    job: &ReleaseJob,
    next_in_line: &NextInLine,
    send: Sending,
) -> (ScriptCall, usize) {
    let flag = |on: bool| if on { "1" } else { "0" };
    let mut invocation = job.op.call.clone();
    // The first-send flag's place (0-based): after the op's own arguments, the memo's
    // lifetime, the publish command and the grant's length.
    let again = invocation.args().len() + 3;
    invocation
        .arg(timing.memo_ttl.as_millis() as u64)
        .arg(backend.publish_command())
        .arg(timing.grant.as_millis() as u64)
        .arg(flag(send == Sending::Again));
    if let Some(task) = &next_in_line.next {
        invocation
            .arg(&*task.field)
            .arg(flag(next_in_line.keep))
            .arg(task.lease_ms)
            .arg(flag(task.fence));
    }
    if (next_in_line.next.is_some() || next_in_line.contended)
        && let Some(key) = &job.op.hand_off_key
    {
        invocation.key(&**key);
    }
    (invocation, again)
}

/// What the release script's `outcome` (holds left, or below 0 for no hold) means, the
/// lock having gone to `next`; `retried` when an earlier send got no reply.
fn released(job: &ReleaseJob, outcome: i64, next: NextHolder, retried: bool) -> Released {
    match outcome {
        n if n < 0 && retried && job.op.finds_nothing_once_done => {
            // The first attempt's outcome is unknown (no reply): the hold is gone either
            // way, which is what the release is for.
            tracing::debug!(lock = %job.name, "dlock: retried release found the hold gone; counted as the first attempt's success");
            Released::Free(NextHolder::Anyone)
        }
        n if n < 0 => Released::NotHeld,
        0 => Released::Free(next),
        n => Released::StillHeld(u32::try_from(n).unwrap_or(u32::MAX)),
    }
}

/// The most calls one release sends to tell the waiters a search left untold: each call
/// passes over up to 64 registry entries of clients that are gone, so this covers
/// thousands of them; past it the waiters left fall back to their recheck.
const MAX_PASS_ON_CALLS: usize = 256;

/// After a release whose hand-off stopped at its bound with waiters left untold (the
/// registry's first entries were clients that are gone): the same call in mode `leave`
/// (the owner, which holds nothing now, leaves again) goes on from where it stopped,
/// until a waiter that can take the lock was told. Bounded work per call, but the live
/// waiters are told. A failure is logged: the waiters left fall back to their recheck.
async fn pass_on(
    backend: &Backend,
    timing: ReleaseTiming,
    job: &ReleaseJob,
    invocation: &crate::scripts::ScriptCall,
) {
    let Some(mode_at) = job.op.pass_on_mode else {
        return;
    };
    let mut leave = invocation.clone();
    leave.set_arg(mode_at, "leave");
    for _ in 0..MAX_PASS_ON_CALLS {
        let outcome = timing
            .retry
            .run(&job.name, None, || backend.invoke::<Reply>(&leave))
            .await;
        match outcome {
            Ok((_, Reply(_, _, true))) => {}
            Ok(_) => return,
            Err(error) => {
                tracing::debug!(lock = %job.name, %error, "dlock: telling the waiters behind gone clients failed; they recheck");
                return;
            }
        }
    }
    tracing::warn!(lock = %job.name, calls = MAX_PASS_ON_CALLS, "dlock: waiters left untold behind gone clients; they recheck");
}

/// A release that may give the lock to the client's next task, followed by `WAIT` for
/// `acks` (see `Backend::invoke_replicated`): that task's hold counts only once the
/// replicas confirmed it, as its own acquisition would. Unconfirmed, the task is not told
/// ([`NextHolder::Unconfirmed`]): it tries itself, and its confirmed try finds the hold.
async fn confirmed(
    backend: &Backend,
    name: &str,
    invocation: &crate::scripts::ScriptCall,
    acks: (u32, Duration),
) -> Result<Reply, CallError> {
    let given = |reply: &Reply| matches!(reply.1, NextHolder::ThisClient { .. });
    match backend
        .invoke_replicated::<Reply>(name, invocation, acks, given)
        .await
    {
        // Only a reply that gave the lock to this client's task is unconfirmed, and such a
        // reply never says `untold`: a release that gives its client's task the lock tells
        // no other waiter (release.lua), so no pass-on is lost here.
        Err(CallError::NotReplicated { .. }) => Ok(Reply(0, NextHolder::Unconfirmed, false)),
        other => other,
    }
}

/// Whether a release op is sent for the first time, or again: from the background after
/// an unlock that failed or was cancelled, or replayed on a new master, where an earlier
/// send may have been applied (retries within one call are marked by [`release`] itself).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Sending {
    First,
    Again,
}

/// A release script's answer: the holds left (or a negative number), for a freed lock
/// whom it goes to next, and whether passing it on left waiters untold (see [`pass_on`]).
struct Reply(i64, NextHolder, bool);

impl redis::FromRedisValue for Reply {
    fn from_redis_value(value: redis::Value) -> Result<Reply, redis::ParsingError> {
        let redis::Value::Array(mut items) = value else {
            return Ok(Reply(
                i64::from_redis_value(value)?,
                NextHolder::Anyone,
                false,
            ));
        };
        let untold = matches!(items.last(), Some(redis::Value::BulkString(last)) if last.as_slice() == b"untold");
        if untold {
            items.pop();
        }
        let unexpected =
            || format!("unexpected reply from a dlock release script: {items:?}").into();
        let (how, token) = match items.as_slice() {
            [redis::Value::Int(outcome)] => return Ok(Reply(*outcome, NextHolder::Anyone, untold)),
            [redis::Value::Int(0), how] => (how, None),
            [redis::Value::Int(0), how, redis::Value::Int(token)] => (how, Some(*token)),
            _ => return Err(unexpected()),
        };
        let fence = match token.map(u64::try_from) {
            None => None,
            Some(Ok(token)) => Some(Fence::new(token)),
            Some(Err(_)) => return Err(unexpected()),
        };
        let next = match (String::from_redis_value(how.clone())?.as_str(), fence) {
            ("given", fence) => NextHolder::ThisClient {
                others_wait: false,
                fence,
            },
            ("kept", fence) => NextHolder::ThisClient {
                others_wait: true,
                fence,
            },
            ("passed", None) => NextHolder::Another,
            _ => return Err(unexpected()),
        };
        Ok(Reply(0, next, untold))
    }
}

/// The queue of background releases, as [`run_background`] reads it; shared, so that the
/// task can be restarted on another runtime (see
/// [`Background`](crate::background::Background)) without losing jobs. It holds no
/// sender: the task ends once the client (every [`BackgroundReleases`]) is gone.
#[derive(Clone)]
pub(crate) struct ReleaseQueue {
    jobs: Arc<tokio::sync::Mutex<mpsc::UnboundedReceiver<ReleaseJob>>>,
    pending: Arc<Pending>,
}

impl ReleaseQueue {
    /// The next job, `None` once every sender is gone; for tests that read the queue.
    #[cfg(test)]
    pub(crate) fn try_next(&self) -> Option<ReleaseJob> {
        let job = self.jobs.try_lock().ok()?.try_recv().ok()?;
        self.pending.done();
        Some(job)
    }
}

/// Where the client's releases that nobody awaits go (dropped guards, acquisitions that
/// ended without a guard, hand-offs nobody here can use): the background release task,
/// which counts them until Redis answered each, so that a client can wait for them before
/// its process exits (`LockClient::shutdown`). Cheap to clone; never blocks.
#[derive(Clone)]
pub(crate) struct BackgroundReleases {
    jobs: mpsc::UnboundedSender<ReleaseJob>,
    pending: Arc<Pending>,
}

/// How many background releases are queued or running, a wake-up when that changes, and
/// how many ended without Redis' answer (given up after their retries).
#[derive(Default)]
struct Pending {
    count: AtomicUsize,
    changed: Notify,
    failed: AtomicUsize,
}

impl Pending {
    fn done(&self) {
        self.count.fetch_sub(1, Ordering::AcqRel);
        self.changed.notify_waiters();
    }
}

impl BackgroundReleases {
    /// A sender and the queue its jobs arrive in, for [`run_background`].
    pub(crate) fn new() -> (BackgroundReleases, ReleaseQueue) {
        let (jobs, queue) = mpsc::unbounded_channel();
        let pending = Arc::<Pending>::default();
        let queue = ReleaseQueue {
            jobs: Arc::new(tokio::sync::Mutex::new(queue)),
            pending: Arc::clone(&pending),
        };
        (BackgroundReleases { jobs, pending }, queue)
    }

    /// Queues `job`; works anywhere, also outside a runtime.
    pub(crate) fn send(&self, job: ReleaseJob) {
        self.pending.count.fetch_add(1, Ordering::AcqRel);
        if self.jobs.send(job).is_err() {
            self.pending.done();
        }
    }

    /// Completes once every job sent so far (and every one sent meanwhile) is done:
    /// answered by Redis, or given up after its retries.
    pub(crate) async fn settled(&self) {
        loop {
            let changed = self.pending.changed.notified();
            tokio::pin!(changed);
            changed.as_mut().enable();
            if self.pending.count.load(Ordering::Acquire) == 0 {
                return;
            }
            changed.await;
        }
    }

    /// How many jobs are queued or running.
    pub(crate) fn pending(&self) -> usize {
        self.pending.count.load(Ordering::Acquire)
    }

    /// How many guards' releases ended without Redis' answer since the last call (what
    /// they would have given back lapses with its lease); cleanups are not counted.
    pub(crate) fn take_failed(&self) -> usize {
        self.pending.failed.swap(0, Ordering::AcqRel)
    }
}

/// The background release task: one spawned release per job, until the client is gone.
pub(crate) async fn run_background(
    queue: ReleaseQueue,
    backend: Backend,
    timing: ReleaseTiming,
    metrics: Arc<Metrics>,
    log: Arc<ReleaseLog>,
) {
    let mut jobs = queue.jobs.lock().await;
    while let Some(job) = jobs.recv().await {
        let backend = backend.clone();
        let metrics = Arc::clone(&metrics);
        let log = Arc::clone(&log);
        let done = Done(Arc::clone(&queue.pending));
        tokio::spawn(async move {
            // A job comes here when its guard was dropped, or after a send whose outcome
            // is unknown (a failed or cancelled unlock): counted as sent before.
            log.record(&job);
            let outcome = release(&backend, timing, &job, NextInLine::NONE, Sending::Again).await;
            // Only a guard's hold is owed: a cleanup's tries may never have reached Redis
            // (an outage), and whatever one took lapses with its lease.
            if outcome.is_err() && job.counted {
                done.0.failed.fetch_add(1, Ordering::AcqRel);
            }
            let confirmed = matches!(outcome, Ok(Released::Free(_) | Released::StillHeld(_)));
            if job.counted {
                metrics.released(confirmed);
            }
            if let (false, Some(label)) = (confirmed, job.label) {
                observe::release_failed(label);
            }
            match outcome {
                Ok(Released::NotHeld) => {
                    tracing::debug!(lock = %job.name, "dlock: background release found the lock not held")
                }
                Ok(_) => {}
                Err(error) if job.counted => tracing::warn!(
                    lock = %job.name,
                    %error,
                    "dlock: background release failed; the lock stays until its lease expires"
                ),
                Err(error) => tracing::debug!(
                    lock = %job.name,
                    %error,
                    "dlock: cleanup of an acquisition that ended without a guard got no answer; a hold an unanswered try may have taken lapses with its lease"
                ),
            }
            drop(done);
        });
    }
}

/// Counts a background release done when dropped: when it finished, and when its task
/// was dropped with its runtime (it is not run again).
struct Done(Arc<Pending>);

impl Drop for Done {
    fn drop(&mut self) {
        self.0.done();
    }
}

/// How long releases are remembered for [`replay_after_failover`] at most: longer than a
/// Sentinel takes from promoting a replica to announcing it (about a second measured).
/// Shorter with a short command timeout: see [`replay_window`].
const MAX_REPLAY_WINDOW: Duration = Duration::from_secs(3);

/// How long a release stays replayable for a client whose memos live `memo_ttl`: half
/// of it, at most [`MAX_REPLAY_WINDOW`]. A replay sent at the end of the window and
/// retried for a command timeout still finds the first attempt's memo (the memo lives
/// 3 command timeouts + 1 s, half of that is 1.5 timeouts + 0.5 s), so a release that did
/// reach the new master is never applied twice.
pub(crate) fn replay_window(memo_ttl: Duration) -> Duration {
    (memo_ttl / 2).min(MAX_REPLAY_WINDOW)
}
/// At most this many releases are remembered; the oldest go first.
const REPLAY_CAPACITY: usize = 65_536;

/// Recent releases, a guard's and a cleanup's alike (a withdraw, a re-entry's undo,
/// sent by the acquisition that gave up or from the background), kept only where the
/// master can move under the client (Sentinel): see [`replay_after_failover`].
pub(crate) struct ReleaseLog {
    /// `None` when the deployment cannot move its master: nothing is recorded.
    entries: Option<Mutex<VecDeque<(Instant, ReleaseJob)>>>,
    window: Duration,
    /// Dropped with the log, which tells the replay task the client is gone.
    alive: watch::Sender<()>,
}

impl ReleaseLog {
    /// A log keeping releases for `window` (see [`replay_window`]), or none at all.
    pub(crate) fn new(enabled: bool, window: Duration) -> ReleaseLog {
        ReleaseLog {
            entries: enabled.then(Mutex::default),
            window,
            alive: watch::channel(()).0,
        }
    }

    /// Remembers a release as it is sent. Not once it is answered: the old master may
    /// apply it and answer after the client has moved to the new master, whose replica
    /// never got it, and then the replay has passed already (the simulator's
    /// `a_release_logged_once_answered`). It counts once when replayed (see
    /// [`ReleaseOp`]): where an attempt reached the new master, its memo or the absence
    /// of anything of the owner's answers; a release that reached no master is applied
    /// by the replay, as it was asked to be; one sent again after an unknown outcome is
    /// in the log twice, and its second replay finds nothing left to do.
    pub(crate) fn record(&self, job: &ReleaseJob) {
        let Some(entries) = &self.entries else {
            return;
        };
        let now = Instant::now();
        let mut entries = entries.lock().unwrap_or_else(|p| p.into_inner());
        while entries
            .front()
            .is_some_and(|(at, _)| now - *at > self.window)
            || entries.len() >= REPLAY_CAPACITY
        {
            entries.pop_front();
        }
        entries.push_back((now, job.clone()));
    }

    fn recent(&self) -> Vec<ReleaseJob> {
        let Some(entries) = &self.entries else {
            return Vec::new();
        };
        let now = Instant::now();
        let entries = entries.lock().unwrap_or_else(|p| p.into_inner());
        entries
            .iter()
            .filter(|(at, _)| now - *at <= self.window)
            .map(|(_, job)| job.clone())
            .collect()
    }
}

/// After the client moved to a new master, releases it recently sent to the old one again.
///
/// Between a replica's promotion and the announcement the client follows, releases still
/// go to the old master; the promoted replica keeps those locks until their leases run out
/// (30 s with the default watchdog), blocking everyone for nothing. The replay uses each
/// release's own operation id, so where the original release did reach the new master
/// (replicated before the promotion) its memo answers and nothing is applied twice. The
/// releases go one at a time, so the client's own traffic is not queued behind a burst.
///
/// Ends when the log is dropped (the client is gone).
pub(crate) async fn replay_after_failover(
    backend: Backend,
    timing: ReleaseTiming,
    log: Weak<ReleaseLog>,
) {
    let (mut generation, mut alive) = match log.upgrade() {
        Some(log) => (backend.generation(), log.alive.subscribe()),
        None => return,
    };
    loop {
        tokio::select! {
            moved = generation.changed() => if moved.is_err() { return },
            _ = alive.changed() => return,
        }
        let Some(jobs) = log.upgrade().map(|log| log.recent()) else {
            return;
        };
        tracing::debug!(
            releases = jobs.len(),
            "dlock: master moved; replaying recent releases on the new one"
        );
        for job in jobs {
            if let Err(error) =
                release(&backend, timing, &job, NextInLine::NONE, Sending::Again).await
            {
                tracing::debug!(lock = %job.name, %error, "dlock: replayed release failed");
            }
        }
    }
}
