//! Acquiring a [`Lock`]: a re-entry inside a live scope, or a new owner that lines up
//! locally, then tries the acquire script and waits for unlock messages between tries.

use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use super::guard::LockGuard;
use super::release_ops::{release_job, ReleaseKind};
use super::Lock;
use crate::error::{LossReason, Result};
use crate::fence::Fence;
use crate::kind::LockKind;
use crate::lease::{lease_millis, reentry_lease, ReentryLease};
use crate::lock::scripts::{acquire_call, extend_call, AcquireArgs};
use crate::protocol::{self, Grant, GrantReader, TakeUp};
use crate::redis::CallError;
use crate::scripts::catalog::lock::scripts;
use crate::scripts::ScriptCall;
use crate::sync::acquire::{self, Acquisition, Answer};
use crate::sync::attempt::{PlaceLifetime, RegisteredFlag, Reply, TryStep};
use crate::sync::grant;
use crate::sync::held::{Held, HoldOwner};
use crate::sync::line::LineWait;
use crate::sync::local::{Given, Place, Turn};
use crate::sync::observe::{self, Label};
use crate::sync::owner;
use crate::sync::pubsub::{Route, Subscription};
use crate::sync::release::{NextTask, ReleaseJob};
use crate::sync::verbs::Acquire;
use crate::sync::wait::{NotYet, Waiter};

/// The acquisition, traced and measured (`sync::observe`): every public way to take the
/// lock comes here.
impl Acquire for Lock {
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
            kind: "lock",
            template,
        };
        let acquisition = self.acquire_unobserved(wait, lease);
        observe::acquisition(label, &self.name, wait, acquisition).await
    }
}

impl Lock {
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
        let inner = &self.client.inner;
        inner.keep_running();
        let started = Instant::now();
        // A wait too long to represent is a wait without end.
        let give_up_at = wait.and_then(|wait| started.checked_add(wait));

