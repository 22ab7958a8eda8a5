//! A `dlock-hold` process (the victim of the "holder dies while holding" faults): started,
//! waited for until it holds, killed.

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

/// How long after a holder's process is reaped its last writes surely reached Redis (on
/// loopback they are in the server's socket already; this leaves Redis time to read them).
const SETTLE: Duration = Duration::from_millis(20);

/// A running `dlock-hold` that reported its hold. Killed when dropped.
pub struct HoldProcess {
    child: Child,
}

impl HoldProcess {
    /// Runs `program` (the `dlock-hold` binary: `env!("CARGO_BIN_EXE_dlock-hold")` in a
    /// test of this package) with `args` and waits up to 10 s for its `acquired` line.
    ///
    /// # Panics
    ///
    /// When it cannot be started or does not report the hold in time (it is killed).
    pub fn start(program: &str, args: &[&str]) -> HoldProcess {
        let mut child = Command::new(program)
            .args(args)
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start {program}: {e}"));
        let stdout = child.stdout.take().expect("piped stdout");
        let (sender, receiver) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let mut line = String::new();
            let _ = BufReader::new(stdout).read_line(&mut line);
            let _ = sender.send(line);
        });
        let mut holder = HoldProcess { child };
        match receiver.recv_timeout(Duration::from_secs(10)) {
            Ok(line) if line.trim() == "acquired" => holder,
            other => {
                let _ = holder.child.kill();
                panic!("{program} {args:?} did not report its hold: {other:?}");
            }
        }
    }

    /// [`start`](HoldProcess::start) from async code: the wait for the hold's report runs
    /// on a blocking thread, so holders started together wait for theirs at once.
    pub fn start_in_background(
        program: &'static str,
        args: Vec<String>,
    ) -> tokio::task::JoinHandle<HoldProcess> {
        tokio::task::spawn_blocking(move || {
            let args: Vec<&str> = args.iter().map(String::as_str).collect();
            HoldProcess::start(program, &args)
        })
    }

    /// SIGKILL, wait until the process is gone, then 20 ms more, so that what it
    /// wrote before it died (a renewal in flight) has reached Redis: a lease read after
    /// this returns is the dead holder's last. (Read before the kill, a renewal sent
    /// between the read and the kill would move the expiry past the reading.)
    ///
    /// # Panics
    ///
    /// When the signal cannot be sent or the process not reaped.
    pub fn kill(&mut self) {
        self.child.kill().expect("SIGKILL the holder");
        self.child.wait().expect("reap the holder");
        std::thread::sleep(SETTLE);
    }
}

impl Drop for HoldProcess {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
