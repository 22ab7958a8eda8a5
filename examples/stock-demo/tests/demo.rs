//! The demo proves something only if both outcomes hold: with the lock nothing is
//! oversold, without it the same load oversells.

use std::process::Command;

use serde_json::Value;

/// Runs the demo with small numbers; returns the exit code and the JSON report.
fn demo(extra: &[&str]) -> (Option<i32>, Value) {
    let output = Command::new(env!("CARGO_BIN_EXE_stock-demo"))
        .args([
            "--processes",
            "2",
            "--requests",
            "300",
            "--concurrency",
            "30",
        ])
        .args(["--items", "2", "--stock", "40", "--hold", "2ms", "--json"])
        .args(extra)
        .output()
        .expect("run stock-demo");
    let (stdout, stderr) = (
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr),
    );
    // With --json, stdout is the JSON document alone; the table goes to stderr.
    let report: Value = serde_json::from_str(&stdout)
        .unwrap_or_else(|e| panic!("stdout is not one JSON document ({e}):\n{stdout}\n{stderr}"));
    assert!(
        stderr.contains("stock-demo report"),
        "no table on stderr:\n{stderr}"
    );
    assert_rounded(&report);
    (output.status.code(), report)
}

/// Every measured figure in the report has at most 3 decimals.
fn assert_rounded(value: &Value) {
    match value {
        Value::Number(n) if n.is_f64() => {
            let shown = n.to_string();
            let decimals = shown.split_once('.').map_or(0, |(_, d)| d.len());
            assert!(decimals <= 3, "{shown} is not rounded");
        }
        Value::Array(items) => items.iter().for_each(assert_rounded),
        Value::Object(fields) => fields.values().for_each(assert_rounded),
        _ => {}
    }
}

fn number(report: &Value, field: &str) -> i64 {
    report[field]
        .as_i64()
        .unwrap_or_else(|| panic!("{field} missing in {report}"))
}

#[test]
fn every_locking_style_sells_exactly_the_stock() {
    for route in ["attribute", "manual", "try"] {
        let (code, report) = demo(&["--route", route]);
        assert_eq!(number(&report, "oversold"), 0, "{route}: {report}");
        assert_eq!(
            number(&report, "sold"),
            80,
            "{route}: all 2 x 40 items sold: {report}"
        );
        assert_eq!(number(&report, "sold_out"), 220, "{route}: {report}");
        assert_eq!(number(&report, "errors"), 0, "{route}: {report}");
        for item in report["items"].as_array().unwrap() {
            assert_eq!(item["final"], 0, "{route}: {report}");
        }
        assert_eq!(code, Some(0), "{route}");
    }
}

#[test]
fn the_control_without_the_lock_oversells_and_fails() {
    let (code, report) = demo(&["--no-lock"]);
    assert!(
        number(&report, "oversold") > 0,
        "the control must oversell: {report}"
    );
    assert_eq!(code, Some(1), "an oversold run exits non-zero");
}

#[test]
fn hot_mode_sells_one_item_from_every_process() {
    let (code, report) = demo(&["--mode", "hot"]);
    assert_eq!(number(&report, "oversold"), 0, "{report}");
    assert_eq!(number(&report, "sold"), 40, "{report}");
    assert_eq!(report["items"].as_array().unwrap().len(), 1);
    assert_eq!(code, Some(0));
}

/// The control for hot mode: every request on one item, no lock. Hot mode serialises all
/// requests on one key, so it is where a lock that does not exclude would show; this shows
/// the report's oversold count catches it there too.
#[test]
fn hot_mode_control_without_the_lock_oversells_and_fails() {
    let (code, report) = demo(&["--mode", "hot", "--no-lock"]);
    assert!(
        number(&report, "oversold") > 0,
        "the hot-mode control must oversell: {report}"
    );
    assert_eq!(report["items"].as_array().unwrap().len(), 1);
    assert_eq!(code, Some(1), "an oversold run exits non-zero");
    eprintln!(
        "hot-mode control: {} sold of 40, oversold {}",
        number(&report, "sold"),
        number(&report, "oversold")
    );
}

