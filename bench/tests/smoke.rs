//! Smoke tests: the benchmark binary runs the quick limit, scripts, S1 and S2 scenarios,
//! and the quick scaling sweeps, against its own redis-servers and reports plausible
//! figures.

use std::process::Command;
use std::time::Instant;

/// S2's counted acquisitions in the smoke run.
const ACQUISITIONS: u64 = 200;

#[test]
fn quick_limit_s1_s2() {
    let started = Instant::now();
    // Shorter than `--quick` alone: the figures of a debug build mean nothing, and these
    // measurements keep both cores busy beside the rest of the suite.
    let output = Command::new(env!("CARGO_BIN_EXE_dlock-bench"))
        .args(["--quick", "--scenarios", "limit,scripts,s1,s2", "--json"])
        .args([
            "--duration",
            "500ms",
            "--acquisitions",
            &ACQUISITIONS.to_string(),
        ])
        .output()
        .expect("run dlock-bench");
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        output.status.success(),
        "dlock-bench failed ({}):\n{stderr}\n{stdout}",
        output.status
    );

    // The table (on stderr with --json): one row per scenario, with a non-zero rate.
    let row = |scenario: &str| -> String {
        stderr
            .lines()
            .find(|line| line.split_whitespace().next() == Some(scenario))
            .unwrap_or_else(|| panic!("no {scenario} row in:\n{stderr}"))
            .to_owned()
    };
    for (scenario, unit) in [
        ("limit", "cycles/s"),
        ("s1", "cycles/s"),
        ("s2", "acquisitions/s"),
    ] {
        let line = row(scenario);
        let rate: f64 = line
            .split_whitespace()
            .nth(2)
            .map(|n| n.replace(',', ""))
            .and_then(|n| n.parse().ok())
            .unwrap_or_else(|| panic!("no rate in {line:?}"));
        assert!(rate > 0.0 && line.contains(unit), "{line}");
    }
    let counted = format!("counter {ACQUISITIONS}/{ACQUISITIONS} ok");
    assert!(row("s2").contains(&counted), "{}", row("s2"));

    // The JSON document on stdout says the same.
    let json: serde_json::Value = serde_json::from_str(&stdout).expect("JSON on stdout");
    let of = |scenario: &str, implementation: &str, key: &str| -> f64 {
        json["scenarios"]
            .as_array()
            .expect("scenarios")
            .iter()
            .find(|s| s["scenario"] == scenario && s["implementation"] == implementation)
            .and_then(|s| s["summary"][key].as_f64())
            .unwrap_or_else(|| panic!("no {scenario}/{implementation}.{key} in {stdout}"))
    };
    let summary = |scenario: &str, key: &str| of(scenario, "dlock", key);
    assert!(of("limit", "raw", "cycle_ceiling_per_s") > 0.0);
    // The limit's redis-benchmark part sends dlock's scripts with their arguments written
    // out by hand: a script whose arguments changed makes it fail (a note, not an error).
    assert!(
        !stdout.contains("redis-benchmark failed"),
        "the limit's redis-benchmark calls fail: {stdout}"
    );
    assert!(summary("s1", "cycles_per_s") > 0.0);
    // Redis' work per lock, beside the lean floor's in the same run.
    assert!(summary("s1", "server_cpu_us_per_cycle") > 0.0);
    assert!(of("s1", "floor", "server_cpu_us_per_cycle") > 0.0);
    // The scripts' commands per call are counts, the same on every machine.
    assert_eq!(of("scripts", "raw", "acquire_commands"), 4.0);
    assert_eq!(of("scripts", "raw", "release_commands"), 3.0);
    assert_eq!(of("scripts", "raw", "renew_commands_per_lock"), 2.0);
    assert_eq!(of("scripts", "raw", "floor_acquire_commands"), 3.0);
    assert_eq!(of("scripts", "raw", "floor_release_commands"), 2.0);
    // dlock runs exactly the design floor's commands on its common paths: what it costs
    // beyond it is arguments and Lua, not work Redis does.
    assert_eq!(of("scripts", "raw", "design_acquire_commands"), 4.0);
    assert_eq!(of("scripts", "raw", "design_release_commands"), 3.0);
    // ... and the design floor called with dlock's keys and arguments is measured beside.
    assert!(of("scripts", "raw", "args_acquire_us") > 0.0);
    assert!(of("scripts", "raw", "args_release_us") > 0.0);
    assert!(of("scripts", "raw", "bare_acquire_us") > 0.0);
    assert!(of("scripts", "raw", "bare_release_us") > 0.0);
    assert!(summary("s2", "server_cpu_us_per_acquisition") > 0.0);
    assert!(summary("s2", "acquisitions_per_s") > 0.0);
    assert_eq!(summary("s2", "counter"), ACQUISITIONS as f64);
    assert_eq!(summary("s2", "counter_ok"), 1.0);
    eprintln!("smoke run took {:.1?}", started.elapsed());
}

