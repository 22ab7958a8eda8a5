//! The read-write lock's multi-process worker. Every time it reports is Redis `TIME` in
//! microseconds, so that the records of several processes share one clock.
//!
//! ```text
//! dlock-rw sections URL LOCK ROLE COUNT HOLD_MS OUT
//!     ROLE: read | write | write-as-read (the control: a writer taking the read lock)
//!     Runs COUNT critical sections of HOLD_MS and writes one line per section to OUT:
//!     `<role> <start_us> <end_us> <stable>`. Writers increment LOCK:counter non-atomically
//!     (GET, sleep, SET); readers read it at both ends of the section (`stable` is 1 when
//!     both reads agree).
//! dlock-rw hold-read URL LOCK LEASE_MS WATCHDOG_MS
//!     Takes the read lock (LEASE_MS 0: with the watchdog of WATCHDOG_MS), prints
//!     `held <time_us>` and sleeps until killed.
//! dlock-rw read URL LOCK
//!     Prints `waiting`, waits for the read lock, prints `acquired <time_us>`, exits.
//! ```

use std::io::Write;
use std::time::Duration;

use dlock::LockClient;
use redis::AsyncCommands;

/// Redis `TIME` in microseconds.
async fn now_us(redis: &mut redis::aio::MultiplexedConnection) -> u64 {
    let (secs, micros): (u64, u64) = redis::cmd("TIME").query_async(redis).await.expect("TIME");
    secs * 1_000_000 + micros
}

fn arg<T: std::str::FromStr>(args: &[String], at: usize, what: &str) -> T {
    args.get(at)
        .and_then(|text| text.parse().ok())
        .unwrap_or_else(|| panic!("argument {at}: expected {what}"))
}

async fn sections(args: &[String]) {
    let (url, lock, role) = (&args[2], &args[3], args[4].as_str());
    let count: u32 = arg(args, 5, "COUNT");
    let hold = Duration::from_millis(arg(args, 6, "HOLD_MS"));
    let out = &args[7];
    let client = LockClient::connect(url).await.expect("connect");
    let mut redis = redis::Client::open(url.as_str())
        .expect("url")
        .get_multiplexed_async_connection()
        .await
        .expect("connect");
    let counter = format!("{lock}:counter");
    let rw = client.rw_lock(lock);
    let mut lines = String::new();
    for _ in 0..count {
        let guard = match role {
            "read" | "write-as-read" => rw.read().lock().await,
            "write" => rw.write().lock().await,
            other => panic!("unknown role {other}"),
        }
        .expect("acquire");
        let start = now_us(&mut redis).await;
        let before: i64 = redis
            .get(&counter)
            .await
            .map(|v: Option<i64>| v.unwrap_or(0))
            .expect("GET");
        tokio::time::sleep(hold).await;
        let stable = if role == "read" {
            let after: Option<i64> = redis.get(&counter).await.expect("GET");
            after.unwrap_or(0) == before
        } else {
            let () = redis.set(&counter, before + 1).await.expect("SET");
            true
        };
        let end = now_us(&mut redis).await;
        guard.unlock().await.expect("release");
        lines.push_str(&format!("{role} {start} {end} {}\n", u8::from(stable)));
    }
    std::fs::write(out, lines).expect("write the records");
}

async fn hold_read(args: &[String]) {
    let (url, lock) = (&args[2], &args[3]);
    let lease: u64 = arg(args, 4, "LEASE_MS");
    let watchdog: u64 = arg(args, 5, "WATCHDOG_MS");
    let client = LockClient::builder()
        .watchdog_timeout(Duration::from_millis(watchdog))
        .connect(url)
        .await
        .expect("connect");
    let mut redis = redis::Client::open(url.as_str())
        .expect("url")
        .get_multiplexed_async_connection()
        .await
        .expect("connect");
    let read = client.rw_lock(lock).read();
    let guard = if lease == 0 {
        read.lock().await
    } else {
        read.lock_with_lease(Duration::from_millis(lease)).await
    }
    .expect("acquire");
    let at = now_us(&mut redis).await;
    println!("held {at}");
    std::io::stdout().flush().expect("stdout");
    std::future::pending::<()>().await;
    drop(guard);
}

async fn read(args: &[String]) {
    let (url, lock) = (&args[2], &args[3]);
    let client = LockClient::connect(url).await.expect("connect");
    let mut redis = redis::Client::open(url.as_str())
        .expect("url")
        .get_multiplexed_async_connection()
        .await
        .expect("connect");
    let read = client.rw_lock(lock).read();
    println!("waiting");
    std::io::stdout().flush().expect("stdout");
    let guard = read.lock().await.expect("acquire");
    let at = now_us(&mut redis).await;
    println!("acquired {at}");
    std::io::stdout().flush().expect("stdout");
    guard.unlock().await.expect("release");
}

#[tokio::main(flavor = "current_thread")]
async fn main() {
    let args: Vec<String> = std::env::args().collect();
    match args.get(1).map(String::as_str) {
        Some("sections") => sections(&args).await,
        Some("hold-read") => hold_read(&args).await,
        Some("read") => read(&args).await,
        _ => panic!("usage: dlock-rw sections|hold-read|read ... (see the source)"),
    }
}
