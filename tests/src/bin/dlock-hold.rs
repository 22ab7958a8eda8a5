//! Acquires one lock and holds it until the process is killed: the victim of the
//! "holder dies while holding" fault tests.
//!
//! Usage: `dlock-hold <redis-url> <lock-name> (--watchdog <duration> | --lease <duration>)
//! [--kind <primitive>]`
//!
//! `--kind` takes any primitive of [`dlock_tests::primitive::Primitive`] (`lock`, the
//! default, `fair`, `read`, `write`, `semaphore`, `multi-same-slot`, `multi-sequential`),
//! `redlock` (then `<redis-url>` is the servers' URLs separated by commas), or
//! `lock-given`: a lock that a first task takes and gives back while a second task of the
//! process waits in line, so that the release gives it to the second task, which then
//! holds it.
//!
//! Prints `acquired` on its own line (flushed) once the lock is held, then sleeps. With
//! `--watchdog` the lock has no fixed lease and the client's watchdog renews it with that
//! `watchdog_timeout`; with `--lease` it expires after that lease.

use std::io::Write;
use std::time::Duration;

use dlock::redlock::RedLockClient;
use dlock::LockClient;
use dlock_tests::primitive::Primitive;

const USAGE: &str = "usage: dlock-hold <redis-url> <lock-name> \
    (--watchdog <duration> | --lease <duration>) [--kind <primitive>]";

/// How the held lock stays alive.
enum Keep {
    Watchdog(Duration),
    Lease(Duration),
}

/// What the process holds.
enum Kind {
    Primitive(Primitive),
    RedLock,
    /// A lock its release gave to the process's next task.
    Given,
}

fn parse(args: &[String]) -> Result<(String, String, Keep, Kind), String> {
    let (args, kind) = match args {
        [rest @ .., option, kind] if option == "--kind" && kind == "redlock" => {
            (rest, Kind::RedLock)
        }
        [rest @ .., option, kind] if option == "--kind" && kind == "lock-given" => {
            (rest, Kind::Given)
        }
        [rest @ .., option, kind] if option == "--kind" => (rest, Kind::Primitive(kind.parse()?)),
        _ => (args, Kind::Primitive(Primitive::Lock)),
    };
    let [url, name, flag, value] = args else {
        return Err(format!(
            "expected 4 arguments before --kind, got {}",
            args.len()
        ));
    };
    let duration = humantime::parse_duration(value)
        .map_err(|e| format!("{flag} {value:?} is not a duration: {e}"))?;
    let keep = match flag.as_str() {
        "--watchdog" => Keep::Watchdog(duration),
        "--lease" => Keep::Lease(duration),
        other => return Err(format!("unknown option {other:?}")),
    };
    Ok((url.clone(), name.clone(), keep, kind))
}

#[tokio::main]
async fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let (url, name, keep, kind) = parse(&args).unwrap_or_else(|e| {
        eprintln!("dlock-hold: {e}\n{USAGE}");
        std::process::exit(2)
    });
    let builder = LockClient::builder();
    let builder = match keep {
        Keep::Watchdog(timeout) => builder.watchdog_timeout(timeout),
        Keep::Lease(_) => builder,
    };
    let fail = |e: dlock::LockError| -> ! {
        eprintln!("dlock-hold: {e}");
        std::process::exit(1)
    };
    let lease = match keep {
        Keep::Watchdog(_) => None,
        Keep::Lease(lease) => Some(lease),
    };
    let wait = Duration::from_secs(3600);
    // The hold must stay alive (for the watchdog to renew it) until the process is killed.
    let announce_and_hold = || async {
        let mut stdout = std::io::stdout();
        let _ = writeln!(stdout, "acquired");
        let _ = stdout.flush();
        std::future::pending::<()>().await
    };
    match kind {
        Kind::Primitive(primitive) => {
            let client = builder.connect(&url).await.unwrap_or_else(|e| fail(e));
            let _held = primitive
                .acquire(&client, &name, wait, lease)
                .await
                .unwrap_or_else(|e| fail(e));
            announce_and_hold().await
        }
        Kind::Given => {
            let client = builder.connect(&url).await.unwrap_or_else(|e| fail(e));
            let acquire = |lock: dlock::Lock| async move {
                match lease {
                    Some(lease) => lock.try_lock_with_lease(wait, lease).await,
                    None => lock.try_lock_for(wait).await,
                }
            };
            let first = acquire(client.lock(&name))
                .await
                .unwrap_or_else(|e| fail(e));
            let next = tokio::spawn(acquire(client.lock(&name)));
            // In line behind the first task.
            tokio::time::sleep(Duration::from_millis(100)).await;
            first.unlock().await.unwrap_or_else(|e| fail(e));
            let _given = next
                .await
                .expect("the next task")
                .unwrap_or_else(|e| fail(e));
            announce_and_hold().await
        }
        Kind::RedLock => {
            let urls: Vec<String> = url.split(',').map(str::to_owned).collect();
            let client = RedLockClient::connect(builder, &urls)
                .await
                .unwrap_or_else(|e| fail(e));
            let lock = client.lock(&name);
            let _guard = match lease {
                Some(lease) => lock.try_lock_with_lease(wait, lease).await,
                None => lock.try_lock_for(wait).await,
            }
            .unwrap_or_else(|e| fail(e));
            announce_and_hold().await
        }
    }
}
