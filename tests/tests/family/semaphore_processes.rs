//! The semaphore across OS processes (the `dlock-semaphore` worker): 4 permits, 3
//! processes × 8 tasks, holders `kill -9`ed along the way. The probe counts the critical
//! sections running at once (a killed process's sections end with it); a control run
//! without the semaphore shows the probe can exceed 4.

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use dlock::LockClient;
use dlock_tests::RedisServer;
use redis::Commands;

const WORKER: &str = env!("CARGO_BIN_EXE_dlock-semaphore");
const PERMITS: u32 = 4;
const WATCHDOG_MS: u64 = 1500;

/// Starts a worker and waits until its tasks entered as often as there are tasks.
fn spawn(server: &RedisServer, name: &str, tasks: u32, hold_ms: u64, mode: &str) -> Child {
    let mut child = Command::new(WORKER)
        .args(["run", &server.url(), name])
        .arg(PERMITS.to_string())
        .arg(tasks.to_string())
        .arg(hold_ms.to_string())
        .arg(WATCHDOG_MS.to_string())
        .arg(mode)
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut line = String::new();
    BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    assert_eq!(line.trim(), "ready", "the worker did not start");
    child
}

/// `kill -9`, then takes the dead process's open sections off the probe: they ended with
/// it. Returns the server time of the kill in ms.
fn kill(redis: &mut redis::Connection, name: &str, mut child: Child) -> i64 {
    let at = server_ms(redis);
    child.kill().unwrap();
    child.wait().unwrap();
    let _: i64 = redis::Script::new(
        "local n = tonumber(redis.call('get', KEYS[2])) or 0
         redis.call('del', KEYS[2])
         return redis.call('decrby', KEYS[1], n)",
    )
    .key(format!("{name}:inside"))
    .key(format!("{name}:inside:{}", child.id()))
    .invoke(redis)
    .unwrap();
    at
}

fn server_ms(redis: &mut redis::Connection) -> i64 {
    let (secs, micros): (i64, i64) = redis::cmd("TIME").query(redis).unwrap();
    secs * 1000 + micros / 1000
}

#[test]
fn without_the_semaphore_the_probe_exceeds_the_permits() {
    let server = RedisServer::start();
    let mut redis = server.connection();
    let workers: Vec<Child> = (0..3)
        .map(|_| spawn(&server, "control", 8, 20, "none"))
        .collect();
    std::thread::sleep(Duration::from_millis(500));
    for worker in workers {
        kill(&mut redis, "control", worker);
    }
    let max: u32 = redis.get("control:max").unwrap();
    println!("control: {max} sections at once");
    assert!(max > PERMITS, "the probe never saw more than {max}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn four_permits_across_processes_hold_under_kill_9_and_dead_permits_return() {
    let server = RedisServer::start();
    let mut redis = server.connection();
    let name = "permits";
    let mut workers: Vec<Child> = (0..3).map(|_| spawn(&server, name, 8, 30, "sem")).collect();
    for _ in 0..2 {
        std::thread::sleep(Duration::from_millis(1000));
        // A holder dies mid-section; its grants stay until their lease runs out, then the
        // others take them over.
        kill(&mut redis, name, workers.remove(0));
        std::thread::sleep(Duration::from_millis(2000));
        workers.push(spawn(&server, name, 8, 30, "sem"));
    }
    std::thread::sleep(Duration::from_millis(1000));
    for worker in workers {
        kill(&mut redis, name, worker);
    }
    let max: u32 = redis.get(format!("{name}:max")).unwrap();
    println!("with the semaphore: at most {max} sections at once");
    assert_eq!(
        max, PERMITS,
        "more (or never all) of the {PERMITS} permits in use"
    );

    // A process holding every permit dies: they come back within its lease + 200 ms,
    // measured on the server's clock with `available` (which reclaims by server time).
    let client = LockClient::connect(&server.url()).await.unwrap();
    let sem = client.semaphore("dead", PERMITS);
    let holder = spawn(&server, "dead", PERMITS, 600_000, "sem");
    assert_eq!(sem.available_permits().await.unwrap(), 0);
    let killed_at = kill(&mut redis, "dead", holder);
    loop {
        let free = sem.available_permits().await.unwrap();
        let since = server_ms(&mut redis) - killed_at;
        if free == PERMITS {
            println!("a killed holder's {PERMITS} permits returned {since} ms after the kill (lease {WATCHDOG_MS} ms)");
            break;
        }
        assert!(
            since <= WATCHDOG_MS as i64 + 200,
            "{free} of {PERMITS} permits free {since} ms after the kill"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}
