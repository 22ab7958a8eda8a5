//! The pause test (LOCK-FAMILY §6.4): a holder is stopped inside its critical section
//! past its lease, a second process takes the lock and writes, then the first wakes up
//! and writes what it computed before the pause.
//!
//! Both processes do a read-modify-write of one counter (GET, +1, SET) in `dlock-pause`.
//! With plain writes — the control — the woken holder's stale write lands and one of two
//! increments is lost: a lock alone cannot stop a writer that does not know it lost the
//! lock. Three ways to lose it:
//! - manual: `try_lock_with_lease(wait, 500 ms lease)`, holder SIGSTOPped for longer;
//! - attribute: `#[distributed_lock(lease = "1s")]`, holder SIGSTOPped for longer;
//! - watchdog: no lease, 1 s watchdog timeout; the holder keeps running but its lock
//!   client reaches Redis through a `TcpProxy` whose connections are cut and held, so its
//!   renewals never arrive, while the rival connects directly.
//!
//! With fenced writes (`client.fenced().set` presenting the hold's fencing token) the
//! same runs end with the holder's write refused (`StaleToken`: the rival's larger token
//! wrote the key) and the counter exact: 1, the one increment that was applied.

use std::io::{BufRead, BufReader, Write};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::mpsc::{channel, Receiver};
use std::time::{Duration, Instant};

use dlock_tests::{RedisServer, TcpProxy};
use rustix::process::{kill_process, Pid, Signal};

/// Bound on every line a worker owes the test (its lock wait is 10 s).
const LINE_TIMEOUT: Duration = Duration::from_secs(15);
const COUNTER: &str = "pause:counter";
const LOCK: &str = "pause:lock";

/// One `dlock-pause` process, its stdin open and its stdout read line by line.
struct Worker {
    child: Child,
    stdin: ChildStdin,
    lines: Receiver<String>,
}

