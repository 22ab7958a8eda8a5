//! Guards the scheduled-job example: three processes fire the same ticks against one
//! Redis, and the job runs exactly once per tick across them, even though two of them
//! tick 150 ms and 300 ms late (`min_hold` covers 800 ms: the late nodes' ticks may come
//! another 500 ms later on a loaded machine; with 500 ms ticks and a 400 ms `min_hold`,
//! a margin of 100 ms, a slow CI run once saw a node run a tick twice). The control (no `min_hold`) runs it more than once per
//! tick, so the check can fail.

use std::collections::BTreeMap;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use dlock_tests::RedisServer;
use redis::Commands;

/// Six ticks of 1 s, plus start-up, in a debug build.
const LIMIT: Duration = Duration::from_secs(60);

const TICKS: u64 = 6;

fn start(url: &str, node: &str, skew: &str, control: bool) -> Child {
    let mut command = Command::new(env!("CARGO_BIN_EXE_scheduled-job"));
    command
        .args([
            "--node",
            node,
            "--skew",
            skew,
            "--ticks",
            &TICKS.to_string(),
        ])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .env("DLOCK_REDIS_URL", url);
    if control {
        command.arg("--no-min-hold");
    }
    command.spawn().expect("start the scheduled-job example")
}

/// Waits for `child` (killed after [`LIMIT`]); its stdout.
fn finish(mut child: Child, started: Instant) -> String {
    while child.try_wait().unwrap().is_none() {
        if started.elapsed() > LIMIT {
            let _ = child.kill();
            let _ = child.wait();
            panic!("the scheduled-job example ran longer than {LIMIT:?}");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let output = child.wait_with_output().unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
    assert!(
        output.status.success(),
        "scheduled-job failed ({}):\n{stdout}\n{}",
        output.status,
        String::from_utf8_lossy(&output.stderr)
    );
    stdout
}

/// Runs three nodes (skews 0, 150 and 300 ms); per tick, how many nodes ran the job and
/// how many fired it at all, and the Redis run counters per tick.
fn run_nodes(control: bool) -> (BTreeMap<u64, (u32, u32)>, BTreeMap<u64, i64>) {
    let server = RedisServer::start();
    let started = Instant::now();
    let children: Vec<Child> = [("a", "0ms"), ("b", "150ms"), ("c", "300ms")]
        .into_iter()
        .map(|(node, skew)| start(&server.url(), node, skew, control))
        .collect();
    let outputs: Vec<String> = children
        .into_iter()
        .map(|child| finish(child, started))
        .collect();

    let mut ticks: BTreeMap<u64, (u32, u32)> = BTreeMap::new();
    for output in &outputs {
        assert_eq!(output.lines().count() as u64, TICKS, "{output}");
        for line in output.lines() {
            let (tick, outcome) = line
                .strip_prefix("tick ")
                .and_then(|rest| rest.split_once(' '))
                .unwrap_or_else(|| panic!("unexpected line {line:?}"));
            let entry = ticks.entry(tick.parse().unwrap()).or_default();
            entry.1 += 1;
            if outcome.ends_with(": ran") {
                entry.0 += 1;
            } else {
                assert!(outcome.ends_with(": skipped"), "{line:?}");
            }
        }
    }
    let mut counters = BTreeMap::new();
    for key in server
        .connection()
        .keys::<_, Vec<String>>("scheduled:runs:*")
        .unwrap()
    {
        let tick: u64 = key.rsplit(':').next().unwrap().parse().unwrap();
        counters.insert(tick, server.connection().get(&key).unwrap());
    }
    (ticks, counters)
}

#[test]
fn three_processes_run_the_job_once_per_tick() {
    let (ticks, counters) = run_nodes(false);
    let shared = ticks.values().filter(|(_, fired)| *fired == 3).count();
    assert!(
        shared >= 4,
        "the three nodes fired at least 4 ticks together: {ticks:?}"
    );
    for (tick, (ran, fired)) in &ticks {
        assert_eq!(
            *ran, 1,
            "tick {tick}: {ran} of {fired} nodes ran the job: {ticks:?}"
        );
        assert_eq!(counters.get(tick), Some(&1), "tick {tick}: {counters:?}");
    }
    eprintln!("min_hold: {} ticks, each run once: {ticks:?}", ticks.len());
}

#[test]
fn control_without_min_hold_late_nodes_run_the_job_again() {
    let (ticks, counters) = run_nodes(true);
    let repeated = ticks.values().filter(|(ran, _)| *ran > 1).count();
    assert!(
        repeated > 0,
        "without min_hold the late nodes find the lock free: no tick ran twice, so the test above proves nothing: {ticks:?}"
    );
    assert!(counters.values().any(|runs| *runs > 1), "{counters:?}");
    eprintln!(
        "control: {repeated} of {} ticks ran more than once: {ticks:?}",
        ticks.len()
    );
}
