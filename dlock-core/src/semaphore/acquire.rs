//! Acquiring a grant of `n` permits: one try of the acquire script, then waiting for a
//! release, reclaim or capacity message, or for the earliest grant deadline the script
//! reported, and trying again.

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use super::release_ops::release_job;
use super::Semaphore;
use crate::error::{LockError, Result};
use crate::lease::lease_millis;
use crate::lock::guard::LockGuard;
use crate::redis::CallError;
use crate::scripts::sem_scripts;
use crate::sync::held::{Held, HoldOwner};
use crate::sync::observe;
use crate::sync::release::{self, HandOff, ReleaseJob};
use crate::sync::wait::{GiveUp, NotYet, WaitPolicy, Waiter};

impl Semaphore {
    /// A grant of `n` permits, traced and measured (`sync::observe`).
    pub(super) async fn acquire_permits(
        &self,
        n: u32,
        wait: Option<Duration>,
        lease: Option<Duration>,
    ) -> Result<LockGuard> {
        let acquisition = self.acquire_unobserved(n, wait, lease);
        observe::acquisition("semaphore", &self.shared.name, wait, acquisition).await
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
        let mut attempt = Attempt {
            sem: self,
            grant: format!("{}:{}", inner.id, inner.next_owner()).into(),
            maybe_applied: false,
        };
        // Every message may be the one that frees enough permits for this waiter, and one
        // release can admit several waiters: each re-checks on every message.
        let mut waiter = Waiter::new(
            &inner.pubsub,
            &self.shared.keys.grants,
            None,
            WaitPolicy {
                recheck: settings.max_wait_recheck,
                failover_wait: settings.failover_wait,
                give_up_at,
                patient: wait != Some(Duration::ZERO),
            },
        )
        .woken_by_every_message();
        loop {
            // Every try reads the handle's capacity anew: a `set_permits` through this
            // handle (or a clone) while it waits is this waiter's capacity too.
            let permits = match self.checked_n(n) {
                Ok(permits) => permits,
                Err(error) => {
                    attempt.leave().await;
                    return Err(error);
                }
            };
            let not_yet = match attempt.run(n, lease_ms, permits, give_up_at).await {
                Ok((sent_at, Reply::Granted)) => {
                    attempt.maybe_applied = false;
                    let held = Arc::new(Held::new(
                        HoldOwner {
                            name: Arc::clone(&self.shared.name),
                            key: Arc::clone(&self.shared.key),
                            renew_script: &sem_scripts().renew,
                            field: Arc::clone(&attempt.grant),
                        },
                        renewal,
                        sent_at + lease,
                        Arc::clone(&inner.metrics),
                    ));
                    inner.metrics.acquired(started.elapsed());
                    tracing::debug!(semaphore = %self.shared.name, grant = %attempt.grant, n, waited = ?started.elapsed(), "dlock: semaphore permits acquired");
                    let grant = Arc::clone(&attempt.grant);
                    return Ok(LockGuard::new(self.shared.client.clone(), held, |op| {
                        release_job(&self.shared, &grant, op)
                    }));
                }
                Ok((_, Reply::Short(ttl_ms))) => NotYet::Busy { ttl_ms },
                // A `set_permits` of this handle raced the try (its message can wake
                // this waiter before the call returns and the handle adopts the new
                // capacity): try again under the handle's new capacity, once the call
                // is done (it is one command: bounded by the command timeout).
                Ok((_, Reply::Drift(_))) if self.permits() != permits => continue,
                Ok((_, Reply::Drift(_))) if self.shared.setting.load(Ordering::Acquire) > 0 => {
                    NotYet::Busy { ttl_ms: 10 }
                }
                Ok((_, Reply::Drift(stored))) => {
                    inner.metrics.acquire_failed();
                    return Err(LockError::CapacityMismatch {
                        name: self.shared.name.to_string(),
                        handle: permits,
                        stored,
                    });
                }
                Ok((_, Reply::WrongType(found))) => {
                    inner.metrics.acquire_failed();
                    return Err(self.wrong_type(found));
                }
                Err(error) => NotYet::Unavailable(error),
            };
            match waiter.wait(not_yet).await {
                Ok(()) => {}
                Err(GiveUp::TimedOut) => {
                    inner.metrics.timed_out();
                    attempt.leave().await;
                    return Err(LockError::Timeout {
                        name: self.shared.name.to_string(),
                        waited: wait.unwrap_or_default(),
                    });
                }
                Err(GiveUp::Unavailable(error)) => {
                    inner.metrics.acquire_failed();
                    attempt.leave().await;
                    return Err(error.into_lock_error(&self.shared.name, "acquire"));
                }
            }
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

/// What the acquire script answered (see `scripts/acquire.lua`).
#[derive(Debug)]
enum Reply {
    /// nil: the grant is taken.
    Granted,
    /// Too few permits free: the earliest live grant deadline is this many ms away.
    Short(i64),
    /// Redis stores this capacity, not the handle's; nothing was granted.
    Drift(u32),
    /// A key holds a value of this Redis type; nothing was written.
    WrongType(String),
}

impl redis::FromRedisValue for Reply {
    fn from_redis_value(value: redis::Value) -> std::result::Result<Reply, redis::ParsingError> {
        match value {
            redis::Value::Nil => Ok(Reply::Granted),
            redis::Value::Int(n) => Ok(Reply::Short(n)),
            other => {
                let text = String::from_redis_value(other)?;
                match text.split_once(':') {
                    Some(("drift", stored)) => stored
                        .parse()
                        .map(Reply::Drift)
                        .map_err(|_| format!("bad capacity in a dlock reply: {text:?}").into()),
                    Some(("wrongtype", found)) => Ok(Reply::WrongType(found.to_owned())),
                    _ => Err(format!("unexpected reply from a dlock script: {text:?}").into()),
                }
            }
        }
    }
}

/// One acquisition's tries, all under one grant id. If dropped while a try may have taken
/// the grant (its reply never came), queues the release of that grant.
struct Attempt<'a> {
    sem: &'a Semaphore,
    grant: Arc<str>,
    maybe_applied: bool,
}

impl Attempt<'_> {
    /// Runs the acquire script, retrying fast transient failures (a retry whose first
    /// call was applied finds its grant). Returns the send time of the call that answered
    /// and the script's reply.
    async fn run(
        &mut self,
        n: u32,
        lease_ms: u64,
        permits: u32,
        give_up_at: Option<Instant>,
    ) -> Result<(Instant, Reply), CallError> {
        let sem = &self.sem.shared;
        let inner = &sem.client.inner;
        let mut invocation = sem_scripts().acquire.prepare_invoke();
        invocation
            .key(&sem.keys.grants)
            .key(&sem.keys.capacity)
            .arg(&*self.grant)
            .arg(n)
            .arg(lease_ms)
            .arg(permits)
            .arg(inner.backend.publish_command());
        // Stays true after an error: the reply may have been lost after the grant.
        self.maybe_applied = true;
        let invocation = &invocation;
        let outcome = inner
            .settings
            .retry()
            .run(&sem.name, give_up_at, || async move {
                inner.metrics.attempted();
                inner.backend.invoke::<Reply>(invocation).await
            })
            .await;
        if let Ok((_, reply)) = &outcome {
            if !matches!(reply, Reply::Granted) {
                self.maybe_applied = false;
            }
        }
        outcome
    }

    fn abandon(&self) -> Option<ReleaseJob> {
        self.maybe_applied.then(|| {
            let inner = &self.sem.shared.client.inner;
            release_job(&self.sem.shared, &self.grant, inner.next_op())
        })
    }

    /// Gives the acquisition up now, releasing its grant if a try may have taken it;
    /// falls back to the background when Redis does not answer (or when cancelled here).
    async fn leave(&mut self) {
        let Some(job) = self.abandon() else {
            return;
        };
        let inner = &self.sem.shared.client.inner;
        if let Err(error) = release::release(
            &inner.backend,
            inner.settings.release_timing(),
            &job,
            HandOff::NONE,
        )
        .await
        {
            tracing::debug!(semaphore = %self.sem.shared.name, %error, "dlock: releasing an abandoned grant failed; retrying in the background");
            inner.release_in_background(job);
        }
        self.maybe_applied = false;
    }
}

impl Drop for Attempt<'_> {
    fn drop(&mut self) {
        if let Some(job) = self.abandon() {
            tracing::debug!(semaphore = %self.sem.shared.name, grant = %self.grant, "dlock: semaphore acquisition abandoned; releasing in the background");
            self.sem.shared.client.inner.release_in_background(job);
        }
    }
}
