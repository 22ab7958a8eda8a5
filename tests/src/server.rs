//! A throw-away `redis-server` process owned by one test.

use std::fmt::Write as _;
use std::fs::File;
use std::io::ErrorKind;
use std::net::{Ipv4Addr, SocketAddr, TcpListener};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::thread;
use std::time::{Duration, Instant};

use rustix::process::{kill_process, Pid, Signal};
use tempfile::TempDir;

/// Environment variable naming the `redis-server` binary to run instead of the one on `PATH`.
pub const REDIS_SERVER_ENV: &str = "DLOCK_REDIS_SERVER";

/// How to get a Redis installation, quoted in panic messages.
const INSTALL_HINT: &str =
    "install it with `apt-get install -y redis-server redis-sentinel redis-tools` \
     or point the DLOCK_REDIS_SERVER environment variable at a redis-server binary";

/// How many ports are tried before giving up on starting a server.
const START_ATTEMPTS: usize = 5;
/// How long one attempt waits for the server to answer `PING`.
const READY_TIMEOUT: Duration = Duration::from_secs(10);
/// Pause between two readiness probes.
const READY_POLL: Duration = Duration::from_millis(10);
/// Connect and read timeout of one readiness probe.
const PROBE_TIMEOUT: Duration = Duration::from_millis(500);
/// Timeout used by [`RedisServer::connection`] to establish the connection.
const ADMIN_CONNECT_TIMEOUT: Duration = Duration::from_secs(5);

/// A `redis-server` process listening on a free `127.0.0.1` port, with its own temporary
/// working directory (no persistence), killed when dropped.
///
/// The drop also runs while a failing test unwinds, so a panicking test does not leave a
/// server behind. Each server is independent: tests can run in parallel.
#[derive(Debug)]
pub struct RedisServer {
    child: Child,
    pid: u32,
    port: u16,
    stopped: bool,
    log_path: PathBuf,
    console_path: PathBuf,
    // Dropped after the process has been killed (fields drop after `Drop::drop` runs).
    dir: TempDir,
}

/// Why one start attempt failed.
struct Failure {
    reason: String,
    diagnostics: String,
}

impl RedisServer {
    /// Starts redis-server on a free 127.0.0.1 port in its own temp dir.
    ///
    /// The server runs without persistence (`--save ""`, `--appendonly no`), with
    /// `DEBUG` allowed from local connections and `--repl-diskless-sync-delay 0`.
    ///
    /// # Panics
    ///
    /// If the binary (the `DLOCK_REDIS_SERVER` environment variable, else `redis-server`
    /// from `PATH`) cannot be spawned, or if the server does not answer `PING` within
    /// 10 seconds on any of 5 ports tried; the message quotes the server log.
    pub fn start() -> RedisServer {
        Self::start_with(&[])
    }

    /// Same as [`RedisServer::start`], with extra command-line arguments appended
    /// (e.g. `["--maxmemory", "1mb"]`).
    ///
    /// # Panics
    ///
    /// As [`RedisServer::start`]; a bad extra argument makes every attempt exit early, and
    /// the panic message then shows Redis' complaint.
    pub fn start_with(extra_args: &[&str]) -> RedisServer {
        let binary = redis_server_binary();
        let mut failures = Vec::new();
        for attempt in 1..=START_ATTEMPTS {
            match Self::try_start(&binary, extra_args) {
                Ok(server) => return server,
                Err(failure) => {
                    failures.push(format!(
                        "attempt {attempt}/{START_ATTEMPTS}: {}\n{}",
                        failure.reason, failure.diagnostics
                    ));
                }
            }
        }
        panic!(
            "could not start `{binary}` with extra arguments {extra_args:?}:\n{}",
            failures.join("\n")
        );
    }

