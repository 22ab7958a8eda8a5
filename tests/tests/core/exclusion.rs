//! Mutual exclusion: a non-atomic counter increment stays exact only under the lock.

use dlock::LockClient;
use dlock_tests::workload::{increment_counter, Guarding};
use dlock_tests::RedisServer;
use redis::Commands;

const TASKS: usize = 8;
const INCREMENTS: usize = 200;

fn counter(server: &RedisServer, key: &str) -> i64 {
    let value: Option<i64> = server.connection().get(key).unwrap();
    value.unwrap_or(0)
}

/// Two clients on one server, `TASKS` tasks each; returns the final counter.
async fn two_clients(server: &RedisServer, guarding: Guarding, increments: usize) -> i64 {
    let url = server.url();
    let (a, b) = (
        LockClient::connect(&url).await.unwrap(),
        LockClient::connect(&url).await.unwrap(),
    );
    tokio::join!(
        increment_counter(
            &a,
            &url,
            "counter-lock",
            "counter",
            guarding,
            TASKS,
            increments
        ),
        increment_counter(
            &b,
            &url,
            "counter-lock",
            "counter",
            guarding,
            TASKS,
            increments
        ),
    );
    counter(server, "counter")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_clients_eight_tasks_each_keep_the_counter_exact() {
    let server = RedisServer::start();
    let total = two_clients(&server, Guarding::Locked, INCREMENTS).await;
    assert_eq!(total, (2 * TASKS * INCREMENTS) as i64);
    let left: bool = server.connection().exists("counter-lock").unwrap();
    assert!(!left, "the lock key must be gone after the last release");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_the_lock_the_same_workload_loses_updates() {
    let server = RedisServer::start();
    // Fewer increments suffice: interleaving loses updates almost at once.
    let total = two_clients(&server, Guarding::Unlocked, 50).await;
    assert!(
        total < (2 * TASKS * 50) as i64,
        "the control run must lose updates, got an exact {total}"
    );
}

fn run_workers(server: &RedisServer, counter_key: &str, extra: &[&str]) {
    let worker = env!("CARGO_BIN_EXE_dlock-counter");
    let spawn = || {
        std::process::Command::new(worker)
            .args([
                server.url().as_str(),
                "process-lock",
                counter_key,
                "8",
                "100",
            ])
            .args(extra)
            .spawn()
            .expect("start dlock-counter")
    };
    let mut children = [spawn(), spawn()];
    for child in &mut children {
        let status = child.wait().unwrap();
        assert!(status.success(), "dlock-counter failed: {status}");
    }
}

#[test]
fn two_os_processes_keep_the_counter_exact_and_lose_updates_without_the_lock() {
    let server = RedisServer::start();
    run_workers(&server, "locked", &[]);
    assert_eq!(counter(&server, "locked"), 2 * 8 * 100);

    run_workers(&server, "unlocked", &["--no-lock"]);
    let total = counter(&server, "unlocked");
    assert!(
        total < 2 * 8 * 100,
        "the control run must lose updates, got {total}"
    );
}
