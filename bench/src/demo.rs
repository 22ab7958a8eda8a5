//! `demo`: the stock demo's hot item, through the real `stock-demo` binary.
//!
//! Three service processes sell one item; every buy holds the item's lock for
//! [`HOLD`], so one lock serialises all sales and `1 / HOLD` is the ceiling. The demo runs
//! for [`Config::demo_duration`] with a few request slots per process (each slot sends to
//! one process only) and reports each process's sales and the sales per second; this
//! scenario reads its `--json` line.
//!
//! The binary is looked up next to dlock-bench's own executable (cargo puts both in
//! `target/<profile>/`), and not built from here: a build would need the source tree and
//! cargo at run time, would take minutes in the middle of a measurement on a shared
//! machine, and could pick another profile or target directory than the bench itself.
//! When it is missing the scenario fails with the command that builds it.

use std::path::PathBuf;
use std::process::Command;
use std::time::Duration;

use serde::Deserialize;

use crate::metrics::Metrics;
use crate::settings::Config;
use crate::stats::{error, Result};

/// Time in the critical section of each sale.
pub const HOLD: Duration = Duration::from_millis(50);
/// Service processes.
const PROCESSES: usize = 3;
/// Request slots per process: enough that every process always has buys waiting.
const SLOTS_PER_PROCESS: usize = 4;

/// The part of the demo's JSON report this scenario reads.
#[derive(Deserialize)]
struct Report {
    sold: u64,
    oversold: i64,
    errors: u64,
    busy: u64,
    sold_per_process: Vec<u64>,
    per_process_within_30pct: bool,
    per_process_min_over_mean: Option<f64>,
    sold_per_s: f64,
    seconds: f64,
}

/// The demo binary next to ours.
fn demo_binary() -> Result<PathBuf> {
    let exe =
        std::env::current_exe().map_err(|e| error(format!("cannot find my own binary: {e}")))?;
    let path = exe
        .parent()
        .ok_or_else(|| error("my own binary has no directory"))?
        .join(format!("stock-demo{}", std::env::consts::EXE_SUFFIX));
    if path.is_file() {
        Ok(path)
    } else {
        Err(error(format!(
            "{} is missing: build it with `cargo build --release -p stock-demo` (same profile \
             and target directory as dlock-bench)",
            path.display()
        )))
    }
}

/// Runs the demo once.
pub async fn run(cfg: &Config) -> Result<Metrics> {
    let binary = demo_binary()?;
    let duration = cfg.demo_duration;
    let args: Vec<String> = vec![
        "--mode".into(),
        "hot".into(),
        "--processes".into(),
        PROCESSES.to_string(),
        "--hold".into(),
        humantime::format_duration(HOLD).to_string(),
        "--duration".into(),
        humantime::format_duration(duration).to_string(),
        "--concurrency".into(),
        (PROCESSES * SLOTS_PER_PROCESS).to_string(),
        // Bounds that the duration reaches first: never sold out, never out of requests.
        "--stock".into(),
        "1000000".into(),
        "--requests".into(),
        "1000000".into(),
        "--json".into(),
    ];
    let output = tokio::task::spawn_blocking(move || Command::new(&binary).args(&args).output())
        .await
        .map_err(|e| error(format!("stock-demo supervisor: {e}")))?
        .map_err(|e| error(format!("cannot run stock-demo: {e}")))?;
    let stdout = String::from_utf8_lossy(&output.stdout);
    if !output.status.success() {
        return Err(error(format!(
            "stock-demo exited with {}: {}{}",
            output.status,
            String::from_utf8_lossy(&output.stderr),
            stdout
        )));
    }
    let line = stdout
        .lines()
        .rev()
        .find(|l| l.starts_with('{'))
        .ok_or_else(|| error(format!("no JSON report from stock-demo in {stdout:?}")))?;
    let report: Report =
        serde_json::from_str(line).map_err(|e| error(format!("bad stock-demo report: {e}")))?;

    let ceiling = 1.0 / HOLD.as_secs_f64();
    let mut m = Metrics::default();
    m.add("sold_per_s", "sales/s", report.sold_per_s, 1);
    m.add(
        "vs_ceiling",
        "sales/s ÷ (1 / critical section)",
        report.sold_per_s / ceiling,
        2,
    );
    for (i, key, label) in [
        (0, "sold_p1", "sold by process 1"),
        (1, "sold_p2", "sold by process 2"),
        (2, "sold_p3", "sold by process 3"),
    ] {
        let sold = report.sold_per_process.get(i).copied().unwrap_or(0);
        m.add(key, label, sold as f64, 0);
    }
    m.add(
        "min_over_mean",
        "per-process sold: min / mean",
        report.per_process_min_over_mean.unwrap_or(f64::NAN),
        2,
    );
    m.add_min(
        "within_30pct",
        "every process within ±30 % of the mean: 1 = yes (worst run)",
        if report.per_process_within_30pct {
            1.0
        } else {
            0.0
        },
    );
    m.add("sold", "sold", report.sold as f64, 0);
    m.add_max("oversold", "oversold (worst run)", report.oversold as f64);
    m.add_max(
        "errors",
        "errors + busy answers (worst run)",
        (report.errors + report.busy) as f64,
    );
    m.add("seconds", "load phase (s)", report.seconds, 2);
    m.note(format!(
        "demo: `stock-demo --mode hot --processes {PROCESSES} --hold {} --duration {} \
         --concurrency {} --json` (each request slot sends to one process); \
         the ceiling is 1 / hold = {ceiling:.0} sales/s",
        humantime::format_duration(HOLD),
        humantime::format_duration(duration),
        PROCESSES * SLOTS_PER_PROCESS
    ));
    Ok(m)
}
