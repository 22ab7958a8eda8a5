//! Acquiring a [`Lock`]: a re-entry inside a live scope, or a new owner that lines up
//! locally, then tries the acquire script and waits for unlock messages between tries.

use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use super::guard::LockGuard;
use super::release_ops::{release_job, ReleaseKind};
use super::Lock;
use crate::error::{LockError, LossReason, Result};
use crate::fence::Fence;
use crate::lease::{lease_millis, reentry_lease, ReentryLease};
use crate::redis::CallError;
use crate::scripts::scripts;
use crate::sync::held::{Held, HoldOwner};
use crate::sync::local::{Place, Ticket, Turn};
use crate::sync::observe;
use crate::sync::owner;
use crate::sync::pubsub::Subscription;
use crate::sync::release::ReleaseJob;
use crate::sync::wait::{GiveUp, NotYet, WaitPolicy, Waiter};

impl Lock {
    /// The acquisition, traced and measured (`sync::observe`): every public way to take
    /// the lock comes here.
    pub(crate) async fn acquire(
        &self,
        wait: Option<Duration>,
        lease: Option<Duration>,
    ) -> Result<LockGuard> {
        observe::acquisition(
            "lock",
            &self.name,
            wait,
            self.acquire_unobserved(wait, lease),
        )
        .await
    }

