//! A throw-away `redis-server` for the demo when no configuration names one: on a free
//! loopback port, without persistence, stopped when dropped.

use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// How long the server may take to answer its first `PING`.
const START_TIMEOUT: Duration = Duration::from_secs(10);

/// A running `redis-server` (the `DLOCK_REDIS_SERVER` environment variable, else
/// `redis-server` from `PATH`); killed on drop.
pub struct LocalRedis {
    child: Child,
    url: String,
}

/// How many free ports are tried: a port found free can be taken by another process
/// before the server binds it.
const ATTEMPTS: usize = 5;

impl LocalRedis {
    /// Starts the server on a free port of `127.0.0.1` and waits until it answers.
    pub fn start_on_a_free_port() -> Result<LocalRedis, String> {
        let mut last = String::new();
        for _ in 0..ATTEMPTS {
            match LocalRedis::start(crate::free_port()?)? {
                Ok(server) => return Ok(server),
                Err(taken) => last = taken,
            }
        }
        Err(format!(
            "no free port for redis-server in {ATTEMPTS} attempts: {last}"
        ))
    }

    /// Starts the server on `port` (of `127.0.0.1`) and waits until it answers: `Ok(Err)`
    /// when another process has the port (the server that answers is not this one).
    fn start(port: u16) -> Result<Result<LocalRedis, String>, String> {
        let program =
            std::env::var("DLOCK_REDIS_SERVER").unwrap_or_else(|_| "redis-server".to_owned());
        let child = Command::new(&program)
            .args(["--port", &port.to_string(), "--bind", "127.0.0.1"])
            .args(["--save", "", "--appendonly", "no"])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::inherit())
            .spawn()
            .map_err(|e| {
                format!("cannot start {program:?}: {e}; install it (apt-get install -y redis-server) or pass --config")
            })?;
        let server = LocalRedis {
            child,
            url: format!("redis://127.0.0.1:{port}"),
        };
        let answering = server.wait_until_ready()?;
        if answering != server.child.id() {
            return Ok(Err(format!(
                "{} answered from process {answering}, not the redis-server started (process {})",
                server.url,
                server.child.id()
            )));
        }
        Ok(Ok(server))
    }

    /// The server's address, `redis://127.0.0.1:PORT`.
    pub fn url(&self) -> &str {
        &self.url
    }

    /// Waits until a server answers on the port; returns the id of its process.
    fn wait_until_ready(&self) -> Result<u32, String> {
        let started = Instant::now();
        let client = redis::Client::open(self.url.as_str()).map_err(|e| e.to_string())?;
        loop {
            let info = client
                .get_connection_with_timeout(Duration::from_millis(200))
                .and_then(|mut conn| redis::cmd("INFO").arg("server").query::<String>(&mut conn));
            match info {
                Ok(info) => {
                    return info
                        .lines()
                        .find_map(|line| line.strip_prefix("process_id:"))
                        .and_then(|id| id.trim().parse().ok())
                        .ok_or_else(|| format!("{} sent no process_id in INFO", self.url));
                }
                Err(error) if started.elapsed() > START_TIMEOUT => {
                    return Err(format!(
                        "redis-server at {} did not answer within {START_TIMEOUT:?}: {error}",
                        self.url
                    ))
                }
                Err(_) => std::thread::sleep(Duration::from_millis(20)),
            }
        }
    }
}

impl Drop for LocalRedis {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A port another redis-server has already is not taken for the demo's: the server
    /// that answers there is the other one, and a start on it says so.
    #[test]
    fn a_server_on_a_taken_port_is_not_taken_for_the_demos() {
        let first = LocalRedis::start_on_a_free_port().unwrap();
        let port: u16 = first.url().rsplit(':').next().unwrap().parse().unwrap();
        let refused = LocalRedis::start(port).unwrap();
        let Err(why) = refused else {
            panic!("a second server on {port} was taken for the demo's");
        };
        assert!(why.contains("not the redis-server started"), "{why}");
    }
}
