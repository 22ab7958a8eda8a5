//! What acquisitions and holds tell the outside: the `dlock.acquire` and `dlock.hold`
//! tracing spans and, with the `metrics` feature, the `dlock_*` metrics of the `metrics`
//! facade (names, types and labels in the crate docs' `# Metrics` section).
//!
//! Every primitive's acquisition runs inside [`acquisition`], which opens the span, counts
//! the waiter, and records the outcome; the guard it returns carries a [`HoldRecord`] that
//! counts the lock as held until the guard is gone. Labels are bounded: the lock's kind and
//! the attribute's key template (passed to the acquisition, see `verbs::Acquire`), never
//! the lock's name, which grows with the data.

use std::future::Future;
use std::pin::Pin;
use std::time::Duration;

use tokio::time::Instant;
use tracing::field::Empty;
use tracing::Instrument;

use crate::error::Result;

/// The bounded labels of one acquisition and its hold.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Label {
    /// The primitive: `lock`, `fair_lock`, `read`, `write`, `semaphore`, `multi_lock`,
    /// `redlock`.
    pub(crate) kind: &'static str,
    /// The attribute's key template (`goods:<id>`); `None` for the manual API.
    pub(crate) template: Option<&'static str>,
}

/// A guard that carries the record of its hold.
pub(crate) trait Observed {
    /// Keeps `hold` until the guard is released or dropped, and labels the guard's losses
    /// and release failures with its label.
    fn observe(&mut self, hold: HoldRecord);
}

/// One acquisition labelled `label` of a lock called `name`, waiting up to `wait` (`None`:
/// no end):
/// `acquire` inside the `dlock.acquire` span, counted as a waiter while it runs, its
/// outcome recorded in the span and the metrics, and the guard it returns observed.
///
/// `acquire` is boxed as a `dyn Future` before the future returned is built, so that
/// neither this future's layout nor the proof that it is `Send` goes through it: the
/// acquisition's state machine is deep, and nested in every caller's future it reached
/// rustc's default recursion limit (a few async layers around an attribute's function
/// did). One allocation per acquisition, next to at least one round trip to Redis.
pub(crate) fn acquisition<'a, G, F>(
    label: Label,
    name: &str,
    wait: Option<Duration>,
    acquire: F,
) -> impl Future<Output = Result<G>> + Send + 'a + use<'a, G, F>
where
    G: Observed + Send + 'a,
    F: Future<Output = Result<G>> + Send + 'a,
{
    let span = tracing::info_span!(
        "dlock.acquire",
        lock = %name,
        kind = label.kind,
        key_template = Empty,
        wait = %WaitBudget(wait),
        outcome = Empty,
        waited_ms = Empty,
    );
    if let Some(template) = label.template {
        span.record("key_template", template);
    }
    let acquire: Pin<Box<dyn Future<Output = Result<G>> + Send + 'a>> =
        Box::pin(acquire.instrument(span.clone()));
    async move {
        let pending = Pending::start(label, span);
        let outcome = acquire.await;
        let waited = pending.finish(match &outcome {
            Ok(_) => "acquired",
            Err(error) if error.is_timeout() => "timeout",
            Err(_) => "error",
        });
        match outcome {
            Ok(mut guard) => {
                emit::counter("dlock_acquisitions_total", label);
                emit::histogram("dlock_wait_seconds", label, waited);
                guard.observe(HoldRecord::start(label));
                Ok(guard)
            }
            Err(error) => {
                let counter = if error.is_timeout() {
                    "dlock_timeouts_total"
                } else {
                    "dlock_acquire_errors_total"
                };
                emit::counter(counter, label);
                Err(error)
            }
        }
    }
}

/// An acquisition that has not ended: a waiter until it does. Dropped unfinished (the
/// acquisition's future was cancelled), it records the outcome `cancelled`.
struct Pending {
    label: Label,
    span: tracing::Span,
    started: Instant,
    finished: bool,
}

impl Pending {
    fn start(label: Label, span: tracing::Span) -> Pending {
        emit::gauge("dlock_waiters", label, 1.0);
        Pending {
            label,
            span,
            started: Instant::now(),
            finished: false,
        }
    }

