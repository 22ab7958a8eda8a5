//! Acquiring a [`FairLock`]: a re-entry inside a live scope, or a new waiter with its own
//! queue entry in Redis, kept alive by its tries until it is the head and the lock is free.

use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use super::release_ops::{release_job, FairRelease};
use super::FairLock;
use crate::error::{LossReason, Result};
use crate::kind::LockKind;
use crate::lease::{lease_millis, reentry_lease, ReentryLease};
use crate::lock::guard::LockGuard;
use crate::lock::scripts::{acquire_call, AcquireArgs};
use crate::redis::CallError;
use crate::scripts::catalog::fair::fair_scripts;
use crate::scripts::catalog::lock::scripts;
use crate::sync::acquire::{self, Acquisition, Answer};
use crate::sync::attempt::{Reply, TryStep};
use crate::sync::held::{Held, HoldOwner};
use crate::sync::observe::{self, Label};
use crate::sync::owner;
use crate::sync::release::ReleaseJob;
use crate::sync::verbs::Acquire;
use crate::sync::wait::{NotYet, WaitPolicy, Waiter};

/// The acquisition, traced and measured (`sync::observe`).
impl Acquire for FairLock {
    type Guard = LockGuard;

    fn default_wait(&self) -> Option<Duration> {
        self.client.inner.settings.default_wait
    }

    async fn acquire(
        &self,
        wait: Option<Duration>,
        lease: Option<Duration>,
        template: Option<&'static str>,
    ) -> Result<LockGuard> {
        let label = Label {
            kind: "fair_lock",
            template,
        };
        let acquisition = self.acquire_unobserved(wait, lease);
        observe::acquisition(label, &self.name, wait, acquisition).await
    }
}

impl FairLock {
    /// The acquisition: a re-entry inside a live scope of this lock, otherwise a new
    /// waiter. `wait: None` waits forever; `lease: None` uses the watchdog.
    async fn acquire_unobserved(
        &self,
        wait: Option<Duration>,
        lease: Option<Duration>,
    ) -> Result<LockGuard> {
        self.check_name()?;
        if let Some(lease) = lease {
            lease_millis("lease", lease)?;
        }
        let entry_ms = self.entry_millis()?;
        let inner = &self.client.inner;
        inner.keep_running();
        let started = Instant::now();
        // A wait too long to represent is a wait without end.
        let give_up_at = wait.and_then(|wait| started.checked_add(wait));

        if let Some(outer) = owner::current_hold(inner.id_bits(), &self.keys.key)
            && let Some(guard) = self.reenter(&outer, lease, started).await?
        {
            return Ok(guard);
        }
        // The outer hold turned out to be gone (it is reported lost now): the scope
        // owns nothing, so this is a new waiter.
        self.acquire_new(wait, lease, entry_ms, started, give_up_at)
            .await
    }

