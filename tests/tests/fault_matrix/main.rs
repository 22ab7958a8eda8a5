//! The fault matrix: every primitive under every fault of docs/RELIABILITY.md that
//! applies to it, each cell asserting what the primitive promises under that fault, with
//! a control that shows the oracle can fire. [`cell`] names the test that fills each cell
//! (or why none applies); `the_reliability_table_lists_every_cell` keeps the table in
//! docs/RELIABILITY.md in step with it.

mod redlock;
mod replicated;
mod single;
mod support;

use std::time::Duration;

use dlock_tests::primitive::Primitive;
use dlock_tests::RedisServer;

use support::{builder, connect, hold, name, Rival};

/// The matrix's rows: the seven lock primitives, then fenced writes and RedLock.
const PRIMITIVES: [&str; 9] = [
    "lock",
    "fair",
    "read",
    "write",
    "semaphore",
    "multi-same-slot",
    "multi-sequential",
    "fenced",
    "redlock",
];

/// The matrix's faults, in the table's order.
const FAULTS: [&str; 10] = [
    "holder_killed",
    "redis_paused",
    "restart_without_persistence",
    "connection_killed",
    "half_open",
    "subscriber_lost",
    "sentinel_failover",
    "sentinel_replica_acks",
    "cluster_slot_failover",
    "cpu_starvation",
];

/// The test that fills a cell (`binary::module::function`: `fault_matrix::single::…` for
/// this binary's), or `n/a: why` when the fault does not apply to the primitive.
fn cell(primitive: &str, fault: &str) -> &'static str {
    match (primitive, fault) {
        ("fenced", "holder_killed") => "n/a: a fenced write holds nothing between calls; it is one script, applied whole or not at all",
        ("fenced", "subscriber_lost") => "n/a: fenced writes never wait, so they subscribe to nothing",
        ("fenced", "cpu_starvation") => "n/a: a fenced write has no lease and no timer; starvation only delays the call",
        ("fenced", "sentinel_failover" | "sentinel_replica_acks") => {
            "faults::failover_lost_updates::failover_lost_updates_with_and_without_replica_acks"
        }
        ("redlock", "redis_paused") => "family::redlock_quorum::renewal_keeps_the_lock_and_a_lost_majority_ends_it",
        ("redlock", "restart_without_persistence") => {
            "family::redlock_quorum::restarted_servers_without_data_let_a_second_owner_in"
        }
        ("redlock", "half_open") => "family::redlock_quorum::a_majority_answering_late_is_an_error_and_leaves_nothing",
        ("redlock", "subscriber_lost") => "n/a: RedLock waits by retrying rounds; it subscribes to nothing",
        ("redlock", "sentinel_failover" | "sentinel_replica_acks" | "cluster_slot_failover") => {
            "n/a: RedLock's servers are independent single servers; Sentinel and cluster clients are refused"
        }
        ("redlock", "holder_killed") => "fault_matrix::redlock::redlock_holder_killed",
        ("redlock", "connection_killed") => "fault_matrix::redlock::redlock_connections_killed",
        ("redlock", "cpu_starvation") => "fault_matrix::redlock::redlock_cpu_starvation",
        (_, "holder_killed") => "fault_matrix::single::holder_killed",
        (_, "redis_paused") => "fault_matrix::single::redis_paused_past_the_lease",
        (_, "restart_without_persistence") => "fault_matrix::single::restart_without_persistence",
        (_, "connection_killed") => "fault_matrix::single::command_connections_killed",
        (_, "half_open") => "fault_matrix::single::half_open_connection",
        (_, "subscriber_lost") => "fault_matrix::single::subscriber_lost",
        (_, "sentinel_failover") => "fault_matrix::replicated::sentinel_failover",
        (_, "sentinel_replica_acks") => "fault_matrix::replicated::sentinel_failover_with_replica_acks",
        (_, "cluster_slot_failover") => "fault_matrix::replicated::cluster_slot_failover",
        (_, "cpu_starvation") => "fault_matrix::single::cpu_starvation",
        _ => panic!("no cell {primitive} × {fault}"),
    }
}

