//! The Redis server one scenario run talks to: a fresh throw-away `redis-server`, or the
//! server given with `--redis-url`.

use std::collections::HashMap;
use std::time::Duration;

use dlock::LockClient;
use dlock_tests::RedisServer;
use redis::aio::MultiplexedConnection;
use redis::{AsyncCommands, ConnectionAddr};

use crate::stats::{error, Result};

/// Where one scenario run sends its traffic. Keys it writes start with [`Target::prefix`].
pub struct Target {
    /// The server this run started, killed on drop; `None` with `--redis-url`.
    server: Option<RedisServer>,
    url: String,
    prefix: String,
}

impl Target {
    /// Starts a fresh `redis-server` (when `external` is `None`) or uses `external`, and
    /// checks that the server answers.
    pub async fn open(external: Option<&str>) -> Result<Target> {
        let server = match external {
            Some(_) => None,
            None => Some(start_server().await?),
        };
        let url = match (&server, external) {
            (Some(server), _) => server.url(),
            (None, Some(url)) => url.to_owned(),
            (None, None) => return Err(error("no Redis server")),
        };
        let run = uuid::Uuid::new_v4().simple().to_string();
        let target = Target {
            server,
            url,
            prefix: format!("dlock-bench:{}:", &run[..8]),
        };
        let mut conn = target.connection().await?;
        let pong: String = redis::cmd("PING")
            .query_async(&mut conn)
            .await
            .map_err(|e| {
                error(format!(
                    "Redis at {} does not answer PING: {e}",
                    target.redacted_url()
                ))
            })?;
        if pong != "PONG" {
            return Err(error(format!("unexpected reply to PING: {pong}")));
        }
        Ok(target)
    }

    /// The server's address.
    pub fn url(&self) -> &str {
        &self.url
    }

    /// The address with any password hidden, for messages.
    pub fn redacted_url(&self) -> String {
        dlock::admin::redact_url(&self.url)
    }

    /// Prefix of every key this run writes (also the lock clients' key prefix).
    pub fn prefix(&self) -> &str {
        &self.prefix
    }

    /// Whether this run started its own server (and may reset its statistics freely).
    pub fn is_own_server(&self) -> bool {
        self.server.is_some()
    }

    /// A new multiplexed connection (one TCP connection; concurrent requests pipeline).
    pub async fn connection(&self) -> Result<MultiplexedConnection> {
        connect(&self.url).await
    }

    /// A dlock client with this run's key prefix, and the given watchdog timeout (else the
    /// default, 30 s).
    pub async fn lock_client(&self, watchdog: Option<Duration>) -> Result<LockClient> {
        let mut builder = LockClient::builder().key_prefix(self.prefix.clone());
        if let Some(timeout) = watchdog {
            builder = builder.watchdog_timeout(timeout);
        }
        Ok(builder.connect(&self.url).await?)
    }

    /// Host and port for `redis-benchmark`, when the server is a plain TCP address without
    /// credentials or database number (the only case the benchmark tool is run for).
    pub fn plain_tcp_address(&self) -> Option<(String, u16)> {
        let client = redis::Client::open(self.url.as_str()).ok()?;
        let info = client.get_connection_info();
        let settings = info.redis_settings();
        if settings.password().is_some() || settings.username().is_some() || settings.db() != 0 {
            return None;
        }
        match info.addr() {
            ConnectionAddr::Tcp(host, port) => Some((host.clone(), *port)),
            _ => None,
        }
    }

    /// Deletes this run's keys from a server given with `--redis-url` (a server the run
    /// started itself is simply killed).
    pub async fn finish(self) -> Result<()> {
        if self.server.is_some() {
            return Ok(());
        }
        let mut conn = self.connection().await?;
        let pattern = format!("{}*", self.prefix);
        let mut cursor: u64 = 0;
        loop {
            let (next, keys): (u64, Vec<String>) = redis::cmd("SCAN")
                .arg(cursor)
                .arg("MATCH")
                .arg(&pattern)
                .arg("COUNT")
                .arg(1000)
                .query_async(&mut conn)
                .await?;
            if !keys.is_empty() {
                let _: () = conn.unlink(keys).await?;
            }
            if next == 0 {
                return Ok(());
            }
            cursor = next;
        }
    }
}