    /// The acquisition: a re-entry inside a live scope of this lock, otherwise a new owner
    /// that lines up locally and then waits in Redis. `wait: None` waits forever;
    /// `lease: None` uses the watchdog. Unobserved: a multi-lock taking its locks one by
    /// one counts as one acquisition, its own.
    pub(crate) async fn acquire_unobserved(
        &self,
        wait: Option<Duration>,
        lease: Option<Duration>,
    ) -> Result<LockGuard> {
        self.check_name()?;
        if let Some(lease) = lease {
            lease_millis("lease", lease)?;
        }
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
            // owns nothing, so this is a new owner's acquisition.
        }
        let Some((turn, subscription)) = self
            .wait_for_turn(inner.local.join(&self.line), give_up_at)
            .await
        else {
            inner.metrics.timed_out();
            return Err(self.timeout(wait));
        };
        self.acquire_new(turn, subscription, wait, lease, started, give_up_at)
            .await
    }

    /// A re-entry under `outer`'s owner: one more hold, or `None` when Redis no longer has
    /// the outer hold.
    ///
    /// The lease rule: an explicit lease is never stretched by a re-entry unless the
    /// re-entry itself asks for a longer explicit one. A re-entry without a lease inside a
    /// watchdog hold is renewed like it; inside an explicit lease it lives on that lease
    /// (same expiry, no renewal).
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
        let mut attempt = Attempt {
            lock: self,
            field: Arc::clone(&outer.field),
            kind: AttemptKind::Reentry { op },
            maybe_applied: false,
            waits: false,
        };
        let (sent_at, reply) = match attempt.run(lease_ms, None).await {
            Ok(outcome) => outcome,
            Err(error) => {
                inner.metrics.acquire_failed();
                return Err(error.into_lock_error(&self.name, "acquire"));
            }
        };
        match reply {
            Reply::Acquired(_) => {
                attempt.maybe_applied = false;
                let deadline = lease.map_or_else(|| outer.deadline(), |lease| sent_at + lease);
                // A re-entry shares its outer hold's token: the script mints none for it.
                let held = Held::new(
                    self.hold_owner(&outer.field),
                    renewal,
                    deadline,
                    Arc::clone(&inner.metrics),
                )
                .with_fence(outer.fence);
                inner.metrics.acquired(started.elapsed());
                tracing::debug!(lock = %self.name, owner = %outer.field, "dlock: re-entered");
                Ok(Some(self.guard(Arc::new(held))))
            }
            Reply::NotHeld | Reply::Number(_) => {
                outer.mark_lost(LossReason::NotHeldOnCheck);
                Ok(None)
            }
            Reply::WrongType(found) => {
                inner.metrics.acquire_failed();
                Err(self.wrong_type(found))
            }
        }
    }

    /// Waits in the client's local line until `ticket` has the turn, or `None` when
    /// `give_up_at` passes first. Returns the turn with the lock's channel subscription if
    /// it had to wait: kept for the wait in Redis, so that a busy line does not unsubscribe
    /// and subscribe again at every hand-off.
    ///
    /// The first waiter watches the holder: it marks the holder lost (which gives up the
    /// turn) when its lease runs out, and checks it in Redis after every unlock message
    /// for the lock and every `max_wait_recheck`, so that a force unlock or an expiry seen
    /// by Redis frees the line as soon as a waiter in another process would get the lock.
    ///
    /// A task waiting behind a hold it took itself (`lock()` twice without `scope`) waits
    /// forever; the same state is legitimate when another future of the task holds it
    /// (`join!`), so it cannot be refused. After [`SELF_WAIT_WARNING`] it is logged.
    async fn wait_for_turn(
        &self,
        ticket: Ticket<Held>,
        give_up_at: Option<Instant>,
    ) -> Option<(Turn<Held>, Option<Subscription>)> {
        let inner = &self.client.inner;
        let recheck = inner.settings.max_wait_recheck;
        let mut watching: Option<Subscription> = None;
        // The holder being watched, and since when it was seen.
        let mut watched: Option<(Arc<Held>, Instant)> = None;
        let warn_at = tokio::time::Instant::now() + SELF_WAIT_WARNING;
        let mut warned = false;
        let give_up = async {
            match give_up_at {
                Some(at) => tokio::time::sleep_until(at).await,
                None => std::future::pending().await,
            }
        };
        tokio::pin!(give_up);
        loop {
            let holder = match ticket.place() {
                Place::Turn => return Some((ticket.into_turn(), watching)),
                Place::First => ticket.holder(),
                Place::Behind => None,
            };
            // Every waiter in line holds a subscription to the lock's channel, so that it
            // stays subscribed from hand-off to hand-off while anyone waits.
            let subscription = watching.get_or_insert_with(|| {
                inner
                    .pubsub
                    .subscribe_registered(&self.keys.channel, &self.keys.key)
            });
            let Some(holder) = holder else {
                tokio::select! {
                    () = ticket.moved() => continue,
                    () = &mut give_up => return None,
                }
            };
            // A busy line hands over faster than WATCH_GRACE: only a holder that keeps the
            // lock longer is worth watching (and checking in Redis on unlock messages).
            let since = match &watched {
                Some((seen, since)) if Arc::ptr_eq(seen, &holder) => *since,
                _ => {
                    let now = Instant::now();
                    watched = Some((Arc::clone(&holder), now));
                    now
                }
            };
            if since.elapsed() < WATCH_GRACE {
                tokio::select! {
                    () = ticket.moved() => {}
                    () = tokio::time::sleep_until(since + WATCH_GRACE) => {}
                    () = &mut give_up => return None,
                }
                continue;
            }
            // Outside any task (the body of `block_on`, `#[tokio::main]`) both are `None`.
            let own_hold = !warned && holder.acquired_in == tokio::task::try_id();
            tokio::select! {
                () = ticket.moved() => {}
                _ = holder.wait_lost() => {}
                () = subscription.noticed() => self.check_holder(&holder).await,
                () = tokio::time::sleep(recheck) => self.check_holder(&holder).await,
                () = tokio::time::sleep_until(warn_at), if own_hold => {
                    warned = true;
                    tracing::warn!(lock = %self.name, "dlock: this task has waited {} for a lock it acquired itself and still holds; unless another future of the task (join!) releases it, this never ends. To take a lock again inside its own critical section, run that code in `guard.scope(...)`", humantime::format_duration(SELF_WAIT_WARNING));
                }
                () = &mut give_up => return None,
            }
        }
    }

    /// The guard of a hold that the owner `field` took of this lock in another
    /// primitive's script over the same hash layout (the multi-lock's same-slot script):
    /// renewed, released and lost like any hold of the lock.
    pub(crate) fn adopt(
        &self,
        field: &Arc<str>,
        renewal: Option<Duration>,
        deadline: Instant,
        fence: Option<Fence>,
    ) -> LockGuard {
        let inner = &self.client.inner;
        let held = Held::new(
            self.hold_owner(field),
            renewal,
            deadline,
            Arc::clone(&inner.metrics),
        )
        .with_fence(fence);
        self.guard(Arc::new(held))
    }

    /// The release of every hold of the fresh owner `field`, for an acquisition by
    /// another primitive's script whose outcome is unknown (no guard of that owner exists).
    pub(crate) fn abandoned_release(&self, field: &str) -> ReleaseJob {
        let op = self.client.inner.next_op();
        release_job(&self.name, &self.keys, field, ReleaseKind::Owner { op })
    }

    /// The guard of `held`, given back with the lock's release script.
    fn guard(&self, held: Arc<Held>) -> LockGuard {
        LockGuard::new(self.client.clone(), Arc::clone(&held), |op| {
            release_job(
                &self.name,
                &self.keys,
                &held.field,
                ReleaseKind::Hold { op },
            )
        })
    }

    /// Who holds a hold of this lock taken by the owner `field`.
    fn hold_owner(&self, field: &Arc<str>) -> HoldOwner {
        HoldOwner {
            name: Arc::clone(&self.name),
            key: Arc::clone(&self.line),
            renew_script: &scripts().renew,
            field: Arc::clone(field),
        }
    }

    /// Marks `holder` lost when Redis no longer has its hold.
    async fn check_holder(&self, holder: &Held) {
        if !holder.is_live() {
            return;
        }
        let held: std::result::Result<bool, CallError> = self
            .client
            .inner
            .backend
            .query(
                redis::cmd("HEXISTS")
                    .arg(&self.keys.key)
                    .arg(&*holder.field),
            )
            .await;
        if let Ok(false) = held {
            holder.mark_lost(LossReason::NotHeldOnCheck);
        }
    }

    /// A new owner's acquisition, once it has the local turn: tries, then waits for
    /// unlock messages (or the holder's TTL, or `max_wait_recheck`) and tries again, riding
    /// out Redis errors for up to `failover_wait`.
    async fn acquire_new(
        &self,
        turn: Turn<Held>,
        subscription: Option<Subscription>,
        wait: Option<Duration>,
        lease: Option<Duration>,
        started: Instant,
        give_up_at: Option<Instant>,
    ) -> Result<LockGuard> {
        let inner = &self.client.inner;
        let settings = &inner.settings;
        let renewal = lease.is_none().then_some(settings.watchdog_timeout);
        let lease = lease.unwrap_or(settings.watchdog_timeout);
        let lease_ms = lease_millis("lease", lease)?;
        let owner = inner.next_owner();
        let mut attempt = Attempt {
            lock: self,
            field: format!("{}:{owner}", inner.id_text).into(),
            kind: AttemptKind::New,
            maybe_applied: false,
            waits: wait != Some(Duration::ZERO),
        };
        // A confirmed subscription held before the first try (the line's, or the channel
        // still subscribed from this client's last wait) means a busy first try can wait
        // for its wake-up at once: nothing published after it can be missed.
        let subscription = subscription.or_else(|| {
            inner
                .pubsub
                .subscribe_if_confirmed(&self.keys.channel, &self.keys.key)
        });
        let mut waiter = Waiter::new(
            &inner.pubsub,
            &self.keys.channel,
            subscription,
            WaitPolicy {
                recheck: settings.max_wait_recheck,
                failover_wait: settings.failover_wait,
                give_up_at,
                patient: wait != Some(Duration::ZERO),
            },
        )
        .registered_for(&self.keys.key);
        // The previous local holder passed the lock to another client and registered this
        // one behind the waiting clients: wait for this client's wake-up (or a recheck)
        // rather than take the lock from under the client it was passed to.
        // A single try (`wait` of zero) tries all the same.
        let mut pending = (turn.take_wait_for_wake() && wait != Some(Duration::ZERO))
            .then_some(NotYet::Busy { ttl_ms: -1 });
        loop {
            if let Some(not_yet) = pending.take() {
                match waiter.wait(not_yet).await {
                    Ok(()) => {}
                    Err(GiveUp::TimedOut) => {
                        tracing::debug!(lock = %self.name, waited = ?started.elapsed(), "dlock: wait budget spent");
                        inner.metrics.timed_out();
                        return Err(self.timeout(wait));
                    }
                    Err(GiveUp::Unavailable(error)) => {
                        inner.metrics.acquire_failed();
                        return Err(error.into_lock_error(&self.name, "acquire"));
                    }
                }
            }
            waiter.trying();
            let outcome = attempt.run(lease_ms, give_up_at).await;
            waiter.tried();
            pending = Some(match outcome {
                Ok((sent_at, Reply::Acquired(fence))) => {
                    attempt.maybe_applied = false;
                    waiter.acquired();
                    let held = Arc::new(
                        Held::new(
                            self.hold_owner(&attempt.field),
                            renewal,
                            sent_at + lease,
                            Arc::clone(&inner.metrics),
                        )
                        .with_fence(fence),
                    );
                    held.keep_turn(turn);
                    inner.metrics.acquired(started.elapsed());
                    tracing::debug!(lock = %self.name, owner, waited = ?started.elapsed(), "dlock: acquired");
                    return Ok(self.guard(held));
                }
                Ok((_, Reply::Number(ttl_ms))) => NotYet::Busy { ttl_ms },
                Ok((_, Reply::WrongType(found))) => {
                    inner.metrics.acquire_failed();
                    return Err(self.wrong_type(found));
                }
                Ok((_, reply @ Reply::NotHeld)) => {
                    inner.metrics.acquire_failed();
                    return Err(self.unexpected("acquire", &reply));
                }
                Err(error) => NotYet::Unavailable(error),
            });
        }
    }
}

