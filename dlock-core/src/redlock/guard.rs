//! [`RedLockGuard`]: a RedLock held on a majority, its renewal task and its release.

use std::future::Future;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use futures_util::future::join_all;
use futures_util::stream::{FuturesUnordered, StreamExt};
use tokio::sync::watch;
use tokio::task::AbortHandle;
use tokio::time::Instant;

use super::{drift, node, per_node_timeout, release_timeout, RedLock};
use crate::error::{LockError, LossReason, Result};
use crate::lease::lease_millis;
use crate::sync::observe::{self, HoldRecord, Label, Observed};
use crate::sync::release::Released;

/// A RedLock held on a majority of its servers, from [`RedLock`]'s acquisition methods.
///
/// Give it back with [`unlock`](RedLockGuard::unlock); dropping it releases on every
/// server in the background. Work that must not outlive the lock races
/// [`lost`](RedLockGuard::lost) or checks [`deadline`](RedLockGuard::deadline).
#[must_use = "dropping the guard releases the lock at once"]
pub struct RedLockGuard {
    hold: Arc<Hold>,
    /// The task that renews the lock (or, with an explicit lease, reports its expiry).
    task: AbortHandle,
    released: bool,
    /// Counts the lock as held until the guard is gone.
    record: Option<HoldRecord>,
}

/// What the guard shares with its task and its `lost()` futures.
struct Hold {
    lock: RedLock,
    /// The owner field of the round that won, the same on every server.
    field: Arc<str>,
    lease: Duration,
    deadline: Mutex<Instant>,
    /// `Some` once the lock is lost; dropped (closing the channel) once the guard and its
    /// task are gone.
    lost: watch::Sender<Option<LossReason>>,
    /// The acquisition's labels, for the loss's metric; set when the guard is handed out.
    label: OnceLock<Label>,
}

impl Hold {
    fn deadline(&self) -> Instant {
        *self.deadline.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn mark_lost(&self, reason: LossReason) {
        tracing::warn!(lock = %self.lock.name, %reason, "dlock: RedLock lost");
        let first = self.lost.send_replace(Some(reason)).is_none();
        if let (true, Some(label)) = (first, self.label.get()) {
            observe::lost(*label);
        }
    }
}

impl std::fmt::Debug for RedLockGuard {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RedLockGuard")
            .field("name", &self.hold.lock.name)
            .field("owner", &self.hold.field)
            .field("deadline", &self.hold.deadline())
            .field("lost", &self.is_lost())
            .finish()
    }
}

impl RedLockGuard {
    pub(super) fn new(
        lock: RedLock,
        field: Arc<str>,
        lease: Duration,
        renewed: bool,
        deadline: Instant,
    ) -> RedLockGuard {
        let hold = Arc::new(Hold {
            lock,
            field,
            lease,
            deadline: Mutex::new(deadline),
            lost: watch::channel(None).0,
            label: OnceLock::new(),
        });
        let task = tokio::spawn(watch_hold(Arc::clone(&hold), renewed)).abort_handle();
        RedLockGuard {
            hold,
            task,
            released: false,
            record: None,
        }
    }

    /// The span around the attribute's body under this guard.
    pub(crate) fn hold_span(&self) -> tracing::Span {
        observe::hold_span(&self.hold.lock.name, self.hold.label.get().copied())
    }

    /// The lock's name.
    pub fn name(&self) -> &str {
        &self.hold.lock.name
    }

    /// Runs `future` as it is. Every guard has a `scope` (the attribute runs its body in
    /// it), but a RedLock is not reentrant: an acquisition of the same RedLock inside waits
    /// for this guard like any other. There is no `fencing_token` either: a RedLock's
    /// servers keep no common counter to mint one from.
    ///
    /// ```compile_fail
    /// # fn f(guard: dlock::redlock::RedLockGuard) {
    /// let token = guard.fencing_token(); // no such method: a RedLock mints no tokens
    /// # }
    /// ```
    pub fn scope<F: Future>(&self, future: F) -> F {
        future
    }

