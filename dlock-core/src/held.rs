//! The state one held lock shares between its guard, the watchdog and `lost()` futures.

use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::Notify;
use tokio::time::Instant;

use crate::error::LossReason;
use crate::keys::LockKeys;
use crate::metrics::Metrics;

const HELD: u8 = 0;
const RELEASED: u8 = 1;
const LOST_NOT_HELD: u8 = 2;
const LOST_EXPIRED: u8 = 3;

/// One acquisition's view of its lock.
pub(crate) struct Held {
    pub(crate) name: Arc<str>,
    pub(crate) keys: Arc<LockKeys>,
    /// `<client-id>:<owner-id>`: the hash field this owner holds.
    pub(crate) field: Arc<str>,
    /// The lease the last acquire or renewal asked for.
    pub(crate) lease: Duration,
    /// Local deadline on the monotonic clock: send time of the last confirmed acquire or
    /// renewal + lease. Redis cannot expire the lock before it, so past it the holder must
    /// assume someone else may hold the lock, even when Redis is unreachable.
    deadline: Mutex<Instant>,
    state: AtomicU8,
    changed: Notify,
    metrics: Arc<Metrics>,
}

impl Held {
    pub(crate) fn new(
        name: Arc<str>,
        keys: Arc<LockKeys>,
        field: Arc<str>,
        lease: Duration,
        sent_at: Instant,
        metrics: Arc<Metrics>,
    ) -> Held {
        Held {
            name,
            keys,
            field,
            lease,
            deadline: Mutex::new(sent_at + lease),
            state: AtomicU8::new(HELD),
            changed: Notify::new(),
            metrics,
        }
    }

    pub(crate) fn deadline(&self) -> Instant {
        *self.deadline.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// A renewal sent at `sent_at` was confirmed: push the deadline out (never back).
    pub(crate) fn confirm(&self, sent_at: Instant) {
        let mut deadline = self.deadline.lock().unwrap_or_else(|p| p.into_inner());
        *deadline = (*deadline).max(sent_at + self.lease);
    }

    /// Why the lock is lost, if it is; a passed deadline counts as lost.
    pub(crate) fn loss(&self) -> Option<LossReason> {
        match self.state.load(Ordering::Acquire) {
            LOST_NOT_HELD => Some(LossReason::NotHeldOnRenewal),
            LOST_EXPIRED => Some(LossReason::LeaseExpired),
            RELEASED => None,
            _ if Instant::now() >= self.deadline() => {
                self.mark_lost(LossReason::LeaseExpired);
                self.loss()
            }
            _ => None,
        }
    }

    pub(crate) fn is_released(&self) -> bool {
        self.state.load(Ordering::Acquire) == RELEASED
    }

    /// Marks the lock lost (first reason wins) and wakes every `lost()` future.
    /// Returns `true` if this call changed the state.
    pub(crate) fn mark_lost(&self, reason: LossReason) -> bool {
        let code = match reason {
            LossReason::NotHeldOnRenewal => LOST_NOT_HELD,
            LossReason::LeaseExpired => LOST_EXPIRED,
        };
        let changed = self
            .state
            .compare_exchange(HELD, code, Ordering::AcqRel, Ordering::Acquire)
            .is_ok();
        if changed {
            self.metrics.lost();
            tracing::warn!(lock = %self.name, %reason, "dlock: lock lost");
            self.changed.notify_waiters();
        }
        changed
    }

    /// The guard gave the lock back: `lost()` futures will never complete.
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
