//! A throw-away `redis-server` process owned by one test.

use std::ffi::OsString;
use std::fmt::Write as _;
use std::fs::File;
use std::hash::{BuildHasher, Hasher};
use std::io::ErrorKind;
use std::net::{Ipv4Addr, SocketAddr, TcpListener};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
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
/// Connect timeout of the short-lived connections of [`query_port`].
const QUERY_CONNECT_TIMEOUT: Duration = Duration::from_secs(1);
/// Read and write timeout of the short-lived connections of [`query_port`].
const QUERY_IO_TIMEOUT: Duration = Duration::from_secs(2);
/// Lowest port handed out by [`cluster_port`]. Cluster ports and their bus ports
/// (port + 10000) stay below Linux' default ephemeral range (32768-60999), so outgoing
/// connections never take them.
const CLUSTER_PORT_MIN: u16 = 20_000;
/// Number of ports [`cluster_port`] cycles through (20000-22767, bus 30000-32767).
const CLUSTER_PORT_SPAN: u32 = 2_768;
/// Offset between a cluster node's port and its cluster bus port.
pub(crate) const CLUSTER_BUS_OFFSET: u16 = 10_000;

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
    /// What runs, for messages: `redis-server` or `redis-sentinel`.
    role: &'static str,
    stopped: bool,
    /// The binary and command line it was started with, for [`RedisServer::restart`].
    binary: String,
    args: Vec<OsString>,
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

