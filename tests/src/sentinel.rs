//! A Redis Sentinel group: a master, two replicas and three sentinels monitoring them.

use std::collections::HashMap;
use std::ffi::OsString;
use std::fmt::Write as _;
use std::net::SocketAddr;
use std::path::Path;
use std::time::{Duration, Instant};

use crate::replicas::repl_offset;
use crate::server::{free_port, info_field, query_port, tail, wait_until, Launch};
use crate::{RedisReplicaSet, RedisServer};

/// The name the sentinels monitor the master under.
const MASTER_NAME: &str = "mymaster";
/// Number of replicas of the group.
const REPLICAS: usize = 2;
/// Number of sentinels of the group.
const SENTINELS: usize = 3;
/// How long [`RedisSentinelGroup::start`] waits for the sentinels to discover everything.
const DISCOVERY_TIMEOUT: Duration = Duration::from_secs(20);
/// How long a failover may take until every sentinel reports the new master.
const FAILOVER_TIMEOUT: Duration = Duration::from_secs(15);
/// How long [`RedisSentinelGroup::wait_replicated`] waits for the replicas.
const CATCH_UP_TIMEOUT: Duration = Duration::from_secs(30);
/// Log lines quoted per process in panic messages.
const LOG_LINES: usize = 60;

/// A master and two replicas monitored by three Redis Sentinels as `mymaster`, all on
/// free `127.0.0.1` ports, every process in its own temporary directory.
///
/// The sentinels use quorum 2, `down-after-milliseconds 1000`, `failover-timeout 5000` and
/// `parallel-syncs 1`. [`RedisSentinelGroup::start`] returns once every sentinel knows the
/// master, both replicas and the two other sentinels, so a failover can start at once.
/// Dropping the group kills the sentinels, then the servers, also while a failing test
/// unwinds.
///
/// Which server is the master changes with failovers: ask
/// [`RedisSentinelGroup::current_master_port`] or [`RedisSentinelGroup::master_server`]
/// rather than remembering it.
#[derive(Debug)]
pub struct RedisSentinelGroup {
    // Declared (hence dropped) first: no sentinel may start a failover while the servers
    // are being killed.
    sentinels: Vec<RedisServer>,
    servers: Vec<RedisServer>,
}

impl RedisSentinelGroup {
    /// Starts the master and its two replicas, waits until both replicas are in sync, then
    /// starts three sentinels and waits until every sentinel reports the master, sees both
    /// replicas (`SENTINEL replicas`) and the two other sentinels (`SENTINEL sentinels`),
    /// none of them down or disconnected.
    ///
    /// Discovery goes through the sentinels' hello messages and takes a few seconds.
    ///
    /// # Panics
    ///
    /// If a process cannot be started, or the sentinels have not discovered each other
    /// within 20 seconds; the message quotes every sentinel's and server's log.
    pub fn start() -> RedisSentinelGroup {
        let RedisReplicaSet { master, replicas } = RedisReplicaSet::start(REPLICAS);
        let master_port = master.port();
        let mut servers = vec![master];
        servers.extend(replicas);
        let sentinels = (0..SENTINELS)
            .map(|_| start_sentinel(master_port))
            .collect();
        let group = RedisSentinelGroup { sentinels, servers };
        let started = Instant::now();
        if let Err(missing) = wait_until(DISCOVERY_TIMEOUT, || group.check_discovered(master_port))
        {
            panic!(
                "the sentinels did not discover the group within {:?}: {missing}\n{}",
                started.elapsed(),
                group.diagnostics()
            );
        }
        group
    }

    /// The name the sentinels monitor the master under: `"mymaster"`.
    pub fn master_name(&self) -> &str {
        MASTER_NAME
    }

    /// The sentinels' URLs, `redis://127.0.0.1:PORT`.
    pub fn sentinel_urls(&self) -> Vec<String> {
        self.sentinels.iter().map(RedisServer::url).collect()
    }

