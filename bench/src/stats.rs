//! Percentiles, medians, clocks and CPU time.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// The error type of the benchmark: anything printable, sendable between tasks.
pub type Error = Box<dyn std::error::Error + Send + Sync>;

/// Result with the benchmark's [`Error`].
pub type Result<T> = std::result::Result<T, Error>;

/// Builds an [`Error`] from a message.
pub fn error(message: impl Into<String>) -> Error {
    message.into().into()
}

/// Wall-clock time in microseconds since the Unix epoch.
///
/// Used for events that are compared across processes (S5), where `Instant` cannot be
/// shared; all processes run on the same machine and read the same clock.
pub fn now_us() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_micros()).unwrap_or(u64::MAX))
}

/// `CLOCK_MONOTONIC` in nanoseconds: one clock for every process on the machine (unlike
/// `Instant`, which cannot be passed between processes) that, unlike the wall clock, never
/// steps. The churn scenario's workers stamp their events with it.
pub fn monotonic_ns() -> u64 {
    let now = rustix::time::clock_gettime(rustix::time::ClockId::Monotonic);
    // CLOCK_MONOTONIC counts from boot: never negative.
    u64::try_from(now.tv_sec).unwrap_or(0) * 1_000_000_000 + u64::try_from(now.tv_nsec).unwrap_or(0)
}

/// The Tokio instant at which [`monotonic_ns`] reads `ns` (now, if that has passed).
pub fn instant_at(ns: u64) -> tokio::time::Instant {
    tokio::time::Instant::now() + Duration::from_nanos(ns.saturating_sub(monotonic_ns()))
}

/// Duration in whole nanoseconds, saturating.
pub fn nanos(d: Duration) -> u64 {
    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)
}

/// CPU time (user + system, all threads) this process has used so far.
pub fn process_cpu() -> Duration {
    let spec = rustix::time::clock_gettime(rustix::time::ClockId::ProcessCPUTime);
    Duration::new(
        u64::try_from(spec.tv_sec).unwrap_or(0),
        u32::try_from(spec.tv_nsec).unwrap_or(0),
    )
}

/// CPU seconds the whole machine (all cores, every process) has spent busy so far, from
/// `/proc/stat` (ticks of 1/100 s, Linux' `USER_HZ`); `None` where that file is missing.
pub fn machine_busy() -> Option<f64> {
    let text = std::fs::read_to_string("/proc/stat").ok()?;
    let line = text.lines().find(|l| l.starts_with("cpu "))?;
    let ticks: Vec<u64> = line
        .split_whitespace()
        .skip(1)
        .filter_map(|t| t.parse().ok())
        .collect();
    // user nice system idle iowait irq softirq steal ...: busy = user + nice + system +
    // irq + softirq (steal is the hypervisor running someone else, not a process here).
    let field = |i: usize| ticks.get(i).copied().unwrap_or(0);
    if ticks.len() < 7 {
        return None;
    }
    Some((field(0) + field(1) + field(2) + field(5) + field(6)) as f64 / 100.0)
}

/// This process' resident set size in bytes (`VmRSS` in `/proc/self/status`); `None`
/// where that file is missing.
pub fn resident_bytes() -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with("VmRSS:"))?;
    // "VmRSS:     12345 kB"
    let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kib * 1024)
}

/// The `p`-th percentile (0..=100) of `sorted` by the nearest-rank method; 0 when empty.
pub fn percentile(sorted: &[u64], p: f64) -> u64 {
    if sorted.is_empty() {
        return 0;
    }
    let rank = (p / 100.0 * sorted.len() as f64).ceil() as usize;
    sorted[rank.clamp(1, sorted.len()) - 1]
}

/// Median of `values` (mean of the middle two for an even count); NaN when empty.
pub fn median(values: &[f64]) -> f64 {
    let mut sorted: Vec<f64> = values.iter().copied().filter(|v| !v.is_nan()).collect();
    if sorted.is_empty() {
        return f64::NAN;
    }
    sorted.sort_by(f64::total_cmp);
    let mid = sorted.len() / 2;
    if sorted.len() % 2 == 1 {
        sorted[mid]
    } else {
        (sorted[mid - 1] + sorted[mid]) / 2.0
    }
}

/// Microseconds to milliseconds, for reporting.
pub fn ms(us: u64) -> f64 {
    us as f64 / 1000.0
}

/// Duration in whole microseconds, saturating.
pub fn micros(d: Duration) -> u64 {
    u64::try_from(d.as_micros()).unwrap_or(u64::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percentiles_by_nearest_rank() {
        let v: Vec<u64> = (1..=100).collect();
        assert_eq!(percentile(&v, 50.0), 50);
        assert_eq!(percentile(&v, 99.0), 99);
        assert_eq!(percentile(&v, 100.0), 100);
        assert_eq!(percentile(&[7], 99.0), 7);
        assert_eq!(percentile(&[], 50.0), 0);
    }

    #[test]
    fn medians() {
        assert_eq!(median(&[3.0, 1.0, 2.0]), 2.0);
        assert_eq!(median(&[4.0, 1.0, 2.0, 3.0]), 2.5);
        assert!(median(&[]).is_nan());
    }
}