/// How to start one process: the crate-internal hook behind [`RedisServer::start_with`],
/// cluster nodes and sentinels.
pub(crate) struct Launch<'a> {
    /// What runs, for messages: `redis-server` or `redis-sentinel`.
    pub(crate) role: &'static str,
    /// Describes the launch in the final panic message (e.g. the extra arguments).
    pub(crate) description: String,
    /// Name of the log file inside the process' temporary directory.
    pub(crate) log_name: &'a str,
    /// Picks the port of one attempt.
    pub(crate) pick_port: &'a dyn Fn() -> u16,
    /// Given the fresh temporary directory, the port and the log file path, writes any
    /// file the process needs and returns its command-line arguments.
    pub(crate) args: &'a dyn Fn(&Path, u16, &Path) -> Vec<OsString>,
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
        Self::start_with_port_picker(&free_port, extra_args)
    }

    /// Same as [`RedisServer::start_with`], on ports chosen by `pick_port` (called once
    /// per attempt).
    pub(crate) fn start_with_port_picker(
        pick_port: &dyn Fn() -> u16,
        extra_args: &[&str],
    ) -> RedisServer {
        Self::launch(&Launch {
            role: "redis-server",
            description: format!("with extra arguments {extra_args:?}"),
            log_name: "redis.log",
            pick_port,
            args: &|dir, port, log_path| server_args(dir, port, log_path, extra_args),
        })
    }

    /// Starts the process described by `launch`, trying up to 5 ports.
    ///
    /// # Panics
    ///
    /// As [`RedisServer::start`].
    pub(crate) fn launch(launch: &Launch<'_>) -> RedisServer {
        let binary = redis_server_binary();
        let mut failures = Vec::new();
        for attempt in 1..=START_ATTEMPTS {
            match Self::try_start(&binary, launch) {
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
            "could not start `{binary}` as {} {}:\n{}",
            launch.role,
            launch.description,
            failures.join("\n")
        );
    }

    /// One attempt on one port. Spawn errors panic right away (retrying would not help).
    fn try_start(binary: &str, launch: &Launch<'_>) -> Result<RedisServer, Failure> {
        let dir = tempfile::Builder::new()
            .prefix("dlock-redis-")
            .tempdir()
            .expect("cannot create a temporary directory for redis-server");
        let port = (launch.pick_port)();
        let log_path = dir.path().join(launch.log_name);
        let console_path = dir.path().join("console.log");
        let console = File::create(&console_path).expect("cannot create the console log file");
        let console_err = console
            .try_clone()
            .expect("cannot duplicate the console log file handle");

        let args = (launch.args)(dir.path(), port, &log_path);
        let child = spawn(binary, &args, console, console_err);
        let mut server = RedisServer {
            pid: child.id(),
            child,
            port,
            role: launch.role,
            stopped: false,
            binary: binary.to_owned(),
            args,
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
                        "{} on port {} exited early ({status})",
                        self.role, self.port
                    ));
                }
                Ok(None) => {}
                Err(err) => return Err(format!("cannot poll the {} process: {err}", self.role)),
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
                    "{} on port {} not ready after {READY_TIMEOUT:?} (last probe: {last_error})",
                    self.role, self.port
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
                    "cannot connect to {} at {}: {err}\n{}",
                    self.role,
                    self.url(),
                    self.diagnostics()
                ),
            }
        }
    }

    /// Closes this master's links to its replicas (`CLIENT KILL TYPE replica`): with the
    /// replicas paused, nothing written from now on reaches them, and nothing is in flight.
    ///
    /// # Panics
    ///
    /// If the server does not answer.
    pub fn kill_replica_links(&self) {
        let _: u64 = redis::cmd("CLIENT")
            .arg("KILL")
            .arg("TYPE")
            .arg("replica")
            .query(&mut self.connection())
            .unwrap_or_else(|e| panic!("CLIENT KILL TYPE replica: {e}\n{}", self.diagnostics()));
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

    /// Shuts the server down cleanly (`SIGTERM`: Redis writes its AOF / RDB files if
    /// persistence is on) and starts it again on the same port, in the same directory,
    /// with the same command line. Returns how long the server was unreachable.
    ///
    /// Start it with persistence for the data to survive, e.g.
    /// `RedisServer::start_with(&["--appendonly", "yes", "--appendfsync", "always"])`.
    ///
    /// # Panics
    ///
    /// If the server was stopped, does not exit within 10 seconds, or does not answer
    /// `PING` on its port within 10 seconds of the new start (e.g. another process took
    /// the port in between); the message quotes the server log.
    pub fn restart(&mut self) -> Duration {
        assert!(!self.stopped, "cannot restart a stopped {}", self.role);
        let down = Instant::now();
        self.signal(Signal::TERM, "TERM");
        let exited = wait_until(READY_TIMEOUT, || match self.child.try_wait() {
            Ok(Some(_)) => Ok(()),
            Ok(None) => Err("still running".to_owned()),
            Err(err) => Err(err.to_string()),
        });
        if let Err(state) = exited {
            panic!(
                "{} {} did not shut down after SIGTERM: {state}\n{}",
                self.role,
                self.pid,
                self.diagnostics()
            );
        }
        let console = File::options()
            .append(true)
            .open(&self.console_path)
            .expect("cannot reopen the console log file");
        let console_err = console
            .try_clone()
            .expect("cannot duplicate the console log file handle");
        self.child = spawn(&self.binary, &self.args, console, console_err);
        self.pid = self.child.id();
        if let Err(reason) = self.wait_ready() {
            panic!(
                "{} did not come back on port {}: {reason}\n{}",
                self.role,
                self.port,
                self.diagnostics()
            );
        }
        down.elapsed()
    }

    /// Whether the server was stopped ([`RedisServer::stop`]); a paused server is not.
    pub fn is_stopped(&self) -> bool {
        self.stopped
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
    pub(crate) fn diagnostics(&self) -> String {
        let mut text = String::new();
        let log = self.log();
        let _ = writeln!(
            text,
            "--- {} log ({}) ---\n{}",
            self.role,
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
                "--- {} stdout/stderr ---\n{}",
                self.role,
                console.trim_end()
            );
        }
        text.push_str("--- end ---");
        text
    }

    fn signal(&self, signal: Signal, name: &str) {
        assert!(
            !self.stopped,
            "cannot send SIG{name} to {} {}: it was stopped",
            self.role, self.pid
        );
        if let Err(err) = send_signal(self.pid, signal) {
            panic!("cannot send SIG{name} to {} {}: {err}", self.role, self.pid);
        }
    }
}

impl Drop for RedisServer {
    fn drop(&mut self) {
        self.stop();
    }
}

/// Spawns `binary` with `args`, output to the console log.
///
/// # Panics
///
/// If the binary cannot be run at all (retrying would not help).
fn spawn(binary: &str, args: &[OsString], stdout: File, stderr: File) -> Child {
    Command::new(binary)
        .args(args)
        .stdin(Stdio::null())
        .stdout(stdout)
        .stderr(stderr)
        .spawn()
        .unwrap_or_else(|err| {
            panic!("cannot run the Redis server binary `{binary}`: {err}; {INSTALL_HINT}")
        })
}

/// The binary to run: `$DLOCK_REDIS_SERVER` if set and non-empty, else `redis-server`.
fn redis_server_binary() -> String {
    std::env::var(REDIS_SERVER_ENV)
        .ok()
        .filter(|value| !value.trim().is_empty())
        .unwrap_or_else(|| "redis-server".to_owned())
}

