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
use crate::kind::LockKind;
use crate::lease::{lease_millis, reentry_lease, ReentryLease};
use crate::lock::guard::LockGuard;
use crate::scripts::catalog::rw::rw_scripts;
use crate::scripts::ScriptCall;
use crate::sync::acquire::{self, Acquisition, Answer};
use crate::sync::attempt::{PlaceLifetime, Reply, TryStep};
use crate::sync::held::{Held, HoldOwner};
use crate::sync::observe::{self, Label};
use crate::sync::owner;
use crate::sync::wait::{NotYet, WaitPolicy, Waiter};

/// How long a waiting writer's entry lives after its last try. A live writer tries again
/// at least every third of it (see `acquire_new`); a dead one's entry holds readers back
/// for at most this long.
const WRITER_ENTRY_TTL: Duration = Duration::from_secs(10);

/// The acquire script's argument that says how long a waiter's promise is kept
/// (`ARGV[8]`, see `scripts/acquire.lua`).
const PROMISE_LIFETIME: PlaceLifetime = PlaceLifetime(7);

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
        template: Option<&'static str>,
    ) -> Result<LockGuard> {
        let label = Label {
            kind: match kind {
                Kind::Read => "read",
                Kind::Write => "write",
            },
            template,
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
        if let Some(outer) = outer
            && let Some(guard) = self.reenter(kind, &outer, lease, started).await?
        {
            return Ok(guard);
        }
        // The outer hold turned out to be gone (it is reported lost now): the scope
        // owns nothing, so this is a new owner's acquisition.
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
        let owner = owner_of(outer);
        let op = inner.next_op();
        let call = self.acquire_call(kind, &owner, lease_ms, Some(op), (0, 0));
        let mut step = TryStep::new(
            &**inner,
            &self.shared.name,
            Arc::clone(&owner),
            call,
            |owner| {
                vec![release_job(
                    &self.shared,
                    owner,
                    kind,
                    ReleaseKind::Reentry { op },
                )]
            },
        )
        .replicated();
        let (sent_at, reply) = match step.run(None).await {
            Ok(outcome) => outcome,
            Err(error) => {
                step.give_up().await;
                inner.metrics.acquire_failed();
                return Err(error.into_lock_error(&self.shared.name, "acquire"));
            }
        };
        match reply {
            Reply::Granted(_) => {
                step.granted();
                let deadline = lease.map_or_else(|| outer.deadline(), |lease| sent_at + lease);
                // A write re-entry shares its outer write hold's token; reads have none.
                let fence = match kind {
                    Kind::Write => outer.fence,
                    Kind::Read => None,
                };
                let held = Arc::new(
                    Held::new(
                        self.hold_owner(kind, &owner),
                        renewal,
                        deadline,
                        Arc::clone(&inner.metrics),
                    )
                    .with_fence(fence),
                );
                inner.metrics.acquired(started.elapsed());
                tracing::debug!(lock = %self.shared.name, %owner, ?kind, "dlock: re-entered read-write lock");
                Ok(Some(self.guard(kind, &owner, held)))
            }
            Reply::NotHeld | Reply::Busy { .. } => {
                outer.mark_lost(LossReason::NotHeldOnCheck);
                Ok(None)
            }
            Reply::Upgrade => {
                // The write hold of the scope is gone in Redis, its read holds are not.
                outer.mark_lost(LossReason::NotHeldOnCheck);
                Err(self.upgrade_refused())
            }
            other => {
                step.give_up().await;
                inner.metrics.acquire_failed();
                Err(other.refusal(&self.shared.name, "acquire", LockKind::ReadWrite))
            }
        }
    }

    /// The acquire script's call for a `kind` hold of `owner` with lease `lease_ms`: a
    /// re-entry (acquisition `reentry`, which names its marker) or, for `None`, a fresh
    /// owner; a fresh writer that finds the lock busy keeps a waiting entry for
    /// `entry_ms` (0: none), and a fresh owner that waits keeps the promise of its busy
    /// answers for `promise_ms` (0: a single try, promised nothing).
    fn acquire_call(
        &self,
        kind: Kind,
        owner: &str,
        lease_ms: u64,
        reentry: Option<u64>,
        (entry_ms, promise_ms): (u64, u64),
    ) -> ScriptCall {
        let lock = &self.shared;
        let settings = &lock.client.inner.settings;
        let (marker, how, marker_ms) = match reentry {
            None => (None, "fresh", 0),
            Some(op) => (
                Some(lock.keys.marker(&kind.field(owner), op)),
                "reenter",
                settings.memo_ttl().as_millis() as u64,
            ),
        };
        let mut call = rw_scripts().acquire.prepare_invoke();
        call.key(&*lock.key)
            .key(&*lock.writers)
            // A new owner has no marker; the lock key fills the slot (one slot for all).
            .key(marker.as_deref().unwrap_or(&lock.key))
            .key(&*lock.keys.fence)
            .key(&lock.keys.naps)
            .key(&lock.keys.channel)
            .arg(lease_ms)
            .arg(owner)
            .arg(kind.as_str())
            .arg(how)
            .arg(marker_ms)
            .arg(entry_ms)
            .arg(settings.fence_arg())
            .arg(promise_ms)
            .arg(lock.client.inner.backend.publish_command());
        call
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
        let owner = inner.new_owner_field();
        let promise_ms = if patient {
            settings.registry_ttl().as_millis() as u64
        } else {
            0
        };
        let call = self.acquire_call(kind, &owner, lease_ms, None, (entry_ms, promise_ms));
        // Whatever an unanswered try took, and a writer's waiting entry (which holds new
        // readers back), go when the acquisition ends without a guard.
        let mut step = TryStep::new(
            &**inner,
            &self.shared.name,
            Arc::clone(&owner),
            call,
            |owner| {
                vec![release_job(
                    &self.shared,
                    owner,
                    kind,
                    ReleaseKind::Withdraw {
                        op: inner.next_op(),
                    },
                )]
            },
        )
        .replicated()
        .waiting(entry_ms > 0, None);
        if patient {
            step = step.keeping_place(PROMISE_LIFETIME, promise_ms);
        }
        let waiter = Waiter::new(
            &inner.pubsub,
            &self.shared.keys.channel,
            if entry_ms > 0 {
                // A waiting writer's tries are its entry's heartbeat.
                WaitPolicy {
                    recheck: settings.max_wait_recheck.min(WRITER_ENTRY_TTL / 3),
                    longest_recheck: WRITER_ENTRY_TTL / 3,
                    ..settings.wait_policy(give_up_at, patient)
                }
            } else {
                settings.wait_policy(give_up_at, patient)
            },
        );
        // One write release admits every waiting reader: each must try again.
        let mut waiter = match kind {
            Kind::Read => waiter.woken_by_every_message(),
            Kind::Write => waiter,
        };
        let mut acquisition = NewOwner {
            lock: self,
            kind,
            owner,
            lease,
            renewal,
        };
        let guard =
            acquire::until_acquired(&mut acquisition, &mut step, &mut waiter, wait, started)
                .await?;
        tracing::debug!(lock = %self.shared.name, owner = %acquisition.owner, ?kind, waited = ?started.elapsed(), "dlock: acquired read-write lock");
        Ok(guard)
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
}

/// A new owner's acquisition of a read or write hold, in the shared loop.
struct NewOwner<'a> {
    lock: &'a ReadWriteLock,
    kind: Kind,
    owner: Arc<str>,
    lease: Duration,
    renewal: Option<Duration>,
}

impl Acquisition for NewOwner<'_> {
    type Guard = LockGuard;

    fn name(&self) -> &str {
        &self.lock.shared.name
    }

    fn answer(&mut self, sent_at: Instant, reply: Reply) -> Answer<LockGuard> {
        let lock = self.lock;
        match reply {
            Reply::Granted(fence) => {
                let held = Held::new(
                    lock.hold_owner(self.kind, &self.owner),
                    self.renewal,
                    sent_at + self.lease,
                    Arc::clone(&lock.shared.client.inner.metrics),
                )
                .with_fence(fence);
                Answer::Acquired(lock.guard(self.kind, &self.owner, Arc::new(held)))
            }
            Reply::Busy { wait_ms, .. } => Answer::NotYet(NotYet::Busy { ttl_ms: wait_ms }),
            other => {
                Answer::Refused(other.refusal(&lock.shared.name, "acquire", LockKind::ReadWrite))
            }
        }
    }
}
