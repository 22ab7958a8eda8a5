//! A waiter killed with SIGKILL while queued for a fair lock (the head, or one in the
//! middle) holds up the live ones behind it for at most its entry timeout, and they do not
//! spin while they wait: Redis sees the heartbeat rate, nothing more.

use std::io::Write;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use dlock::LockClient;
use dlock_tests::commandstats::command_calls;
use dlock_tests::RedisServer;
use redis::Commands;

const ENTRY: Duration = Duration::from_millis(1000);
const MARGIN: Duration = Duration::from_millis(200);

/// A worker process with one waiter, `id`, holding the lock 50 ms once granted.
fn waiter(server: &RedisServer, id: usize) -> Child {
    let mut child = Command::new(env!("CARGO_BIN_EXE_dlock-fair"))
        .args([
            server.url().as_str(),
            "dead",
            "grants",
            &ENTRY.as_millis().to_string(),
            "50",
        ])
        .stdin(Stdio::piped())
        .spawn()
        .expect("start dlock-fair");
    writeln!(child.stdin.as_mut().expect("piped stdin"), "{id}").expect("write");
    child
}

fn evalsha_calls(server: &RedisServer) -> u64 {
    command_calls(&mut server.connection())
        .get("evalsha")
        .copied()
        .unwrap_or(0)
}

/// Waits (bounded) until the grants list has `n` entries; returns when it did.
fn wait_for_grants(server: &RedisServer, n: usize) -> Instant {
    let mut conn = server.connection();
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let len: usize = conn.llen("grants").unwrap();
        if len >= n {
            return Instant::now();
        }
        assert!(
            Instant::now() < deadline,
            "only {len} of {n} grants in 10 s"
        );
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// Holds the lock, queues waiters 1, 2, 3 (one process each) in that order, kills the
/// one numbered `victim`, releases, and checks that the next live waiter in line is
/// granted within the entry timeout + 200 ms of the kill, with at most `max_calls` script
/// calls by everyone in between.
async fn kill_queued_waiter(victim: usize) {
    let server = RedisServer::start();
    let client = LockClient::connect(&server.url()).await.unwrap();
    let lock = client.fair_lock("dead").with_entry_timeout(ENTRY);
    let holder = lock.lock().await.unwrap();
    let mut children = Vec::new();
    for id in 1..=3 {
        children.push(waiter(&server, id));
        let started = Instant::now();
        while lock.queue_len().await.unwrap() < id {
            assert!(
                started.elapsed() < Duration::from_secs(10),
                "waiter {id} never queued"
            );
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
    }
    // Let every waiter settle into its heartbeat (subscribed, confirmed).
    tokio::time::sleep(Duration::from_millis(300)).await;

    children[victim - 1].kill().expect("SIGKILL");
    let killed = Instant::now();
    let calls_before = evalsha_calls(&server);
    holder.unlock().await.unwrap();
    let next = if victim == 1 { 2 } else { 3 };
    let server = std::sync::Arc::new(server);
    let at = tokio::task::spawn_blocking({
        let server = std::sync::Arc::clone(&server);
        move || wait_for_grants(&server, next - 1)
    })
    .await
    .unwrap();
    let calls = evalsha_calls(&server) - calls_before;
    let gap = at - killed;
    let grants: Vec<usize> = server.connection().lrange("grants", 0, -1).unwrap();
    eprintln!("victim {victim}: next live waiter granted {gap:?} after the kill, {calls} EVALSHA calls in between");
    assert_eq!(
        grants,
        (1..=3)
            .filter(|id| *id != victim)
            .take(next - 1)
            .collect::<Vec<_>>(),
        "the live waiters are granted in order, the dead one never"
    );
    assert!(
        gap <= ENTRY + MARGIN,
        "granted {gap:?} after the kill: more than the entry timeout + {MARGIN:?}"
    );
    // Two live waiters renew their entries every third of the entry timeout: about 3
    // calls each per entry timeout, plus the release, the wake-ups at the dead entry's
    // deadline and the grants. A waiter that re-tried without napping would make
    // thousands.
    assert!(
        calls <= 25,
        "{calls} script calls in {gap:?}: waiters spin behind the dead entry"
    );
    for mut child in children {
        drop(child.stdin.take());
        let _ = child.wait();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_head_of_the_queue_stalls_the_next_waiter_at_most_its_entry_timeout() {
    kill_queued_waiter(1).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_waiter_in_the_middle_stalls_the_next_at_most_its_entry_timeout() {
    kill_queued_waiter(2).await;
}