    /// Releases the lock on every server, the ones that did not answer during the
    /// acquisition included.
    ///
    /// The same contract as every guard's `unlock` ([`LockGuard::unlock`](crate::LockGuard::unlock)):
    /// `Ok(())` when a majority still held it and gave it back, [`LockError::NotHeld`]
    /// when it had already expired or was gone on too many servers. A server that cannot
    /// be reached gets the release again in the background.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> dlock::Result<()> {
    /// # let servers: Vec<_> = (0..3).map(|_| dlock_tests::RedisServer::start()).collect();
    /// # let urls: Vec<String> = servers.iter().map(|s| s.url()).collect();
    /// # let redlock = dlock::redlock::RedLockClient::connect(dlock::LockClient::builder(), &urls).await?;
    /// use std::time::Duration;
    ///
    /// let guard = redlock.lock("report").lock_with_lease(Duration::from_millis(50)).await?;
    /// tokio::time::sleep(Duration::from_millis(100)).await;
    /// let expired = guard.unlock().await; // expired meanwhile: not held
    /// assert!(matches!(expired, Err(dlock::LockError::NotHeld { .. })));
    /// # Ok(())
    /// # }
    /// ```
    ///
    /// # Errors
    ///
    /// [`LockError::NotHeld`] as above; a Redis error when too many servers could not be
    /// reached for the answer to be known (the error of one of them), the releases being
    /// retried in the background.
    ///
    /// # Cancel safety
    ///
    /// If cancelled, the servers whose release was not confirmed get it in the
    /// background (the guard's drop).
    pub async fn unlock(mut self) -> Result<()> {
        self.task.abort();
        let lock = self.hold.lock.clone();
        let field = Arc::clone(&self.hold.field);
        // The servers connected now, once: one that connects meanwhile never had the
        // hold, and the answers below are matched to these by position.
        let servers: Vec<_> = lock.nodes().collect();
        let jobs: Vec<_> = servers
            .iter()
            .map(|(_, keys)| node::release_of(&lock.name, keys, &field))
            .collect();
        // Every job that has not answered is still owed: a cancelled unlock hands them to
        // the background through `Drop`, which sees `released` false. Each server gets the
        // round's per-server timeout, not its command timeout, and the unlock returns as
        // soon as its answer is known: one dead server of five must not make every unlock
        // wait for it (its release goes on in the background).
        let lease = self.hold.lease;
        let mut calls: FuturesUnordered<_> = servers
            .iter()
            .zip(&jobs)
            .enumerate()
            .map(|(i, ((node, _), job))| async move {
                (
                    i,
                    node::release(node, job, release_timeout(node, lease)).await,
                )
            })
            .collect();
        let (nodes, quorum) = (lock.client.nodes(), lock.client.quorum());
        let mut answered = vec![false; nodes];
        let (mut held, mut gone, mut first_error) = (0, 0, None);
        while let Some((i, answer)) = calls.next().await {
            match answer {
                Ok(Released::Free(_) | Released::StillHeld(_)) => held += 1,
                Ok(Released::NotHeld) => gone += 1,
                Err(error) => {
                    tracing::warn!(lock = %lock.name, %error, "dlock: RedLock release failed on a server; retrying in the background");
                    first_error.get_or_insert(error);
                    continue;
                }
            }
            answered[i] = true;
            if held >= quorum || gone > nodes - quorum {
                break;
            }
        }
        drop(calls);
        self.released = true;
        for ((job, answered), (node, _)) in jobs.into_iter().zip(answered).zip(&servers) {
            if !answered {
                node.inner.release_in_background(job);
            }
        }
        // Released once the hold is gone from a majority: given back there, or never
        // written (a round ends once a majority granted) or expired there, as long as no
        // majority lacked it (then it was lost before this call). Unknown only when too
        // few servers answered for either.
        let outcome = match first_error {
            _ if held >= quorum => Ok(()),
            _ if gone > nodes - quorum => Err(LockError::NotHeld {
                name: lock.name.to_string(),
            }),
            _ if held + gone >= quorum => Ok(()),
            Some(error) => Err(error.into_lock_error(&lock.name, "release")),
            None => Err(LockError::NotHeld {
                name: lock.name.to_string(),
            }),
        };
        if let (Err(_), Some(label)) = (&outcome, self.hold.label.get()) {
            observe::release_failed(*label);
        }
        outcome
    }