    /// One attempt on one port. Spawn errors panic right away (retrying would not help).
    fn try_start(binary: &str, extra_args: &[&str]) -> Result<RedisServer, Failure> {
        let dir = tempfile::Builder::new()
            .prefix("dlock-redis-")
            .tempdir()
            .expect("cannot create a temporary directory for redis-server");
        let port = free_port();
        let log_path = dir.path().join("redis.log");
        let console_path = dir.path().join("console.log");
        let console = File::create(&console_path).expect("cannot create the console log file");
        let console_err = console
            .try_clone()
            .expect("cannot duplicate the console log file handle");

        let mut command = Command::new(binary);
        command
            .arg("--port")
            .arg(port.to_string())
            .args(["--bind", "127.0.0.1"])
            .arg("--dir")
            .arg(dir.path())
            .args(["--save", ""])
            .args(["--appendonly", "no"])
            .args(["--repl-diskless-sync-delay", "0"])
            .args(["--enable-debug-command", "local"])
            .arg("--logfile")
            .arg(&log_path)
            .args(["--daemonize", "no"])
            .args(["--protected-mode", "no"])
            .args(extra_args)
            .stdin(Stdio::null())
            .stdout(console)
            .stderr(console_err);
        let child = match command.spawn() {
            Ok(child) => child,
            Err(err) => {
                panic!("cannot run the Redis server binary `{binary}`: {err}; {INSTALL_HINT}")
            }
        };

        let mut server = RedisServer {
            pid: child.id(),
            child,
            port,
            stopped: false,
            log_path,
            console_path,
            dir,
        };
        match server.wait_ready() {
            Ok(()) => Ok(server),
            Err(reason) => {
                server.stop();
                let diagnostics = server.diagnostics();
                Err(Failure {
                    reason,
                    diagnostics,
                })
            }
        }
    }

    /// Polls until the freshly spawned process answers `PING` itself.
    fn wait_ready(&mut self) -> Result<(), String> {
        let client = self.client();
        let deadline = Instant::now() + READY_TIMEOUT;
        loop {
            match self.child.try_wait() {
                Ok(Some(status)) => {
                    self.stopped = true;
                    return Err(format!(
                        "redis-server on port {} exited early ({status})",
                        self.port
                    ));
                }
                Ok(None) => {}
                Err(err) => return Err(format!("cannot poll the redis-server process: {err}")),
            }
            let last_error = match probe(&client) {
                // Another process may have taken the port between `free_port` and the bind:
                // only accept an answer from our own process.
                Ok(pid) if pid == self.pid => return Ok(()),
                Ok(pid) => format!("port {} is answered by process {pid}", self.port),
                Err(err) => err.to_string(),
            };
            if Instant::now() >= deadline {
                return Err(format!(
                    "redis-server on port {} not ready after {READY_TIMEOUT:?} (last probe: {last_error})",
                    self.port
                ));
            }
            thread::sleep(READY_POLL);
        }
    }

    /// The TCP port the server listens on.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// The server's address, `127.0.0.1:PORT`.
    pub fn addr(&self) -> SocketAddr {
        SocketAddr::from((Ipv4Addr::LOCALHOST, self.port))
    }

