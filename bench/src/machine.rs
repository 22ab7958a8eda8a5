//! Facts about the machine the results come from.

use std::process::Command;
use std::time::{SystemTime, UNIX_EPOCH};

use serde::Serialize;

use crate::stats::Result;
use crate::target::{self, Target};

/// What the report records about where it was measured.
#[derive(Debug, Clone, Serialize)]
pub struct Machine {
    /// UTC date and time of the run.
    pub date: String,
    /// Logical CPUs available to the process.
    pub cores: usize,
    /// CPU model from `/proc/cpuinfo`.
    pub cpu: String,
    /// Total memory from `/proc/meminfo`.
    pub memory: String,
    /// Kernel release.
    pub kernel: String,
    /// `redis_version` of the server.
    pub redis_version: String,
    /// `redis-benchmark --version`, or "not installed".
    pub redis_benchmark: String,
    /// The compiler that built this binary.
    pub rustc: String,
    /// `release` or `debug`.
    pub build: String,
    /// Tokio worker threads of the benchmark's runtime.
    pub tokio_workers: usize,
    /// The workspace's git commit, with `+dirty` when dlock-core has uncommitted changes.
    pub dlock_commit: String,
    /// `/proc/loadavg` when the benchmark started (the machine is shared).
    pub load_at_start: String,
    /// `/proc/loadavg` when it ended (filled in by the caller).
    pub load_at_end: String,
}

impl Machine {
    /// Collects the facts; the Redis version comes from a server started for the purpose.
    pub async fn collect(redis_url: Option<&str>) -> Result<Machine> {
        let target = Target::open(redis_url).await?;
        let mut conn = target.connection().await?;
        let server = target::info(&mut conn, "server").await?;
        target.finish().await?;
        let cores = std::thread::available_parallelism().map_or(1, usize::from);
        Ok(Machine {
            date: utc_now(),
            cores,
            cpu: proc_field("/proc/cpuinfo", "model name").unwrap_or_else(|| "unknown".into()),
            memory: proc_field("/proc/meminfo", "MemTotal").unwrap_or_else(|| "unknown".into()),
            kernel: std::fs::read_to_string("/proc/sys/kernel/osrelease")
                .map_or_else(|_| "unknown".into(), |s| s.trim().to_owned()),
            redis_version: server
                .get("redis_version")
                .cloned()
                .unwrap_or_else(|| "unknown".into()),
            redis_benchmark: Command::new("redis-benchmark")
                .arg("--version")
                .output()
                .ok()
                .filter(|o| o.status.success())
                .map_or_else(
                    || "not installed".into(),
                    |o| String::from_utf8_lossy(&o.stdout).trim().to_owned(),
                ),
            rustc: env!("DLOCK_BENCH_RUSTC_VERSION").to_owned(),
            build: if cfg!(debug_assertions) {
                "debug"
            } else {
                "release"
            }
            .to_owned(),
            tokio_workers: cores,
            dlock_commit: git_commit(),
            load_at_start: load_average(),
            load_at_end: String::new(),
        })
    }
}

/// `git rev-parse --short HEAD` of the workspace this binary was built from.
fn git_commit() -> String {
    let workspace = concat!(env!("CARGO_MANIFEST_DIR"), "/..");
    let git = |args: &[&str]| {
        Command::new("git")
            .arg("-C")
            .arg(workspace)
            .args(args)
            .output()
            .ok()
            .filter(|o| o.status.success())
            .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_owned())
    };
    match git(&["rev-parse", "--short", "HEAD"]) {
        Some(commit) => match git(&["status", "--porcelain", "--", "dlock-core", "dlock-macros"]) {
            Some(changes) if !changes.is_empty() => format!("{commit}+dirty"),
            _ => commit,
        },
        None => "unknown".into(),
    }
}

/// The 1, 5 and 15 minute load averages.
pub fn load_average() -> String {
    std::fs::read_to_string("/proc/loadavg").map_or_else(
        |_| "unknown".into(),
        |s| s.split_whitespace().take(3).collect::<Vec<_>>().join(" "),
    )
}

/// The first `name: value` line of a `/proc` file.
fn proc_field(path: &str, name: &str) -> Option<String> {
    let text = std::fs::read_to_string(path).ok()?;
    text.lines()
        .filter_map(|line| line.split_once(':'))
        .find(|(k, _)| k.trim() == name)
        .map(|(_, v)| v.trim().to_owned())
}

/// `YYYY-MM-DD HH:MM UTC` for now.
fn utc_now() -> String {
    let secs = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    let (days, rest) = (secs / 86_400, secs % 86_400);
    let (y, m, d) = civil_from_days(days as i64);
    format!(
        "{y:04}-{m:02}-{d:02} {:02}:{:02} UTC",
        rest / 3600,
        rest % 3600 / 60
    )
}

/// Days since 1970-01-01 to (year, month, day) in the proleptic Gregorian calendar
/// (Howard Hinnant's algorithm).
fn civil_from_days(days: i64) -> (i64, u32, u32) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1_460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let month = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    let year = yoe + era * 400 + i64::from(month <= 2);
    (year, month, day)
}

#[cfg(test)]
mod tests {
    use super::civil_from_days;

    #[test]
    fn dates() {
        assert_eq!(civil_from_days(0), (1970, 1, 1));
        assert_eq!(civil_from_days(19_723), (2024, 1, 1));
        assert_eq!(civil_from_days(11_016), (2000, 2, 29));
    }
}