    /// Records `outcome`; the time waited.
    fn finish(mut self, outcome: &'static str) -> Duration {
        self.finished = true;
        self.end(outcome)
    }

    fn end(&self, outcome: &'static str) -> Duration {
        let waited = self.started.elapsed();
        self.span.record("outcome", outcome);
        self.span.record(
            "waited_ms",
            u64::try_from(waited.as_millis()).unwrap_or(u64::MAX),
        );
        emit::gauge("dlock_waiters", self.label, -1.0);
        waited
    }
}

impl Drop for Pending {
    fn drop(&mut self) {
        if !self.finished {
            self.end("cancelled");
        }
    }
}

/// The wait budget as the span shows it.
struct WaitBudget(Option<Duration>);

impl std::fmt::Display for WaitBudget {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.0 {
            Some(wait) => write!(f, "{}", humantime::format_duration(wait)),
            None => f.write_str("unbounded"),
        }
    }
}

/// A held lock, from its acquisition until its guard is released or dropped: counted in
/// `dlock_locks_held`, and its time in `dlock_hold_seconds` when it ends.
#[derive(Debug)]
pub(crate) struct HoldRecord {
    label: Label,
    since: Instant,
}

impl HoldRecord {
    fn start(label: Label) -> HoldRecord {
        emit::gauge("dlock_locks_held", label, 1.0);
        HoldRecord {
            label,
            since: Instant::now(),
        }
    }

    /// Whose hold it is.
    pub(crate) fn label(&self) -> Label {
        self.label
    }
}

impl Drop for HoldRecord {
    fn drop(&mut self) {
        emit::gauge("dlock_locks_held", self.label, -1.0);
        emit::histogram("dlock_hold_seconds", self.label, self.since.elapsed());
    }
}

/// The span around the attribute's body: from the acquired lock to the body's end, so a
/// trace shows how long the lock was held and what ran under it.
pub(crate) fn hold_span(name: &str, label: Option<Label>) -> tracing::Span {
    let span = tracing::info_span!(
        "dlock.hold",
        lock = %name,
        kind = Empty,
        key_template = Empty,
    );
    if let Some(label) = label {
        span.record("kind", label.kind);
        if let Some(template) = label.template {
            span.record("key_template", template);
        }
    }
    span
}

/// A held lock was lost.
pub(crate) fn lost(label: Label) {
    emit::counter("dlock_losses_total", label);
}

/// A guard's release found the lock not held or failed.
pub(crate) fn release_failed(label: Label) {
    emit::counter("dlock_release_errors_total", label);
}

/// The attribute skipped its body because the lock was busy (`on_busy = "skip"`).
pub(crate) fn skipped(label: Label) {
    emit::counter("dlock_skips_total", label);
}

/// The `metrics` facade calls. Every series has the labels `kind` and `key_template`.
#[cfg(feature = "metrics")]
mod emit {
    use std::time::Duration;

    use super::Label;

    /// The `key_template` of acquisitions through the manual API, which has no template:
    /// one series per kind, whatever the lock's name.
    const MANUAL: &str = "*";

    fn key_template(label: Label) -> &'static str {
        label.template.unwrap_or(MANUAL)
    }

    pub(super) fn counter(name: &'static str, label: Label) {
        metrics::counter!(name, "kind" => label.kind, "key_template" => key_template(label))
            .increment(1);
    }

    pub(super) fn gauge(name: &'static str, label: Label, change: f64) {
        metrics::gauge!(name, "kind" => label.kind, "key_template" => key_template(label))
            .increment(change);
    }

    pub(super) fn histogram(name: &'static str, label: Label, value: Duration) {
        metrics::histogram!(name, "kind" => label.kind, "key_template" => key_template(label))
            .record(value.as_secs_f64());
    }
}

/// Without the `metrics` feature nothing is recorded beyond the spans.
#[cfg(not(feature = "metrics"))]
mod emit {
    use std::time::Duration;

    use super::Label;

    pub(super) fn counter(_: &'static str, _: Label) {}

    pub(super) fn gauge(_: &'static str, _: Label, _: f64) {}

    pub(super) fn histogram(_: &'static str, _: Label, _: Duration) {}
}