    /// A re-entry under `outer`'s owner, without queueing (the owner holds the lock): one
    /// more hold, or `None` when Redis no longer has the outer hold. Same hash layout and
    /// lease rule as the reentrant lock, so its acquire script does it; the release is the
    /// fair one, so that whichever hold goes last wakes the head of the queue.
    async fn reenter(
        &self,
        outer: &Arc<Held>,
        lease: Option<Duration>,
        started: Instant,
    ) -> Result<Option<LockGuard>> {
        let inner = &self.client.inner;
        let watchdog = inner.settings.watchdog_timeout;
        let ReentryLease {
            millis: lease_ms,
            renewal,
            lease,
        } = reentry_lease(lease, outer.renewal, watchdog)?;
        let op = inner.next_op();
        let field = Arc::clone(&outer.field);
        let marker = self.keys.marker(&field, op);
        // The lock's acquire script, as a re-entry (see `lock/scripts/acquire.lua`).
        let call = acquire_call(
            &self.keys,
            &field,
            AcquireArgs {
                lease_ms,
                fence: inner.settings.fence_arg(),
                registry_ms: 0,
                publish: inner.backend.publish_command(),
                reentry: Some((&marker, inner.settings.memo_ttl().as_millis() as u64)),
            },
        );
        let mut step = TryStep::new(&**inner, &self.name, Arc::clone(&field), call, |field| {
            vec![self.job(field, FairRelease::Undo { op })]
        })
        .replicated();
        let (sent_at, reply) = match step.run(None).await {
            Ok(outcome) => outcome,
            Err(error) => {
                step.give_up().await;
                inner.metrics.acquire_failed();
                return Err(error.into_lock_error(&self.name, "acquire"));
            }
        };
        match reply {
            Reply::Granted(_) => {
                step.granted();
                let deadline = lease.map_or_else(|| outer.deadline(), |lease| sent_at + lease);
                // A re-entry shares its outer hold's token: the script mints none for it.
                let held = Held::new(
                    self.hold_owner(&field),
                    renewal,
                    deadline,
                    Arc::clone(&inner.metrics),
                )
                .with_fence(outer.fence);
                inner.metrics.acquired(started.elapsed());
                tracing::debug!(lock = %self.name, owner = %field, "dlock: re-entered (fair)");
                Ok(Some(self.guard(Arc::new(held))))
            }
            Reply::NotHeld | Reply::Busy { .. } => {
                outer.mark_lost(LossReason::NotHeldOnCheck);
                Ok(None)
            }
            other => {
                step.give_up().await;
                inner.metrics.acquire_failed();
                Err(other.refusal(&self.name, "acquire", LockKind::Fair))
            }
        }
    }

    /// A new waiter: one queue entry of its own, renewed by every try (the try is the
    /// heartbeat), woken on its client's channel by a message naming it from the
    /// release, purge or leave that makes it the head of a free lock, and never napping
    /// longer than a third of its entry timeout. Leaves the queue when it gives up.
    async fn acquire_new(
        &self,
        wait: Option<Duration>,
        lease: Option<Duration>,
        entry_ms: u64,
        started: Instant,
        give_up_at: Option<Instant>,
    ) -> Result<LockGuard> {
        let inner = &self.client.inner;
        let settings = &inner.settings;
        let renewal = lease.is_none().then_some(settings.watchdog_timeout);
        let lease = lease.unwrap_or(settings.watchdog_timeout);
        let lease_ms = lease_millis("lease", lease)?;
        let patient = wait != Some(Duration::ZERO);
        let field = inner.new_owner_field();
        let channel = format!("{}{}", self.fair.wake_prefix, inner.id_text);
        let mut call = fair_scripts().acquire.prepare_invoke();
        call.key(&self.keys.key)
            .key(&self.fair.queue)
            .key(&self.fair.deadlines)
            .key(&*self.keys.fence)
            .key(&self.keys.naps)
            .arg(lease_ms)
            .arg(&*field)
            .arg(if patient { "wait" } else { "try" })
            .arg(entry_ms)
            .arg(&self.fair.wake_prefix)
            .arg(inner.backend.publish_command())
            .arg(inner.settings.fence_arg());
        let op = inner.next_op();
        // Its queue entry, and any hold an unanswered try may have taken, go when it ends
        // without a guard. A try that does not wait never queues.
        let mut step = TryStep::new(&**inner, &self.name, Arc::clone(&field), call, |field| {
            vec![self.job(field, FairRelease::Leave { op })]
        })
        .replicated()
        .waiting(patient, None);
        let mut acquisition = NewWaiter {
            lock: self,
            field: &field,
            lease,
            renewal,
        };
        // Adopts the channel while the client's other waiters keep it subscribed: a
        // wake-up is heard from the first try on. A wake-up for an owner of this client
        // that no longer waits is dropped: it only asked that owner to try, and the
        // owner's own leave (its `TryStep`'s cleanup) wakes the next head.
        let channels = [(channel.as_str(), None)];
        let mut waiter = Waiter::for_owner(
            &inner.pubsub,
            &channels,
            &field,
            WaitPolicy {
                // Every try renews the entry: at a third of its timeout, two tries can be
                // lost or late before a live waiter is taken for dead.
                recheck: settings
                    .max_wait_recheck
                    .min(Duration::from_millis(entry_ms) / 3),
                longest_recheck: Duration::from_millis(entry_ms) / 3,
                ..settings.wait_policy(give_up_at, patient)
            },
        );
        let guard =
            acquire::until_acquired(&mut acquisition, &mut step, &mut waiter, wait, started)
                .await?;
        tracing::debug!(lock = %self.name, owner = %field, waited = ?started.elapsed(), "dlock: acquired (fair)");
        Ok(guard)
    }

