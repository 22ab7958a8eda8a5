//! The semaphore's multi-process worker.
//!
//! ```text
//! dlock-semaphore run URL NAME PERMITS TASKS HOLD_MS WATCHDOG_MS MODE
//!     Runs TASKS tasks that loop forever: take 1 permit (MODE `sem`; MODE `none` is the
//!     control and takes nothing), enter (INCR NAME:inside and NAME:inside:<pid>, raise
//!     NAME:max to NAME:inside, in one script), sleep HOLD_MS, leave (DECR both), release.
//!     Prints `ready` once the tasks entered TASKS times. Runs until killed; the test then
//!     takes the killed process's NAME:inside:<pid> off NAME:inside.
//! ```

use std::io::Write;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;
use std::time::Duration;

use dlock::LockClient;

/// INCR the probe and raise the recorded maximum, atomically.
const ENTER: &str = r"
local inside = redis.call('incr', KEYS[1])
redis.call('incr', KEYS[3])
local max = tonumber(redis.call('get', KEYS[2])) or 0
if inside > max then redis.call('set', KEYS[2], inside) end
return inside";

/// DECR both probes, atomically.
const LEAVE: &str = r"
redis.call('decr', KEYS[2])
return redis.call('decr', KEYS[1])";

fn arg<T: std::str::FromStr>(args: &[String], at: usize, what: &str) -> T {
    args.get(at)
        .and_then(|text| text.parse().ok())
        .unwrap_or_else(|| panic!("argument {at}: expected {what}"))
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let args: Vec<String> = std::env::args().collect();
    assert_eq!(
        args.get(1).map(String::as_str),
        Some("run"),
        "usage: see the source"
    );
    let (url, name) = (args[2].clone(), args[3].clone());
    let permits: u32 = arg(&args, 4, "PERMITS");
    let tasks: u32 = arg(&args, 5, "TASKS");
    let hold = Duration::from_millis(arg(&args, 6, "HOLD_MS"));
    let watchdog = Duration::from_millis(arg(&args, 7, "WATCHDOG_MS"));
    let guarded = args[8] == "sem";
    let client = LockClient::builder()
        .watchdog_timeout(watchdog)
        .connect(&url)
        .await
        .expect("connect");
    let redis = redis::Client::open(url.as_str())
        .expect("url")
        .get_multiplexed_async_connection()
        .await
        .expect("connect");
    let sem = client.semaphore(&name, permits);
    let started = Arc::new(AtomicU32::new(0));
    let (enter, leave) = (redis::Script::new(ENTER), redis::Script::new(LEAVE));
    let (inside, max) = (format!("{name}:inside"), format!("{name}:max"));
    let mine = format!("{name}:inside:{}", std::process::id());
    let mut running = tokio::task::JoinSet::new();
    for _ in 0..tasks {
        let (sem, mut redis, started) = (sem.clone(), redis.clone(), Arc::clone(&started));
        let (enter, leave) = (enter.clone(), leave.clone());
        let (inside, max, mine) = (inside.clone(), max.clone(), mine.clone());
        running.spawn(async move {
            loop {
                let guard = if guarded {
                    Some(sem.acquire(1).await.expect("acquire"))
                } else {
                    None
                };
                let _: i64 = enter
                    .key(&inside)
                    .key(&max)
                    .key(&mine)
                    .invoke_async(&mut redis)
                    .await
                    .expect("enter");
                if started.fetch_add(1, Ordering::SeqCst) + 1 == tasks {
                    println!("ready");
                    std::io::stdout().flush().expect("stdout");
                }
                tokio::time::sleep(hold).await;
                let _: i64 = leave
                    .key(&inside)
                    .key(&mine)
                    .invoke_async(&mut redis)
                    .await
                    .expect("leave");
                if let Some(guard) = guard {
                    guard.unlock().await.expect("release");
                }
            }
        });
    }
    // The tasks loop until the test kills this process: one that ends has panicked.
    if let Some(Err(error)) = running.join_next().await {
        panic!("a task failed: {error}");
    }
}
