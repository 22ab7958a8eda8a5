//! Smoke test: the benchmark binary runs the quick limit, S1 and S2 scenarios against its
//! own redis-server and reports plausible figures.

use std::process::Command;
use std::time::Instant;

#[test]
fn quick_limit_s1_s2() {
    let started = Instant::now();
    let output = Command::new(env!("CARGO_BIN_EXE_dlock-bench"))
        .args(["--quick", "--scenarios", "limit,s1,s2", "--json"])
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
    assert!(row("s2").contains("counter 500/500 ok"), "{}", row("s2"));

    // The JSON document on stdout says the same.
    let json: serde_json::Value = serde_json::from_str(&stdout).expect("JSON on stdout");
    let summary = |scenario: &str, key: &str| -> f64 {
        json["scenarios"]
            .as_array()
            .expect("scenarios")
            .iter()
            .find(|s| s["scenario"] == scenario && s["implementation"] != "rslock")
            .and_then(|s| s["summary"][key].as_f64())
            .unwrap_or_else(|| panic!("no {scenario}.{key} in {stdout}"))
    };
    assert!(summary("limit", "cycle_ceiling_per_s") > 0.0);
    assert!(summary("s1", "cycles_per_s") > 0.0);
    assert!(summary("s2", "acquisitions_per_s") > 0.0);
    assert_eq!(summary("s2", "counter"), 500.0);
    assert_eq!(summary("s2", "counter_ok"), 1.0);
    eprintln!("smoke run took {:.1?}", started.elapsed());
}