    /// The sentinels' addresses, `127.0.0.1:PORT`.
    pub fn sentinel_addrs(&self) -> Vec<SocketAddr> {
        self.sentinels.iter().map(RedisServer::addr).collect()
    }

    /// The three sentinel processes.
    pub fn sentinels(&self) -> &[RedisServer] {
        &self.sentinels
    }

    /// The three data servers, the initial master first.
    pub fn servers(&self) -> &[RedisServer] {
        &self.servers
    }

    /// The data server listening on `port`, if any.
    pub fn server_on_port(&self, port: u16) -> Option<&RedisServer> {
        self.servers.iter().find(|server| server.port() == port)
    }

    /// The data server listening on `port`, if any, mutably (e.g. to
    /// [`stop`](RedisServer::stop) it).
    pub fn server_on_port_mut(&mut self, port: u16) -> Option<&mut RedisServer> {
        self.servers.iter_mut().find(|server| server.port() == port)
    }

    /// The master's port according to the first sentinel that answers
    /// `SENTINEL get-master-addr-by-name mymaster` (stopped sentinels are skipped).
    ///
    /// # Panics
    ///
    /// If no sentinel answers.
    pub fn current_master_port(&self) -> u16 {
        let mut errors = Vec::new();
        for sentinel in self.running_sentinels() {
            match master_port_reported_by(sentinel.port()) {
                Ok(port) => return port,
                Err(err) => errors.push(err),
            }
        }
        panic!(
            "no sentinel reports the master of {MASTER_NAME}: {}",
            errors.join("; ")
        );
    }

    /// The data server that is the master according to the sentinels.
    ///
    /// # Panics
    ///
    /// If no sentinel answers, or the reported port is not one of the group's servers.
    pub fn master_server(&self) -> &RedisServer {
        let port = self.current_master_port();
        self.server_on_port(port).unwrap_or_else(|| {
            panic!("the sentinels report master port {port}, which is none of the group's servers")
        })
    }

    /// Sends `SENTINEL FAILOVER mymaster` to a sentinel and waits until every running
    /// sentinel reports a new master and that server answers `ROLE` as master; returns the
    /// new master's port.
    ///
    /// A sentinel refuses a failover while one is in progress (`INPROG`) or while it has
    /// not yet checked the replicas of a freshly promoted master (`NOGOODSLAVE`): those
    /// refusals are retried, so failovers can be chained.
    ///
    /// The old master is not demoted when this returns: it stays a writable master until
    /// the sentinels' next `INFO` of it, about 10 seconds later (measured 11.3 s after the
    /// command on Redis 7.0), and only then replicates the new master. A client still
    /// talking to it meanwhile writes into a branch that is thrown away.
    ///
    /// # Panics
    ///
    /// If the command fails otherwise, or the failover is not complete within 15 seconds;
    /// the message quotes every log.
    pub fn failover(&self) -> u16 {
        let old_port = self.current_master_port();
        let sentinel = self
            .running_sentinels()
            .next()
            .expect("every sentinel of the group was stopped");
        let started = Instant::now();
        let sent = wait_until(FAILOVER_TIMEOUT, || {
            match query_port::<()>(
                sentinel.port(),
                redis::cmd("SENTINEL").arg("FAILOVER").arg(MASTER_NAME),
            ) {
                Ok(()) => Ok(()),
                Err(err) if is_retryable_refusal(&err) => Err(err.to_string()),
                Err(err) => panic!(
                    "SENTINEL FAILOVER {MASTER_NAME} on sentinel {} failed: {err}\n{}",
                    sentinel.port(),
                    self.diagnostics()
                ),
            }
        });
        if let Err(refusal) = sent {
            panic!(
                "SENTINEL FAILOVER {MASTER_NAME} still refused after {:?}: {refusal}\n{}",
                started.elapsed(),
                self.diagnostics()
            );
        }
        self.wait_for_new_master(old_port)
    }

