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
//! The old connection is not closed at once: a server that was paused (`CLIENT PAUSE`)
//! rather than cut off holds the calls that timed out and runs them when it resumes, and
//! closing their connection would make it drop them instead — a release that timed out
//! would then never happen and the lock would sit until its lease ran out. The old
//! connection stays open for [`KEEP_OLD`] (or a few command timeouts, if longer), the
//! time within which such a late call still counts.
//!
//! Cluster connections are left to the cluster client, which manages one connection per
//! node and refreshes them itself.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use super::{Backend, Node, Route};

/// How long a replaced connection stays open, at least (see the module's notes).
const KEEP_OLD: Duration = Duration::from_secs(10);

/// The next [`Node::serial`].
pub(super) fn next_serial() -> u64 {
    static NEXT: AtomicU64 = AtomicU64::new(1);
    NEXT.fetch_add(1, Ordering::Relaxed)
}

/// Clears the backend's `replacing` flag when the replacement ends, however it ends.
struct Replacing<'a>(&'a std::sync::atomic::AtomicBool);

impl Drop for Replacing<'_> {
    fn drop(&mut self) {
        self.0.store(false, Ordering::Release);
    }
}

impl Backend {
    /// Opens a new connection in place of connection `serial`, which did not answer
    /// within the command timeout, unless it was replaced already or a replacement is
    /// under way.
    pub(super) fn replace_silent(&self, serial: u64) {
        let current = match &self.shared.route {
            Route::Direct(node) => super::read(node),
            Route::Sentinel(route) => route.node(),
            Route::Cluster(_) => return,
        };
        if current.serial != serial || self.shared.replacing.swap(true, Ordering::AcqRel) {
            return;
        }
        let backend = self.clone();
        tokio::spawn(async move {
            let _replacing = Replacing(&backend.shared.replacing);
            let options = backend.shared.options;
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
            let old = match &backend.shared.route {
                Route::Direct(node) => {
                    let mut node = node.write().unwrap_or_else(|p| p.into_inner());
                    (node.serial == serial).then(|| std::mem::replace(&mut *node, fresh))
                }
                Route::Sentinel(route) => route.replace_node_if(serial, fresh),
                Route::Cluster(_) => None,
            };
            let Some(old) = old else { return };
            tracing::info!(
                deployment = %backend.shared.shown,
                "dlock: a connection gave no answer within the command timeout; replaced it"
            );
            let keep = KEEP_OLD.max(options.command_timeout * 3 + Duration::from_secs(1));
            drop(_replacing);
            drop(backend);
            tokio::time::sleep(keep).await;
            drop(old);
        });
    }
}
