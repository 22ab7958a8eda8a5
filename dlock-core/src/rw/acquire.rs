//! Acquiring a read or write hold: a re-entry (or downgrade) inside a live scope, a
//! refused upgrade, or a new owner that tries the acquire script and waits between tries.
//!
//! Neither side uses the client's local line: readers share the lock, so lining them up
//! would serialise what Redis grants together; a writer keeps its own waiting entry in
//! Redis (writer preference needs every waiting writer there), and a write release wakes
//! one local waiter per message as the line would.

use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use super::release_ops::{release_job, ReleaseKind};
use super::{Kind, ReadWriteLock, WRITE_SUFFIX};
use crate::error::{LockError, LossReason, Result};
use crate::fence::Fence;
use crate::lease::{lease_millis, reentry_lease, ReentryLease};
use crate::lock::guard::LockGuard;
use crate::redis::CallError;
use crate::scripts::rw_scripts;
use crate::sync::held::{Held, HoldOwner};
use crate::sync::observe;
use crate::sync::owner;
use crate::sync::release::{self, HandOff};
use crate::sync::wait::{GiveUp, NotYet, WaitPolicy, Waiter};

/// How long a waiting writer's entry lives after its last try. A live writer tries again
/// at least every third of it (see `acquire_new`); a dead one's entry holds readers back
/// for at most this long.
const WRITER_ENTRY_TTL: Duration = Duration::from_secs(10);

/// The kind of a hold of a read-write lock, `None` for holds of other primitives (told
/// apart by their renew script, which every hold names).
fn hold_kind(held: &Held) -> Option<Kind> {
    let scripts = rw_scripts();
    if std::ptr::eq(held.renew_script, &scripts.renew_read) {
        Some(Kind::Read)
    } else if std::ptr::eq(held.renew_script, &scripts.renew_write) {
        Some(Kind::Write)
    } else {
        None
    }
}

/// The owner of a read or write hold: its field without the write suffix.
fn owner_of(held: &Held) -> Arc<str> {
    match held.field.strip_suffix(WRITE_SUFFIX) {
        Some(owner) if hold_kind(held) == Some(Kind::Write) => owner.into(),
        _ => Arc::clone(&held.field),
    }
}

impl ReadWriteLock {
    /// The acquisition of a `kind` hold, traced and measured (`sync::observe`) as a
    /// `read` or `write`.
    pub(super) async fn acquire(
        &self,
        kind: Kind,
        wait: Option<Duration>,
        lease: Option<Duration>,
    ) -> Result<LockGuard> {
        let label = match kind {
            Kind::Read => "read",
            Kind::Write => "write",
        };
        let acquisition = self.acquire_unobserved(kind, wait, lease);
        observe::acquisition(label, &self.shared.name, wait, acquisition).await
    }

    /// The acquisition of a `kind` hold: inside a live scope of this lock a re-entry,
    /// downgrade or refused upgrade, otherwise a new owner. `wait: None` waits forever;
    /// `lease: None` uses the watchdog.
    async fn acquire_unobserved(
        &self,
        kind: Kind,
        wait: Option<Duration>,
        lease: Option<Duration>,
    ) -> Result<LockGuard> {
        self.check_name()?;
        if let Some(lease) = lease {
            lease_millis("lease", lease)?;
        }
        let inner = &self.shared.client.inner;
        inner.keep_running();
        let started = Instant::now();
        // A wait too long to represent is a wait without end.
        let give_up_at = wait.and_then(|wait| started.checked_add(wait));
        let (id, key) = (inner.id_bits(), &*self.shared.key);
        let outer = match kind {
            // A read inside any hold of this lock: a re-entrant read, or a downgrade.
            Kind::Read => owner::find_hold(id, key, |held| hold_kind(held).is_some()),
            // A write inside a write hold (anywhere up the chain): a re-entrant write.
            Kind::Write => {
                let writing =
                    owner::find_hold(id, key, |held| hold_kind(held) == Some(Kind::Write));
                if writing.is_none()
                    && owner::find_hold(id, key, |held| hold_kind(held) == Some(Kind::Read))
                        .is_some()
                {
                    return Err(self.upgrade_refused());
                }
                writing
            }
        };
        if let Some(outer) = outer {
            if let Some(guard) = self.reenter(kind, &outer, lease, started).await? {
                return Ok(guard);
            }
            // The outer hold turned out to be gone (it is reported lost now): the scope
            // owns nothing, so this is a new owner's acquisition.
        }
        self.acquire_new(kind, wait, lease, started, give_up_at)
            .await
    }

