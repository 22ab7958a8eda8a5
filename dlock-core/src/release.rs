//! Releasing a lock: the `release` script with safe retries, in the foreground
//! ([`LockGuard::unlock`](crate::LockGuard::unlock)) or in the background (dropped guards,
//! abandoned acquisitions).

use std::sync::Arc;

use tokio::sync::mpsc;
use tokio::time::Instant;

use crate::backend::{Backend, CallError};
use crate::client::Settings;
use crate::keys::LockKeys;
use crate::metrics::Metrics;
use crate::scripts::scripts;

/// Which holds a release gives back.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ReleaseMode {
    /// One hold: the guard re-entered a lock its call chain already held.
    One,
    /// Every hold of the owner: the outermost guard, or an acquisition abandoned with an
    /// unknown outcome. Holds added by acquisitions whose replies were lost go with it.
    All,
}

/// What the script reported.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Released {
    /// The owner did not hold the lock.
    NotHeld,
    /// The lock is free now.
    Free,
    /// The owner still holds it this many times.
    StillHeld(u32),
}

/// One release to perform.
pub(crate) struct ReleaseJob {
    pub(crate) name: Arc<str>,
    pub(crate) keys: Arc<LockKeys>,
    pub(crate) field: Arc<str>,
    pub(crate) mode: ReleaseMode,
    /// Identifies this release operation across retries (the memo key).
    pub(crate) op: u64,
}

/// Runs the release script, retrying transient failures with the same memo so that a
/// retry cannot turn a successful release into "not held".
pub(crate) async fn release(
    backend: &Backend,
    settings: &Settings,
    job: &ReleaseJob,
) -> Result<Released, CallError> {
    let memo_key = format!("{}{}:{}", job.keys.memo_prefix, job.field, job.op);
    let mode = match job.mode {
        ReleaseMode::One => "one",
        ReleaseMode::All => "all",
    };
    let mut invocation = scripts().release.prepare_invoke();
    invocation
        .key(&job.keys.key)
        .key(&job.keys.channel)
        .key(&memo_key)
        .arg(&*job.field)
        .arg(mode)
        .arg(settings.memo_ttl().as_millis() as u64)
        .arg(backend.publish_command());
    let started = Instant::now();
    let mut failures = 0;
    loop {
        match backend.invoke::<i64>(&invocation).await {
            Ok(outcome) => {
                let released = match outcome {
                    n if n < 0 => Released::NotHeld,
                    0 => Released::Free,
                    n => Released::StillHeld(u32::try_from(n).unwrap_or(u32::MAX)),
                };
                tracing::debug!(lock = %job.name, ?released, "dlock: released");
                return Ok(released);
            }
            Err(error) => match settings.retry_after(&error, failures, started) {
                Some(delay) => {
                    failures += 1;
                    tracing::debug!(lock = %job.name, %error, "dlock: release failed; retrying");
                    tokio::time::sleep(delay).await;
                }
                None => return Err(error),
            },
        }
    }
}

/// The background release task: one spawned release per job, until the client is gone.
pub(crate) async fn run_background(
    mut jobs: mpsc::UnboundedReceiver<ReleaseJob>,
    backend: Backend,
    settings: Settings,
    metrics: Arc<Metrics>,
) {
    let settings = Arc::new(settings);
    while let Some(job) = jobs.recv().await {
        let backend = backend.clone();
        let settings = Arc::clone(&settings);
        let metrics = Arc::clone(&metrics);
        tokio::spawn(async move {
            let outcome = release(&backend, &settings, &job).await;
            metrics.released(matches!(
                outcome,
                Ok(Released::Free | Released::StillHeld(_))
            ));
            match outcome {
                Ok(Released::NotHeld) => {
                    tracing::debug!(lock = %job.name, "dlock: background release found the lock not held")
                }
                Ok(_) => {}
                Err(error) => tracing::warn!(
                    lock = %job.name,
                    %error,
                    "dlock: background release failed; the lock stays until its lease expires"
                ),
            }
        });
    }
}
