//! Acquiring a [`MultiLock`]: one lock after the other in canonical order (sequential),
//! or all at once by one script (same slot).

use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use super::{Mode, MultiGuard, MultiLock};
use crate::error::{LockError, Result};
use crate::kind::LockKind;
use crate::lease::lease_millis;
use crate::lock::guard::LockGuard;
use crate::protocol::GRANT;
use crate::scripts::catalog::multi::multi_scripts;
use crate::sync::acquire::{self, Acquisition, Answer};
use crate::sync::attempt::{Host, PlaceLifetime, RegisteredFlag, Reply, TryStep};
use crate::sync::observe::{self, Label};
use crate::sync::owner;
use crate::sync::release::OwnerRelease;
use crate::sync::verbs::Acquire;
use crate::sync::wait::{NotYet, Waiter};
use crate::sync::watchdog::renew_once;

/// The acquisition, traced and measured (`sync::observe`) under the set's names.
impl Acquire for MultiLock {
    type Guard = MultiGuard;

    fn default_wait(&self) -> Option<Duration> {
        self.first_client().inner.settings.default_wait
    }

    async fn acquire(
        &self,
        wait: Option<Duration>,
        lease: Option<Duration>,
        template: Option<&'static str>,
    ) -> Result<MultiGuard> {
        let names = self.names().join(", ");
        let label = Label {
            kind: "multi_lock",
            template,
        };
        let acquisition = self.acquire_unobserved(wait, lease);
        observe::acquisition(label, &names, wait, acquisition).await
    }
}

impl MultiLock {
    /// The acquisition of the whole set within one wait budget (`None`: no end);
    /// `lease: None` uses the watchdog.
    async fn acquire_unobserved(
        &self,
        wait: Option<Duration>,
        lease: Option<Duration>,
    ) -> Result<MultiGuard> {
        if let Some(lease) = lease {
            lease_millis("lease", lease)?;
        }
        let started = Instant::now();
        let give_up_at = wait.and_then(|wait| started.checked_add(wait));
        let outcome = match self.mode {
            Mode::SameSlot if !self.any_held_by_chain() => {
                self.acquire_same_slot(wait, lease, give_up_at).await
            }
            _ => self.acquire_sequential(lease, give_up_at).await,
        };
        // A lock's own timeout names its share of the budget; the caller gave the whole.
        outcome.map_err(|error| match error {
            LockError::Timeout { name, .. } => LockError::Timeout {
                name,
                waited: wait.unwrap_or_default(),
                permits: None,
            },
            other => other,
        })
    }

    /// Whether the current call chain holds one of the locks (a same-slot set then goes
    /// the sequential way, which re-enters it).
    fn any_held_by_chain(&self) -> bool {
        self.locks
            .iter()
            .any(|lock| owner::current_hold(lock.client().inner.id_bits(), lock.key()).is_some())
    }

    /// Each lock through its own acquisition, in canonical order, sharing the budget. A
    /// failure gives back the locks already taken, then reports; no release-and-retry
    /// loop is needed, since the order is the same for every multi-lock.
    ///
    /// Cancellation: the lock being acquired cancels its own attempt (its in-flight
    /// script is undone in the background) and the guards already held release in the
    /// background when dropped.
    async fn acquire_sequential(
        &self,
        lease: Option<Duration>,
        give_up_at: Option<Instant>,
    ) -> Result<MultiGuard> {
        let mut held: Vec<LockGuard> = Vec::with_capacity(self.locks.len());
        for lock in self.locks.iter() {
            let remaining = give_up_at.map(|at| at.saturating_duration_since(Instant::now()));
            let outcome = match lease {
                None => lock.acquire_unobserved(remaining, None).await,
                Some(lease) => {
                    let acquisition = lock.acquire_unobserved(remaining, Some(lease));
                    keep_alive_while(&held, lease, acquisition).await
                }
            };
            match outcome {
                Ok(guard) => held.push(guard),
                Err(error) => {
                    give_back(held).await;
                    return Err(error);
                }
            }
        }
        if let Some(lease) = lease
            && let Err(error) = refresh_early(&held, lease).await
        {
            give_back(held).await;
            return Err(error);
        }
        Ok(MultiGuard::new(held))
    }