        // The rarer paths are boxed (a re-entry, a wait in the local line): each await
        // makes this future as large as its own, and this future is moved on every call.
        if let Some(outer) = owner::current_hold(inner.id_bits(), &self.keys.key)
            && let Some(guard) = Box::pin(self.reenter(&outer, lease, started)).await?
        {
            return Ok(guard);
        }
        // The outer hold turned out to be gone (it is reported lost now): the scope
        // owns nothing, so this is a new owner's acquisition.
        let settings = &inner.settings;
        let renewal = lease.is_none().then_some(settings.watchdog_timeout);
        let lease = lease.unwrap_or(settings.watchdog_timeout);
        let lease_ms = lease_millis("lease", lease)?;
        let field = inner.new_owner_field();
        let fresh = Fresh {
            field,
            lease,
            lease_ms,
            renewal,
        };
        // Waiting in line, the task may be given the lock by the release before its turn.
        let next_task = || NextTask {
            field: Arc::clone(&fresh.field),
            lease_ms,
            fence: settings.fencing_tokens,
        };
        let ticket = inner.local.join(&self.line, &self.withdraw, next_task);
        let (turn, subscription) = if matches!(ticket.place(), Place::Turn) {
            (ticket.into_turn(), None)
        } else {
            match Box::pin(self.line_wait().for_turn(ticket, give_up_at)).await {
                Some(waited) => waited,
                None => {
                    inner.metrics.timed_out();
                    return Err(self.timeout(wait));
                }
            }
        };
        if let Some(given) = turn.take_given() {
            return Ok(self.hold_given(fresh, turn, given, started));
        }
        self.acquire_new(fresh, turn, subscription, wait, started, give_up_at)
            .await
    }

    /// The guard of a lock the release before `turn` gave to the task's owner: held since
    /// that release, which was sent at `given.sent_at`, with the token it minted.
    fn hold_given(
        &self,
        fresh: Fresh,
        turn: Turn<Held>,
        given: Given,
        started: Instant,
    ) -> LockGuard {
        let inner = &self.client.inner;
        let held = Arc::new(
            Held::new(
                self.hold_owner(&fresh.field),
                fresh.renewal,
                given.sent_at + fresh.lease,
                Arc::clone(&inner.metrics),
            )
            .with_fence(given.fence)
            .contended(true),
        );
        held.keep_turn(turn);
        inner.metrics.acquired(started.elapsed());
        tracing::debug!(lock = %self.name, owner = %fresh.field, waited = ?started.elapsed(), "dlock: acquired from the release before it");
        self.guard(held)
    }

    /// The hold of the lock a release of another client gave the owner `field` (see
    /// `sync::grant`), extended to `lease` in the background; `None` when the owner
    /// cannot hold it as it is, and takes it with a try instead (see
    /// [`protocol::take_up`]).
    fn granted_hold(
        &self,
        field: &Arc<str>,
        lease: Duration,
        renewal: Option<Duration>,
        grant: Grant,
        first: FirstSend,
    ) -> Option<Arc<Held>> {
        let inner = &self.client.inner;
        let settings = &inner.settings;
        let reader = GrantReader {
            first_sent: first.at,
            now: Instant::now(),
            lease,
            replica_acks: settings.replica_acks.is_some(),
            wants_token: settings.fencing_tokens,
            route_moved: inner.pubsub.route() != first.route,
        };
        let TakeUp::Hold { deadline } = protocol::take_up(grant, &reader) else {
            return None;
        };
        let fence = grant
            .token
            .filter(|_| settings.fencing_tokens)
            .map(Fence::new);
        let held = Arc::new(
            Held::new(
                self.hold_owner(field),
                renewal,
                deadline,
                Arc::clone(&inner.metrics),
            )
            .with_fence(fence)
            .contended(true)
            .extending(),
        );
        let call = extend_call(
            &self.keys,
            field,
            lease_millis("lease", lease).ok()?,
            inner.backend.publish_command(),
        );
        let (client, leave) = (Arc::clone(inner), self.leave_release(field));
        grant::extend(
            inner.backend.clone(),
            Arc::clone(&held),
            call,
            lease,
            settings.retry_delay,
            move || client.release_in_background(leave),
        );
        Some(held)
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
        let field = Arc::clone(&outer.field);
        let marker = self.keys.marker(&field, op);
        let call = self.acquire_call(&field, lease_ms, Some(&marker), 0);
        let mut step = TryStep::new(&**inner, &self.name, field, call, |field| {
            vec![release_job(
                &self.name,
                &self.keys,
                field,
                ReleaseKind::Reentry { op },
            )]
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
                // An outer hold given by another client's release lives on the grant's
                // deadline until its extension is answered (one round trip): the re-entry
                // shares the extended one.
                outer.extended().await;
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
            Reply::NotHeld | Reply::Busy { .. } => {
                outer.mark_lost(LossReason::NotHeldOnCheck);
                Ok(None)
            }
            other => {
                step.give_up().await;
                inner.metrics.acquire_failed();
                Err(other.refusal(&self.name, "acquire", LockKind::Lock))
            }
        }
    }

    /// The acquire script's call for `field` with lease `lease_ms`: a re-entry with its
    /// `marker`, or (`None`) a fresh owner, whose busy tries register it as waiting for
    /// `registry_ms` (0: a single try, which registers nothing).
    fn acquire_call(
        &self,
        field: &str,
        lease_ms: u64,
        marker: Option<&str>,
        registry_ms: u64,
    ) -> ScriptCall {
        let inner = &self.client.inner;
        acquire_call(
            &self.keys,
            field,
            AcquireArgs {
                lease_ms,
                fence: inner.settings.fence_arg(),
                registry_ms,
                publish: inner.backend.publish_command(),
                reentry: marker
                    .map(|marker| (marker, inner.settings.memo_ttl().as_millis() as u64)),
            },
        )
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
    pub(crate) fn withdraw_release(&self, field: &str) -> ReleaseJob {
        release_job(&self.name, &self.keys, field, ReleaseKind::Withdraw)
    }

    /// The `leave` of the owner `field`, which holds nothing of this lock and does not
    /// wait for it (a multi-lock that passed it on): it goes on telling the waiters a
    /// hand-off left untold.
    pub(crate) fn leave_release(&self, field: &str) -> ReleaseJob {
        release_job(&self.name, &self.keys, field, ReleaseKind::Leave).uncounted()
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

    /// A wait in the client's local line for this lock (see `sync::line`).
    fn line_wait(&self) -> LineWait<'_> {
        let inner = &self.client.inner;
        LineWait {
            name: &self.name,
            key: &self.keys.key,
            wake: &self.wake,
            leave: &self.leave,
            report: self.keys.line_report(&inner.id_text),
            backend: &inner.backend,
            pubsub: &inner.pubsub,
            recheck: inner.settings.max_wait_recheck,
        }
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

    /// Whether the waiting owner `field` is still in the lock's waiter registry, once its
    /// client listens on its wake channel: then no release passed the lock to it, or told
    /// it anything, while it did not listen yet. Every such message goes to a registered
    /// waiter and, when nobody receives it, takes the waiter out of the registry (see
    /// `handoff.lua`); a message received since then is waiting for the owner. One
    /// `ZSCORE` instead of a second busy try, which registers again and records a
    /// promise. An error answers no: the owner tries.
    pub(crate) async fn still_registered(&self, field: &str) -> bool {
        let score: std::result::Result<Option<String>, CallError> = self
            .client
            .inner
            .backend
            .query(redis::cmd("ZSCORE").arg(&self.keys.channel).arg(field))
            .await;
        matches!(score, Ok(Some(_)))
    }

    /// A new owner's acquisition, once it has the local turn: tries, then waits for its
    /// hand-off (or the time the lock can change hands, or `max_wait_recheck`) and tries
    /// again, riding out Redis errors for up to `failover_wait` (`sync::acquire`).
    #[expect(
        clippy::manual_async_fn,
        reason = "an async fn keeps its arguments twice in the state a waiting task keeps"
    )]
    fn acquire_new(
        &self,
        fresh: Fresh,
        turn: Turn<Held>,
        line_subscription: Option<Subscription>,
        wait: Option<Duration>,
        started: Instant,
        give_up_at: Option<Instant>,
    ) -> impl std::future::Future<Output = Result<LockGuard>> + '_ {
        // An async block rather than an `async fn`: an `async fn` keeps its arguments
        // twice in its state (as arguments and as the locals they move into), and this
        // state is what a waiting task keeps.
        async move {
            let inner = &self.client.inner;
            let settings = &inner.settings;
            let waits = wait != Some(Duration::ZERO);
            // A single try does not wait, so it must not be passed the lock in anyone's turn.
            let registry_ms = if waits {
                settings.registry_ttl().as_millis() as u64
            } else {
                0
            };
            let call = self.acquire_call(&fresh.field, fresh.lease_ms, None, registry_ms);
            let mut step = TryStep::new(
                &**inner,
                &self.name,
                Arc::clone(&fresh.field),
                call,
                |field| vec![self.withdraw_release(field)],
            )
            .replicated()
            .waiting(waits, Some(REGISTERED_FLAG));
            if waits {
                step = step.keeping_place(REGISTRY_LIFETIME, registry_ms);
            }
            // Adopts the channel the line kept subscribed (or this client's other waiters
            // did): a hand-off to this owner is heard from its first try on.
            let channels = [(&*self.wake, Some(&self.leave))];
            let mut waiter = Waiter::for_owner(
                &inner.pubsub,
                &channels,
                &fresh.field,
                settings.wait_policy(give_up_at, waits),
            );
            let mut acquisition = NewOwner {
                lock: self,
                // Waited in line: others may wait for it too.
                contended: line_subscription.is_some(),
                fresh: &fresh,
                turn: Some(turn),
                // Every try of this acquisition is sent from now on: a grant's deadline
                // counts from here, on the route the client has now (see `sync::grant`).
                first_sent: FirstSend {
                    at: Instant::now(),
                    route: inner.pubsub.route(),
                },
            };
            drop(line_subscription);
            let guard =
                acquire::until_acquired(&mut acquisition, &mut step, &mut waiter, wait, started)
                    .await?;
            tracing::debug!(lock = %self.name, owner = %fresh.field, waited = ?started.elapsed(), "dlock: acquired");
            Ok(guard)
        }
    }
}

