//! A task's wait in its client's local line (`sync::local`) until it has the turn: what
//! the client's core says to wait for ([`LineWatch`]), performed.
//!
//! The first task in line watches the hold ahead of it: it marks the holder lost (which
//! gives up the turn) when its lease runs out, and asks Redis about it when the core says
//! (after the hold's grace, once its subscription is confirmed, after every message for
//! the lock and every `max_wait_recheck`), so that a lock free in Redis frees the line as
//! soon as a waiter in another process would get it. Every task in line keeps a
//! subscription to its client's wake channel for the lock, so that a busy line stays
//! subscribed from hand-off to hand-off.
//!
//! With each check of the holder goes the line's report for `inspect`: how many tasks of
//! this client wait in the line, which Redis' registry does not show (see
//! `LockKeys::line_report`). It lives three recheck intervals and a second unless a check
//! renews it, and the line's last task takes it back when its wait ends.
//!
//! A task waiting behind a hold it took itself (`lock()` twice without `scope`) waits
//! forever; the same state is legitimate when another future of the task holds it
//! (`join!`), so it cannot be refused. After [`SELF_WAIT_WARNING`] it is logged.

use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use crate::error::LossReason;
use crate::protocol::{LineWatch, Watch};
use crate::redis::Backend;
use crate::sync::held::Held;
use crate::sync::local::{Place, Ticket, Turn};
use crate::sync::pubsub::{PubSubService, Subscription};
use crate::sync::recheck::place_lifetime;
use crate::sync::release::OwnerRelease;

/// How long a task waits behind a hold it acquired itself before that is logged.
const SELF_WAIT_WARNING: Duration = Duration::from_secs(5);

/// What a wait in the local line needs of the lock it waits for and of its client.
pub(crate) struct LineWait<'a> {
    /// The lock's name, for the self-wait warning.
    pub(crate) name: &'a str,
    /// The lock's hash: a holder is checked there.
    pub(crate) key: &'a str,
    /// The client's wake channel for the lock, and the `leave` of a message for an owner
    /// that no longer waits.
    pub(crate) wake: &'a str,
    pub(crate) leave: &'a OwnerRelease,
    /// Where the line's length is reported for `inspect`.
    pub(crate) report: String,
    pub(crate) backend: &'a Backend,
    pub(crate) pubsub: &'a PubSubService,
    /// The client's `max_wait_recheck`.
    pub(crate) recheck: Duration,
}

