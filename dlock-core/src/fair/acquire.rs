//! Acquiring a [`FairLock`]: a re-entry inside a live scope, or a new waiter with its own
//! queue entry in Redis, kept alive by its tries until it is the head and the lock is free.

use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use super::release_ops::{release_job, FairRelease};
use super::FairLock;
use crate::client::ClientInner;
use crate::error::{LossReason, Result};
use crate::fence::Fence;
use crate::lease::{lease_millis, reentry_lease, ReentryLease};
use crate::lock::guard::LockGuard;
use crate::redis::CallError;
use crate::scripts::{fair_scripts, scripts, Script};
use crate::sync::held::{Held, HoldOwner};
use crate::sync::observe;
use crate::sync::owner;
use crate::sync::release::{self, HandOff, ReleaseJob};
use crate::sync::wait::{GiveUp, NotYet, WaitPolicy, Waiter};

impl FairLock {
    /// The acquisition, traced and measured (`sync::observe`).
    pub(super) async fn acquire(
        &self,
        wait: Option<Duration>,
        lease: Option<Duration>,
    ) -> Result<LockGuard> {
        let acquisition = self.acquire_unobserved(wait, lease);
        observe::acquisition("fair_lock", &self.name, wait, acquisition).await
    }

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

        if let Some(outer) = owner::current_hold(inner.id_bits(), &self.keys.key) {
            if let Some(guard) = self.reenter(&outer, lease, started).await? {
                return Ok(guard);
            }
            // The outer hold turned out to be gone (it is reported lost now): the scope
            // owns nothing, so this is a new waiter.
        }
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
        let call = Call {
            script: &scripts().acquire,
            keys: vec![self.keys.key.clone(), marker, self.keys.fence.clone()],
            args: vec![
                lease_ms.to_string(),
                field.to_string(),
                "reenter".to_owned(),
                inner.settings.memo_ttl().as_millis().to_string(),
                inner.settings.fence_arg().to_owned(),
            ],
        };
        let mut pending = Pending::new(inner, self.job(&field, FairRelease::Undo { op }));
        pending.armed = true;
        let reply = match self.call(&call, None).await {
            Ok(outcome) => outcome,
            Err(error) => {
                inner.metrics.acquire_failed();
                return Err(error.into_lock_error(&self.name, "acquire"));
            }
        };
        match reply {
            (sent_at, Reply::Acquired(_)) => {
                pending.armed = false;
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
            (_, Reply::NotHeld | Reply::Busy(_)) => {
                pending.armed = false;
                outer.mark_lost(LossReason::NotHeldOnCheck);
                Ok(None)
            }
            (_, Reply::WrongType(found)) => {
                pending.armed = false;
                inner.metrics.acquire_failed();
                Err(self.wrong_type(found))
            }
        }
    }

