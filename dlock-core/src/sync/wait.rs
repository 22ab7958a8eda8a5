//! The wait between tries, for every primitive: after a busy answer, subscribe to the
//! lock's channel and sleep until an unlock message, the holder's TTL or the recheck
//! interval; after a Redis error, ride the outage out for up to `failover_wait`; stop at
//! the caller's deadline.
//!
//! The acquisition loop (`sync::acquire`) hands each try's outcome that is not a grant to
//! [`Waiter::wait_or_check`], which either waits and returns so the loop tries again, or
//! says why to give up.

use std::borrow::Cow;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use crate::protocol::{self, Call, Grant, Phase, Step, Wait};
use crate::redis::CallError;
use crate::sync::pubsub::{LiveOwner, OwnerWake, PubSubService, Subscription};
use crate::sync::recheck::SpacedPlace;
use crate::sync::release::OwnerRelease;

/// A try that did not acquire.
pub(crate) enum NotYet {
    /// Another owner holds it; its remaining TTL in ms (negative: no expiry or unknown).
    Busy { ttl_ms: i64 },
    /// Redis did not answer or refused.
    Unavailable(CallError),
}

/// Why to stop trying.
#[derive(Debug)]
pub(crate) enum GiveUp {
    /// The caller's wait ran out while the lock was busy.
    TimedOut,
    /// Redis stayed unavailable past `failover_wait` or the deadline, or failed in a way
    /// waiting cannot fix.
    Unavailable(CallError),
}

/// How long and how to wait.
pub(crate) struct WaitPolicy {
    /// The longest sleep without trying again (a missed unlock message costs this) while
    /// few tasks of the client wait; spaced out up to `longest_recheck` when many do (see
    /// [`Waiter::plan_recheck`]).
    pub(crate) recheck: Duration,
    /// How far spacing may stretch `recheck`: what keeps the waiter's place among the
    /// waiters alive when its tries do not (a fair lock's queue entry, a waiting writer's
    /// entry), else [`LONGEST_SPACED_RECHECK`](crate::sync::recheck::LONGEST_SPACED_RECHECK).
    pub(crate) longest_recheck: Duration,
    /// How long a run of Redis errors is ridden out.
    pub(crate) failover_wait: Duration,
    /// When to give up; `None` waits as long as it takes.
    pub(crate) give_up_at: Option<Instant>,
    /// `false` for a single try (`wait` of zero): errors are reported at once.
    pub(crate) patient: bool,
}

/// One acquisition's waiting state: its subscriptions (kept across tries, so no unlock
/// message is missed between them) and the start of the current outage.
pub(crate) struct Waiter<'a> {
    pubsub: &'a PubSubService,
    /// The channels it listens on: a shared channel, or the wake channels the owner
    /// waits on (a multi-lock's, one per lock), each with how to give up a message for an
    /// owner of this client that no longer waits. Borrowed from an owner's caller.
    channels: Cow<'a, [(&'a str, Option<&'a OwnerRelease>)]>,
    /// The owner this waiter waits as on wake channels (messages name it); `None` on a
    /// shared channel.
    owner: Option<&'a Arc<str>>,
    /// The owner's wake-up, shared by its subscriptions: made with the first of them (or
    /// by a message for the owner that came before it listened, see `live`).
    wake: Option<Arc<OwnerWake>>,
    /// The owner counted among its client's live waiting owners while this waiter lives,
    /// for an acquisition that waits: a message naming it before it listens waits for it.
    live: Option<LiveOwner>,
    policy: WaitPolicy,
    /// One per channel once the waiter waited (or adopted them all before its first try).
    subscriptions: Vec<Subscription>,
    /// Whether the subscriptions were confirmed before the last try, so that no unlock
    /// message since that try can have been missed.
    confirmed: bool,
    outage: Option<Instant>,
    /// Whether every unlock message on the channel wakes this waiter (see
    /// [`Waiter::woken_by_every_message`]) rather than one waiter per message.
    every_message: bool,
    /// Its share of its client's rechecks, taken when it first plans one.
    place: Option<SpacedPlace<'a>>,
    /// The recheck interval planned before the last try (see [`Waiter::plan_recheck`]).
    planned: Option<Duration>,
}

impl<'a> Waiter<'a> {
    /// A waiter on the shared `channel`; it adopts the channel's subscription if its
    /// client listens there already (see [`Waiter::adopt_subscribed`]).
    ///
    /// Create it before the first try.
    pub(crate) fn new(pubsub: &'a PubSubService, channel: &'a str, policy: WaitPolicy) -> Self {
        Waiter {
            pubsub,
            channels: Cow::Owned(vec![(channel, None)]),
            owner: None,
            wake: None,
            live: None,
            policy,
            subscriptions: Vec::new(),
            confirmed: false,
            outage: None,
            every_message: false,
            place: None,
            planned: None,
        }
        .adopt_subscribed()
    }