/// How long the first waiter lets a new holder hold before watching it (see
/// `Lock::wait_for_turn`): far below the promised bounds for noticing an expired lease
/// (50 ms) or a force unlock (100 ms), far above a busy line's hand-off interval.
const WATCH_GRACE: Duration = Duration::from_millis(20);

/// How long a task waits behind a hold it acquired itself before that is logged (see
/// `Lock::wait_for_turn`).
const SELF_WAIT_WARNING: Duration = Duration::from_secs(5);

/// What a lock script answered (see `scripts/acquire.lua` and `scripts/force_unlock.lua`).
#[derive(Debug)]
pub(super) enum Reply {
    /// nil or `{token}`: the owner holds the lock now; with the fencing token minted for
    /// (or stored with) a fresh owner's hold, `None` for a re-entry or with tokens off.
    Acquired(Option<Fence>),
    /// An integer: the other owner's TTL in ms (acquire: busy), or 1 / 0 for whether a
    /// lock was deleted (force unlock).
    Number(i64),
    /// A re-entry found the owner's hold gone.
    NotHeld,
    /// The key holds a value of this Redis type, not a lock; nothing was written.
    WrongType(String),
}

impl redis::FromRedisValue for Reply {
    fn from_redis_value(value: redis::Value) -> std::result::Result<Reply, redis::ParsingError> {
        match value {
            redis::Value::Nil => Ok(Reply::Acquired(None)),
            redis::Value::Int(n) => Ok(Reply::Number(n)),
            redis::Value::Array(items) => match items.as_slice() {
                [redis::Value::Int(token)] => match u64::try_from(*token) {
                    Ok(token) if token > 0 => Ok(Reply::Acquired(Some(Fence::new(token)))),
                    _ => Err(format!("a dlock fencing token must be positive, got {token}").into()),
                },
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

impl Lock {
    /// A reply the script does not give for this call (a script of another dlock version
    /// loaded under the same hash, say): reported, never acted on.
    pub(super) fn unexpected(&self, action: &'static str, reply: &Reply) -> LockError {
        let source = redis::RedisError::from((
            redis::ErrorKind::UnexpectedReturnType,
            "unexpected reply from a dlock script",
            format!("{reply:?}"),
        ));
        LockError::Redis {
            name: self.name.to_string(),
            action,
            source,
        }
    }
}

/// Which acquisition an [`Attempt`] makes.
#[derive(Debug, Clone, Copy)]
enum AttemptKind {
    /// A new owner id, used by this acquisition only.
    New,
    /// One more hold for an owner whose scope we are in; `op` names its marker.
    Reentry { op: u64 },
}

/// One acquisition's attempts to run the acquire script; if dropped while an attempt may
/// have taken a hold (its reply never came), queues the release of exactly that hold.
struct Attempt<'a> {
    lock: &'a Lock,
    field: Arc<str>,
    kind: AttemptKind,
    maybe_applied: bool,
    /// The acquisition waits for unlock messages when busy (not a single try): its busy
    /// tries register the client in the lock's waiter registry.
    waits: bool,
}

impl Attempt<'_> {
    /// The script's marker (re-entries only), kind and marker lifetime.
    fn script_args(&self) -> (Option<String>, &'static str, u64) {
        match self.kind {
            AttemptKind::New => (None, "fresh", 0),
            AttemptKind::Reentry { op } => (
                Some(self.lock.keys.marker(&self.field, op)),
                "reenter",
                self.lock.client.inner.settings.memo_ttl().as_millis() as u64,
            ),
        }
    }

    /// Runs the acquire script, retrying fast transient failures. Returns the send time of
    /// the successful call and the script's reply.
    async fn run(
        &mut self,
        lease_ms: u64,
        give_up_at: Option<Instant>,
    ) -> Result<(Instant, Reply), CallError> {
        let inner = &self.lock.client.inner;
        let (marker, kind, marker_ms) = self.script_args();
        // A new owner has no marker; the lock key fills the slot (one slot for every key).
        let marker = marker.as_deref().unwrap_or(&self.lock.keys.key);
        // The client id under which a busy try registers this client as waiting: a new
        // owner's; a re-entry never waits.
        let lock = self.lock;
        let registrant: &str = match self.kind {
            AttemptKind::New => &lock.client.inner.id_text,
            AttemptKind::Reentry { .. } => "",
        };
        // A single try does not wait, so it must not be woken in anyone's turn.
        let registry_ms = if self.waits {
            inner.settings.registry_ttl().as_millis() as u64
        } else {
            0
        };
        let mut invocation = scripts().acquire.prepare_invoke();
        invocation
            .key(&self.lock.keys.key)
            .key(marker)
            .key(&self.lock.keys.fence)
            .key(&self.lock.keys.channel)
            .arg(lease_ms)
            .arg(&*self.field)
            .arg(kind)
            .arg(marker_ms)
            .arg(inner.settings.fence_arg())
            .arg(registrant)
            .arg(registry_ms);
        // Stays true after an error reply too: a script refused half-way (an ACL denying
        // PEXPIRE after HSET, say) keeps what it wrote, so the compensating release is
        // needed then as well.
        self.maybe_applied = true;
        let (invocation, name) = (&invocation, &self.lock.name);
        let outcome = inner
            .settings
            .retry()
            .run(name, give_up_at, || async move {
                inner.metrics.attempted();
                match inner.settings.replica_acks {
                    None => inner.backend.invoke::<Reply>(invocation).await,
                    // The script followed by `WAIT` (see `Backend::invoke_replicated`):
                    // taken but not confirmed by enough replicas is an error; the hold
                    // stays `maybe_applied` and is released if the caller gives up (a
                    // retry of the same acquisition finds it applied and adds nothing).
                    Some(acks) => {
                        inner
                            .backend
                            .invoke_replicated(
                                name,
                                invocation,
                                (acks.replicas, acks.within),
                                |reply| matches!(reply, Reply::Acquired(_)),
                            )
                            .await
                    }
                }
            })
            .await;
        if let Ok((_, reply)) = &outcome {
            if !matches!(reply, Reply::Acquired(_)) {
                // Redis answered "busy" or refused before writing: nothing of ours is there.
                self.maybe_applied = false;
            }
        }
        outcome
    }
}

impl Drop for Attempt<'_> {
    fn drop(&mut self) {
        if !self.maybe_applied {
            return;
        }
        let inner = &self.lock.client.inner;
        tracing::debug!(lock = %self.lock.name, "dlock: acquire outcome unknown; releasing in the background");
        let kind = match self.kind {
            AttemptKind::New => ReleaseKind::Owner {
                op: inner.next_op(),
            },
            AttemptKind::Reentry { op } => ReleaseKind::Reentry { op },
        };
        inner.release_in_background(release_job(
            &self.lock.name,
            &self.lock.keys,
            &self.field,
            kind,
        ));
    }
}