    /// A new waiter: one queue entry of its own, renewed by every try (the try is the
    /// heartbeat), woken on its own channel by the release, purge or leave that makes it
    /// the head of a free lock, and never napping longer than a third of its entry
    /// timeout. Leaves the queue when it gives up.
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
        let owner = inner.next_owner();
        let field: Arc<str> = format!("{}:{owner}", inner.id_text).into();
        let channel = format!("{}{field}", self.fair.wake_prefix);
        let call = Call {
            script: &fair_scripts().acquire,
            keys: vec![
                self.keys.key.clone(),
                self.fair.queue.clone(),
                self.fair.deadlines.clone(),
                self.keys.fence.clone(),
            ],
            args: vec![
                lease_ms.to_string(),
                field.to_string(),
                if patient { "wait" } else { "try" }.to_owned(),
                entry_ms.to_string(),
                self.fair.wake_prefix.clone(),
                inner.backend.publish_command().to_owned(),
                inner.settings.fence_arg().to_owned(),
            ],
        };
        let op = inner.next_op();
        let mut pending = Pending::new(inner, self.job(&field, FairRelease::Leave { op }));
        let mut waiter = Waiter::new(
            &inner.pubsub,
            &channel,
            None,
            WaitPolicy {
                // Every try renews the entry: at a third of its timeout, two tries can be
                // lost or late before a live waiter is taken for dead.
                recheck: settings
                    .max_wait_recheck
                    .min(Duration::from_millis(entry_ms) / 3),
                failover_wait: settings.failover_wait,
                give_up_at,
                patient,
            },
        );
        loop {
            // From the first send on, the script may have queued us or granted the lock.
            pending.armed = true;
            let not_yet = match self.call(&call, give_up_at).await {
                Ok((sent_at, Reply::Acquired(fence))) => {
                    pending.armed = false;
                    let held = Arc::new(
                        Held::new(
                            self.hold_owner(&field),
                            renewal,
                            sent_at + lease,
                            Arc::clone(&inner.metrics),
                        )
                        .with_fence(fence),
                    );
                    inner.metrics.acquired(started.elapsed());
                    tracing::debug!(lock = %self.name, owner, waited = ?started.elapsed(), "dlock: acquired (fair)");
                    return Ok(self.guard(held));
                }
                Ok((_, Reply::Busy(ttl_ms))) => {
                    // A try never queues: a busy answer left nothing of ours in Redis.
                    pending.armed = patient;
                    NotYet::Busy { ttl_ms }
                }
                Ok((_, Reply::WrongType(found))) => {
                    pending.armed = false;
                    inner.metrics.acquire_failed();
                    return Err(self.wrong_type(found));
                }
                Ok((_, reply @ Reply::NotHeld)) => {
                    pending.leave().await;
                    inner.metrics.acquire_failed();
                    return Err(self.unexpected("acquire", &reply));
                }
                Err(error) => NotYet::Unavailable(error),
            };
            match waiter.wait(not_yet).await {
                Ok(()) => {}
                Err(GiveUp::TimedOut) => {
                    pending.leave().await;
                    tracing::debug!(lock = %self.name, waited = ?started.elapsed(), "dlock: wait budget spent (fair)");
                    inner.metrics.timed_out();
                    return Err(self.timeout(wait));
                }
                Err(GiveUp::Unavailable(error)) => {
                    pending.leave().await;
                    inner.metrics.acquire_failed();
                    return Err(error.into_lock_error(&self.name, "acquire"));
                }
            }
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

    /// Runs `call`, retrying fast transient failures (every script it runs is idempotent).
    /// Returns the send time of the answered call and the script's reply.
    async fn call(
        &self,
        call: &Call,
        give_up_at: Option<Instant>,
    ) -> std::result::Result<(Instant, Reply), CallError> {
        let inner = &self.client.inner;
        let mut invocation = call.script.prepare_invoke();
        for key in &call.keys {
            invocation.key(key);
        }
        for arg in &call.args {
            invocation.arg(arg);
        }
        let invocation = &invocation;
        inner
            .settings
            .retry()
            .run(&self.name, give_up_at, || async move {
                inner.metrics.attempted();
                match inner.settings.replica_acks {
                    None => inner.backend.invoke::<Reply>(invocation).await,
                    // `call` followed by `WAIT` (see `Backend::invoke_replicated`):
                    // granted but not confirmed by enough replicas is an error, and the
                    // hold stays for the retry (which finds it) or the leave (which gives
                    // it back).
                    Some(acks) => {
                        inner
                            .backend
                            .invoke_replicated(
                                &self.name,
                                invocation,
                                (acks.replicas, acks.within),
                                |reply| matches!(reply, Reply::Acquired(_)),
                            )
                            .await
                    }
                }
            })
            .await
    }
}

/// A script call: the script with its keys and arguments.
struct Call {
    script: &'static Script,
    keys: Vec<String>,
    args: Vec<String>,
}

/// What a fair-lock script (or the reentrant lock's acquire script, for re-entries)
/// answered.
#[derive(Debug)]
pub(super) enum Reply {
    /// nil or `{token}`: the owner holds the lock now, with its fencing token (`None`
    /// for a re-entry, which shares its outer hold's, and with tokens off).
    Acquired(Option<Fence>),
    /// An integer: how long to wait at most before the next try, in ms (acquire; -1:
    /// unknown), or 1 / 0 for whether a lock was deleted (force unlock).
    Busy(i64),
    /// A re-entry found the owner's hold gone.
    NotHeld,
    /// The key holds a value of this Redis type, not a lock; nothing was written.
    WrongType(String),
}

impl redis::FromRedisValue for Reply {
    fn from_redis_value(value: redis::Value) -> std::result::Result<Reply, redis::ParsingError> {
        match value {
            redis::Value::Nil => Ok(Reply::Acquired(None)),
            redis::Value::Int(n) => Ok(Reply::Busy(n)),
            redis::Value::Array(items) => match items.as_slice() {
                [redis::Value::Int(token)] if *token > 0 => {
                    Ok(Reply::Acquired(u64::try_from(*token).ok().map(Fence::new)))
                }
                other => Err(format!("unexpected reply from a dlock script: {other:?}").into()),
            },
            other => {
                let text = String::from_redis_value(other)?;
                match text.split_once(':') {
                    _ if text == "notheld" => Ok(Reply::NotHeld),
                    Some(("wrongtype", found)) => Ok(Reply::WrongType(found.to_owned())),
                    _ => Err(format!("unexpected reply from a dlock script: {text:?}").into()),
                }
            }
        }
    }
}

/// What an acquisition must undo if it ends without a guard: while `armed`, a script call
/// of it may have queued it or given it a hold. Leaving is tried in the foreground when
/// the acquisition gives up; if that fails, or the acquisition is dropped, the same
/// operation (same memo, so it counts once) goes to the background releases, which retry
/// until Redis confirms.
struct Pending<'a> {
    inner: &'a ClientInner,
    job: ReleaseJob,
    armed: bool,
}

impl<'a> Pending<'a> {
    fn new(inner: &'a ClientInner, job: ReleaseJob) -> Self {
        Pending {
            inner,
            job,
            armed: false,
        }
    }

    /// Leaves now, if anything may be there; on failure `Drop` hands it to the background.
    async fn leave(&mut self) {
        if !self.armed {
            return;
        }
        let inner = self.inner;
        match release::release(
            &inner.backend,
            inner.settings.release_timing(),
            &self.job,
            HandOff::NONE,
        )
        .await
        {
            Ok(_) => {
                inner.release_log.record(&self.job);
                self.armed = false;
            }
            Err(error) => {
                tracing::debug!(lock = %self.job.name, %error, "dlock: leaving the fair queue failed; retrying in the background");
            }
        }
    }
}

impl Drop for Pending<'_> {
    fn drop(&mut self) {
        if self.armed {
            tracing::debug!(lock = %self.job.name, "dlock: fair acquisition abandoned; leaving in the background");
            self.inner.release_in_background(self.job.clone());
        }
    }
}
