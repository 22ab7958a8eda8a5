//! When a failed call is tried again: at once after a dropped connection, then backing
//! off, always within one command timeout.

use std::future::Future;
use std::time::Duration;

use tokio::time::Instant;

use crate::redis::CallError;

/// How a client retries calls that failed on a fast, transient error.
#[derive(Debug, Clone, Copy)]
pub(crate) struct RetryPolicy {
    /// Retries after the first attempt.
    pub(crate) attempts: u32,
    /// The pause before the second retry; later ones double it.
    pub(crate) delay: Duration,
    /// The whole operation, retries included, stays within this (the command timeout).
    pub(crate) within: Duration,
}

impl RetryPolicy {
    /// The pause before retrying a call that failed with `error`, or `None` to give up.
    ///
    /// Only fast, transient failures (dropped or refused connections, failover errors) are
    /// retried, and only while the whole operation stays within one command timeout: a
    /// caller never waits much longer than `command_timeout` for an answer.
    ///
    /// The first retry goes out at once: the connection that failed is already being
    /// replaced (a dropped connection is reopened on the failure, a Sentinel or cluster
    /// route is re-resolved), and a retry simply waits for that. A killed connection then
    /// costs a reconnect, not a `retry_delay`. Later retries back off from `retry_delay`.
    pub(crate) fn retry_after(
        &self,
        error: &CallError,
        failures: u32,
        started: Instant,
    ) -> Option<Duration> {
        if !error.is_quick_to_retry() || failures >= self.attempts {
            return None;
        }
        let delay = backoff(self.delay, failures);
        (started.elapsed().saturating_add(delay) < self.within).then_some(delay)
    }
}

impl RetryPolicy {
    /// Runs `call` until it answers, retrying the failures [`retry_after`](Self::retry_after)
    /// allows while the pause ends before `give_up_at`. Returns the send time of the call
    /// that answered (a lease counts from it) with its answer; `lock` names the lock in
    /// the log line of each retry.
    pub(crate) async fn run<T, F, Fut>(
        &self,
        lock: &str,
        give_up_at: Option<Instant>,
        mut call: F,
    ) -> Result<(Instant, T), CallError>
    where
        F: FnMut() -> Fut,
        Fut: Future<Output = Result<T, CallError>>,
    {
        let started = Instant::now();
        let mut failures = 0;
        loop {
            let sent_at = Instant::now();
            let error = match call().await {
                Ok(answer) => return Ok((sent_at, answer)),
                Err(error) => error,
            };
            let retry = self
                .retry_after(&error, failures, started)
                .filter(|delay| give_up_at.is_none_or(|at| ends_before(*delay, at)));
            let Some(delay) = retry else {
                return Err(error);
            };
            failures += 1;
            tracing::debug!(lock, %error, "dlock: call failed; retrying");
            tokio::time::sleep(delay).await;
        }
    }
}

/// Whether `pause` from now ends before `deadline`; a pause too long to represent does not.
pub(crate) fn ends_before(pause: Duration, deadline: Instant) -> bool {
    Instant::now()
        .checked_add(pause)
        .is_some_and(|end| end < deadline)
}

/// The pause before the retry that follows `failures` failed attempts: none before the
/// first retry (the failed connection is already being replaced; the retry waits for
/// that), then `delay`, doubling up to 256 × `delay`.
pub(crate) fn backoff(delay: Duration, failures: u32) -> Duration {
    match failures {
        0 => Duration::ZERO,
        n => delay.saturating_mul(2u32.saturating_pow((n - 1).min(8))),
    }
}
