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

impl LocalRedis {
    /// Starts the server on `port` (of `127.0.0.1`) and waits until it answers.
    pub fn start(port: u16) -> Result<LocalRedis, String> {
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
        server.wait_until_ready()?;
        Ok(server)
    }

    /// The server's address, `redis://127.0.0.1:PORT`.
    pub fn url(&self) -> &str {
        &self.url
    }

    fn wait_until_ready(&self) -> Result<(), String> {
        let started = Instant::now();
        let client = redis::Client::open(self.url.as_str()).map_err(|e| e.to_string())?;
        loop {
            let pong = client
                .get_connection_with_timeout(Duration::from_millis(200))
                .and_then(|mut conn| redis::cmd("PING").query::<String>(&mut conn));
            match pong {
                Ok(_) => return Ok(()),
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
