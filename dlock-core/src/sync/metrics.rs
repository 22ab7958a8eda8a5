//! Counters and a latency histogram a service can export (Prometheus, StatsD, logs): read
//! them with [`LockClient::stats`](crate::LockClient::stats).

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

/// Upper bounds of the acquisition-latency buckets; a last bucket takes everything longer.
pub const LATENCY_BOUNDS: [Duration; 9] = [
    Duration::from_millis(1),
    Duration::from_millis(5),
    Duration::from_millis(10),
    Duration::from_millis(50),
    Duration::from_millis(100),
    Duration::from_millis(500),
    Duration::from_secs(1),
    Duration::from_secs(5),
    Duration::from_secs(30),
];

/// The live counters of one client.
#[derive(Default)]
pub(crate) struct Metrics {
    acquired: AtomicU64,
    acquire_attempts: AtomicU64,
    timeouts: AtomicU64,
    acquire_errors: AtomicU64,
    released: AtomicU64,
    release_errors: AtomicU64,
    renewals: AtomicU64,
    renewal_failures: AtomicU64,
    lost: AtomicU64,
    skipped: AtomicU64,
    latency_buckets: [AtomicU64; LATENCY_BOUNDS.len() + 1],
    latency_sum_micros: AtomicU64,
}

/// A snapshot of a client's counters since it was built. All counts are monotonic.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Stats {
    /// Acquisitions that succeeded (re-entries included).
    pub acquired: u64,
    /// Acquire scripts sent to Redis (first tries, tries after a wake-up and retries after
    /// an error, re-entries included): against `acquired`, what an acquisition costs Redis
    /// under contention.
    pub acquire_attempts: u64,
    /// Acquisitions that gave up because their wait budget ran out.
    pub timeouts: u64,
    /// Acquisitions that failed because Redis failed.
    pub acquire_errors: u64,
    /// Releases that Redis confirmed (by `unlock` or in the background).
    pub released: u64,
    /// Releases that found the lock not held, or failed.
    pub release_errors: u64,
    /// Lease renewals confirmed by Redis (one per lock and period).
    pub renewals: u64,
    /// Renewal rounds that failed and were retried.
    pub renewal_failures: u64,
    /// Guards that found their lock lost.
    pub lost: u64,
    /// `#[distributed_lock(on_busy = "skip")]` calls that found the lock busy and ran
    /// nothing: with a scheduled job on several nodes, the ticks another node ran.
    pub skipped: u64,
    /// Time from the call to the acquired lock, bucketed by [`LATENCY_BOUNDS`]: entry `i`
    /// counts acquisitions that took at most `LATENCY_BOUNDS[i]` (and more than the bound
    /// before); the last entry counts the longer ones.
    pub acquire_latency: Vec<u64>,
    /// Sum of all acquisition latencies (for the mean).
    pub acquire_latency_sum: Duration,
}

impl Metrics {
    pub(crate) fn acquired(&self, latency: Duration) {
        self.acquired.fetch_add(1, Ordering::Relaxed);
        let bucket = LATENCY_BOUNDS
            .iter()
            .position(|bound| latency <= *bound)
            .unwrap_or(LATENCY_BOUNDS.len());
        self.latency_buckets[bucket].fetch_add(1, Ordering::Relaxed);
        let micros = u64::try_from(latency.as_micros()).unwrap_or(u64::MAX);
        self.latency_sum_micros.fetch_add(micros, Ordering::Relaxed);
    }

    /// An acquire script is about to be sent.
    pub(crate) fn attempted(&self) {
        self.acquire_attempts.fetch_add(1, Ordering::Relaxed);
    }

    pub(crate) fn timed_out(&self) {
        self.timeouts.fetch_add(1, Ordering::Relaxed);
    }

    pub(crate) fn acquire_failed(&self) {
        self.acquire_errors.fetch_add(1, Ordering::Relaxed);
    }

    pub(crate) fn released(&self, confirmed: bool) {
        let counter = if confirmed {
            &self.released
        } else {
            &self.release_errors
        };
        counter.fetch_add(1, Ordering::Relaxed);
    }

    pub(crate) fn renewed(&self) {
        self.renewals.fetch_add(1, Ordering::Relaxed);
    }

    pub(crate) fn renewal_failed(&self) {
        self.renewal_failures.fetch_add(1, Ordering::Relaxed);
    }

    pub(crate) fn lost(&self) {
        self.lost.fetch_add(1, Ordering::Relaxed);
    }

    /// An `on_busy = "skip"` call found the lock busy.
    pub(crate) fn skipped(&self) {
        self.skipped.fetch_add(1, Ordering::Relaxed);
    }

    pub(crate) fn snapshot(&self) -> Stats {
        let get = |counter: &AtomicU64| counter.load(Ordering::Relaxed);
        Stats {
            acquired: get(&self.acquired),
            acquire_attempts: get(&self.acquire_attempts),
            timeouts: get(&self.timeouts),
            acquire_errors: get(&self.acquire_errors),
            released: get(&self.released),
            release_errors: get(&self.release_errors),
            renewals: get(&self.renewals),
            renewal_failures: get(&self.renewal_failures),
            lost: get(&self.lost),
            skipped: get(&self.skipped),
            acquire_latency: self.latency_buckets.iter().map(get).collect(),
            acquire_latency_sum: Duration::from_micros(get(&self.latency_sum_micros)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn latencies_land_in_their_bucket() {
        let metrics = Metrics::default();
        metrics.acquired(Duration::from_micros(300));
        metrics.acquired(Duration::from_millis(1));
        metrics.acquired(Duration::from_millis(7));
        metrics.acquired(Duration::from_secs(60));
        let stats = metrics.snapshot();
        assert_eq!(stats.acquired, 4);
        assert_eq!(stats.acquire_latency[0], 2, "≤ 1 ms");
        assert_eq!(stats.acquire_latency[2], 1, "≤ 10 ms");
        assert_eq!(stats.acquire_latency[LATENCY_BOUNDS.len()], 1, "> 30 s");
        assert_eq!(stats.acquire_latency_sum, Duration::from_micros(60_008_300));
    }
}