/// The quick sweeps: every point runs, every curve gets a growth class, the pictures are
/// written beside the docs file and linked from it, and the wake-up target is judged.
#[test]
fn quick_sweeps() {
    let started = Instant::now();
    let dir = std::env::temp_dir().join(format!("dlock-bench-sweeps-{}", std::process::id()));
    let docs = dir.join("RESULTS.md");
    let output = Command::new(env!("CARGO_BIN_EXE_dlock-bench"))
        .args(["--quick", "--scenarios", "sweeps", "--json", "--write-docs"])
        .arg(&docs)
        .output()
        .expect("run dlock-bench");
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        output.status.success(),
        "dlock-bench failed ({}):\n{stderr}\n{stdout}",
        output.status
    );

    let json: serde_json::Value = serde_json::from_str(&stdout).expect("JSON on stdout");
    let sweeps = json["sweeps"].as_array().expect("sweeps");
    let ids: Vec<&str> = sweeps.iter().filter_map(|s| s["id"].as_str()).collect();
    assert_eq!(
        ids,
        ["sweep-s4", "sweep-s1", "sweep-s2-s5", "sweep-wakeups"]
    );
    for sweep in sweeps {
        for series in sweep["series"].as_array().expect("series") {
            let points = series["points"].as_array().expect("points");
            assert!(points.len() >= 2, "{series}");
            for point in points {
                assert!(point["error"].is_null(), "failed point: {point}");
            }
            for (metric, growth) in series["growth"].as_object().expect("growth") {
                // Fairness may be 0 at some point; every other curve must be fitted.
                if metric != "min_over_mean" {
                    assert!(growth["class"].is_string(), "{metric}: {growth}");
                }
            }
        }
        let id = sweep["id"].as_str().unwrap_or_default();
        let svg = std::fs::read_to_string(dir.join(format!("{id}.svg")))
            .unwrap_or_else(|e| panic!("no picture of {id}: {e}"));
        assert!(
            svg.starts_with("<svg") && svg.contains("(log scale)"),
            "{id}"
        );
        assert!(std::fs::read_to_string(&docs)
            .expect("docs written")
            .contains(&format!("]({id}.svg)")));
    }
    // The contended points are still exact, in 1 and in 4 processes.
    for series in sweeps[2]["series"].as_array().expect("series") {
        for point in series["points"].as_array().expect("points") {
            assert_eq!(point["values"]["counter_ok"], 1.0, "{point}");
        }
    }
    let wakeups = &sweeps[3]["series"][0]["points"];
    assert_eq!(
        wakeups[0]["values"]["attempts_per_release"], 1.0,
        "one client never waits"
    );
    let target = json["targets"]
        .as_array()
        .expect("targets")
        .iter()
        .find(|t| {
            t["target"]
                .as_str()
                .is_some_and(|t| t.contains("20 waiting clients"))
        })
        .expect("wake-up target");
    assert!(target["met"].is_boolean(), "judged: {target}");
    std::fs::remove_dir_all(&dir).ok();
    eprintln!("sweep smoke run took {:.1?}", started.elapsed());
}
