//! A scheduled job run once per tick across nodes: every process fires the same tokio
//! interval tick, one runs the job, the others skip it.
//!
//! `on_busy = "skip"` makes a node whose tick finds the lock taken run nothing;
//! `min_hold` keeps the lock taken for most of the period even though the job itself is
//! quick, so a node whose tick comes late (a slow scheduler, a skewed clock: `--skew`)
//! still finds it taken instead of running the job a second time.
//!
//! Uses the Redis at `DLOCK_REDIS_URL`, by default `redis://127.0.0.1:6379`. Each run of the
//! job counts itself under `scheduled:runs:<tick>`. Prints one line per tick:
//! `tick <n> node <name>: ran` or `tick <n> node <name>: skipped`.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use clap::Parser;
use dlock::{distributed_lock, LockClient};
use redis::AsyncCommands;

/// The interval between ticks; every node fires on the same multiples of it.
const PERIOD: Duration = Duration::from_millis(1_000);

/// How long the job itself takes.
const WORK: Duration = Duration::from_millis(50);

type JobResult<T> = Result<T, Box<dyn std::error::Error + Send + Sync>>;

#[derive(Parser)]
#[command(about = "Run a job once per 1 s tick across every process started alike")]
struct Args {
    /// This process' name in the output.
    #[arg(long, default_value = "node")]
    node: String,
    /// How many ticks to fire before exiting: 20 by default (20 s), time enough to start
    /// more nodes in other terminals.
    #[arg(long, default_value_t = 20)]
    ticks: u64,
    /// How late this node's ticks fire after the shared boundary, e.g. "150ms".
    #[arg(long, default_value = "0ms", value_parser = parse_skew)]
    skew: Duration,
    /// The control: run the job without `min_hold` (late nodes then run it again).
    #[arg(long)]
    no_min_hold: bool,
}

fn parse_skew(text: &str) -> Result<Duration, String> {
    let millis = text
        .strip_suffix("ms")
        .and_then(|number| number.parse::<u64>().ok())
        .ok_or_else(|| format!("{text:?} is not a duration in milliseconds such as \"150ms\""))?;
    if millis >= PERIOD.as_millis() as u64 {
        return Err(format!(
            "a skew of {text} reaches the next tick; give less than 1000ms"
        ));
    }
    Ok(Duration::from_millis(millis))
}

/// The job: one lock for every call, so no placeholder (a global lock on purpose). Held
/// at least 800 ms from acquisition, less than [`PERIOD`], so the next tick finds it free;
/// a node whose tick fires up to 800 ms after the first node's finds it taken.
#[distributed_lock(key = "scheduled:report", on_busy = "skip", min_hold = "800ms")]
async fn report(
    tick: u64,
    redis: &mut redis::aio::MultiplexedConnection,
) -> JobResult<Option<u64>> {
    run_job(tick, redis).await.map(Some)
}

/// The control: the same job without `min_hold`.
#[distributed_lock(key = "scheduled:report", on_busy = "skip")]
async fn report_without_min_hold(
    tick: u64,
    redis: &mut redis::aio::MultiplexedConnection,
) -> JobResult<Option<u64>> {
    run_job(tick, redis).await.map(Some)
}

/// Counts this run of tick `tick`; returns how many runs the tick has had.
async fn run_job(tick: u64, redis: &mut redis::aio::MultiplexedConnection) -> JobResult<u64> {
    let runs: u64 = redis.incr(format!("scheduled:runs:{tick}"), 1).await?;
    tokio::time::sleep(WORK).await;
    Ok(runs)
}

/// Time since the Unix epoch: the nodes share the machine's wall clock, so they agree on
/// the tick boundaries.
fn now() -> Duration {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default()
}

#[tokio::main]
async fn main() -> JobResult<()> {
    let args = Args::parse();
    let url = std::env::var("DLOCK_REDIS_URL").unwrap_or_else(|_| "redis://127.0.0.1:6379".into());
    dlock::set_global(LockClient::connect(&url).await?).ok();
    // The start-up check: a missing client fails here, not at the first tick.
    dlock::global_client()?;
    let mut redis = redis::Client::open(url.as_str())?
        .get_multiplexed_async_connection()
        .await?;

    // Start on the next boundary, then fire every PERIOD (late by `skew`).
    let period = PERIOD.as_millis();
    let first = now().as_millis() / period + 1;
    let start = Duration::from_millis((first * period) as u64) + args.skew;
    let mut interval = tokio::time::interval_at(
        tokio::time::Instant::now() + start.saturating_sub(now()),
        PERIOD,
    );
    for _ in 0..args.ticks {
        interval.tick().await;
        let tick = ((now() - args.skew).as_millis() / period) as u64;
        let outcome = if args.no_min_hold {
            report_without_min_hold(tick, &mut redis).await?
        } else {
            report(tick, &mut redis).await?
        };
        let said = if outcome.is_some() { "ran" } else { "skipped" };
        println!("tick {tick} node {}: {said}", args.node);
    }
    // Whatever the client still owes Redis is done before the process exits.
    dlock::global_client()?.shutdown().await?;
    Ok(())
}