/// docs/RELIABILITY.md's fault matrix has one row per cell, `| primitive | fault | test |
/// measured |`, naming the test [`cell`] names, which exists; every measured column is
/// filled.
#[test]
fn the_reliability_table_lists_every_cell() {
    let root = concat!(env!("CARGO_MANIFEST_DIR"), "/..");
    let doc = std::fs::read_to_string(format!("{root}/docs/RELIABILITY.md")).unwrap();
    let table = doc
        .split_once("## Fault matrix")
        .expect("docs/RELIABILITY.md has a \"## Fault matrix\" section")
        .1;
    // The table ends at the next heading (the mutations' table follows it).
    let table = table.split("\n#").next().unwrap();
    let mut rows = std::collections::HashMap::new();
    for line in table.lines().filter(|line| line.starts_with("| ")) {
        let columns: Vec<&str> = line.trim_matches('|').split(" | ").map(str::trim).collect();
        let [primitive, fault, test, measured] = columns[..] else {
            panic!("a matrix row has four columns: {line}");
        };
        if primitive == "Primitive" {
            continue;
        }
        let test = test.trim_matches('`');
        assert!(!measured.is_empty(), "{primitive} × {fault}: no figure");
        let previous = rows.insert((primitive.to_owned(), fault.to_owned()), test.to_owned());
        assert!(previous.is_none(), "{primitive} × {fault} listed twice");
    }
    for primitive in PRIMITIVES {
        for fault in FAULTS {
            let expected = cell(primitive, fault);
            let listed = rows
                .remove(&(primitive.to_owned(), fault.to_owned()))
                .unwrap_or_else(|| panic!("no row for {primitive} × {fault}"));
            assert_eq!(listed, expected, "{primitive} × {fault}");
            if expected.starts_with("n/a: ") {
                continue;
            }
            let (path, function) = expected.rsplit_once("::").unwrap();
            let file = match path.split_once("::") {
                Some((binary, module)) => format!("{root}/tests/tests/{binary}/{module}.rs"),
                None => format!("{root}/tests/tests/{path}.rs"),
            };
            let source = std::fs::read_to_string(&file)
                .unwrap_or_else(|e| panic!("{primitive} × {fault}: {file}: {e}"));
            assert!(
                source.contains(&format!("fn {function}()")),
                "{primitive} × {fault}: no test {function} in {file}"
            );
        }
    }
    assert!(rows.is_empty(), "rows for no cell: {rows:?}");
}

/// The control of every wake-up oracle: a lock freed behind dlock's back (its keys
/// deleted, no release message) wakes no rival within a second — so a rival woken within
/// `WAKE_LIMIT` in a cell was woken by the release, not by luck or a timer.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn control_a_release_without_its_message_wakes_nobody() {
    let _cpu = crate::support::sharing_cpu().await;
    let server = RedisServer::start();
    let holders = connect(builder(), &server.url()).await;
    let rivals = connect(builder(), &server.url()).await;
    let mut admin = server.connection();
    let mut cells = Vec::new();
    for primitive in Primitive::ALL {
        let name = name("control", primitive);
        let held = hold(&holders, primitive, &name, None).await;
        let rival = Rival::spawn(&rivals, primitive, &name, Duration::from_secs(20));
        cells.push((primitive, name, held, rival));
    }
    tokio::time::sleep(Duration::from_millis(300)).await;
    for (primitive, name, _, _) in &cells {
        let _: u64 = redis::cmd("DEL")
            .arg(primitive.keys(&holders, name))
            .query(&mut admin)
            .unwrap();
    }
    tokio::time::sleep(Duration::from_secs(1)).await;
    for (primitive, _, held, rival) in cells {
        assert!(
            !rival.is_finished(),
            "{primitive}: a rival was woken without a release message"
        );
        drop(rival);
        drop(held);
    }
}