    /// The connection URL, `redis://127.0.0.1:PORT`.
    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port)
    }

    /// A `redis` client for this server (no connection is opened yet).
    pub fn client(&self) -> redis::Client {
        redis::Client::open(self.url()).expect("a redis://127.0.0.1:PORT URL is always valid")
    }

    /// A fresh synchronous admin connection to the server, without read or write timeout.
    ///
    /// # Panics
    ///
    /// If the connection cannot be established within 5 seconds; the message quotes the
    /// server log.
    pub fn connection(&self) -> redis::Connection {
        let client = self.client();
        let mut attempts = 0;
        loop {
            attempts += 1;
            match client.get_connection_with_timeout(ADMIN_CONNECT_TIMEOUT) {
                Ok(connection) => return connection,
                // A stray SIGCHLD can interrupt the timed handshake read: just retry.
                Err(err) if is_interrupted(&err) && attempts < 5 => {}
                Err(err) => panic!(
                    "cannot connect to redis-server at {}: {err}\n{}",
                    self.url(),
                    self.diagnostics()
                ),
            }
        }
    }

    /// Suspends the server process (`SIGSTOP`): it keeps its socket but answers nothing
    /// until [`RedisServer::resume`].
    ///
    /// # Panics
    ///
    /// If the server was stopped or the signal cannot be sent.
    pub fn pause(&self) {
        self.signal(Signal::STOP, "STOP");
    }

    /// Resumes a server suspended by [`RedisServer::pause`] (`SIGCONT`).
    ///
    /// # Panics
    ///
    /// If the server was stopped or the signal cannot be sent.
    pub fn resume(&self) {
        self.signal(Signal::CONT, "CONT");
    }

    /// Kills the server (`SIGKILL`) and waits for it to exit. Idempotent; dropping the
    /// server does the same.
    pub fn stop(&mut self) {
        if self.stopped {
            return;
        }
        self.stopped = true;
        // A paused process would die of SIGKILL anyway; continuing it first is harmless.
        let _ = send_signal(self.pid, Signal::CONT);
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    /// The contents of the server's log file (empty if it has not been written yet).
    pub fn log(&self) -> String {
        read_lossy(&self.log_path)
    }

    /// The operating-system process id of the server.
    pub fn pid(&self) -> u32 {
        self.pid
    }

    /// The server's temporary working directory (removed when the server is dropped).
    pub fn dir(&self) -> &Path {
        self.dir.path()
    }

    /// Log file plus anything the process printed on stdout/stderr (Redis reports bad
    /// command-line arguments there, before it opens its log file).
    fn diagnostics(&self) -> String {
        let mut text = String::new();
        let log = self.log();
        let _ = writeln!(
            text,
            "--- redis-server log ({}) ---\n{}",
            self.log_path.display(),
            if log.trim().is_empty() {
                "(empty)"
            } else {
                log.trim_end()
            }
        );
        let console = read_lossy(&self.console_path);
        if !console.trim().is_empty() {
            let _ = writeln!(
                text,
                "--- redis-server stdout/stderr ---\n{}",
                console.trim_end()
            );
        }
        text.push_str("--- end ---");
        text
    }

    fn signal(&self, signal: Signal, name: &str) {
        assert!(
            !self.stopped,
            "cannot send SIG{name} to redis-server {}: it was stopped",
            self.pid
        );
        if let Err(err) = send_signal(self.pid, signal) {
            panic!("cannot send SIG{name} to redis-server {}: {err}", self.pid);
        }
    }
}

impl Drop for RedisServer {
    fn drop(&mut self) {
        self.stop();
    }
}

/// The binary to run: `$DLOCK_REDIS_SERVER` if set and non-empty, else `redis-server`.
fn redis_server_binary() -> String {
    std::env::var(REDIS_SERVER_ENV)
        .ok()
        .filter(|value| !value.trim().is_empty())
        .unwrap_or_else(|| "redis-server".to_owned())
}

/// A port that was free a moment ago (another process may take it before Redis binds it;
/// the caller retries on failure).
pub(crate) fn free_port() -> u16 {
    TcpListener::bind((Ipv4Addr::LOCALHOST, 0))
        .and_then(|listener| listener.local_addr())
        .map(|addr| addr.port())
        .expect("cannot bind an ephemeral port on 127.0.0.1")
}

/// `PING`s the server over a fresh connection and returns the process id it reports.
fn probe(client: &redis::Client) -> redis::RedisResult<u32> {
    let mut connection = client.get_connection_with_timeout(PROBE_TIMEOUT)?;
    connection.set_read_timeout(Some(PROBE_TIMEOUT))?;
    connection.set_write_timeout(Some(PROBE_TIMEOUT))?;
    let pong: String = redis::cmd("PING").query(&mut connection)?;
    if pong != "PONG" {
        return Err(redis::RedisError::from(std::io::Error::other(format!(
            "PING answered {pong:?}"
        ))));
    }
    let info: String = redis::cmd("INFO").arg("server").query(&mut connection)?;
    info.lines()
        .find_map(|line| line.strip_prefix("process_id:"))
        .and_then(|pid| pid.trim().parse().ok())
        .ok_or_else(|| {
            redis::RedisError::from(std::io::Error::other("INFO server has no process_id field"))
        })
}

/// Sends a signal to a process.
///
/// This uses `kill(2)` directly rather than spawning the `kill` command: a short-lived
/// child can exit while glibc's `posix_spawn` still has every signal blocked in the
/// spawning thread, and the resulting `SIGCHLD` is then queued instead of ignored and
/// interrupts (`EINTR`) whatever socket call with a timeout another thread is blocked in.
fn send_signal(pid: u32, signal: Signal) -> std::io::Result<()> {
    let raw = i32::try_from(pid).map_err(std::io::Error::other)?;
    let pid = Pid::from_raw(raw).ok_or_else(|| std::io::Error::other("process id 0"))?;
    kill_process(pid, signal).map_err(std::io::Error::from)
}