    /// Waits until every running sentinel reports the same master, other than
    /// `old_master_port`, and that server answers `ROLE` as master; returns its port.
    ///
    /// Use it after [`stop`](RedisServer::stop)ping the master (found with
    /// [`RedisSentinelGroup::server_on_port_mut`]) to wait for the automatic failover.
    ///
    /// # Panics
    ///
    /// If that does not happen within 15 seconds; the message quotes every log.
    pub fn wait_for_new_master(&self, old_master_port: u16) -> u16 {
        let started = Instant::now();
        wait_until(FAILOVER_TIMEOUT, || self.check_new_master(old_master_port)).unwrap_or_else(
            |missing| {
                panic!(
                    "no new master (other than {old_master_port}) after {:?}: {missing}\n{}",
                    started.elapsed(),
                    self.diagnostics()
                )
            },
        )
    }

    /// Waits until every other running data server replicates the current master (link
    /// up) and has applied everything the master had accepted at the call: use it before
    /// killing the master to make sure no acknowledged write is lost.
    ///
    /// Right after [`RedisSentinelGroup::failover`] this waits for the sentinels to demote
    /// the old master, which takes about 10 seconds; after a master was stopped, only the
    /// surviving replica is waited for.
    ///
    /// # Panics
    ///
    /// If no sentinel answers, or a replica does not catch up within 30 seconds; the
    /// message quotes every log.
    pub fn wait_replicated(&self) {
        let master_port = self.current_master_port();
        let target = repl_offset(master_port, "master_repl_offset")
            .unwrap_or_else(|err| panic!("{err}\n{}", self.diagnostics()));
        let started = Instant::now();
        let caught_up = wait_until(CATCH_UP_TIMEOUT, || {
            let replicas = self
                .servers
                .iter()
                .filter(|server| !server.is_stopped() && server.port() != master_port);
            for replica in replicas {
                let port = replica.port();
                let info: String = query_port(port, redis::cmd("INFO").arg("replication"))
                    .map_err(|err| format!("INFO replication on {port} failed: {err}"))?;
                let following = info_field(&info, "master_port")
                    .is_some_and(|followed| followed == master_port.to_string());
                if info_field(&info, "role") != Some("slave") || !following {
                    return Err(format!(
                        "server {port} does not replicate {master_port} yet"
                    ));
                }
                if info_field(&info, "master_link_status") != Some("up") {
                    return Err(format!("server {port}'s link to {master_port} is not up"));
                }
                let offset = repl_offset(port, "slave_repl_offset")?;
                if offset < target {
                    return Err(format!(
                        "server {port} is at offset {offset}, the master was at {target}"
                    ));
                }
            }
            Ok(())
        });
        if let Err(lag) = caught_up {
            panic!(
                "the replicas of {master_port} did not catch up within {:?}: {lag}\n{}",
                started.elapsed(),
                self.diagnostics()
            );
        }
    }

    fn running_sentinels(&self) -> impl Iterator<Item = &RedisServer> {
        self.sentinels
            .iter()
            .filter(|sentinel| !sentinel.is_stopped())
    }

    /// `Ok` once every sentinel knows the master, both replicas and both other sentinels.
    fn check_discovered(&self, master_port: u16) -> Result<(), String> {
        for sentinel in &self.sentinels {
            let port = sentinel.port();
            let reported = master_port_reported_by(port)?;
            if reported != master_port {
                return Err(format!(
                    "sentinel {port} reports master {reported}, not {master_port}"
                ));
            }
            let master: HashMap<String, String> =
                query_port(port, redis::cmd("SENTINEL").arg("MASTER").arg(MASTER_NAME))
                    .map_err(|err| format!("SENTINEL MASTER on sentinel {port} failed: {err}"))?;
            let flags = master.get("flags").map_or("", String::as_str);
            if flags != "master" {
                return Err(format!("sentinel {port} flags the master {flags:?}"));
            }
            for (what, expected) in [("REPLICAS", REPLICAS), ("SENTINELS", SENTINELS - 1)] {
                let peers: Vec<HashMap<String, String>> =
                    query_port(port, redis::cmd("SENTINEL").arg(what).arg(MASTER_NAME)).map_err(
                        |err| format!("SENTINEL {what} on sentinel {port} failed: {err}"),
                    )?;
                let healthy = peers
                    .iter()
                    .filter(|peer| {
                        let flags = peer.get("flags").map_or("", String::as_str);
                        !flags.contains("down") && !flags.contains("disconnected")
                    })
                    .count();
                if healthy != expected {
                    return Err(format!(
                        "sentinel {port} knows {healthy} healthy {} (of {} listed), not {expected}",
                        what.to_lowercase(),
                        peers.len()
                    ));
                }
            }
        }
        Ok(())
    }

