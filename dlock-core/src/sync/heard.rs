//! What one subscribed channel has heard, shared by the subscriptions to it: whether Redis
//! confirmed the subscription, and the unlock messages (and reconnections) so far.
//!
//! Every channel a waiter subscribes to carries one, so it is kept small: one lock and
//! one `Notify` (a `tokio::sync::watch` channel per fact cost a cold waiter on a lock of
//! its own about 700 bytes). A subscription waits for a change by registering with the
//! `Notify` before it looks at the state, so a change between the look and the wait is
//! never missed.

use std::sync::{Mutex, MutexGuard};

use tokio::sync::Notify;
use tokio::time::Instant;

/// What a channel's unlock messages said so far, for the subscriptions that see every one.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Notices {
    /// Every message (and reconnection).
    pub(crate) seen: u64,
    /// The messages that ask every waiter to try again: all but `writers:<ms>`.
    pub(crate) for_all: u64,
    /// When the last `writers:<ms>` message asked the waiters it does not wake to try
    /// by at the latest.
    pub(crate) others_by: Option<Instant>,
}

/// A channel's confirmation and notices (see the module documentation).
#[derive(Default)]
pub(crate) struct Heard {
    state: Mutex<State>,
    changed: Notify,
}

#[derive(Clone, Copy, Default)]
struct State {
    confirmed: bool,
    notices: Notices,
}

impl Heard {
    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Records whether Redis confirmed the subscription (a reconnection takes it back
    /// until the new connection confirms it).
    pub(crate) fn set_confirmed(&self, confirmed: bool) {
        let mut state = self.lock();
        let became_confirmed = confirmed && !state.confirmed;
        state.confirmed = confirmed;
        drop(state);
        if became_confirmed {
            self.changed.notify_waiters();
        }
    }

    /// Whether Redis confirmed the subscription.
    pub(crate) fn is_confirmed(&self) -> bool {
        self.lock().confirmed
    }

    /// The notices so far.
    pub(crate) fn notices(&self) -> Notices {
        self.lock().notices
    }

    /// Records a message (or a reconnection) with `record` and wakes whoever waits for one.
    pub(crate) fn notice(&self, record: impl FnOnce(&mut Notices)) {
        record(&mut self.lock().notices);
        self.changed.notify_waiters();
    }

    /// Completes once Redis confirmed the subscription.
    pub(crate) async fn confirmed(&self) {
        self.until(|state| state.confirmed.then_some(())).await;
    }

    /// Completes with the notices once they count more messages than `seen` did (at once
    /// if they do already).
    pub(crate) async fn noticed_since(&self, seen: u64) -> Notices {
        self.until(|state| (state.notices.seen != seen).then_some(state.notices))
            .await
    }

    /// Completes with what `ready` makes of the state once it makes something.
    async fn until<T>(&self, ready: impl Fn(&State) -> Option<T>) -> T {
        loop {
            let changed = self.changed.notified();
            tokio::pin!(changed);
            // Registered before the look: a change made after it wakes this wait.
            changed.as_mut().enable();
            if let Some(done) = ready(&self.lock()) {
                return done;
            }
            changed.await;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;
    use std::time::Duration;

    use futures_util::FutureExt;

    #[tokio::test]
    async fn a_confirmation_wakes_its_waiters_and_can_be_taken_back() {
        let heard = Arc::new(Heard::default());
        assert!(!heard.is_confirmed());
        assert!(heard.confirmed().now_or_never().is_none());

        let waiter = tokio::spawn({
            let heard = Arc::clone(&heard);
            async move { heard.confirmed().await }
        });
        tokio::task::yield_now().await;
        heard.set_confirmed(true);
        tokio::time::timeout(Duration::from_secs(5), waiter)
            .await
            .expect("the confirmation wakes the waiter")
            .unwrap();
        assert!(heard.confirmed().now_or_never().is_some());

        heard.set_confirmed(false);
        assert!(!heard.is_confirmed());
        assert!(heard.confirmed().now_or_never().is_none());
    }

    #[tokio::test]
    async fn a_notice_wakes_every_waiter_that_has_not_seen_it() {
        let heard = Arc::new(Heard::default());
        let before = heard.notices().seen;
        assert!(heard.noticed_since(before).now_or_never().is_none());

        let waiters: Vec<_> = (0..3)
            .map(|_| {
                let heard = Arc::clone(&heard);
                tokio::spawn(async move { heard.noticed_since(before).await })
            })
            .collect();
        tokio::task::yield_now().await;
        heard.notice(|notices| {
            notices.seen += 1;
            notices.for_all += 1;
        });
        for waiter in waiters {
            let notices = tokio::time::timeout(Duration::from_secs(5), waiter)
                .await
                .expect("the notice wakes every waiter")
                .unwrap();
            assert_eq!(notices.seen, before + 1);
        }
        // Seen before the wait began: it completes at once.
        assert!(heard.noticed_since(before).now_or_never().is_some());
        assert!(heard.noticed_since(before + 1).now_or_never().is_none());
        // A confirmation is not a notice.
        heard.set_confirmed(true);
        assert!(heard.noticed_since(before + 1).now_or_never().is_none());
    }
}