/// Whether a redis error is an interrupted system call (see [`send_signal`]).
fn is_interrupted(err: &redis::RedisError) -> bool {
    std::error::Error::source(err)
        .and_then(|source| source.downcast_ref::<std::io::Error>())
        .is_some_and(|io| io.kind() == ErrorKind::Interrupted)
}

fn read_lossy(path: &Path) -> String {
    match std::fs::read(path) {
        Ok(bytes) => String::from_utf8_lossy(&bytes).into_owned(),
        Err(err) if err.kind() == ErrorKind::NotFound => String::new(),
        Err(err) => format!("(cannot read {}: {err})", path.display()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ping(connection: &mut redis::Connection) -> redis::RedisResult<String> {
        redis::cmd("PING").query(connection)
    }

    fn server_pid(connection: &mut redis::Connection) -> Result<u32, String> {
        let info: String = redis::cmd("INFO")
            .arg("server")
            .query(connection)
            .map_err(|err| err.to_string())?;
        info.lines()
            .find_map(|line| line.strip_prefix("process_id:"))
            .and_then(|pid| pid.trim().parse().ok())
            .ok_or_else(|| "no process_id".to_owned())
    }

    #[test]
    fn start_ping_stop() {
        let mut server = RedisServer::start();
        assert_eq!(server.addr().port(), server.port());
        assert_eq!(server.url(), format!("redis://127.0.0.1:{}", server.port()));
        let mut connection = server.connection();
        assert_eq!(ping(&mut connection).unwrap(), "PONG");
        let dir: String = redis::cmd("CONFIG")
            .arg("GET")
            .arg("dir")
            .query::<Vec<String>>(&mut connection)
            .unwrap()
            .pop()
            .unwrap();
        assert_eq!(
            Path::new(&dir).canonicalize().unwrap(),
            server.dir().canonicalize().unwrap()
        );
        assert!(
            server.log().contains("Ready to accept connections"),
            "{}",
            server.log()
        );

        server.stop();
        server.stop(); // idempotent
        assert!(
            ping(&mut connection).is_err(),
            "the old connection still works after stop()"
        );
        // The port may have been taken by another test's server meanwhile: only a
        // connection to our (dead) process would be wrong.
        if let Ok(mut connection) = server
            .client()
            .get_connection_with_timeout(Duration::from_millis(500))
        {
            let pid = server_pid(&mut connection);
            assert_ne!(
                pid,
                Ok(server.pid()),
                "a new connection succeeds after stop()"
            );
        }
    }

    #[test]
    fn extra_args_are_applied() {
        let server = RedisServer::start_with(&["--maxmemory", "1mb"]);
        let mut connection = server.connection();
        let value: Vec<String> = redis::cmd("CONFIG")
            .arg("GET")
            .arg("maxmemory")
            .query(&mut connection)
            .unwrap();
        assert_eq!(value, ["maxmemory", "1048576"]);
    }

    #[test]
    #[should_panic(expected = "exited early")]
    fn bad_extra_args_panic_with_the_reason() {
        let _server = RedisServer::start_with(&["--no-such-option", "1"]);
    }

    #[test]
    fn pause_and_resume() {
        let server = RedisServer::start();
        let mut connection = server.connection();
        connection
            .set_read_timeout(Some(Duration::from_millis(300)))
            .unwrap();
        assert_eq!(ping(&mut connection).unwrap(), "PONG");

        server.pause();
        let started = Instant::now();
        let result = ping(&mut connection);
        assert!(result.is_err(), "PING answered while paused: {result:?}");
        assert!(started.elapsed() >= Duration::from_millis(250));

        server.resume();
        // The timed-out connection is unusable (redis-rs drops it); use a fresh one.
        let mut connection = server.connection();
        connection
            .set_read_timeout(Some(Duration::from_millis(300)))
            .unwrap();
        assert_eq!(ping(&mut connection).unwrap(), "PONG");
    }

    #[test]
    fn drop_kills_a_paused_server() {
        let server = RedisServer::start();
        let pid = server.pid();
        server.pause();
        drop(server);
        // The process was reaped by the drop, so no such process exists any more.
        let pid = Pid::from_raw(i32::try_from(pid).unwrap()).unwrap();
        assert!(
            rustix::process::test_kill_process(pid).is_err(),
            "redis-server {pid:?} still exists"
        );
    }
}