    /// `Ok(port)` once every running sentinel reports the same new master and it is one.
    fn check_new_master(&self, old_master_port: u16) -> Result<u16, String> {
        let mut reported = None;
        for sentinel in self.running_sentinels() {
            let port = master_port_reported_by(sentinel.port())?;
            if port == old_master_port {
                return Err(format!(
                    "sentinel {} still reports the old master {port}",
                    sentinel.port()
                ));
            }
            match reported {
                Some(other) if other != port => {
                    return Err(format!("the sentinels disagree: {other} and {port}"));
                }
                _ => reported = Some(port),
            }
        }
        let port = reported.ok_or("every sentinel of the group was stopped")?;
        let role: Vec<redis::Value> = query_port(port, &redis::cmd("ROLE"))
            .map_err(|err| format!("ROLE on the new master {port} failed: {err}"))?;
        let role: Option<String> = role
            .first()
            .and_then(|value| redis::from_redis_value_ref(value).ok());
        if role.as_deref() != Some("master") {
            return Err(format!(
                "the new master {port} answers ROLE {role:?}, not master"
            ));
        }
        Ok(port)
    }

    /// The tail of every sentinel's and server's log, and what each sentinel reports.
    fn diagnostics(&self) -> String {
        let mut text = String::new();
        for sentinel in &self.sentinels {
            let masters: redis::RedisResult<redis::Value> =
                query_port(sentinel.port(), redis::cmd("SENTINEL").arg("MASTERS"));
            let _ = writeln!(
                text,
                "=== sentinel {} (SENTINEL MASTERS: {masters:?}) log:\n{}",
                sentinel.port(),
                tail(&sentinel.log(), LOG_LINES)
            );
        }
        for server in &self.servers {
            let _ = writeln!(
                text,
                "=== server {} log:\n{}",
                server.port(),
                tail(&server.log(), LOG_LINES)
            );
        }
        text
    }
}

/// Starts one sentinel monitoring the master on `master_port`, with its configuration
/// file (which the sentinel rewrites) in its own temporary directory.
fn start_sentinel(master_port: u16) -> RedisServer {
    let write_config = |dir: &Path, port: u16, log_path: &Path| -> Vec<OsString> {
        let config_path = dir.join("sentinel.conf");
        let config = format!(
            "port {port}\n\
             bind 127.0.0.1\n\
             protected-mode no\n\
             daemonize no\n\
             dir {dir}\n\
             logfile {log}\n\
             sentinel monitor {MASTER_NAME} 127.0.0.1 {master_port} 2\n\
             sentinel down-after-milliseconds {MASTER_NAME} 1000\n\
             sentinel failover-timeout {MASTER_NAME} 5000\n\
             sentinel parallel-syncs {MASTER_NAME} 1\n",
            dir = config_quote(dir),
            log = config_quote(log_path),
        );
        std::fs::write(&config_path, config).unwrap_or_else(|err| {
            panic!(
                "cannot write the sentinel configuration {}: {err}",
                config_path.display()
            )
        });
        vec![config_path.into(), "--sentinel".into()]
    };
    RedisServer::launch(&Launch {
        role: "redis-sentinel",
        description: format!("monitoring 127.0.0.1:{master_port}"),
        log_name: "sentinel.log",
        pick_port: &free_port,
        args: &write_config,
    })
}

