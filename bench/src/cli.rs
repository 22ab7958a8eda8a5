//! Command-line interface.

use std::path::PathBuf;
use std::time::Duration;

use clap::{Args, Parser, Subcommand, ValueEnum};

use crate::contended::Primitive;
use crate::settings::Config;

/// Benchmarks dlock against the Redis server's own ceiling and against rslock.
///
/// Without --redis-url every scenario run gets a fresh throw-away redis-server (from
/// PATH or DLOCK_REDIS_SERVER). The table goes to stdout; with --json, stdout carries one
/// JSON document instead and the table goes to stderr. Progress lines go to stderr.
#[derive(Debug, Parser)]
#[command(name = "dlock-bench", version, args_conflicts_with_subcommands = true)]
pub struct Cli {
    /// Hidden subcommands (the S5 and churn workers).
    #[command(subcommand)]
    pub command: Option<Sub>,

    /// Scenarios to run, comma-separated.
    #[arg(long, value_enum, value_delimiter = ',', default_value = "all")]
    pub scenarios: Vec<Scenario>,

    /// Of the selected scenarios' rows, only these, comma-separated, each as its scenario
    /// and implementation appear in the table (e.g. `s2:dlock,s2:rslock`): to compare two
    /// rows with nothing else run in between.
    #[arg(long, value_delimiter = ',', value_name = "SCENARIO:IMPL")]
    pub only: Vec<String>,

    /// Runs per scenario; the report shows the medians [default: 3, 1 with --quick].
    #[arg(long, value_parser = clap::value_parser!(u32).range(1..=50))]
    pub runs: Option<u32>,

    /// Measured time of S1, S3, rslock's S1, the limit and churn (e.g. 10s, 500ms)
    /// [default: 10s, 2s with --quick].
    #[arg(long, value_parser = parse_duration)]
    pub duration: Option<Duration>,

    /// Counted acquisitions in S2 and S5 [default: 2000, 500 with --quick].
    #[arg(long, value_parser = clap::value_parser!(u64).range(1..=10_000_000))]
    pub acquisitions: Option<u64>,

    /// Tasks in S1 (and the scenarios built on its loop: S3, the limit, the floors,
    /// rslock's S1, the family's S1 rows, `scripts`, `memory`); the headings say 64, the
    /// report's settings line the number used [default: 64].
    #[arg(long, value_parser = clap::value_parser!(u64).range(1..=100_000))]
    pub s1_tasks: Option<u64>,

    /// Locks held at once in S4, and waiters in `subscribe` [default: 10000, 1000 with
    /// --quick].
    #[arg(long, value_parser = clap::value_parser!(u64).range(1..=1_000_000))]
    pub locks: Option<u64>,

    /// Smoke-test sizes: 1 run, 2 s durations, 500 acquisitions, 1,000 locks in S4, and
    /// a few small points per sweep.
    #[arg(long)]
    pub quick: bool,

    /// Print the results as one JSON document on stdout (the table goes to stderr).
    #[arg(long)]
    pub json: bool,

    /// Write the results into this Markdown file, between generated-section markers
    /// (text outside them is kept).
    #[arg(long, value_name = "PATH")]
    pub write_docs: Option<PathBuf>,

    /// Write the sweeps' pictures (SVG) into this directory [default with --write-docs:
    /// the docs file's directory].
    #[arg(long, value_name = "DIR")]
    pub plots: Option<PathBuf>,

    /// Repeat a run (at most twice) when other processes used more than this much CPU
    /// during it, in % of one core; the machine may be shared.
    #[arg(long, value_name = "PCT", default_value_t = 25.0, value_parser = parse_percent)]
    pub foreign_cpu_limit: f64,

    /// Use this Redis server instead of starting one per run (keys are prefixed with
    /// `dlock-bench:<run>:` and deleted afterwards; S4 runs CONFIG RESETSTAT).
    #[arg(long, value_name = "URL")]
    pub redis_url: Option<String>,
}

/// A scenario name on the command line.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Scenario {
    /// The server's ceiling for dlock's acquire and release scripts.
    Limit,
    /// Each script's execution and inner commands per call (`INFO commandstats`): dlock's
    /// lock acquire, release and renewal, and the lean floor's pair.
    Scripts,
    /// Uncontended lock + unlock, 64 tasks with a key each.
    S1,
    /// Contended hand-off, 16 tasks on one key (lock, fair lock, read-write lock).
    S2,
    /// S1 through a `#[distributed_lock]` function.
    S3,
    /// 10,000 locks held with watchdog renewal.
    S4,
    /// S2 with 4 processes (lock, fair lock, read-write lock).
    S5,
    /// S5 (4 processes × 4 tasks, one lock) with cancellations, timeouts, dropped guards,
    /// expiring leases and a process killed and restarted: how long a free lock is left
    /// untaken while a task waits for it.
    Churn,
    /// rslock in S1 and S2.
    Peers,
    /// The rest of the family: multi-lock (2 and 5 keys, one slot or several), semaphore
    /// and RedLock (5 servers) in S1; semaphore and multi-lock in S2.
    Family,
    /// Redis memory growth over S1's loop (60 s, 6 × --duration).
    Memory,
    /// 10,000 waiters (--locks) on distinct locks: time until all are subscribed, and
    /// until all are unsubscribed after they are cancelled.
    Subscribe,
    /// The stock demo's hot item (runs the `stock-demo` binary found next to this one).
    Demo,
    /// Everything above (the default).
    All,
    /// Scaling sweeps (S1 vs tasks, S2 / S5 vs contenders, S4 vs locks, waiters vs
    /// wake-ups), one run per point; not part of `all` (it adds minutes): everything is
    /// `--scenarios all,sweeps`.
    Sweeps,
}