    fn upgrade_refused(&self) -> LockError {
        LockError::UpgradeNotSupported {
            name: self.shared.name.to_string(),
        }
    }

    /// A `kind` hold for `outer`'s owner, or `None` when Redis no longer has the owner.
    /// The lease rule is the reentrant lock's: a re-entry never stretches an explicit
    /// lease unless it asks for a longer explicit one itself, and never adds leases up.
    async fn reenter(
        &self,
        kind: Kind,
        outer: &Arc<Held>,
        lease: Option<Duration>,
        started: Instant,
    ) -> Result<Option<LockGuard>> {
        let inner = &self.shared.client.inner;
        let watchdog = inner.settings.watchdog_timeout;
        let ReentryLease {
            millis: lease_ms,
            renewal,
            lease,
        } = reentry_lease(lease, outer.renewal, watchdog)?;
        let mut attempt = Attempt {
            rw: self,
            owner: owner_of(outer),
            kind,
            reentry: Some(inner.next_op()),
            maybe_applied: false,
            queued: false,
        };
        let (sent_at, reply) = match attempt.run(lease_ms, 0, None).await {
            Ok(outcome) => outcome,
            Err(error) => {
                inner.metrics.acquire_failed();
                return Err(error.into_lock_error(&self.shared.name, "acquire"));
            }
        };
        match reply {
            Reply::Acquired(_) => {
                attempt.maybe_applied = false;
                let deadline = lease.map_or_else(|| outer.deadline(), |lease| sent_at + lease);
                // A write re-entry shares its outer write hold's token; reads have none.
                let fence = match kind {
                    Kind::Write => outer.fence,
                    Kind::Read => None,
                };
                let held = Arc::new(
                    Held::new(
                        self.hold_owner(kind, &attempt.owner),
                        renewal,
                        deadline,
                        Arc::clone(&inner.metrics),
                    )
                    .with_fence(fence),
                );
                inner.metrics.acquired(started.elapsed());
                tracing::debug!(lock = %self.shared.name, owner = %attempt.owner, ?kind, "dlock: re-entered read-write lock");
                Ok(Some(self.guard(kind, &attempt.owner, held)))
            }
            Reply::NotHeld | Reply::Busy(_) => {
                outer.mark_lost(LossReason::NotHeldOnCheck);
                Ok(None)
            }
            Reply::Upgrade => {
                // The write hold of the scope is gone in Redis, its read holds are not.
                outer.mark_lost(LossReason::NotHeldOnCheck);
                Err(self.upgrade_refused())
            }
            Reply::WrongType(found) => {
                inner.metrics.acquire_failed();
                Err(self.wrong_type(found))
            }
        }
    }