    /// How long the lock stays held as far as Redis knows, once the waiter's client
    /// listens on its wake channel; `None` when it is free. What the waiter may have
    /// missed while it did not listen:
    /// - a release, which deleted the hash (the last hold goes with it) and woke the
    ///   head, which alone may take the lock then: found free, the waiter tries;
    /// - the wake-up of a waiter told to sleep past the lease of a hold taken since (a
    ///   new holder with a shorter lease, which may die holding it): the waiter sleeps
    ///   no longer than that hold's remaining time.
    ///
    /// Otherwise the busy answer's nap stands (it ends when the head's entry can lapse).
    /// One `PTTL` instead of a second busy try; an error answers `None`, and the waiter
    /// tries.
    async fn still_held_for(&self) -> Option<Duration> {
        let pttl: std::result::Result<i64, CallError> = self
            .client
            .inner
            .backend
            .query(redis::cmd("PTTL").arg(&*self.key))
            .await;
        match pttl {
            // A hold without an expiry (not one dlock wrote): its nap stands.
            Ok(-1) => Some(Duration::MAX),
            Ok(ms) => u64::try_from(ms).ok().map(Duration::from_millis),
            Err(_) => None,
        }
    }

    /// The guard of `held`, given back with the fair release (which wakes the head).
    fn guard(&self, held: Arc<Held>) -> LockGuard {
        LockGuard::new(self.client.clone(), Arc::clone(&held), |op| {
            self.job(&held.field, FairRelease::Hold { op })
        })
    }

    fn job(&self, field: &str, kind: FairRelease) -> ReleaseJob {
        release_job(&self.name, &self.keys, &self.fair, field, kind)
    }

    /// Who holds a hold of this lock taken by the owner `field`: renewed by the reentrant
    /// lock's renew script, whose hash layout the fair lock shares.
    fn hold_owner(&self, field: &Arc<str>) -> HoldOwner {
        HoldOwner {
            name: Arc::clone(&self.name),
            key: Arc::clone(&self.key),
            renew_script: &scripts().renew,
            field: Arc::clone(field),
        }
    }
}

/// A new waiter's acquisition of a [`FairLock`], in the shared loop.
struct NewWaiter<'a> {
    lock: &'a FairLock,
    field: &'a Arc<str>,
    lease: Duration,
    renewal: Option<Duration>,
}

impl Acquisition for NewWaiter<'_> {
    type Guard = LockGuard;

    fn name(&self) -> &str {
        &self.lock.name
    }

    fn answer(&mut self, sent_at: Instant, reply: Reply) -> Answer<LockGuard> {
        match reply {
            Reply::Granted(fence) => {
                let held = Held::new(
                    self.lock.hold_owner(self.field),
                    self.renewal,
                    sent_at + self.lease,
                    Arc::clone(&self.lock.client.inner.metrics),
                )
                .with_fence(fence);
                Answer::Acquired(self.lock.guard(Arc::new(held)))
            }
            Reply::Busy { wait_ms, .. } => Answer::NotYet(NotYet::Busy { ttl_ms: wait_ms }),
            other => Answer::Refused(other.refusal(&self.lock.name, "acquire", LockKind::Fair)),
        }
    }

    async fn missed(&self, nap_until: Instant) -> Option<Instant> {
        let held_for = self.lock.still_held_for().await?;
        Some(Instant::now().checked_add(held_for).unwrap_or(nap_until))
    }
}
