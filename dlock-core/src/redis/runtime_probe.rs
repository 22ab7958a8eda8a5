//! Whether the runtime that drives the client's connections still runs.
//!
//! redis-rs drives every connection with a task on the runtime that was current when the
//! connection was opened. When that runtime shuts down (a client built in one
//! `#[tokio::test]` and used in the next; a client built in a short-lived start-up
//! runtime) the connection is dead: a cluster connection refuses every command from then
//! on, and a single-server one fails its next command before it reconnects. A probe is a
//! task on the same runtime that only waits: once the runtime drops it, the client knows
//! to reopen its connections on the runtime that uses it now, before sending anything.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use tokio::sync::oneshot;

/// A waiting task on the runtime current when the probe was started.
pub(crate) struct RuntimeProbe {
    alive: Arc<AtomicBool>,
    /// Dropped with the probe, which ends the task: a dropped client leaves nothing behind.
    _stop: oneshot::Sender<()>,
}

/// Clears the flag when the task's future is dropped: finished, or dropped by its runtime.
struct ClearOnDrop(Arc<AtomicBool>);

impl Drop for ClearOnDrop {
    fn drop(&mut self) {
        self.0.store(false, Ordering::Release);
    }
}

impl RuntimeProbe {
    /// Starts a probe on the current runtime.
    ///
    /// # Panics
    ///
    /// Outside a Tokio runtime.
    pub(crate) fn start() -> RuntimeProbe {
        let alive = Arc::new(AtomicBool::new(true));
        let (stop, stopped) = oneshot::channel::<()>();
        let flag = ClearOnDrop(Arc::clone(&alive));
        tokio::spawn(async move {
            let _flag = flag;
            let _ = stopped.await;
        });
        RuntimeProbe { alive, _stop: stop }
    }

    /// `false` once the probe's runtime has shut down.
    pub(crate) fn runtime_is_alive(&self) -> bool {
        self.alive.load(Ordering::Acquire)
    }
}