    /// A waiter as `owner` on its client's wake channels `channels` (one per lock it
    /// waits for, with the lock's way to give up a message, if it has one): the release
    /// that passes a lock to it, or wakes it, names it (see `sync::pubsub`), on whichever
    /// lock's channel. It adopts the channels its client listens on already (see
    /// [`Waiter::adopt_subscribed`]).
    ///
    /// Create it before the first try: an acquisition that waits counts its owner among
    /// the client's live waiting owners from then on, so that a message naming it that
    /// arrives before it listens on the channel waits for it (see
    /// [`PubSubService::live_owner`]); one that does not wait registers nowhere in Redis,
    /// so no message names it.
    pub(crate) fn for_owner(
        pubsub: &'a PubSubService,
        channels: &'a [(&'a str, Option<&'a OwnerRelease>)],
        owner: &'a Arc<str>,
        policy: WaitPolicy,
    ) -> Self {
        Waiter {
            pubsub,
            channels: Cow::Borrowed(channels),
            owner: Some(owner),
            wake: None,
            live: policy.patient.then(|| pubsub.live_owner(owner)),
            policy,
            subscriptions: Vec::new(),
            confirmed: false,
            outage: None,
            every_message: false,
            place: None,
            planned: None,
        }
        .adopt_subscribed()
    }

    /// Before the first try, subscribes to the channels its client listens on already
    /// (other waiters of the lock, or a channel lingering after its last waiter), which
    /// costs nothing at Redis: a release after the first try is heard there, and when
    /// every channel is adopted and confirmed, a busy first try goes straight to waiting
    /// instead of trying again once its subscriptions are confirmed.
    fn adopt_subscribed(mut self) -> Self {
        for &(channel, leave) in self.channels.iter() {
            if self.pubsub.is_subscribed(channel) {
                let subscription = subscribe(
                    self.pubsub,
                    self.owner,
                    self.live.as_ref(),
                    &mut self.wake,
                    channel,
                    leave,
                );
                self.subscriptions.push(subscription);
            }
        }
        self.confirmed = self.subscriptions.len() == self.channels.len()
            && self.subscriptions.iter().all(Subscription::is_confirmed);
        self
    }

    /// Makes every unlock message on the channel wake this waiter, whoever else it wakes,
    /// but for a writers-only message, which only brings its next try forward.
    ///
    /// A message normally wakes one waiter of the client: one hand-off admits one owner.
    /// When one release admits many owners at once (a writer's release admits every
    /// waiting reader), each of them must try again, and waking them one per message
    /// would serialise them behind messages that never come. A release that only a writer
    /// can use (the lock freed while writers wait, who go first) wakes none of them.
    pub(crate) fn woken_by_every_message(mut self) -> Self {
        self.every_message = true;
        self
    }

    /// Plans the longest sleep without a message after the next try, and returns it: the
    /// policy's `recheck`, spaced out when many tasks of the client wait (see
    /// `sync::recheck`). Called before every try of an acquisition that waits, the first
    /// included. A primitive whose place among the waiters lives by its tries (the lock's
    /// registry, a waiter's promise) makes that try keep it for three such intervals and
    /// a second (`sync::recheck::place_lifetime`); a wait after a try planned for nothing
    /// sleeps at most `recheck`, which a try's place is made for by default.
    pub(crate) fn plan_recheck(&mut self) -> Duration {
        let pubsub = self.pubsub;
        let place = self.place.get_or_insert_with(|| pubsub.rechecks().join());
        let planned = place.interval(self.policy.recheck, self.policy.longest_recheck);
        self.planned = Some(planned);
        planned
    }

    /// The lock a release gave the owner since the last call, if any (see `sync::grant`).
    pub(crate) fn take_grant(&self) -> Option<Grant> {
        self.wake.as_ref().and_then(|wake| wake.take_grant())
    }

    /// When the acquisition gives up; `None` waits as long as it takes.
    pub(crate) fn give_up_at(&self) -> Option<Instant> {
        self.policy.give_up_at
    }

    /// Whether the acquisition waits when it finds the lock taken (a single try does not).
    pub(crate) fn waits(&self) -> bool {
        self.policy.patient
    }

