//! Mutual exclusion seen from outside the lock: `dlock-overlap` runs as several OS
//! processes at once against each topology, every process records its critical sections
//! on the monotonic clock, and the merged records must show no overlap and no lost
//! section. The same run without the lock must overlap, or the checker proves nothing.
//!
//! Scale for longer runs with `DLOCK_OVERLAP_PROCESSES` (default 4), `DLOCK_OVERLAP_COUNT`
//! (sections per process, default 250) and `DLOCK_OVERLAP_HOLD` (time inside, default
//! `1ms`).

use std::fs::File;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Mutex, MutexGuard};
use std::time::{Duration, Instant};

use dlock_tests::overlap::{read_files, Report};
use dlock_tests::{RedisCluster, RedisSentinelGroup, RedisServer};

const BINARY: &str = env!("CARGO_BIN_EXE_dlock-overlap");

/// The shortest time a run may take before its processes are killed.
const MIN_TIMEOUT: Duration = Duration::from_secs(120);

/// The tests run one at a time: concurrent runs on a small machine would share its cores
/// and blur each other's figures (and a topology's start-up).
fn serial() -> MutexGuard<'static, ()> {
    static SERIAL: Mutex<()> = Mutex::new(());
    SERIAL
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// Processes, sections per process and time inside each section.
struct Scale {
    processes: u32,
    count: u64,
    hold: Duration,
}

impl Scale {
    fn from_env() -> Scale {
        fn var<T>(name: &str, default: T, parse: impl Fn(&str) -> Option<T>) -> T {
            match std::env::var(name) {
                Ok(value) => parse(&value).unwrap_or_else(|| panic!("{name}={value:?} is invalid")),
                Err(_) => default,
            }
        }
        Scale {
            processes: var("DLOCK_OVERLAP_PROCESSES", 4, |v| v.parse().ok()),
            count: var("DLOCK_OVERLAP_COUNT", 250, |v| v.parse().ok()),
            hold: var("DLOCK_OVERLAP_HOLD", Duration::from_millis(1), |v| {
                humantime::parse_duration(v).ok()
            }),
        }
    }

    fn expected(&self) -> u64 {
        u64::from(self.processes) * self.count
    }

    /// Generous: every section may take 10 ms longer than its hold.
    fn timeout(&self) -> Duration {
        let per_section = self.hold + Duration::from_millis(10);
        MIN_TIMEOUT.max(per_section * u32::try_from(self.expected()).unwrap_or(u32::MAX))
    }
}

/// `examples/config/<mode>.toml` with each sample port replaced by the real one.
fn sample(mode: &str, ports: &[(u16, u16)]) -> String {
    let path = format!(
        "{}/../examples/config/{mode}.toml",
        env!("CARGO_MANIFEST_DIR")
    );
    let mut text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path}: {e}"));
    for (sample, real) in ports {
        text = text.replace(
            &format!("127.0.0.1:{sample}\""),
            &format!("127.0.0.1:{real}\""),
        );
    }
    text
}

/// One process of a run and where its output goes.
struct Process {
    child: Child,
    stderr: PathBuf,
}

impl Process {
    fn stderr(&self) -> String {
        std::fs::read_to_string(&self.stderr).unwrap_or_else(|e| format!("<{e}>"))
    }
}

/// What a run showed.
struct Outcome {
    report: Report,
    /// The `check` subcommand's exit code on the same files.
    check_code: Option<i32>,
}

/// Runs `dlock-overlap run` as `scale.processes` processes at once, all taking `lock` with
/// `api` against the deployment in `config`, and merges their records.
///
/// # Panics
///
/// If a process fails or is still running after the timeout (it is killed); the message
/// quotes every process's stderr.
fn run(label: &str, config: &str, lock: &str, api: &str) -> Outcome {
    let scale = Scale::from_env();
    let dir = tempfile::tempdir().unwrap();
    let config_path = dir.path().join("config.toml");
    std::fs::write(&config_path, config).unwrap();

    let started = Instant::now();
    let mut processes: Vec<Process> = (1..=scale.processes)
        .map(|id| spawn(dir.path(), &config_path, lock, api, id, &scale))
        .collect();
    let deadline = started + scale.timeout();
    let mut failed = Vec::new();
    for (index, process) in processes.iter_mut().enumerate() {
        let status = loop {
            match process.child.try_wait().unwrap() {
                Some(status) => break Some(status),
                None if Instant::now() >= deadline => break None,
                None => std::thread::sleep(Duration::from_millis(10)),
            }
        };
        match status {
            Some(status) if status.success() => {}
            Some(status) => failed.push(format!("process {} exited with {status}", index + 1)),
            None => failed.push(format!(
                "process {} still running after {:?}; killed",
                index + 1,
                scale.timeout()
            )),
        }
    }
    let wall = started.elapsed();
    if !failed.is_empty() {
        for process in &mut processes {
            let _ = process.child.kill();
            let _ = process.child.wait();
        }
        let stderr: Vec<String> = processes.iter().map(Process::stderr).collect();
        panic!(
            "{label}: {}\n--- stderr ---\n{}",
            failed.join("; "),
            stderr.join("---\n")
        );
    }

    let files: Vec<PathBuf> = (1..=scale.processes)
        .map(|id| out_file(dir.path(), id))
        .collect();
    let report = Report::new(&read_files(&files).unwrap(), scale.expected());
    let check_code = Command::new(BINARY)
        .arg("check")
        .arg("--expect")
        .arg(scale.expected().to_string())
        .args(&files)
        .stdout(Stdio::null())
        .status()
        .unwrap()
        .code();

    println!(
        "{label}: {} processes × {} × {:?}: {} sections, {} overlaps, {} lost in {wall:?} ({:.0} acquisitions/s)",
        scale.processes,
        scale.count,
        scale.hold,
        report.recorded,
        report.overlaps,
        report.lost,
        report.recorded as f64 / wall.as_secs_f64()
    );
    println!("{report}");
    for process in &processes {
        print!("  {}", process.stderr());
    }
    Outcome { report, check_code }
}