/// Subcommands that are not for people.
#[derive(Debug, Subcommand)]
pub enum Sub {
    /// One S5 contender (started by the benchmark itself).
    #[command(hide = true)]
    Worker(WorkerArgs),
    /// One churn process (started by the benchmark itself).
    #[command(hide = true)]
    ChurnWorker(ChurnWorkerArgs),
}

/// Arguments of the hidden S5 worker.
#[derive(Debug, Args)]
pub struct WorkerArgs {
    /// The Redis server.
    #[arg(long)]
    pub redis_url: String,
    /// Key prefix of the run.
    #[arg(long)]
    pub prefix: String,
    /// The shared counter's key.
    #[arg(long)]
    pub counter: String,
    /// Acquisitions to count in total (over all workers).
    #[arg(long)]
    pub total: u64,
    /// This worker's number (also the contender id of all its tasks: S5 reports
    /// fairness per process).
    #[arg(long)]
    pub id: u32,
    /// Contending tasks in this worker, sharing its `LockClient`.
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..=100_000))]
    pub tasks: u32,
    /// Give up after this long.
    #[arg(long, value_parser = parse_duration)]
    pub timeout: Duration,
    /// The dlock primitive to contend for.
    #[arg(long, value_enum)]
    pub primitive: Primitive,
}

/// Arguments of the hidden churn worker.
#[derive(Debug, Args)]
pub struct ChurnWorkerArgs {
    /// The Redis server.
    #[arg(long)]
    pub redis_url: String,
    /// Key prefix of the run.
    #[arg(long)]
    pub prefix: String,
    /// Hot locks the tasks take (`churn:0`, `churn:1`, ...).
    #[arg(long, value_parser = clap::value_parser!(u8).range(1..))]
    pub keys: u8,
    /// Tasks in this worker, sharing its `LockClient`.
    #[arg(long, value_parser = clap::value_parser!(u32).range(1..=100_000))]
    pub tasks: u32,
    /// The client's watchdog timeout: how long a lock outlives this process if it is
    /// killed holding it.
    #[arg(long, value_parser = parse_duration)]
    pub watchdog: Duration,
    /// The file to append this worker's events to.
    #[arg(long)]
    pub events: PathBuf,
}

/// A CPU share in % of one core (0 to 10,000).
fn parse_percent(text: &str) -> Result<f64, String> {
    match text.trim_end_matches('%').parse::<f64>() {
        Ok(p) if (0.0..=10_000.0).contains(&p) => Ok(p),
        _ => Err("expected a percentage of one core, e.g. 25".to_owned()),
    }
}

/// A positive duration such as `10s`, `500ms` or `2m`.
fn parse_duration(text: &str) -> Result<Duration, String> {
    let duration = humantime::parse_duration(text)
        .map_err(|e| format!("{e} (expected e.g. 10s, 500ms, 2m)"))?;
    if duration < Duration::from_millis(100) {
        return Err("must be at least 100ms".to_owned());
    }
    if duration > Duration::from_secs(3600) {
        return Err("must be at most 1h".to_owned());
    }
    Ok(duration)
}

impl Cli {
    /// The settings the command line asks for.
    pub fn settings(&self) -> Config {
        let cli = self;
        let quick = cli.quick;
        let duration = cli
            .duration
            .unwrap_or(Duration::from_secs(if quick { 2 } else { 10 }));
        Config {
            runs: cli.runs.unwrap_or(if quick { 1 } else { 3 }),
            duration,
            warmup: (duration / 10).min(Duration::from_secs(1)),
            acquisitions: cli.acquisitions.unwrap_or(if quick { 500 } else { 2_000 }),
            locks: cli
                .locks
                .map_or(if quick { 1_000 } else { 10_000 }, |n| n as usize),
            quick,
            redis_url: cli.redis_url.clone(),
            s1_tasks: cli.s1_tasks.map_or(64, |n| n as usize),
            s2_tasks: 16,
            processes: 4,
            tasks_per_process: 4,
            s4_watchdog: if quick {
                Duration::from_millis(1500)
            } else {
                Duration::from_secs(3)
            },
            s4_periods: if quick { 4 } else { 6 },
            redis_benchmark_seconds: if quick { 0.25 } else { 2.0 },
            foreign_cpu_limit: cli.foreign_cpu_limit,
            contended_timeout: Duration::from_secs(if quick { 60 } else { 180 }),
            memory_duration: duration * 6,
            demo_duration: Duration::from_secs(if quick { 3 } else { 10 }),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_flags() {
        let cli = Cli::try_parse_from([
            "dlock-bench",
            "--scenarios",
            "limit,s1,peers,churn",
            "--duration",
            "5s",
            "--json",
        ])
        .unwrap();
        assert_eq!(
            cli.scenarios,
            [
                Scenario::Limit,
                Scenario::S1,
                Scenario::Peers,
                Scenario::Churn
            ]
        );
        assert_eq!(cli.duration, Some(Duration::from_secs(5)));
        assert!(cli.json);
    }

    #[test]
    fn rejects_bad_input() {
        for args in [
            &["dlock-bench", "--scenarios", "s9"][..],
            &["dlock-bench", "--duration", "ten"],
            &["dlock-bench", "--duration", "1ms"],
            &["dlock-bench", "--runs", "0"],
            &["dlock-bench", "--bogus"],
        ] {
            assert!(Cli::try_parse_from(args).is_err(), "{args:?} accepted");
        }
    }
}
