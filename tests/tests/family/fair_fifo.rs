//! Global FIFO of the fair lock across OS processes: grants follow enqueue order, even
//! with every process holding several waiters (one Redis entry per waiting task).

use std::io::Write;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use dlock::LockClient;
use dlock_tests::RedisServer;
use redis::Commands;

const PROCESSES: usize = 3;
const TASKS: usize = 4;

fn worker(server: &RedisServer, lock: &str, grants: &str, extra: &[&str]) -> Child {
    Command::new(env!("CARGO_BIN_EXE_dlock-fair"))
        // Entries of 300 ms: waiters behind the head re-try every 100 ms, so a lock that
        // went to whoever asks while it is free (20 ms holds) would show here.
        .args([server.url().as_str(), lock, grants, "300", "20"])
        .args(extra)
        .stdin(Stdio::piped())
        .spawn()
        .expect("start dlock-fair")
}

/// Starts waiter `id` in `child`.
fn start_waiter(child: &mut Child, id: usize) {
    let stdin = child.stdin.as_mut().expect("piped stdin");
    writeln!(stdin, "{id}").expect("write to dlock-fair");
    stdin.flush().expect("flush");
}

/// Waits (bounded) until `grants` has `n` entries, then returns them; closes the workers'
/// stdin and waits for them.
fn collect(server: &RedisServer, grants: &str, n: usize, mut workers: Vec<Child>) -> Vec<usize> {
    let mut conn = server.connection();
    let deadline = Instant::now() + Duration::from_secs(15);
    loop {
        let len: usize = conn.llen(grants).unwrap();
        if len == n {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "only {len} of {n} grants within 15 s"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
    for child in &mut workers {
        drop(child.stdin.take());
        let status = child.wait().expect("wait for dlock-fair");
        assert!(status.success(), "a worker failed: {status}");
    }
    let ids: Vec<String> = conn.lrange(grants, 0, -1).unwrap();
    ids.iter().map(|id| id.parse().unwrap()).collect()
}

/// Waiter `i` goes to process `i % PROCESSES`, so every process's waiters are interleaved
/// with the others' in the enqueue order: batching them per process would show.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn grants_follow_enqueue_order_across_three_processes_of_four_tasks() {
    let server = RedisServer::start();
    let client = LockClient::connect(&server.url()).await.unwrap();
    let lock = client.fair_lock("fifo");
    let holder = lock.lock().await.unwrap();
    let mut workers: Vec<Child> = (0..PROCESSES)
        .map(|_| worker(&server, "fifo", "grants", &[]))
        .collect();
    for id in 0..PROCESSES * TASKS {
        start_waiter(&mut workers[id % PROCESSES], id);
        let started = Instant::now();
        while lock.queue_len().await.unwrap() < id + 1 {
            assert!(
                started.elapsed() < Duration::from_secs(10),
                "waiter {id} never queued"
            );
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
    }
    holder.unlock().await.unwrap();
    let order = tokio::task::spawn_blocking(move || {
        let order = collect(&server, "grants", PROCESSES * TASKS, workers);
        (order, server)
    })
    .await
    .unwrap()
    .0;
    assert_eq!(order, (0..PROCESSES * TASKS).collect::<Vec<_>>());
}

/// Control: the same enqueue order with the reentrant lock (one Redis waiter per process,
/// the rest in its local line, and whoever hears the unlock first wins) is not kept. The
/// plain lock has no queue to observe, so waiters start 30 ms apart instead. For the
/// grants to come out 0, 1, 2, ... the three processes would have to win strictly in turn
/// eleven times while each one's local line hands over to its own next waiter at once:
/// the oracle fires.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn control_the_plain_lock_breaks_the_same_order() {
    let server = RedisServer::start();
    let client = LockClient::connect(&server.url()).await.unwrap();
    let holder = client.lock("fifo").lock().await.unwrap();
    let mut workers: Vec<Child> = (0..PROCESSES)
        .map(|_| worker(&server, "fifo", "grants", &["--plain"]))
        .collect();
    for id in 0..PROCESSES * TASKS {
        start_waiter(&mut workers[id % PROCESSES], id);
        tokio::time::sleep(Duration::from_millis(30)).await;
    }
    holder.unlock().await.unwrap();
    let order = tokio::task::spawn_blocking(move || {
        let order = collect(&server, "grants", PROCESSES * TASKS, workers);
        (order, server)
    })
    .await
    .unwrap()
    .0;
    assert_ne!(
        order,
        (0..PROCESSES * TASKS).collect::<Vec<_>>(),
        "the control must show the oracle can fire"
    );
}