    /// A new owner's acquisition: tries, then waits for unlock messages (every one for a
    /// reader, one per message for a writer), the holders' leases or the recheck
    /// interval, and tries again, riding out Redis errors for up to `failover_wait`.
    async fn acquire_new(
        &self,
        kind: Kind,
        wait: Option<Duration>,
        lease: Option<Duration>,
        started: Instant,
        give_up_at: Option<Instant>,
    ) -> Result<LockGuard> {
        let inner = &self.shared.client.inner;
        let settings = &inner.settings;
        let renewal = lease.is_none().then_some(settings.watchdog_timeout);
        let lease = lease.unwrap_or(settings.watchdog_timeout);
        let lease_ms = lease_millis("lease", lease)?;
        let patient = wait != Some(Duration::ZERO);
        // Only a writer that will wait holds readers back.
        let entry_ms = if kind == Kind::Write && patient {
            WRITER_ENTRY_TTL.as_millis() as u64
        } else {
            0
        };
        let owner: Arc<str> = format!("{}:{}", inner.id, inner.next_owner()).into();
        let mut attempt = Attempt {
            rw: self,
            owner,
            kind,
            reentry: None,
            maybe_applied: false,
            queued: false,
        };
        let waiter = Waiter::new(
            &inner.pubsub,
            &self.shared.keys.channel,
            None,
            WaitPolicy {
                // A waiting writer's tries are its entry's heartbeat.
                recheck: settings.max_wait_recheck.min(WRITER_ENTRY_TTL / 3),
                failover_wait: settings.failover_wait,
                give_up_at,
                patient,
            },
        );
        // One write release admits every waiting reader: each must try again.
        let mut waiter = match kind {
            Kind::Read => waiter.woken_by_every_message(),
            Kind::Write => waiter,
        };
        loop {
            let not_yet = match attempt.run(lease_ms, entry_ms, give_up_at).await {
                Ok((sent_at, Reply::Acquired(fence))) => {
                    attempt.maybe_applied = false;
                    attempt.queued = false;
                    let held = Arc::new(
                        Held::new(
                            self.hold_owner(kind, &attempt.owner),
                            renewal,
                            sent_at + lease,
                            Arc::clone(&inner.metrics),
                        )
                        .with_fence(fence),
                    );
                    inner.metrics.acquired(started.elapsed());
                    tracing::debug!(lock = %self.shared.name, owner = %attempt.owner, ?kind, waited = ?started.elapsed(), "dlock: acquired read-write lock");
                    return Ok(self.guard(kind, &attempt.owner, held));
                }
                Ok((_, Reply::Busy(ttl_ms))) => NotYet::Busy { ttl_ms },
                Ok((_, Reply::WrongType(found))) => {
                    inner.metrics.acquire_failed();
                    attempt.leave().await;
                    return Err(self.wrong_type(found));
                }
                Ok((_, reply @ (Reply::NotHeld | Reply::Upgrade))) => {
                    inner.metrics.acquire_failed();
                    attempt.leave().await;
                    return Err(self.unexpected(&reply));
                }
                Err(error) => NotYet::Unavailable(error),
            };
            match waiter.wait(not_yet).await {
                Ok(()) => {}
                Err(GiveUp::TimedOut) => {
                    tracing::debug!(lock = %self.shared.name, ?kind, waited = ?started.elapsed(), "dlock: wait budget spent");
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

    /// Who holds a `kind` hold of this lock taken by `owner`, and how it is renewed.
    fn hold_owner(&self, kind: Kind, owner: &str) -> HoldOwner {
        let scripts = rw_scripts();
        HoldOwner {
            name: Arc::clone(&self.shared.name),
            key: Arc::clone(&self.shared.key),
            renew_script: match kind {
                Kind::Read => &scripts.renew_read,
                Kind::Write => &scripts.renew_write,
            },
            field: kind.field(owner).into(),
        }
    }

    /// The guard of `held`, given back with the read-write lock's release script.
    fn guard(&self, kind: Kind, owner: &str, held: Arc<Held>) -> LockGuard {
        LockGuard::new(self.shared.client.clone(), held, |op| {
            release_job(&self.shared, owner, kind, ReleaseKind::Hold { op })
        })
    }

    fn wrong_type(&self, found: String) -> LockError {
        LockError::WrongType {
            name: self.shared.name.to_string(),
            found,
        }
    }

    /// A reply the script does not give for this call (a script of another dlock version
    /// loaded under the same hash, say): reported, never acted on.
    fn unexpected(&self, reply: &Reply) -> LockError {
        LockError::Redis {
            name: self.shared.name.to_string(),
            action: "acquire",
            source: redis::RedisError::from((
                redis::ErrorKind::UnexpectedReturnType,
                "unexpected reply from a dlock script",
                format!("{reply:?}"),
            )),
        }
    }
}

/// What the acquire script answered (see `scripts/acquire.lua`).
#[derive(Debug)]
enum Reply {
    /// nil or `{token}`: the hold is taken, with a fresh writer's fencing token.
    Acquired(Option<Fence>),
    /// Busy: try again within this many ms at the latest.
    Busy(i64),
    /// A re-entry found its owner gone.
    NotHeld,
    /// A write re-entry found an owner that only reads.
    Upgrade,
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
                    _ if text == "upgrade" => Ok(Reply::Upgrade),
                    Some(("wrongtype", found)) => Ok(Reply::WrongType(found.to_owned())),
                    _ => Err(format!("unexpected reply from a dlock script: {text:?}").into()),
                }
            }
        }
    }
}

/// One acquisition's tries. If dropped while a try may have taken a hold (its reply never
/// came) or while its writer has a waiting entry, queues the release of exactly that
/// acquisition: the hold, and the entry.
struct Attempt<'a> {
    rw: &'a ReadWriteLock,
    owner: Arc<str>,
    kind: Kind,
    /// A re-entry's operation id (names its marker); `None` for a new owner.
    reentry: Option<u64>,
    maybe_applied: bool,
    /// A writer's waiting entry may be in Redis.
    queued: bool,
}