/// The standard `redis-server` command line: no persistence, loopback only, local
/// `DEBUG`, immediate diskless replication, then `extra_args`.
fn server_args(dir: &Path, port: u16, log_path: &Path, extra_args: &[&str]) -> Vec<OsString> {
    let mut args: Vec<OsString> = vec![
        "--port".into(),
        port.to_string().into(),
        "--bind".into(),
        "127.0.0.1".into(),
        "--dir".into(),
        dir.into(),
        "--save".into(),
        "".into(),
        "--appendonly".into(),
        "no".into(),
        "--repl-diskless-sync-delay".into(),
        "0".into(),
        "--enable-debug-command".into(),
        "local".into(),
        "--logfile".into(),
        log_path.into(),
        "--daemonize".into(),
        "no".into(),
        "--protected-mode".into(),
        "no".into(),
    ];
    args.extend(extra_args.iter().map(OsString::from));
    args
}

/// A port for a cluster node: below 32768 together with its bus port (port + 10000),
/// and both free a moment ago. Successive calls in one process cycle through the range
/// from a random start, so parallel tests do not pick the same port.
pub(crate) fn cluster_port() -> u16 {
    static NEXT: AtomicU32 = AtomicU32::new(u32::MAX);
    // Pick a random start once per process.
    let seed = std::collections::hash_map::RandomState::new()
        .build_hasher()
        .finish();
    let start = u32::try_from(seed % u64::from(CLUSTER_PORT_SPAN)).unwrap_or(0);
    let _ = NEXT.compare_exchange(u32::MAX, start, Ordering::Relaxed, Ordering::Relaxed);
    for _ in 0..CLUSTER_PORT_SPAN {
        let offset = NEXT.fetch_add(1, Ordering::Relaxed) % CLUSTER_PORT_SPAN;
        let port =
            CLUSTER_PORT_MIN + u16::try_from(offset).expect("the cluster port span fits in a u16");
        let bindable = |port: u16| TcpListener::bind((Ipv4Addr::LOCALHOST, port)).is_ok();
        if bindable(port) && bindable(port + CLUSTER_BUS_OFFSET) {
            return port;
        }
    }
    panic!(
        "no free port pair (port, port + {CLUSTER_BUS_OFFSET}) in {CLUSTER_PORT_MIN}..{} on 127.0.0.1",
        u32::from(CLUSTER_PORT_MIN) + CLUSTER_PORT_SPAN
    );
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

/// Runs `cmd` on the server at `127.0.0.1:port` over a fresh connection with short
/// timeouts (1 s to connect, 2 s per read or write), so that a dead or paused server
/// yields an error instead of a hang. An interrupted system call is retried.
pub(crate) fn query_port<T: redis::FromRedisValue>(
    port: u16,
    cmd: &redis::Cmd,
) -> redis::RedisResult<T> {
    let client = redis::Client::open(format!("redis://127.0.0.1:{port}"))?;
    let mut attempts = 0;
    loop {
        attempts += 1;
        let result = client
            .get_connection_with_timeout(QUERY_CONNECT_TIMEOUT)
            .and_then(|mut connection| {
                connection.set_read_timeout(Some(QUERY_IO_TIMEOUT))?;
                connection.set_write_timeout(Some(QUERY_IO_TIMEOUT))?;
                cmd.query(&mut connection)
            });
        match result {
            Err(err) if is_interrupted(&err) && attempts < 5 => {}
            result => return result,
        }
    }
}

/// The value of `field` in an `INFO` reply (`field:value` lines).
pub(crate) fn info_field<'a>(info: &'a str, field: &str) -> Option<&'a str> {
    info.lines().find_map(|line| {
        line.strip_prefix(field)
            .and_then(|rest| rest.strip_prefix(':'))
            .map(str::trim)
    })
}

/// The last `lines` lines of `text`, for panic messages.
pub(crate) fn tail(text: &str, lines: usize) -> String {
    let all: Vec<&str> = text.lines().collect();
    all[all.len().saturating_sub(lines)..].join("\n")
}

/// Polls `check` every 50 ms until it returns `Ok`, for at most `timeout`; on timeout,
/// returns the last `Err` (a description of what was still missing).
pub(crate) fn wait_until<T>(
    timeout: Duration,
    mut check: impl FnMut() -> Result<T, String>,
) -> Result<T, String> {
    let deadline = Instant::now() + timeout;
    loop {
        match check() {
            Ok(value) => return Ok(value),
            Err(missing) if Instant::now() >= deadline => return Err(missing),
            Err(_) => thread::sleep(Duration::from_millis(50)),
        }
    }
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
