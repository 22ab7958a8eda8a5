//! The state one held lock shares between its guard, the watchdog, `lost()` futures, the
//! call-chain scopes and the client's local line.

use std::sync::atomic::{AtomicBool, AtomicU8, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use crate::scripts::Script;
use tokio::sync::Notify;
use tokio::time::Instant;

use crate::error::LossReason;
use crate::fence::Fence;
use crate::sync::local::Turn;
use crate::sync::metrics::Metrics;
use crate::sync::observe::{self, Label};
use crate::sync::release::{NextHolder, NextInLine};

const HELD: u8 = 0;
const RELEASED: u8 = 1;
const LOST: u8 = 2;

/// One guard's view of its hold on a lock.
pub(crate) struct Held {
    pub(crate) name: Arc<str>,
    /// The key the hold lives in: renewed, and grouped by its cluster slot, by the watchdog.
    pub(crate) key: Arc<str>,
    /// The primitive's renew script (see [`watchdog`](crate::sync::watchdog) for its
    /// contract), used while `renewal` is set.
    pub(crate) renew_script: &'static Script,
    /// `<client-id>:<owner-id>`: the hash field this owner holds.
    pub(crate) field: Arc<str>,
    /// The lease renewals ask for, `None` when this hold is never renewed (an explicit
    /// lease, or a re-entry living on its outer hold's explicit lease).
    pub(crate) renewal: Option<Duration>,
    /// Local deadline on the monotonic clock: send time of the last confirmed acquire or
    /// renewal + lease. Redis cannot expire the lock before it, so past it the holder must
    /// assume someone else may hold the lock, even when Redis is unreachable.
    deadline: Mutex<Instant>,
    state: AtomicU8,
    reason: OnceLock<LossReason>,
    /// Whether the hold is a grant from another client's release whose extension to the
    /// lease is still on its way (see `sync::grant`): its deadline is the grant's until
    /// then.
    extending: AtomicBool,
    /// It was taken only after a wait (see [`NextInLine::contended`]).
    contended: bool,
    changed: Notify,
    /// This hold's place at the head of the client's local line, if it took one (fresh
    /// acquisitions do, re-entries do not). Given up when the hold ends: released, lost
    /// or expired, so local waiters never wait longer than ones in other processes.
    turn: Mutex<Option<Turn<Held>>>,
    /// The task that acquired it (`None` outside any task, as in `block_on`), to diagnose
    /// a task waiting for a lock it holds itself.
    pub(crate) acquired_in: Option<tokio::task::Id>,
    /// When it was acquired (when its guard was made): a local waiter asks Redis at once
    /// about a hold this old, which may have been force-unlocked or expired meanwhile.
    pub(crate) acquired_at: Instant,
    /// The fencing token minted for this hold's owner (a re-entry carries its outer
    /// hold's); `None` for kinds that do not exclude writers and clients without tokens.
    pub(crate) fence: Option<Fence>,
    metrics: Arc<Metrics>,
    /// The labels of the acquisition that took it, for the loss's metric; set when its
    /// guard is handed out.
    label: OnceLock<Label>,
}

/// Whose hold it is, and where it lives.
pub(crate) struct HoldOwner {
    pub(crate) name: Arc<str>,
    pub(crate) key: Arc<str>,
    pub(crate) renew_script: &'static Script,
    /// `<client-id>:<owner-id>`.
    pub(crate) field: Arc<str>,
}

impl Held {
    pub(crate) fn new(
        owner: HoldOwner,
        renewal: Option<Duration>,
        deadline: Instant,
        metrics: Arc<Metrics>,
    ) -> Held {
        let HoldOwner {
            name,
            key,
            renew_script,
            field,
        } = owner;
        Held {
            name,
            key,
            renew_script,
            field,
            renewal,
            deadline: Mutex::new(deadline),
            state: AtomicU8::new(HELD),
            reason: OnceLock::new(),
            extending: AtomicBool::new(false),
            contended: false,
            changed: Notify::new(),
            turn: Mutex::new(None),
            acquired_in: tokio::task::try_id(),
            acquired_at: Instant::now(),
            fence: None,
            metrics,
            label: OnceLock::new(),
        }
    }

    /// This hold with its owner's fencing token (set once, before the hold is shared).
    pub(crate) fn with_fence(mut self, fence: Option<Fence>) -> Held {
        self.fence = fence;
        self
    }

    /// This hold, granted by another client's release and held on the grant's deadline
    /// until [`extension_settled`](Held::extension_settled) (set once, before the hold
    /// is shared).
    pub(crate) fn extending(self) -> Held {
        self.extending.store(true, Ordering::Release);
        self
    }

    /// This hold, taken only after a wait when `contended`: others may wait for it too
    /// (set once, before the hold is shared).
    pub(crate) fn contended(mut self, contended: bool) -> Held {
        self.contended = contended;
        self
    }

    /// The grant's extension was answered (its deadline moved, or the hold is lost), or
    /// given up: what waits for it may read the deadline now.
    pub(crate) fn extension_settled(&self) {
        self.extending.store(false, Ordering::Release);
        self.changed.notify_waiters();
    }

    /// Completes once the hold's deadline is its lease's rather than a grant's: at once
    /// for every hold but a grant whose extension is on its way. A re-entry counts its
    /// own deadline from its outer hold's, which must not be the short grant's.
    pub(crate) async fn extended(&self) {
        loop {
            let changed = self.changed.notified();
            tokio::pin!(changed);
            changed.as_mut().enable();
            if !self.extending.load(Ordering::Acquire) {
                return;
            }
            changed.await;
        }
    }

    /// Labels the hold's loss and release failures (the first label set stays).
    pub(crate) fn set_label(&self, label: Label) {
        let _ = self.label.set(label);
    }

    /// The label set by [`set_label`](Held::set_label), if any.
    pub(crate) fn label(&self) -> Option<Label> {
        self.label.get().copied()
    }

    /// Keeps `turn` until the hold ends, and tells the line who holds it.
    pub(crate) fn keep_turn(self: &Arc<Self>, turn: Turn<Held>) {
        turn.hold(self);
        *self.turn.lock().unwrap_or_else(|p| p.into_inner()) = Some(turn);
        // Lost before the turn was stored: nobody else would give it up.
        if self.state.load(Ordering::Acquire) == LOST {
            self.give_up_turn();
        }
    }

    /// What the release of this hold tells Redis about the client's local line, and
    /// whether the hold was contended.
    pub(crate) fn next_in_line(&self) -> NextInLine {
        let mut next_in_line = self
            .turn
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .as_ref()
            .map_or(NextInLine::NONE, Turn::next_in_line);
        next_in_line.contended |= self.contended;
        next_in_line
    }

    /// Passes the local turn on after a release sent at `sent_at` freed the lock for
    /// `next` (see [`Turn::released`]).
    pub(crate) fn give_up_turn_after(&self, next: NextHolder, sent_at: Instant) {
        let turn = self.turn.lock().unwrap_or_else(|p| p.into_inner()).take();
        if let Some(turn) = &turn {
            turn.released(next, sent_at);
        }
        drop(turn);
    }

    /// Passes the local turn to the next waiter of this client, if this hold has it.
    pub(crate) fn give_up_turn(&self) {
        let turn = self.turn.lock().unwrap_or_else(|p| p.into_inner()).take();
        drop(turn);
    }

    pub(crate) fn deadline(&self) -> Instant {
        *self.deadline.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// A renewal sent at `sent_at` was confirmed: push the deadline out (never back).
    pub(crate) fn confirm(&self, sent_at: Instant) {
        let Some(lease) = self.renewal else {
            return;
        };
        let mut deadline = self.deadline.lock().unwrap_or_else(|p| p.into_inner());
        *deadline = (*deadline).max(sent_at + lease);
    }

    /// Pushes the deadline out to `deadline` (never back), for a hold without watchdog
    /// renewal whose primitive renewed it itself (the multi-lock keeps its early explicit-lease
    /// holds alive while it waits for the later ones).
    pub(crate) fn extend_to(&self, deadline: Instant) {
        let mut current = self.deadline.lock().unwrap_or_else(|p| p.into_inner());
        *current = (*current).max(deadline);
    }

    /// Why the lock is lost, if it is; a passed deadline counts as lost.
    pub(crate) fn loss(&self) -> Option<LossReason> {
        match self.state.load(Ordering::Acquire) {
            LOST => self.reason.get().copied(),
            RELEASED => None,
            _ if Instant::now() >= self.deadline() => {
                self.mark_lost(LossReason::LeaseExpired);
                self.loss()
            }
            _ => None,
        }
    }

    /// Neither released nor lost: code in this hold's scope still owns the lock.
    pub(crate) fn is_live(&self) -> bool {
        !self.is_released() && self.loss().is_none()
    }

    pub(crate) fn is_released(&self) -> bool {
        self.state.load(Ordering::Acquire) == RELEASED
    }

    /// Marks the lock lost (first reason wins), wakes every `lost()` future and gives up
    /// the local turn. Returns `true` if this call changed the state.
    pub(crate) fn mark_lost(&self, reason: LossReason) -> bool {
        let _ = self.reason.set(reason);
        let changed = self
            .state
            .compare_exchange(HELD, LOST, Ordering::AcqRel, Ordering::Acquire)
            .is_ok();
        if changed {
            self.metrics.lost();
            if let Some(label) = self.label() {
                observe::lost(label);
            }
            tracing::warn!(lock = %self.name, %reason, "dlock: lock lost");
            self.changed.notify_waiters();
            self.give_up_turn();
        }
        changed
    }

    /// The guard is giving the lock back: `lost()` futures will never complete. The turn
    /// is kept until the release is done, so the next local waiter finds the lock free.
    pub(crate) fn mark_released(&self) {
        let _ = self
            .state
            .compare_exchange(HELD, RELEASED, Ordering::AcqRel, Ordering::Acquire);
    }

    /// Completes when the lock is lost; never completes once it was released.
    pub(crate) async fn wait_lost(&self) -> LossReason {
        loop {
            let changed = self.changed.notified();
            tokio::pin!(changed);
            changed.as_mut().enable();
            if let Some(reason) = self.loss() {
                return reason;
            }
            if self.is_released() {
                std::future::pending::<()>().await;
            }
            tokio::select! {
                _ = changed => {}
                _ = tokio::time::sleep_until(self.deadline()) => {}
            }
        }
    }
}
