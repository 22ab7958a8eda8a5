//! Every `tracing` event (and `log` record: redis-rs logs through `log`) of a test binary,
//! captured as text, for tests that check what dlock logs.
//!
//! A test binary has one global subscriber: the first call to [`capture_logs`] installs it
//! at the level asked for; later calls keep it. Tests of one binary run in parallel, so a
//! test should look only at lines that name its own lock.

use std::io::Write;
use std::sync::{Mutex, Once, PoisonError};

static CAPTURED: Mutex<Vec<u8>> = Mutex::new(Vec::new());

struct Capture;

impl Write for Capture {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        CAPTURED
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .extend_from_slice(buf);
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// Starts capturing every event at `level` and above (once per test binary).
///
/// # Panics
///
/// When another global subscriber was installed first.
pub fn capture_logs(level: tracing::Level) {
    static START: Once = Once::new();
    START.call_once(|| {
        tracing_subscriber::fmt()
            .with_max_level(level)
            .with_ansi(false)
            .with_writer(|| Capture)
            .try_init()
            .expect("no other global subscriber in this test binary");
    });
}

/// Everything captured so far.
pub fn captured() -> String {
    String::from_utf8_lossy(&CAPTURED.lock().unwrap_or_else(PoisonError::into_inner)).into_owned()
}
