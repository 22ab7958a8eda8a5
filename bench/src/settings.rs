//! The settings of a benchmark invocation: how many runs, how long, how big.

use std::time::Duration;

use serde::Serialize;

/// Settings of a benchmark invocation.
#[derive(Debug, Clone, Serialize)]
pub struct Config {
    /// Runs per job.
    pub runs: u32,
    /// Measured time of S1, S3, rslock's S1 and churn; the limit's acquire phase takes half.
    #[serde(with = "secs")]
    pub duration: Duration,
    /// Untimed warm-up before S1, S3 and the limit.
    #[serde(with = "secs")]
    pub warmup: Duration,
    /// Counted acquisitions in S2 and S5.
    pub acquisitions: u64,
    /// Locks held in S4.
    pub locks: usize,
    /// `--quick` was given.
    pub quick: bool,
    /// The server to use instead of fresh ones.
    #[serde(skip)]
    pub redis_url: Option<String>,
    /// Tasks in S1 / S3 / limit.
    pub s1_tasks: usize,
    /// Tasks in S2.
    pub s2_tasks: usize,
    /// Processes in S5.
    pub processes: usize,
    /// Contending tasks in each S5 process (they share the process' `LockClient`).
    pub tasks_per_process: usize,
    /// S4's watchdog timeout (renewal every third of it).
    #[serde(with = "secs")]
    pub s4_watchdog: Duration,
    /// Renewal periods in S4's window.
    pub s4_periods: u32,
    /// How long each `redis-benchmark` acquire run should take (it is sized from the
    /// measured acquire rate).
    pub redis_benchmark_seconds: f64,
    /// A run during which other processes used more CPU (% of one core) is repeated.
    pub foreign_cpu_limit: f64,
    /// Give up on S2 / S5 after this long.
    #[serde(with = "secs")]
    pub contended_timeout: Duration,
    /// How long the memory scenario runs S1's loop (6 × duration: 60 s by default).
    #[serde(with = "secs")]
    pub memory_duration: Duration,
    /// How long the demo scenario sends requests.
    #[serde(with = "secs")]
    pub demo_duration: Duration,
}

mod secs {
    use std::time::Duration;

    pub fn serialize<S: serde::Serializer>(d: &Duration, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_f64(d.as_secs_f64())
    }
}
