//! Guards the quickstart example: it runs to completion against a Redis started by the
//! test harness (`DLOCK_REDIS_URL`), its locked run is exact, and it leaves no lock
//! behind.

use std::io::Read;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use dlock_tests::RedisServer;
use redis::Commands;

/// The example's whole run takes about a second in a debug build.
const LIMIT: Duration = Duration::from_secs(60);

/// Runs the example with `DLOCK_REDIS_URL` set to `url`; kills it after [`LIMIT`].
/// Returns whether it succeeded and its stdout.
fn run(url: &str) -> (bool, String) {
    let mut command = Command::new(env!("CARGO_BIN_EXE_quickstart"));
    command
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .env("DLOCK_REDIS_URL", url);
    let mut child = command.spawn().expect("start the quickstart example");
    let started = Instant::now();
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        if started.elapsed() > LIMIT {
            let _ = child.kill();
            let _ = child.wait();
            panic!("the quickstart example ran longer than {LIMIT:?}");
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let (mut stdout, mut stderr) = (String::new(), String::new());
    child
        .stdout
        .take()
        .unwrap()
        .read_to_string(&mut stdout)
        .unwrap();
    child
        .stderr
        .take()
        .unwrap()
        .read_to_string(&mut stderr)
        .unwrap();
    assert!(
        status.success(),
        "quickstart failed ({status}):\n{stdout}\n{stderr}"
    );
    (status.success(), stdout)
}

fn check_output(stdout: &str) {
    for expected in [
        "Locked: 2 clients x 8 tasks x 100 increments -> counter 1600 of 1600",
        "re-entered \"report\": hold count 2",
        "second client: ",
        "locked run exact: no lost update",
    ] {
        assert!(
            stdout.contains(expected),
            "missing {expected:?} in:\n{stdout}"
        );
    }
    assert!(
        !stdout.contains("unexpected"),
        "the bounded wait did not time out:\n{stdout}"
    );
}

#[test]
fn quickstart_runs_against_the_harness_redis() {
    let server = RedisServer::start();
    let (ok, stdout) = run(&server.url());
    assert!(ok);
    check_output(&stdout);
    // Only the two counters are left besides release memos (which expire by themselves
    // after 3 command timeouts + 1 s), the fencing-token counters (which never expire,
    // one per slot anchor), what the client wrote by connecting (its description, gone
    // 30 s after the process, and the key prefix's layout version):
    // no lock, grant or waiter registration (the example settles its clients with
    // `shutdown` before it exits).
    let mut keys: Vec<String> = server.connection().keys("*").unwrap();
    keys.retain(|key| {
        !key.starts_with("dlock:release:")
            && !key.starts_with("dlock:fence:")
            && !dlock_tests::written_by_connecting(key)
    });
    keys.sort();
    let shown: Vec<String> = keys
        .iter()
        .map(|key| {
            let mut conn = server.connection();
            let kind: String = redis::cmd("TYPE").arg(key).query(&mut conn).unwrap();
            let fields: Vec<String> = redis::cmd("HKEYS")
                .arg(key)
                .query(&mut conn)
                .unwrap_or_default();
            let ttl: i64 = conn.pttl(key).unwrap();
            format!("{key}: {kind} {fields:?}, pttl {ttl} ms")
        })
        .collect();
    assert_eq!(
        keys,
        ["quickstart:counter:locked", "quickstart:counter:unlocked"],
        "keys left behind: {shown:?}"
    );
    let locked: i64 = server
        .connection()
        .get("quickstart:counter:locked")
        .unwrap();
    assert_eq!(locked, 1600);
}