    /// Waits after `outcome` until the next try is worth it, or says why to give up. A
    /// busy answer's wait is the core's ([`protocol::Wait`]): this performs what each of
    /// its phases asks and tells it what happened. A try sent before the subscriptions
    /// were confirmed may have missed a release: once they are, `check` (the primitive's
    /// cheaper question than a try, given the end of the busy answer's nap) answers until
    /// when the waiter may sleep on, or `None` to try now.
    pub(crate) async fn wait_or_check<F>(
        &mut self,
        outcome: NotYet,
        check: impl FnOnce(Instant) -> F,
    ) -> Result<(), GiveUp>
    where
        F: Future<Output = Option<Instant>>,
    {
        let ttl_ms = match outcome {
            NotYet::Busy { ttl_ms } => ttl_ms,
            NotYet::Unavailable(error) => return self.ride_out(error).await,
        };
        self.outage = None;
        let heard = std::mem::replace(&mut self.confirmed, true);
        let recheck = self.planned.unwrap_or(self.policy.recheck);
        let give_up_at = self.policy.give_up_at;
        let mut check = Some(check);
        let mut step = Wait::after_busy(Instant::now(), ttl_ms, recheck, give_up_at, heard, None);
        loop {
            let wait = match step {
                Step::Wait(wait) => {
                    self.subscribe_all();
                    wait
                }
                // A grant stays with the owner's wake-up for the acquisition to take.
                Step::Try | Step::Granted(_) => return Ok(()),
                Step::GiveUp => return Err(GiveUp::TimedOut),
            };
            step = match wait.phase {
                Phase::Asleep => self.sleep(wait).await,
                Phase::Subscribing => {
                    tracing::trace!(channel = %self.channels[0].0, ttl_ms, "dlock: waiting for release");
                    let confirmations = futures_util::future::join_all(
                        self.subscriptions.iter_mut().map(Subscription::confirmed),
                    );
                    match tokio::time::timeout_at(wait.until, confirmations).await {
                        Ok(_) => Step::Wait(wait.confirmed()),
                        Err(_) => wait.timer(Instant::now()),
                    }
                }
                Phase::Checking => {
                    let answer = match check.take() {
                        Some(check) => check(wait.nap_until).await,
                        None => None,
                    };
                    wait.checked(Instant::now(), answer)
                }
            };
        }
    }

    /// Sleeps as `wait` asks, until a message or its timer, and says what comes next.
    async fn sleep(&mut self, wait: Wait<Instant>) -> Step<Instant> {
        if let Some(wake) = &self.wake {
            return match wake.next_call(wait.until).await {
                Some(call) => wait.called(Instant::now(), call),
                None => wait.timer(Instant::now()),
            };
        }
        let Some(subscription) = self.subscriptions.first_mut() else {
            // No channel to hear on (a waiter always has one): the timer alone.
            tokio::time::sleep_until(wait.until).await;
            return wait.timer(Instant::now());
        };
        // A shared channel's message asks every waiter it wakes to try now.
        if self.every_message {
            subscription.called_by_every(wait.until).await;
            return Step::Try;
        }
        match tokio::time::timeout_at(wait.until, subscription.notified()).await {
            Ok(()) => wait.called(Instant::now(), Call::Now),
            Err(_) => wait.timer(Instant::now()),
        }
    }

    /// Subscribes to every channel not subscribed yet (all of them, or the ones an owner
    /// could not adopt), keeping the ones it has.
    fn subscribe_all(&mut self) {
        if self.subscriptions.len() == self.channels.len() {
            return;
        }
        let (pubsub, owner, live) = (self.pubsub, self.owner, self.live.as_ref());
        let wake = &mut self.wake;
        let mut adopted = std::mem::take(&mut self.subscriptions);
        self.subscriptions = self
            .channels
            .iter()
            .map(|&(channel, leave)| {
                if let Some(at) = adopted.iter().position(|s| s.channel() == channel) {
                    return adopted.swap_remove(at);
                }
                subscribe(pubsub, owner, live, wake, channel, leave)
            })
            .collect();
    }

    async fn ride_out(&mut self, error: CallError) -> Result<(), GiveUp> {
        let now = Instant::now();
        let since = *self.outage.get_or_insert(now);
        let policy = &self.policy;
        let resume_at = (policy.patient && error.is_transient())
            .then(|| {
                protocol::ride_out(
                    now,
                    since,
                    policy.recheck,
                    policy.failover_wait,
                    policy.give_up_at,
                )
            })
            .flatten();
        let Some(resume_at) = resume_at else {
            return Err(GiveUp::Unavailable(error));
        };
        tracing::debug!(channel = %self.channels[0].0, %error, "dlock: Redis unavailable while waiting; retrying");
        tokio::time::sleep_until(resume_at).await;
        Ok(())
    }
}

/// A subscription to `channel`: as `owner` with its wake-up `wake` (made with its first
/// subscription, or taken from `live`, where a message may have made it already) on a
/// wake channel, or on a shared channel without an owner.
fn subscribe(
    pubsub: &PubSubService,
    owner: Option<&Arc<str>>,
    live: Option<&LiveOwner>,
    wake: &mut Option<Arc<OwnerWake>>,
    channel: &str,
    leave: Option<&OwnerRelease>,
) -> Subscription {
    match owner {
        Some(owner) => {
            let wake = wake.get_or_insert_with(|| live.map_or_else(Arc::default, LiveOwner::wake));
            pubsub.subscribe_owner(channel, owner, wake, leave)
        }
        None => pubsub.subscribe(channel),
    }
}