    /// Completes with [`LockError::Lost`] if the lock is lost while this guard holds it: a
    /// majority of the servers answered a renewal with "not held", or the deadline passed
    /// without a renewal confirmed by a majority (servers down or too slow), or (explicit
    /// lease) the lease ran out. Never completes once the guard is released.
    ///
    /// The returned future owns what it needs, so it can race the critical section.
    pub fn lost(&self) -> impl Future<Output = LockError> + Send + 'static + use<> {
        let mut changes = self.hold.lost.subscribe();
        let name = self.hold.lock.name.to_string();
        async move {
            loop {
                if let Some(reason) = *changes.borrow_and_update() {
                    return LockError::Lost { name, reason };
                }
                if changes.changed().await.is_err() {
                    // Released: the lock can no longer be lost.
                    std::future::pending::<()>().await;
                }
            }
        }
    }

    /// Whether the lock is known to be lost, or its deadline has passed.
    pub fn is_lost(&self) -> bool {
        self.hold.lost.borrow().is_some() || Instant::now() >= self.hold.deadline()
    }

    /// The end of validity on the monotonic clock: the start of the last round a majority
    /// confirmed (acquisition or renewal) + lease − clock-drift allowance. Until then no
    /// other owner can hold a majority, under the clock assumptions in
    /// [`RedLockClient`](crate::redlock::RedLockClient#what-it-guarantees-and-what-it-does-not).
    pub fn deadline(&self) -> std::time::Instant {
        self.hold.deadline().into_std()
    }
}

impl Observed for RedLockGuard {
    fn observe(&mut self, hold: HoldRecord) {
        let _ = self.hold.label.set(hold.label());
        self.record = Some(hold);
    }
}

impl Drop for RedLockGuard {
    fn drop(&mut self) {
        self.task.abort();
        if !self.released {
            tracing::debug!(lock = %self.hold.lock.name, "dlock: RedLock guard dropped; releasing in the background");
            self.hold
                .lock
                .release_everywhere_in_background(&self.hold.field);
        }
    }
}

/// The guard's task: renews every third of the lease (when `renewed`), and marks the hold
/// lost when a majority says it is gone or when its deadline passes unconfirmed.
async fn watch_hold(hold: Arc<Hold>, renewed: bool) {
    let lease = hold.lease;
    let interval = lease / 3;
    // Asked again sooner when a renewal did not reach a majority, while validity lasts.
    let retry = (lease / 12).max(Duration::from_millis(1));
    let Ok(lease_ms) = lease_millis("lease", lease) else {
        return;
    };
    let mut next = Instant::now() + interval;
    loop {
        let deadline = hold.deadline();
        if !renewed {
            tokio::time::sleep_until(deadline).await;
            hold.mark_lost(LossReason::LeaseExpired);
            return;
        }
        tokio::select! {
            () = tokio::time::sleep_until(next) => {}
            () = tokio::time::sleep_until(deadline) => {
                hold.mark_lost(LossReason::LeaseExpired);
                return;
            }
        }
        let lock = &hold.lock;
        let start = Instant::now();
        let servers: Vec<_> = lock.nodes().collect();
        let answers = join_all(servers.iter().map(|(node, keys)| {
            node::bounded(
                node,
                per_node_timeout(node, lease),
                node::renew(node, keys, &hold.field, lease_ms),
            )
        }))
        .await;
        let elapsed = start.elapsed();
        let confirmed = answers.iter().filter(|a| matches!(a, Ok(true))).count();
        let gone = answers.iter().filter(|a| matches!(a, Ok(false))).count();
        let quorum = lock.client.quorum();
        if confirmed >= quorum && elapsed + drift(lease) < lease {
            let renewed_until = start + (lease - drift(lease));
            {
                let mut deadline = hold.deadline.lock().unwrap_or_else(|p| p.into_inner());
                *deadline = renewed_until.max(*deadline);
            }
            next = start + interval;
            // Servers where the hold is gone (restarted without their data, connected
            // since the acquisition) take it again while a majority confirms it: no other
            // owner can hold a majority now, and each server that holds it again is one
            // more that may fail before the lock is lost.
            let lost_on: Vec<_> = servers
                .iter()
                .zip(&answers)
                .filter(|(_, answer)| matches!(answer, Ok(false)))
                .map(|(server, _)| *server)
                .collect();
            if !lost_on.is_empty() {
                let taken = join_all(lost_on.iter().map(|(node, keys)| {
                    node::bounded(
                        node,
                        per_node_timeout(node, lease),
                        node::acquire(node, keys, &hold.field, lease_ms),
                    )
                }))
                .await;
                let again = taken
                    .iter()
                    .filter(|t| matches!(t, Ok(reply) if reply.is_granted()))
                    .count();
                tracing::debug!(lock = %lock.name, gone = lost_on.len(), again, "dlock: RedLock hold taken again where it was gone");
            }
        } else if gone > lock.client.nodes() - quorum {
            // A majority no longer has this owner's hold: it can never be confirmed again.
            hold.mark_lost(LossReason::NotHeldOnRenewal);
            return;
        } else {
            tracing::debug!(lock = %lock.name, confirmed, gone, "dlock: RedLock renewal not confirmed by a majority; retrying");
            next = Instant::now() + retry;
        }
    }
}