fn out_file(dir: &Path, id: u32) -> PathBuf {
    dir.join(format!("process-{id}.txt"))
}

fn spawn(dir: &Path, config: &Path, lock: &str, api: &str, id: u32, scale: &Scale) -> Process {
    let stderr = dir.join(format!("process-{id}.err"));
    let child = Command::new(BINARY)
        .arg("run")
        .arg("--config")
        .arg(config)
        .args(["--lock", lock, "--api", api])
        .args(["--count", &scale.count.to_string()])
        .args([
            "--hold",
            &humantime::format_duration(scale.hold).to_string(),
        ])
        .arg("--out")
        .arg(out_file(dir, id))
        .args(["--process", &id.to_string()])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(File::create(&stderr).unwrap())
        .spawn()
        .unwrap_or_else(|e| panic!("cannot run {BINARY}: {e}"));
    Process { child, stderr }
}

/// The run must be exclusive and complete, and `check` must agree.
fn assert_exclusive(outcome: &Outcome) {
    let report = &outcome.report;
    assert_eq!(report.overlaps, 0, "{report}");
    assert_eq!(report.lost, 0, "{report}");
    assert!(report.is_clean(), "{report}");
    assert_eq!(outcome.check_code, Some(0), "check disagrees: {report}");
}

fn single(server: &RedisServer) -> String {
    sample("single", &[(6379, server.port())])
}

#[test]
fn single_manual_api_never_overlaps() {
    let _serial = serial();
    let server = RedisServer::start();
    assert_exclusive(&run(
        "single, manual",
        &single(&server),
        "overlap:single:manual",
        "manual",
    ));
}

#[test]
fn single_attribute_never_overlaps() {
    let _serial = serial();
    let server = RedisServer::start();
    assert_exclusive(&run(
        "single, attribute",
        &single(&server),
        "overlap:single:attribute",
        "attribute",
    ));
}

#[test]
fn sentinel_manual_api_never_overlaps() {
    let _serial = serial();
    let group = RedisSentinelGroup::start();
    let ports: Vec<(u16, u16)> = [26379, 26380, 26381]
        .into_iter()
        .zip(group.sentinel_addrs().iter().map(|a| a.port()))
        .collect();
    assert_exclusive(&run(
        "sentinel, manual",
        &sample("sentinel", &ports),
        "overlap:sentinel:manual",
        "manual",
    ));
}

#[test]
fn cluster_attribute_never_overlaps() {
    let _serial = serial();
    let cluster = RedisCluster::start();
    let ports: Vec<(u16, u16)> = [7000, 7001, 7002]
        .into_iter()
        .zip(cluster.nodes().iter().map(|n| n.port()))
        .collect();
    assert_exclusive(&run(
        "cluster, attribute",
        &sample("cluster", &ports),
        "overlap:cluster:attribute",
        "attribute",
    ));
}

/// The control: without the lock the same processes do overlap, so the checker can fail.
#[test]
fn without_the_lock_sections_overlap() {
    let _serial = serial();
    let server = RedisServer::start();
    let outcome = run(
        "single, no lock (control)",
        &single(&server),
        "overlap:control",
        "none",
    );
    let report = &outcome.report;
    assert!(
        report.overlaps > 0,
        "the control run did not overlap: {report}"
    );
    assert_eq!(report.lost, 0, "{report}");
    assert_eq!(
        outcome.check_code,
        Some(1),
        "check passed the control run: {report}"
    );
}