impl Attempt<'_> {
    /// Runs the acquire script, retrying fast transient failures. Returns the send time of
    /// the successful call and the script's reply.
    async fn run(
        &mut self,
        lease_ms: u64,
        entry_ms: u64,
        give_up_at: Option<Instant>,
    ) -> Result<(Instant, Reply), CallError> {
        let lock = &self.rw.shared;
        let inner = &lock.client.inner;
        let (marker, how, marker_ms) = match self.reentry {
            None => (None, "fresh", 0),
            Some(op) => (
                Some(lock.keys.marker(&self.kind.field(&self.owner), op)),
                "reenter",
                inner.settings.memo_ttl().as_millis() as u64,
            ),
        };
        // A new owner has no marker; the lock key fills the slot (one slot for all).
        let keys = [
            &*lock.key,
            &*lock.writers,
            marker.as_deref().unwrap_or(&lock.key),
            &*lock.keys.fence,
        ];
        let args = [
            lease_ms.to_string(),
            self.owner.to_string(),
            self.kind.as_str().to_owned(),
            how.to_owned(),
            marker_ms.to_string(),
            entry_ms.to_string(),
            inner.settings.fence_arg().to_owned(),
        ];
        let mut invocation = rw_scripts().acquire.prepare_invoke();
        for key in keys {
            invocation.key(key);
        }
        for arg in &args {
            invocation.arg(arg);
        }
        // Stays true after an error reply too: a script refused half-way keeps what it
        // wrote, so the compensating release is needed then as well.
        self.maybe_applied = true;
        if entry_ms > 0 {
            self.queued = true;
        }
        let invocation = &invocation;
        let outcome = inner
            .settings
            .retry()
            .run(&lock.name, give_up_at, || async move {
                inner.metrics.attempted();
                match inner.settings.replica_acks {
                    // The call followed by `WAIT`: a hold counts once the replicas have
                    // it (and its fencing token).
                    Some(acks) => {
                        inner
                            .backend
                            .invoke_replicated(
                                &lock.name,
                                invocation,
                                (acks.replicas, acks.within),
                                |reply| matches!(reply, Reply::Acquired(_)),
                            )
                            .await
                    }
                    None => inner.backend.invoke::<Reply>(invocation).await,
                }
            })
            .await;
        if let Ok((_, reply)) = &outcome {
            if !matches!(reply, Reply::Acquired(_)) {
                // Busy or refused before writing a hold (a busy writer's entry is covered
                // by `queued`).
                self.maybe_applied = false;
            }
        }
        outcome
    }

    /// The release of whatever this acquisition may have left: its hold if a try may have
    /// been applied, a writer's waiting entry.
    fn abandon(&self) -> Option<crate::sync::release::ReleaseJob> {
        if !self.maybe_applied && !self.queued {
            return None;
        }
        let inner = &self.rw.shared.client.inner;
        let release = match self.reentry {
            None => ReleaseKind::Owner {
                op: inner.next_op(),
            },
            Some(op) => ReleaseKind::Reentry { op },
        };
        Some(release_job(
            &self.rw.shared,
            &self.owner,
            self.kind,
            release,
        ))
    }

    /// Gives up the acquisition now: a writer leaves the waiting writers at once, so that
    /// the readers it held back pass without waiting for its entry to lapse. Falls back to
    /// the background when Redis does not answer (cancelled here, `Drop` does it).
    async fn leave(&mut self) {
        let Some(job) = self.abandon() else {
            return;
        };
        let inner = &self.rw.shared.client.inner;
        match release::release(
            &inner.backend,
            inner.settings.release_timing(),
            &job,
            HandOff::NONE,
        )
        .await
        {
            Ok(_) => {}
            Err(error) => {
                tracing::debug!(lock = %self.rw.shared.name, %error, "dlock: leaving the wait failed; retrying in the background");
                inner.release_in_background(job);
            }
        }
        self.maybe_applied = false;
        self.queued = false;
    }
}

impl Drop for Attempt<'_> {
    fn drop(&mut self) {
        if let Some(job) = self.abandon() {
            tracing::debug!(lock = %self.rw.shared.name, "dlock: read-write acquisition abandoned; releasing in the background");
            self.rw.shared.client.inner.release_in_background(job);
        }
    }
}