impl LineWait<'_> {
    /// Waits until `ticket` has the turn, or `None` when `give_up_at` passes first.
    /// Returns the turn with the lock's channel subscription if it had to wait: kept for
    /// the wait in Redis, so that a busy line does not unsubscribe and subscribe again at
    /// every hand-off. (It takes the wait by value: the wait lives in this future, not in
    /// the acquisition's, which every task that waits in Redis keeps.)
    pub(crate) async fn for_turn(
        self,
        ticket: Ticket<Held>,
        give_up_at: Option<Instant>,
    ) -> Option<(Turn<Held>, Option<Subscription>)> {
        // However the wait ends (the turn, the deadline, the acquisition dropped), the last
        // task of a reported line takes the report back.
        let report = ReportBack {
            line: &self,
            ticket: &ticket,
        };
        let waited = self.until_turn(&ticket);
        let watching = match give_up_at {
            Some(at) => tokio::time::timeout_at(at, waited).await.ok()?,
            None => waited.await,
        };
        drop(report);
        Some((ticket.into_turn(), watching))
    }

    /// [`for_turn`](Self::for_turn) without a deadline. Returns the subscription it kept.
    async fn until_turn(&self, ticket: &Ticket<Held>) -> Option<Subscription> {
        let mut watching: Option<Subscription> = None;
        let mut watch = LineWatch::default();
        let mut own_hold = SelfWait::new();
        loop {
            let holder = match ticket.place() {
                Place::Turn => return watching,
                Place::First => ticket.holder(),
                Place::Behind => None,
            };
            let subscription =
                watching.get_or_insert_with(|| self.pubsub.watch_wake(self.wake, self.leave));
            let seen = holder
                .as_ref()
                .map(|held| (Arc::as_ptr(held) as usize, held.acquired_at));
            let next = watch.next(seen, Instant::now(), subscription.is_confirmed());
            let Some(holder) = holder else {
                ticket.moved().await;
                continue;
            };
            let check = match next {
                Watch::Behind => false,
                Watch::Check => true,
                Watch::Until(at) => {
                    tokio::select! {
                        () = ticket.moved() => {}
                        () = tokio::time::sleep_until(at) => {}
                    }
                    false
                }
                Watch::Confirming => self.confirming(ticket, &holder, subscription).await,
                Watch::Watching => {
                    self.watching(ticket, &holder, subscription, &mut own_hold)
                        .await
                }
            };
            if check {
                self.check_holder(&holder, ticket).await;
            }
        }
    }

    /// Waits for the line to move, the holder to be lost or the subscription to be
    /// confirmed; whether the holder is to be checked (a recheck came first).
    async fn confirming(
        &self,
        ticket: &Ticket<Held>,
        holder: &Held,
        subscription: &mut Subscription,
    ) -> bool {
        tokio::select! {
            () = ticket.moved() => false,
            _ = holder.wait_lost() => false,
            () = subscription.confirmed() => false,
            () = tokio::time::sleep(self.recheck) => true,
        }
    }

    /// Waits for the line to move or the holder to be lost; whether the holder is to be
    /// checked (a message for the lock or a recheck came first).
    async fn watching(
        &self,
        ticket: &Ticket<Held>,
        holder: &Held,
        subscription: &mut Subscription,
        own_hold: &mut SelfWait,
    ) -> bool {
        tokio::select! {
            () = ticket.moved() => false,
            _ = holder.wait_lost() => false,
            () = subscription.noticed() => true,
            () = tokio::time::sleep(self.recheck) => true,
            () = own_hold.warning(self.name, holder) => false,
        }
    }

    /// Marks `holder` lost when Redis no longer has its hold, and reports how many tasks
    /// wait in `ticket`'s line.
    async fn check_holder(&self, holder: &Held, ticket: &Ticket<Held>) {
        if !holder.is_live() {
            return;
        }
        let mut exists = redis::cmd("HEXISTS");
        exists.arg(self.key).arg(&*holder.field);
        let lifetime = place_lifetime(self.recheck);
        let mut report = redis::cmd("SET");
        report
            .arg(&self.report)
            .arg(ticket.in_line())
            .arg("PX")
            .arg(lifetime.as_millis() as u64);
        let (held, reported) = tokio::join!(
            self.backend.query::<bool>(&exists),
            self.backend.query::<()>(&report)
        );
        if reported.is_ok() {
            ticket.mark_reported();
        }
        if let Ok(false) = held {
            holder.mark_lost(LossReason::NotHeldOnCheck);
        }
    }

    /// Takes the line's report back, in the background: the line is empty. (Not on a
    /// runtime, as when an acquisition is dropped outside one, the report expires.)
    fn clear_report(&self) {
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return;
        };
        let backend = self.backend.clone();
        let mut clear = redis::cmd("DEL");
        clear.arg(&self.report);
        runtime.spawn(async move {
            let _ = backend.query::<()>(&clear).await;
        });
    }
}

/// Takes a line's report back when a wait for the turn ends, by the turn or without it,
/// and nobody else waits in the line.
struct ReportBack<'a> {
    line: &'a LineWait<'a>,
    ticket: &'a Ticket<Held>,
}

impl Drop for ReportBack<'_> {
    fn drop(&mut self) {
        if self.ticket.take_report_if_alone() {
            self.line.clear_report();
        }
    }
}

/// The warning for a task that waits in its line behind a hold it acquired itself, given
/// once per wait.
struct SelfWait {
    at: Instant,
    warned: bool,
}

impl SelfWait {
    fn new() -> SelfWait {
        SelfWait {
            at: Instant::now() + SELF_WAIT_WARNING,
            warned: false,
        }
    }

    /// Completes once it has warned that this task waits behind `holder`, a hold it
    /// acquired itself, since [`SELF_WAIT_WARNING`]; never when the hold is another
    /// task's (outside any task, the body of `block_on`, both are `None`) or it warned
    /// already.
    async fn warning(&mut self, name: &str, holder: &Held) {
        if self.warned || holder.acquired_in != tokio::task::try_id() {
            return std::future::pending().await;
        }
        tokio::time::sleep_until(self.at).await;
        self.warned = true;
        tracing::warn!(lock = %name, "dlock: this task has waited {} for a lock it acquired itself and still holds; unless another future of the task (join!) releases it, this never ends. To take a lock again inside its own critical section, run that code in `guard.scope(...)`", humantime::format_duration(SELF_WAIT_WARNING));
    }
}