/// A new multiplexed connection to the server at `url`.
pub async fn connect(url: &str) -> Result<MultiplexedConnection> {
    let shown = dlock::admin::redact_url(url);
    let client =
        redis::Client::open(url).map_err(|e| error(format!("bad Redis URL {shown}: {e}")))?;
    // redis-rs gives up on an answer after 500 ms by default; the benchmark's own reads
    // can take longer on a server busy with 100,000 waiters (one did), and every scenario
    // bounds its own run.
    let config = redis::AsyncConnectionConfig::new().set_response_timeout(Some(ADMIN_TIMEOUT));
    client
        .get_multiplexed_async_connection_with_config(&config)
        .await
        .map_err(|e| error(format!("cannot connect to {shown}: {e}")))
}

/// How long the benchmark's own connections wait for an answer.
const ADMIN_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(30);

/// Starts a throw-away server; the harness panics when it cannot, which becomes an error.
async fn start_server() -> Result<RedisServer> {
    let started = tokio::task::spawn_blocking(|| std::panic::catch_unwind(RedisServer::start))
        .await
        .map_err(|e| error(format!("starting redis-server: {e}")))?;
    started.map_err(|_| {
        error(
            "could not start redis-server (see the message above); install Redis \
             (`apt-get install -y redis-server redis-tools`) or pass --redis-url",
        )
    })
}

/// One `INFO` section as `field → value`.
pub async fn info(
    conn: &mut MultiplexedConnection,
    section: &str,
) -> Result<HashMap<String, String>> {
    let text: String = redis::cmd("INFO").arg(section).query_async(conn).await?;
    Ok(text
        .lines()
        .filter(|line| !line.starts_with('#'))
        .filter_map(|line| line.split_once(':'))
        .map(|(k, v)| (k.trim().to_owned(), v.trim().to_owned()))
        .collect())
}

/// CPU seconds (user + system) the server has used since it started.
pub async fn server_cpu(conn: &mut MultiplexedConnection) -> Result<f64> {
    let cpu = info(conn, "cpu").await?;
    let field = |name: &str| -> Result<f64> {
        cpu.get(name)
            .and_then(|v| v.parse::<f64>().ok())
            .ok_or_else(|| error(format!("INFO cpu has no {name}")))
    };
    Ok(field("used_cpu_user")? + field("used_cpu_sys")?)
}

/// Calls per command from `INFO commandstats` (`cmdstat_evalsha` → `evalsha`).
pub async fn command_calls(conn: &mut MultiplexedConnection) -> Result<HashMap<String, u64>> {
    Ok(command_stats(conn)
        .await?
        .into_iter()
        .map(|(command, stat)| (command, stat.calls))
        .collect())
}

/// What `INFO commandstats` says of one command: calls, and the server's time in it
/// (for a script, including the commands it ran).
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct CommandStat {
    pub calls: u64,
    pub usec: u64,
}

/// Every command's [`CommandStat`] (`cmdstat_evalsha` → `evalsha`).
pub async fn command_stats(
    conn: &mut MultiplexedConnection,
) -> Result<HashMap<String, CommandStat>> {
    let stats = info(conn, "commandstats").await?;
    Ok(stats
        .into_iter()
        .filter_map(|(name, value)| {
            let command = name.strip_prefix("cmdstat_")?.to_owned();
            let field = |key: &str| -> Option<u64> {
                value
                    .split(',')
                    .find_map(|part| part.strip_prefix(key)?.strip_prefix('='))?
                    .parse()
                    .ok()
            };
            Some((
                command,
                CommandStat {
                    calls: field("calls")?,
                    usec: field("usec")?,
                },
            ))
        })
        .collect())
}

/// `CONFIG RESETSTAT`: zeroes command statistics and counters such as `expired_keys`.
pub async fn reset_stats(conn: &mut MultiplexedConnection) -> Result<()> {
    let () = redis::cmd("CONFIG")
        .arg("RESETSTAT")
        .query_async(conn)
        .await?;
    Ok(())
}