impl Worker {
    fn start(lock_url: &str, store_url: &str, path: &str, write: &str) -> Worker {
        let mut child = Command::new(env!("CARGO_BIN_EXE_dlock-pause"))
            .args([lock_url, store_url, LOCK, COUNTER, path, write])
            .args(["--lease", "500ms", "--watchdog", "1s"])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("cannot start dlock-pause");
        let stdout = child.stdout.take().expect("piped stdout");
        let stdin = child.stdin.take().expect("piped stdin");
        let (sender, lines) = channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                if sender.send(line).is_err() {
                    break;
                }
            }
        });
        Worker {
            child,
            stdin,
            lines,
        }
    }

    /// The next line; panics after [`LINE_TIMEOUT`].
    fn line(&self, what: &str) -> String {
        self.lines
            .recv_timeout(LINE_TIMEOUT)
            .unwrap_or_else(|e| panic!("dlock-pause owed `{what}` and said nothing: {e}"))
    }

    /// Waits for `inside <value>`; returns the value read.
    fn inside(&self) -> i64 {
        let line = self.line("inside");
        line.strip_prefix("inside ")
            .and_then(|value| value.parse().ok())
            .unwrap_or_else(|| panic!("expected `inside <value>`, got {line:?}"))
    }

    /// Sends `go`; returns the worker's report of its write.
    fn go(&mut self) -> String {
        writeln!(self.stdin, "go").expect("write `go` to the worker");
        self.stdin.flush().expect("flush `go`");
        self.line("its write")
    }

    fn signal(&self, signal: Signal) {
        let raw = i32::try_from(self.child.id()).expect("pid fits i32");
        kill_process(Pid::from_raw(raw).expect("non-zero pid"), signal).expect("signal worker");
    }

    /// Waits (bounded) for the worker to exit; returns whether it succeeded.
    fn finish(mut self) -> bool {
        let deadline = Instant::now() + LINE_TIMEOUT;
        loop {
            if let Some(status) = self.child.try_wait().expect("wait for worker") {
                return status.success();
            }
            assert!(Instant::now() < deadline, "dlock-pause did not exit");
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

impl Drop for Worker {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// How the holder loses its lock while inside.
#[derive(Clone, Copy, Debug)]
enum Loss {
    /// SIGSTOP past the explicit lease (path `manual` or `attribute`).
    Paused(&'static str),
    /// Watchdog lock whose renewals are cut off at the proxy.
    Silenced,
}

/// What one pause run showed.
#[derive(Debug)]
struct Outcome {
    holder: String,
    rival: String,
    counter: i64,
}

fn pause_run(loss: Loss, write: &str) -> Outcome {
    let server = RedisServer::start();
    let mut admin = server.connection();
    redis::cmd("SET")
        .arg(COUNTER)
        .arg(0)
        .query::<()>(&mut admin)
        .unwrap();
    let proxy = TcpProxy::start(server.addr());
    let (path, holder_url) = match loss {
        Loss::Paused(path) => (path, server.url()),
        Loss::Silenced => ("watchdog", proxy.url()),
    };

    let mut holder = Worker::start(&holder_url, &server.url(), path, write);
    assert_eq!(holder.inside(), 0, "the holder read the initial counter");
    let stopped_at = Instant::now();
    match loss {
        Loss::Paused(_) => holder.signal(Signal::STOP),
        Loss::Silenced => {
            // Every connection of the holder's lock client is closed and its reconnects
            // are parked: no renewal reaches Redis, the process itself keeps running.
            proxy.hold_new_connections();
            proxy.reset_all();
        }
    }

    // The rival gets the lock only once the holder's lease ran out, and writes.
    let mut rival = Worker::start(&server.url(), &server.url(), path, write);
    assert_eq!(
        rival.inside(),
        0,
        "the rival read the counter before the holder wrote"
    );
    let rival_in = stopped_at.elapsed();
    let rival_wrote = rival.go();
    assert!(rival.finish(), "the rival worker failed");

    match loss {
        Loss::Paused(_) => holder.signal(Signal::CONT),
        Loss::Silenced => proxy.release_held(),
    }
    let holder_wrote = holder.go();
    assert!(holder.finish(), "the holder worker failed");
    let counter: i64 = redis::cmd("GET").arg(COUNTER).query(&mut admin).unwrap();
    eprintln!(
        "{loss:?} {write}: rival inside {rival_in:?} after the stop; rival {rival_wrote:?}, \
         holder {holder_wrote:?}, counter {counter}"
    );
    Outcome {
        holder: holder_wrote,
        rival: rival_wrote,
        counter,
    }
}

/// The control: both writes land, the second computed from a stale read, and one
/// increment is lost. If this could not happen, the fenced runs would prove nothing.
fn assert_lost_update(loss: Loss, outcome: &Outcome) {
    assert_eq!(outcome.rival, "wrote 1", "{loss:?}: {outcome:?}");
    assert_eq!(
        outcome.holder, "wrote 1",
        "{loss:?}: the paused holder's stale write must land: {outcome:?}"
    );
    assert_eq!(
        outcome.counter, 1,
        "{loss:?}: two successful increments, counter 1 (one lost): {outcome:?}"
    );
}

#[test]
fn control_manual_lease_paused_holder_loses_an_update() {
    let loss = Loss::Paused("manual");
    assert_lost_update(loss, &pause_run(loss, "plain"));
}

#[test]
fn control_attribute_lease_paused_holder_loses_an_update() {
    let loss = Loss::Paused("attribute");
    assert_lost_update(loss, &pause_run(loss, "plain"));
}

#[test]
fn control_watchdog_with_silenced_renewals_loses_an_update() {
    assert_lost_update(Loss::Silenced, &pause_run(Loss::Silenced, "plain"));
}

/// The fenced run: the rival's write lands, the woken holder's is refused as stale, and
/// the counter counts exactly the increments that were applied.
fn assert_stale_write_refused(loss: Loss, outcome: &Outcome) {
    assert_eq!(outcome.rival, "wrote 1", "{loss:?}: {outcome:?}");
    let (seen, presented) = outcome
        .holder
        .strip_prefix("refused seen ")
        .and_then(|rest| rest.split_once(" presented "))
        .and_then(|(seen, presented)| {
            Some((seen.parse::<u64>().ok()?, presented.parse::<u64>().ok()?))
        })
        .unwrap_or_else(|| panic!("{loss:?}: the stale write must be refused: {outcome:?}"));
    assert!(
        seen > presented,
        "{loss:?}: refused because a later token wrote: {outcome:?}"
    );
    assert_eq!(
        outcome.counter, 1,
        "{loss:?}: one increment applied, counter exact: {outcome:?}"
    );
}

#[test]
fn fenced_manual_lease_paused_holder_is_refused() {
    let loss = Loss::Paused("manual");
    assert_stale_write_refused(loss, &pause_run(loss, "fenced"));
}

#[test]
fn fenced_attribute_lease_paused_holder_is_refused() {
    let loss = Loss::Paused("attribute");
    assert_stale_write_refused(loss, &pause_run(loss, "fenced"));
}

#[test]
fn fenced_watchdog_with_silenced_renewals_is_refused() {
    assert_stale_write_refused(Loss::Silenced, &pause_run(Loss::Silenced, "fenced"));
}