    /// The same-slot script until it grants every lock, waiting between tries on the
    /// unlock channel of the lock it named as blocking (and its TTL, and the recheck).
    async fn acquire_same_slot(
        &self,
        wait: Option<Duration>,
        lease: Option<Duration>,
        give_up_at: Option<Instant>,
    ) -> Result<MultiGuard> {
        let first = &self.locks[0];
        let inner = &first.client().inner;
        inner.keep_running();
        let started = Instant::now();
        let settings = &inner.settings;
        let renewal = lease.is_none().then_some(settings.watchdog_timeout);
        let lease = lease.unwrap_or(settings.watchdog_timeout);
        let lease_ms = lease_millis("lease", lease)?;
        let waits = wait != Some(Duration::ZERO);
        let field = inner.new_owner_field();
        let registry_ms = if waits {
            settings.registry_ttl().as_millis() as u64
        } else {
            0
        };
        let mut call = multi_scripts().acquire.prepare_invoke();
        for lock in self.locks.iter() {
            call.key(lock.key());
        }
        for lock in self.locks.iter() {
            call.key(&*lock.keys().fence);
        }
        for lock in self.locks.iter() {
            call.key(&lock.keys().channel);
        }
        for lock in self.locks.iter() {
            call.key(&lock.keys().naps);
        }
        call.arg(lease_ms)
            .arg(&*field)
            .arg(settings.fence_arg())
            .arg(registry_ms)
            // Whether an earlier try may have registered it: set by the try step.
            .arg("0")
            .arg(inner.backend.publish_command())
            .arg(GRANT.as_millis() as u64);
        // Every hold an unanswered try may have taken, and the owner's place among each
        // lock's waiters, go lock by lock when the acquisition ends without a guard.
        let mut step = TryStep::new(&**inner, first.name(), Arc::clone(&field), call, |field| {
            self.locks
                .iter()
                .map(|lock| lock.withdraw_release(field))
                .collect()
        })
        .replicated()
        .waiting(waits, Some(REGISTERED_FLAG));
        if waits {
            step = step.keeping_place(REGISTRY_LIFETIME, registry_ms);
        }
        // The waiter listens, as the owner, on every lock's wake channel from before its
        // first try on: each try may register it with another lock (the one that blocked
        // it), whose hand-off must find it listening.
        let channels: Vec<(&str, Option<&OwnerRelease>)> = self
            .locks
            .iter()
            .map(|lock| (lock.wake_channel(), Some(lock.leave())))
            .collect();
        let mut waiter = Waiter::for_owner(
            &inner.pubsub,
            &channels,
            &field,
            settings.wait_policy(give_up_at, waits),
        );
        let mut acquisition = SameSlot {
            set: self,
            field: &field,
            lease,
            renewal,
            blocker: 0,
        };
        let guard =
            acquire::until_acquired(&mut acquisition, &mut step, &mut waiter, wait, started)
                .await?;
        tracing::debug!(locks = ?self.names(), owner = %field, "dlock: multi-lock acquired");
        Ok(guard)
    }
}

/// A same-slot multi-lock's acquisition, in the shared loop.
struct SameSlot<'a> {
    set: &'a MultiLock,
    field: &'a Arc<str>,
    lease: Duration,
    renewal: Option<Duration>,
    /// The lock the last busy try named as blocking: the owner is registered with it.
    blocker: usize,
}