/// A new owner's acquisition of a [`Lock`], in the shared loop.
struct NewOwner<'a> {
    lock: &'a Lock,
    fresh: &'a Fresh,
    /// The owner's local turn, kept by its hold.
    turn: Option<Turn<Held>>,
    /// Waited in line or found the lock busy: others may wait for it too.
    contended: bool,
    first_sent: FirstSend,
}

impl NewOwner<'_> {
    fn guard(&mut self, held: Held) -> LockGuard {
        let held = Arc::new(held.contended(self.contended));
        if let Some(turn) = self.turn.take() {
            held.keep_turn(turn);
        }
        self.lock.guard(held)
    }
}

impl Acquisition for NewOwner<'_> {
    type Guard = LockGuard;

    fn name(&self) -> &str {
        &self.lock.name
    }

    fn answer(&mut self, sent_at: Instant, reply: Reply) -> Answer<LockGuard> {
        match reply {
            Reply::Granted(fence) => {
                let held = Held::new(
                    self.lock.hold_owner(&self.fresh.field),
                    self.fresh.renewal,
                    sent_at + self.fresh.lease,
                    Arc::clone(&self.lock.client.inner.metrics),
                )
                .with_fence(fence);
                Answer::Acquired(self.guard(held))
            }
            Reply::Busy { wait_ms, .. } => {
                self.contended = true;
                Answer::NotYet(NotYet::Busy { ttl_ms: wait_ms })
            }
            other => Answer::Refused(other.refusal(&self.lock.name, "acquire", LockKind::Lock)),
        }
    }

    async fn missed(&self, nap_until: Instant) -> Option<Instant> {
        self.lock
            .still_registered(&self.fresh.field)
            .await
            .then_some(nap_until)
    }

    fn handed_over(&mut self, grant: Grant) -> Option<LockGuard> {
        let held = self.lock.granted_hold(
            &self.fresh.field,
            self.fresh.lease,
            self.fresh.renewal,
            grant,
            self.first_sent,
        )?;
        if let Some(turn) = self.turn.take() {
            held.keep_turn(turn);
        }
        Some(self.lock.guard(held))
    }
}

/// When an acquisition's first try was sent, and where the client's commands and
/// messages went then: a grant's deadline counts from it, and only on the same route.
#[derive(Clone, Copy)]
struct FirstSend {
    at: Instant,
    route: Route,
}

/// A new owner's acquisition: its owner field (used by this acquisition only) and lease.
struct Fresh {
    field: Arc<str>,
    lease: Duration,
    lease_ms: u64,
    /// The watchdog's renewal, without an explicit lease.
    renewal: Option<Duration>,
}

/// The acquire script's argument that says whether an earlier try of the acquisition may
/// have registered its owner (`ARGV[5]`, see `scripts/acquire.lua`).
const REGISTERED_FLAG: RegisteredFlag = RegisteredFlag(4);

/// The acquire script's argument that says how long the registry lives past the
/// registration (`ARGV[4]`).
const REGISTRY_LIFETIME: PlaceLifetime = PlaceLifetime(3);
