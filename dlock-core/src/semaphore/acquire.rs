//! Acquiring a grant of `n` permits: one try of the acquire script, then waiting for a
//! release, reclaim or capacity message, or for the earliest grant deadline the script
//! reported, and trying again.

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use super::release_ops::release_job;
use super::{Semaphore, SemaphorePermit};
use crate::error::{LockError, Result};
use crate::kind::LockKind;
use crate::lease::lease_millis;
use crate::lock::guard::LockGuard;
use crate::semaphore::scripts::sem_scripts;
use crate::sync::attempt::{Reply, TryStep};
use crate::sync::held::{Held, HoldOwner};
use crate::sync::observe::{self, Label};
use crate::sync::release::ReleaseJob;
use crate::sync::wait::{GiveUp, NotYet, Waiter};

impl Semaphore {
    /// A grant of `n` permits, traced and measured (`sync::observe`); every public way to
    /// take permits comes here, and the attribute too (with its key `template`).
    pub(crate) async fn acquire_permits(
        &self,
        n: u32,
        wait: Option<Duration>,
        lease: Option<Duration>,
        template: Option<&'static str>,
    ) -> Result<SemaphorePermit> {
        let label = Label {
            kind: "semaphore",
            template,
        };
        let acquisition = self.acquire_unobserved(n, wait, lease);
        observe::acquisition(label, &self.shared.name, wait, acquisition)
            .await
            .map(|guard| SemaphorePermit::new(guard, n))
    }

    /// A grant of `n` permits. `wait: None` waits forever; `lease: None` uses the
    /// watchdog.
    async fn acquire_unobserved(
        &self,
        n: u32,
        wait: Option<Duration>,
        lease: Option<Duration>,
    ) -> Result<LockGuard> {
        self.checked_n(n)?;
        let inner = &self.shared.client.inner;
        let settings = &inner.settings;
        let renewal = lease.is_none().then_some(settings.watchdog_timeout);
        let lease = lease.unwrap_or(settings.watchdog_timeout);
        let lease_ms = lease_millis("lease", lease)?;
        inner.keep_running();
        let started = Instant::now();
        // A wait too long to represent is a wait without end.
        let give_up_at = wait.and_then(|wait| started.checked_add(wait));
        // Every message may be the one that frees enough permits for this waiter, and one
        // release can admit several waiters: each re-checks on every message.
        let mut waiter = Waiter::new(
            &inner.pubsub,
            &self.shared.keys.grants,
            settings.wait_policy(give_up_at, wait != Some(Duration::ZERO)),
        )
        .woken_by_every_message();
        // The capacity a call was built for, its grant id and the step that runs it;
        // rebuilt, with a grant id of its own, when the handle's capacity changes (the
        // replaced step's cleanup, if a call of it may have been applied, then releases
        // only what that step may have taken).
        let mut current: Option<(u32, Arc<str>, TryStep<'_, _>)> = None;
        loop {
            // Every try reads the handle's capacity anew: a `set_permits` through this
            // handle (or a clone) while it waits is this waiter's capacity too.
            let permits = self.checked_n(n)?;
            if current.as_ref().is_none_or(|(built, ..)| *built != permits) {
                let grant = inner.new_owner_field();
                let mut step = self.try_step(Arc::clone(&grant), n, lease_ms, permits);
                if current.is_none() {
                    step.plan_first_wait(&mut waiter);
                }
                current = Some((permits, grant, step));
            }
            let Some((_, grant, step)) = current.as_mut() else {
                continue;
            };
            let not_yet = match step.run(give_up_at).await {
                Ok((sent_at, Reply::Granted(_))) => {
                    step.granted();
                    let held = Arc::new(Held::new(
                        HoldOwner {
                            name: Arc::clone(&self.shared.name),
                            key: Arc::clone(&self.shared.key),
                            renew_script: &sem_scripts().renew,
                            field: Arc::clone(grant),
                        },
                        renewal,
                        sent_at + lease,
                        Arc::clone(&inner.metrics),
                    ));
                    inner.metrics.acquired(started.elapsed());
                    tracing::debug!(semaphore = %self.shared.name, %grant, n, waited = ?started.elapsed(), "dlock: semaphore permits acquired");
                    return Ok(LockGuard::new(self.shared.client.clone(), held, |op| {
                        release_job(&self.shared, grant, op)
                    }));
                }
                Ok((_, Reply::Busy { wait_ms, .. })) => NotYet::Busy { ttl_ms: wait_ms },
                // A `set_permits` of this handle raced the try (its message can wake
                // this waiter before the call returns and the handle adopts the new
                // capacity): try again under the handle's new capacity, once the call
                // is done (it is one command: bounded by the command timeout).
                Ok((_, Reply::Drift(_))) if self.permits() != permits => continue,
                Ok((_, Reply::Drift(_))) if self.shared.setting.load(Ordering::Acquire) > 0 => {
                    NotYet::Busy { ttl_ms: 10 }
                }
                Ok((_, Reply::Drift(stored))) => {
                    step.give_up().await;
                    inner.metrics.acquire_failed();
                    return Err(LockError::CapacityMismatch {
                        name: self.shared.name.to_string(),
                        handle: permits,
                        stored,
                    });
                }
                Ok((_, other)) => {
                    step.give_up().await;
                    inner.metrics.acquire_failed();
                    return Err(other.refusal(&self.shared.name, "acquire", LockKind::Semaphore));
                }
                Err(error) => NotYet::Unavailable(error),
            };
            match waiter.wait(not_yet).await {
                Ok(_) => {
                    // Spaced out when many tasks of the client wait.
                    step.plan_next_wait(&mut waiter);
                }
                Err(GiveUp::TimedOut) => {
                    step.give_up().await;
                    inner.metrics.timed_out();
                    return Err(LockError::Timeout {
                        name: self.shared.name.to_string(),
                        waited: wait.unwrap_or_default(),
                    });
                }
                Err(GiveUp::Unavailable(error)) => {
                    step.give_up().await;
                    inner.metrics.acquire_failed();
                    return Err(error.into_lock_error(&self.shared.name, "acquire"));
                }
            }
        }
    }

    /// The tries of `grant` for `n` permits under the handle capacity `permits`: the
    /// acquire script, confirmed by replicas when the client asks for it, whose grant
    /// (if an unanswered call took it) is released when the acquisition ends without a
    /// guard. A retried call that was applied finds its grant.
    fn try_step(
        &self,
        grant: Arc<str>,
        n: u32,
        lease_ms: u64,
        permits: u32,
    ) -> TryStep<'_, impl Fn() -> Vec<ReleaseJob> + '_> {
        let inner = &self.shared.client.inner;
        let mut call = sem_scripts().acquire.prepare_invoke();
        call.key(&self.shared.keys.grants)
            .key(&self.shared.keys.capacity)
            .arg(&*grant)
            .arg(n)
            .arg(lease_ms)
            .arg(permits)
            .arg(inner.backend.publish_command());
        TryStep::new(&**inner, &self.shared.name, call, move || {
            vec![release_job(&self.shared, &grant, inner.next_op())]
        })
        .replicated()
    }
}

impl Semaphore {
    /// The handle's capacity, when `n` permits can ever be granted under it.
    fn checked_n(&self, n: u32) -> Result<u32> {
        let permits = self.checked_permits()?;
        if n == 0 || n > permits {
            return Err(self.invalid_permits(n, permits));
        }
        Ok(permits)
    }
}