/// A path as a double-quoted Redis configuration string.
pub(crate) fn config_quote(path: &Path) -> String {
    let text = path.to_str().unwrap_or_else(|| {
        panic!(
            "the temporary path {} is not UTF-8; set TMPDIR to a plain path",
            path.display()
        )
    });
    format!("\"{}\"", text.replace('\\', "\\\\").replace('"', "\\\""))
}

/// The master port reported by the sentinel on `sentinel_port`.
fn master_port_reported_by(sentinel_port: u16) -> Result<u16, String> {
    let addr: Option<(String, String)> = query_port(
        sentinel_port,
        redis::cmd("SENTINEL")
            .arg("GET-MASTER-ADDR-BY-NAME")
            .arg(MASTER_NAME),
    )
    .map_err(|err| {
        format!("SENTINEL GET-MASTER-ADDR-BY-NAME on sentinel {sentinel_port} failed: {err}")
    })?;
    let (_, port) =
        addr.ok_or_else(|| format!("sentinel {sentinel_port} knows no {MASTER_NAME}"))?;
    port.parse()
        .map_err(|_| format!("sentinel {sentinel_port} reports the master port {port:?}"))
}

/// Whether `SENTINEL FAILOVER` was refused for a reason that goes away by itself.
pub(crate) fn is_retryable_refusal(err: &redis::RedisError) -> bool {
    matches!(err.code(), Some("INPROG" | "NOGOODSLAVE"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn set(server: &RedisServer, key: &str, value: &str) -> redis::RedisResult<()> {
        redis::cmd("SET")
            .arg(key)
            .arg(value)
            .query(&mut server.connection())
    }

    fn get(server: &RedisServer, key: &str) -> Option<String> {
        redis::cmd("GET")
            .arg(key)
            .query(&mut server.connection())
            .unwrap()
    }

    #[test]
    fn sentinels_fail_over_on_demand_and_when_the_master_dies() {
        let started = Instant::now();
        let mut group = RedisSentinelGroup::start();
        eprintln!("sentinel group started in {:?}", started.elapsed());

        assert_eq!(group.master_name(), "mymaster");
        assert_eq!(group.sentinels().len(), 3);
        assert_eq!(group.servers().len(), 3);
        assert_eq!(
            group.sentinel_urls(),
            group
                .sentinel_addrs()
                .iter()
                .map(|addr| format!("redis://{addr}"))
                .collect::<Vec<_>>()
        );
        let first_master = group.current_master_port();
        assert_eq!(first_master, group.servers()[0].port());
        assert_eq!(group.master_server().port(), first_master);
        assert!(group.server_on_port(first_master).is_some());
        assert!(group.server_on_port(1).is_none());

        // Killing the master (once its write is replicated) makes the sentinels promote a
        // replica by themselves, without losing the write.
        set(group.master_server(), "first", "1").unwrap();
        group.wait_replicated();
        group.server_on_port_mut(first_master).unwrap().stop();
        let started = Instant::now();
        let second_master = group.wait_for_new_master(first_master);
        eprintln!("automatic sentinel failover took {:?}", started.elapsed());
        assert_ne!(second_master, first_master);
        assert_eq!(group.master_server().port(), second_master);
        assert_eq!(get(group.master_server(), "first").as_deref(), Some("1"));

        // A requested failover moves the master again, for every sentinel.
        let started = Instant::now();
        let third_master = group.failover();
        eprintln!("sentinel failover took {:?}", started.elapsed());
        assert_ne!(third_master, second_master);
        assert_ne!(third_master, first_master);
        assert_eq!(group.current_master_port(), third_master);
        for sentinel in group.sentinels() {
            assert_eq!(master_port_reported_by(sentinel.port()), Ok(third_master));
        }
        let master = group.master_server();
        assert_eq!(master.port(), third_master);
        set(master, "third", "3").unwrap();
        assert_eq!(
            get(master, "first").as_deref(),
            Some("1"),
            "a write was lost"
        );
    }
}
