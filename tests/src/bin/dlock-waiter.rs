//! Waits for one lock from a separate OS process: the victim of the "waiter killed while
//! registered" liveness tests, which SIGKILL it while it waits.
//!
//! Usage: `dlock-waiter <redis-url> <lock-name> [<wait>]`
//!
//! Connects with a 10 s `max_wait_recheck` (so that a wake-up it would depend on shows),
//! prints `waiting <client-id>` on its own line (flushed) right before it starts waiting,
//! then calls `lock()` (or `try_lock_for(<wait>)`, a humantime duration such as `5s`).
//! When it gets the lock it prints `acquired`, gives the lock back and exits; when the
//! wait runs out it prints `timeout` and exits with status 3.

use std::io::Write;
use std::time::Duration;

use dlock::LockClient;

const USAGE: &str = "usage: dlock-waiter <redis-url> <lock-name> [<wait>]";

fn parse(args: &[String]) -> Result<(String, String, Option<Duration>), String> {
    match args {
        [url, name] => Ok((url.clone(), name.clone(), None)),
        [url, name, wait] => {
            let wait = humantime::parse_duration(wait)
                .map_err(|e| format!("wait {wait:?} is not a duration: {e}"))?;
            Ok((url.clone(), name.clone(), Some(wait)))
        }
        _ => Err(format!("expected 2 or 3 arguments, got {}", args.len())),
    }
}

fn say(line: &str) {
    let mut stdout = std::io::stdout();
    let _ = writeln!(stdout, "{line}");
    let _ = stdout.flush();
}

#[tokio::main]
async fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let (url, name, wait) = parse(&args).unwrap_or_else(|e| {
        eprintln!("dlock-waiter: {e}\n{USAGE}");
        std::process::exit(2)
    });
    let fail = |e: dlock::LockError| -> ! {
        eprintln!("dlock-waiter: {e}");
        std::process::exit(1)
    };
    let client = LockClient::builder()
        .max_wait_recheck(Duration::from_secs(10))
        .connect(&url)
        .await
        .unwrap_or_else(|e| fail(e));
    let lock = client.lock(&name);
    say(&format!("waiting {}", client.id()));
    let acquired = match wait {
        None => lock.lock().await,
        Some(wait) => lock.try_lock_for(wait).await,
    };
    match acquired {
        Ok(guard) => {
            say("acquired");
            guard.unlock().await.unwrap_or_else(|e| fail(e));
        }
        Err(e) if e.is_timeout() => {
            say("timeout");
            std::process::exit(3)
        }
        Err(e) => fail(e),
    }
}
