//! Replacing a connection that stopped answering.
//!
//! A connection can go half open: requests still leave, replies never come back (a
//! network path that drops one direction, a middlebox that lost its state, a peer that
//! vanished without a reset). The client library only reconnects on an I/O error, which a
//! silent connection never raises, so every later call on it would time out and a
//! watchdog lock would expire for want of one answer. A call that got no answer within
//! the command timeout therefore has its connection replaced, in the background (the
//! call's own error is not delayed), once per silent connection however many calls met
//! it. A server that is merely slow costs a reconnection per command timeout at most.
//!
//! The old connection is not closed at once (but with the client, if that goes first): a
//! server that was paused (`CLIENT PAUSE`)
//! rather than cut off holds the calls that timed out and runs them when it resumes, and
//! closing their connection would make it drop them instead — a release that timed out
//! would then never happen and the lock would sit until its lease ran out. The old
//! connection stays open for [`KEEP_OLD`] (or a few command timeouts, if longer), the
//! time within which such a late call still counts.
//!
//! Cluster connections are left to the cluster client, which manages one connection per
//! node and refreshes them itself.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::time::{Duration, Instant};

use super::{Backend, Node, Route, Shared};

/// How long a replaced connection stays open, at least (see the module's notes).
const KEEP_OLD: Duration = Duration::from_secs(10);

/// The next [`Node::serial`].
pub(super) fn next_serial() -> u64 {
    static NEXT: AtomicU64 = AtomicU64::new(1);
    NEXT.fetch_add(1, Ordering::Relaxed)
}

/// Clears the backend's `replacing` flag when the replacement ends, however it ends.
struct Replacing(Weak<Shared>);

impl Drop for Replacing {
    fn drop(&mut self) {
        if let Some(shared) = self.0.upgrade() {
            shared.replacing.store(false, Ordering::Release);
        }
    }
}

/// Replaced connections still open, each until its instant. Kept in the client's shared
/// state, not in a task of their own, so that dropping the client closes them at once.
#[derive(Default)]
pub(super) struct Retired(Mutex<Vec<(Instant, Node)>>);

impl Retired {
    /// Keeps `node` open until `until`, and closes those whose time has come.
    fn keep(&self, node: Node, until: Instant) {
        let mut retired = self.0.lock().unwrap_or_else(|p| p.into_inner());
        retired.retain(|(until, _)| *until > Instant::now());
        retired.push((until, node));
    }

    /// Closes the connections whose time has come.
    fn close_expired(&self) {
        let mut retired = self.0.lock().unwrap_or_else(|p| p.into_inner());
        retired.retain(|(until, _)| *until > Instant::now());
    }
}

impl Backend {
    /// Opens a new connection in place of connection `serial`, which did not answer
    /// within the command timeout, unless it was replaced already or a replacement is
    /// under way. The task holds the client only weakly: a client dropped meanwhile is
    /// not kept alive by it.
    pub(super) fn replace_silent(&self, serial: u64) {
        let current = match &self.shared.route {
            Route::Direct(node) => super::read(node),
            Route::Sentinel(route) => route.node(),
            Route::Cluster(_) => return,
        };
        if current.serial != serial || self.shared.replacing.swap(true, Ordering::AcqRel) {
            return;
        }
        let weak = Arc::downgrade(&self.shared);
        let options = self.shared.options;
        tokio::spawn(async move {
            let _replacing = Replacing(weak.clone());
            let opened = tokio::time::timeout(
                options.connect_timeout,
                Node::connect(current.client, options),
            )
            .await;
            let fresh = match opened {
                Ok(Ok(fresh)) => fresh,
                // The next call that gets no answer tries again.
                Ok(Err(error)) => {
                    tracing::debug!(%error, "dlock: could not replace a silent connection");
                    return;
                }
                Err(_) => return,
            };
            let Some(shared) = weak.upgrade() else { return };
            let old = match &shared.route {
                Route::Direct(node) => {
                    let mut node = node.write().unwrap_or_else(|p| p.into_inner());
                    (node.serial == serial).then(|| std::mem::replace(&mut *node, fresh))
                }
                Route::Sentinel(route) => route.replace_node_if(serial, fresh),
                Route::Cluster(_) => None,
            };
            let Some(old) = old else { return };
            tracing::info!(
                deployment = %shared.shown,
                "dlock: a connection gave no answer within the command timeout; replaced it"
            );
            let keep = KEEP_OLD.max(options.command_timeout * 3 + Duration::from_secs(1));
            shared.retired.keep(old, Instant::now() + keep);
            drop(shared);
            tokio::time::sleep(keep).await;
            if let Some(shared) = weak.upgrade() {
                shared.retired.close_expired();
            }
        });
    }
}
