//! Acquiring a grant of `n` permits: one try of the acquire script, then waiting for a
//! release, reclaim or capacity message, or for the earliest grant deadline the script
//! reported, and trying again.

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use super::release_ops::release_job;
use super::{Semaphore, SemaphorePermit};
use crate::error::{LockError, PermitsAsked, Result};
use crate::kind::LockKind;
use crate::lease::lease_millis;
use crate::lock::guard::LockGuard;
use crate::scripts::catalog::semaphore::sem_scripts;
use crate::scripts::ScriptCall;
use crate::sync::acquire::{self, Acquisition, Answer};
use crate::sync::attempt::{Reply, TryStep};
use crate::sync::held::{Held, HoldOwner};
use crate::sync::observe::{self, Label};
use crate::sync::wait::{NotYet, Waiter};

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
        let permits = self.checked_n(n)?;
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
        let grant = inner.new_owner_field();
        let mut step = TryStep::new(
            &**inner,
            &self.shared.name,
            Arc::clone(&grant),
            self.acquire_call(&grant, n, lease_ms, permits),
            |grant| vec![release_job(&self.shared, grant, inner.next_op())],
        )
        .replicated();
        let mut acquisition = NewGrant {
            semaphore: self,
            n,
            lease,
            lease_ms,
            renewal,
            permits,
            grant,
        };
        let permit =
            acquire::until_acquired(&mut acquisition, &mut step, &mut waiter, wait, started)
                .await?;
        tracing::debug!(semaphore = %self.shared.name, grant = %acquisition.grant, n, waited = ?started.elapsed(), "dlock: semaphore permits acquired");
        Ok(permit)
    }

    /// The acquire script's call for `grant` of `n` permits under the handle capacity
    /// `permits`: a retried call that was applied finds its grant.
    fn acquire_call(&self, grant: &str, n: u32, lease_ms: u64, permits: u32) -> ScriptCall {
        let mut call = sem_scripts().acquire.prepare_invoke();
        call.key(&self.shared.keys.grants)
            .key(&self.shared.keys.capacity)
            .arg(grant)
            .arg(n)
            .arg(lease_ms)
            .arg(permits)
            .arg(self.shared.client.inner.backend.publish_command());
        call
    }
}

/// A new grant's acquisition, in the shared loop. Its tries are confirmed by replicas
/// when the client asks for it, and its grant (if an unanswered call took it) is released
/// when the acquisition ends without a guard.
struct NewGrant<'a> {
    semaphore: &'a Semaphore,
    n: u32,
    lease: Duration,
    lease_ms: u64,
    renewal: Option<Duration>,
    /// The handle's capacity the current call was built for.
    permits: u32,
    grant: Arc<str>,
}

impl Acquisition for NewGrant<'_> {
    type Guard = LockGuard;

    fn name(&self) -> &str {
        &self.semaphore.shared.name
    }

    fn permits_asked(&self) -> Option<PermitsAsked> {
        Some(PermitsAsked {
            asked: self.n,
            capacity: self.permits,
        })
    }

    /// Every try reads the handle's capacity anew: a `set_permits` through this handle
    /// (or a clone) while it waits is this waiter's capacity too. A changed capacity is
    /// asked under a grant id of its own, so that the cleanup of the calls so far (if one
    /// may have been applied) releases only what those calls may have taken.
    fn next_call(&mut self) -> Result<Option<(ScriptCall, Arc<str>)>> {
        let permits = self.semaphore.checked_n(self.n)?;
        if permits == self.permits {
            return Ok(None);
        }
        self.permits = permits;
        self.grant = self.semaphore.shared.client.inner.new_owner_field();
        let call = self
            .semaphore
            .acquire_call(&self.grant, self.n, self.lease_ms, permits);
        Ok(Some((call, Arc::clone(&self.grant))))
    }

    fn answer(&mut self, sent_at: Instant, reply: Reply) -> Answer<LockGuard> {
        let shared = &self.semaphore.shared;
        match reply {
            Reply::Granted(_) => {
                let held = Arc::new(Held::new(
                    HoldOwner {
                        name: Arc::clone(&shared.name),
                        key: Arc::clone(&shared.key),
                        renew_script: &sem_scripts().renew,
                        field: Arc::clone(&self.grant),
                    },
                    self.renewal,
                    sent_at + self.lease,
                    Arc::clone(&shared.client.inner.metrics),
                ));
                let grant = Arc::clone(&self.grant);
                Answer::Acquired(LockGuard::new(shared.client.clone(), held, |op| {
                    release_job(shared, &grant, op)
                }))
            }
            Reply::Busy { wait_ms, .. } => Answer::NotYet(NotYet::Busy { ttl_ms: wait_ms }),
            // A `set_permits` of this handle raced the try (its message can wake this
            // waiter before the call returns and the handle adopts the new capacity): try
            // again under the handle's new capacity, once the call is done (it is one
            // command: bounded by the command timeout).
            Reply::Drift(_) if self.semaphore.permits() != self.permits => Answer::Again,
            Reply::Drift(_) if shared.setting.load(Ordering::Acquire) > 0 => {
                Answer::NotYet(NotYet::Busy { ttl_ms: 10 })
            }
            Reply::Drift(stored) => Answer::Refused(LockError::CapacityMismatch {
                name: shared.name.to_string(),
                handle: self.permits,
                stored,
            }),
            other => Answer::Refused(other.refusal(&shared.name, "acquire", LockKind::Semaphore)),
        }
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