/// The fault mode: one service process is SIGSTOPped inside a sale's critical section for
/// longer than the lock's 5 s lease. The lock expires, another process sells the same
/// item, and the woken holder writes back the stock it read before the pause. The manual
/// route, because it does not look at the lock between its read and its write (the
/// attribute's default `on_lost = "cancel"` usually stops the woken body first: best
/// effort, the pause could fall after that check).
fn paused_holder(fenced: bool) -> (Option<i32>, Value) {
    let mut extra = vec!["--mode", "hot", "--route", "manual", "--pause-holder", "6s"];
    extra.extend(["--writes", if fenced { "fenced" } else { "plain" }]);
    let (code, report) = demo(&extra);
    let pause = &report["pause"];
    assert_eq!(pause["item"], 1, "the pause happened: {report}");
    assert!(
        pause["stock_read"].as_i64().is_some_and(|read| read > 0),
        "inside a sale: {report}"
    );
    assert_eq!(number(&report, "errors"), 0, "{report}");
    (code, report)
}

/// Without fencing the lock alone cannot stop the stale write: the report shows it as
/// oversold.
#[test]
fn a_holder_paused_past_its_lease_oversells_without_fencing() {
    let (code, report) = paused_holder(false);
    assert!(
        number(&report, "oversold") > 0,
        "the stale write must show as oversold: {report}"
    );
    assert_eq!(number(&report, "stale_refused"), 0, "{report}");
    assert_eq!(code, Some(1), "an oversold run exits non-zero");
}

/// With fenced writes (the default) the woken holder's write is refused and reported; nothing oversold.
#[test]
fn a_holder_paused_past_its_lease_is_refused_with_fencing() {
    let (code, report) = paused_holder(true);
    assert_eq!(number(&report, "stale_refused"), 1, "{report}");
    assert_eq!(number(&report, "oversold"), 0, "{report}");
    assert_eq!(number(&report, "sold"), 40, "{report}");
    assert_eq!(code, Some(0));
}

/// A time-bounded hot run: `--duration` stops it (not the request count), every sale is
/// credited to the process that made it, and the sales per second stay under the one-lock
/// ceiling of 1 / hold. Returns the JSON report.
fn timed_hot_run(extra: &[&str]) -> Value {
    let output = Command::new(env!("CARGO_BIN_EXE_stock-demo"))
        .args(["--mode", "hot", "--processes", "2", "--concurrency", "8"])
        .args(["--hold", "20ms", "--duration", "1s", "--json"])
        .args(["--stock", "100000", "--requests", "100000"])
        .args(extra)
        .output()
        .expect("run stock-demo");
    let stdout = String::from_utf8_lossy(&output.stdout);
    serde_json::from_str(stdout.lines().last().unwrap_or_default())
        .unwrap_or_else(|e| panic!("no JSON report ({e}):\n{stdout}"))
}

#[test]
fn a_timed_hot_run_reports_sales_per_process_under_the_lock_ceiling() {
    let report = timed_hot_run(&[]);
    let sold = number(&report, "sold");
    let per_process: Vec<i64> = report["sold_per_process"]
        .as_array()
        .expect("sold_per_process")
        .iter()
        .map(|n| n.as_i64().expect("a count"))
        .collect();
    assert_eq!(per_process.len(), 2, "{report}");
    assert_eq!(per_process.iter().sum::<i64>(), sold, "{report}");
    assert!(sold > 0, "{report}");
    assert!(
        number(&report, "requests") < 100_000,
        "the duration stopped it: {report}"
    );
    let share = report["sold_per_s_vs_hold"].as_f64().expect("a share");
    assert!(
        share > 0.0 && share <= 1.0,
        "one lock caps sales at 1 / hold: {report}"
    );
}

/// The control: without the lock, sales overlap and beat the one-lock ceiling, so the
/// bound above is one the lock has to earn.
#[test]
fn a_timed_hot_run_without_the_lock_beats_the_ceiling() {
    let report = timed_hot_run(&["--no-lock"]);
    let share = report["sold_per_s_vs_hold"].as_f64().expect("a share");
    assert!(share > 1.5, "8 overlapping sales: {report}");
}
