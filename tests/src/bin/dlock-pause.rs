//! The pause test's worker: takes a lock, reads a counter, lets the test pause it inside
//! the critical section, then writes the counter back (read-modify-write: GET, +1, SET).
//!
//! ```text
//! dlock-pause <lock-url> <store-url> <lock-name> <counter-key> <path> <write> [--lease D] [--watchdog D]
//!     path:  manual     `try_lock_with_lease(10s, --lease)`
//!            attribute  `#[distributed_lock(lease = "1s", wait = "10s")]`
//!            watchdog   `try_lock_for(10s)` on a client whose watchdog timeout is --watchdog
//!     write: plain      SET on <store-url> (no check: the control)
//!            fenced     `client.fenced().set` with the hold's token (the guard's, or
//!                       `current_fence()` in the annotated body)
//! ```
//!
//! The lock client connects to `<lock-url>` (the watchdog path's holder goes through a
//! `TcpProxy`, so that the test can cut its renewals off), the counter is read and written
//! on `<store-url>`. Protocol on stdout, one flushed line each:
//! `inside <value read>` once the lock is held and the counter read; then the worker waits
//! for a `go` line on stdin (the test pauses it in between); then `wrote <value>`,
//! `refused seen <token> presented <token>` (a fenced write refused as stale) or
//! `error <what>`. It exits 0 once it has reported the write, 1 when it could not lock.

use std::io::{BufRead, Write};
use std::time::Duration;

use clap::{Parser, ValueEnum};
use dlock::{
    distributed_lock,
    fencing::{current_fence, Fence},
    LockClient, LockError,
};

/// How long the worker waits for the lock: the rival must outwait the paused holder's lease.
const WAIT: Duration = Duration::from_secs(10);

#[derive(Parser)]
struct Args {
    /// The lock client's Redis URL (possibly a proxy).
    lock_url: String,
    /// The counter's Redis URL.
    store_url: String,
    /// The lock's name.
    lock_name: String,
    /// The counter's key.
    counter_key: String,
    /// How the lock is taken.
    #[arg(value_enum)]
    path: LockPath,
    /// How the counter is written.
    #[arg(value_enum)]
    write: WriteMode,
    /// The explicit lease of the manual path.
    #[arg(long, default_value = "1s", value_parser = humantime::parse_duration)]
    lease: Duration,
    /// The client's watchdog timeout (the lease of the watchdog path).
    #[arg(long, default_value = "1s", value_parser = humantime::parse_duration)]
    watchdog: Duration,
}

#[derive(Clone, Copy, ValueEnum)]
enum LockPath {
    Manual,
    Attribute,
    Watchdog,
}

#[derive(Clone, Copy, ValueEnum)]
enum WriteMode {
    Plain,
    Fenced,
}

/// The critical section's state: where the counter is and how it is written.
struct Section {
    locks: LockClient,
    store: redis::aio::MultiplexedConnection,
    key: String,
    write: WriteMode,
}

/// Prints one protocol line and flushes it (the test reads it through a pipe).
fn say(line: &str) {
    let mut stdout = std::io::stdout();
    let _ = writeln!(stdout, "{line}");
    let _ = stdout.flush();
}

fn fail(what: &str) -> ! {
    eprintln!("dlock-pause: {what}");
    std::process::exit(1)
}

impl Section {
    /// Read, report `inside`, wait for `go`, write back (fenced writes present `fence`),
    /// report the write.
    async fn run(&self, fence: Option<Fence>) {
        let mut store = self.store.clone();
        let read: redis::RedisResult<Option<i64>> = redis::cmd("GET")
            .arg(&self.key)
            .query_async(&mut store)
            .await;
        let value = match read {
            Ok(value) => value.unwrap_or(0),
            Err(e) => return say(&format!("error GET {}: {e}", self.key)),
        };
        say(&format!("inside {value}"));
        // Blocking stdin on its own thread: the runtime (and the watchdog) keep running.
        let go = tokio::task::spawn_blocking(|| {
            let mut line = String::new();
            std::io::stdin().lock().read_line(&mut line).map(|_| line)
        })
        .await;
        match go {
            Ok(Ok(line)) if line.trim() == "go" => {}
            other => return say(&format!("error expected `go` on stdin, got {other:?}")),
        }
        let next = value + 1;
        let written = match (self.write, fence) {
            (WriteMode::Plain, _) => redis::cmd("SET")
                .arg(&self.key)
                .arg(next)
                .query_async::<()>(&mut store)
                .await
                .map_err(|e| format!("error SET {}: {e}", self.key)),
            (WriteMode::Fenced, Some(fence)) => self
                .locks
                .fenced()
                .set(&self.key, next.to_string(), fence)
                .await
                .map_err(|e| match e {
                    LockError::StaleToken {
                        seen, presented, ..
                    } => format!("refused seen {seen} presented {presented}"),
                    other => format!("error fenced set {}: {other}", self.key),
                }),
            (WriteMode::Fenced, None) => Err("error the hold has no fencing token".to_owned()),
        };
        match written {
            Ok(()) => say(&format!("wrote {next}")),
            Err(report) => say(&report),
        }
    }
}

/// The attribute path: the lease is the attribute's, 1 s. `on_lost = "ignore"`: the
/// holder under test does not notice its loss (the default cancels the body when it does,
/// which narrows the window but cannot close it: the pause can fall between any check
/// and the write).
#[distributed_lock(key = "<name>", lease = "1s", wait = "10s", client = locks, on_lost = "ignore")]
async fn annotated(locks: &LockClient, name: &str, section: &Section) -> Result<(), LockError> {
    section.run(current_fence()).await;
    Ok(())
}

#[tokio::main]
async fn main() {
    let args = Args::parse();
    let client = match args.path {
        LockPath::Watchdog => LockClient::builder().watchdog_timeout(args.watchdog),
        LockPath::Manual | LockPath::Attribute => LockClient::builder(),
    }
    .connect(&args.lock_url)
    .await
    .unwrap_or_else(|e| fail(&format!("connect {}: {e}", args.lock_url)));
    let store = redis::Client::open(args.store_url.as_str())
        .unwrap_or_else(|e| fail(&format!("store URL {}: {e}", args.store_url)));
    let section = Section {
        locks: client.clone(),
        store: store
            .get_multiplexed_async_connection()
            .await
            .unwrap_or_else(|e| fail(&format!("connect {}: {e}", args.store_url))),
        key: args.counter_key,
        write: args.write,
    };
    let lock = client.lock(&args.lock_name);
    let guard = match args.path {
        LockPath::Attribute => {
            return annotated(&client, &args.lock_name, &section)
                .await
                .unwrap_or_else(|e| fail(&format!("lock {}: {e}", args.lock_name)));
        }
        LockPath::Manual => lock.try_lock_with_lease(WAIT, args.lease).await,
        LockPath::Watchdog => lock.try_lock_for(WAIT).await,
    }
    .unwrap_or_else(|e| fail(&format!("lock {}: {e}", args.lock_name)));
    section.run(guard.fencing_token()).await;
    // A paused holder's lock is gone by now: its unlock reports that, which is expected
    // and not this worker's concern.
    if let Err(e) = guard.unlock().await {
        eprintln!("dlock-pause: unlock: {e}");
    }
}