impl Acquisition for SameSlot<'_> {
    type Guard = MultiGuard;

    fn name(&self) -> &str {
        self.set.locks[self.blocker].name()
    }

    fn answer(&mut self, sent_at: Instant, reply: Reply) -> Answer<MultiGuard> {
        let locks = &self.set.locks;
        match reply {
            Reply::GrantedAll(tokens) if tokens.len() == locks.len() => {
                let guards = locks
                    .iter()
                    .zip(tokens)
                    .map(|(lock, fence)| {
                        lock.adopt(self.field, self.renewal, sent_at + self.lease, fence)
                    })
                    .collect();
                Answer::Acquired(MultiGuard::new(guards))
            }
            Reply::Busy {
                wait_ms,
                at,
                untold,
            } if at < locks.len() => {
                self.blocker = at;
                if untold {
                    // A lock the set passed on left waiters untold: each other lock's
                    // `leave` of this owner goes on telling them.
                    let inner = &locks[0].client().inner;
                    for (i, lock) in locks.iter().enumerate() {
                        if i != at {
                            inner.release_in_background(lock.leave_release(self.field));
                        }
                    }
                }
                Answer::NotYet(NotYet::Busy { ttl_ms: wait_ms })
            }
            other => {
                let at = match &other {
                    Reply::WrongType { at, .. } | Reply::OtherKind { at, .. } => *at,
                    _ => 0,
                };
                let name = locks.get(at).unwrap_or(&locks[0]).name();
                Answer::Refused(other.refusal(name, "acquire", LockKind::Lock))
            }
        }
    }

    /// A first wait on channels the client did not listen on yet: the owner is
    /// registered with the lock that blocked it, and still being there once its
    /// subscriptions are confirmed means no release told it anything meanwhile (see
    /// `Lock::still_registered`): one `ZSCORE` instead of a second try.
    async fn missed(&self, nap_until: Instant) -> Option<Instant> {
        self.set.locks[self.blocker]
            .still_registered(self.field)
            .await
            .then_some(nap_until)
    }
}

/// The same-slot script's argument that says whether an earlier try of the acquisition
/// may have registered its owner (`ARGV[5]`, see `scripts/acquire.lua`).
const REGISTERED_FLAG: RegisteredFlag = RegisteredFlag(4);

/// The same-slot script's argument that says how long a lock's registry lives past the
/// owner's registration (`ARGV[4]`).
const REGISTRY_LIFETIME: PlaceLifetime = PlaceLifetime(3);

/// Runs `acquisition` while renewing the explicit-lease holds `held` to `lease` every
/// third of it, so that the locks taken first do not expire while a later one is awaited.
/// A renewal that finds a hold gone marks it lost (the set is then given up by
/// [`refresh_early`]); one that fails is tried again at the next tick, and the hold's
/// deadline stays where the last confirmed renewal put it.
async fn keep_alive_while<F>(
    held: &[LockGuard],
    lease: Duration,
    acquisition: F,
) -> Result<LockGuard>
where
    F: std::future::Future<Output = Result<LockGuard>>,
{
    if held.is_empty() {
        return acquisition.await;
    }
    tokio::pin!(acquisition);
    let every = lease / 3;
    loop {
        tokio::select! {
            outcome = &mut acquisition => return outcome,
            () = tokio::time::sleep(every) => {
                for guard in held {
                    let _ = renew(guard, lease).await;
                }
            }
        }
    }
}

/// Renews every hold but the last when it would expire noticeably (more than a
/// twentieth of the lease) before `lease` from now: every lock then lives `lease` from
/// the moment the whole set is held. (Not "before the last one": a last lock another
/// client's release gave it is held for a short grant until its extension lands.) Fails
/// when a hold is lost (found gone by a renewal while the later locks were awaited, or
/// its deadline passed).
async fn refresh_early(held: &[LockGuard], lease: Duration) -> Result<()> {
    let Some((_, early)) = held.split_last() else {
        return Ok(());
    };
    let target = std::time::Instant::now().checked_add(lease - lease / 20);
    for guard in held {
        if let Some(reason) = guard.held().loss() {
            return Err(LockError::Lost {
                name: guard.name().to_owned(),
                reason,
            });
        }
    }
    for guard in early {
        if target.is_some_and(|target| guard.deadline() < target) {
            renew(guard, lease).await?;
        }
    }
    Ok(())
}

/// One renewal of `guard`'s hold to `lease` (see `sync::watchdog::renew_once`); a hold
/// found gone is an error.
async fn renew(guard: &LockGuard, lease: Duration) -> Result<()> {
    let held = guard.held();
    let inner = &guard.client().inner;
    let lost = renew_once(&inner.backend, held, lease, inner.replica_acks())
        .await
        .map_err(|e| e.into_lock_error(&held.name, "renew"))?;
    match lost {
        None => Ok(()),
        Some(reason) => Err(LockError::Lost {
            name: held.name.to_string(),
            reason,
        }),
    }
}

/// Releases the guards of an acquisition that failed, all at once; a release that fails
/// here goes on in the background (the guard's `Drop`).
async fn give_back(held: Vec<LockGuard>) {
    futures_util::future::join_all(held.into_iter().map(LockGuard::unlock)).await;
}
