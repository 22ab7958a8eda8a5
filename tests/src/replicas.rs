//! A master with replicas: throw-away `redis-server` processes replicating from one master.

use std::fmt::Write as _;
use std::time::{Duration, Instant};

use crate::server::{info_field, query_port, wait_until};
use crate::RedisServer;

/// How long [`RedisReplicaSet::start`] waits for every replica to be in sync.
const SYNC_TIMEOUT: Duration = Duration::from_secs(20);
/// How long [`RedisReplicaSet::wait_replicated`] waits for the replicas to catch up.
const CATCH_UP_TIMEOUT: Duration = Duration::from_secs(5);

/// A master [`RedisServer`] and replicas started with `--replicaof 127.0.0.1 <master-port>`,
/// every process on its own free `127.0.0.1` port and in its own temporary directory.
///
/// [`RedisReplicaSet::start`] returns once every replica's link to the master is up.
/// Dropping the set kills every process (each [`RedisServer`] kills its own), also while a
/// failing test unwinds.
///
/// ```
/// use dlock_tests::RedisReplicaSet;
///
/// let set = RedisReplicaSet::start(1);
/// let mut master = set.master.connection();
/// let () = redis::cmd("SET").arg("k").arg("v").query(&mut master).unwrap();
/// set.wait_replicated();
/// let mut replica = set.replicas[0].connection();
/// let value: String = redis::cmd("GET").arg("k").query(&mut replica).unwrap();
/// assert_eq!(value, "v");
/// ```
#[derive(Debug)]
pub struct RedisReplicaSet {
    /// The server the replicas replicate from.
    pub master: RedisServer,
    /// The replicas, in start order.
    pub replicas: Vec<RedisServer>,
}

impl RedisReplicaSet {
    /// Starts a master and `replicas` replicas of it, and waits until the master's
    /// `INFO replication` shows `connected_slaves:<replicas>`, every replica shows
    /// `master_link_status:up`, and every replica confirms a write to `WAIT`.
    ///
    /// # Panics
    ///
    /// If a server cannot be started (see [`RedisServer::start`]) or the replicas are not
    /// in sync within 20 seconds; the message quotes every server's log.
    pub fn start(replicas: usize) -> RedisReplicaSet {
        let master = RedisServer::start();
        let master_port = master.port().to_string();
        let replicas = (0..replicas)
            .map(|_| RedisServer::start_with(&["--replicaof", "127.0.0.1", &master_port]))
            .collect();
        let set = RedisReplicaSet { master, replicas };
        let started = Instant::now();
        if let Err(missing) = wait_until(SYNC_TIMEOUT, || set.check_in_sync()) {
            panic!(
                "replicas not in sync with master 127.0.0.1:{master_port} after {:?}: {missing}\n{}",
                started.elapsed(),
                set.diagnostics()
            );
        }
        set
    }

    /// The master's URL, `redis://127.0.0.1:PORT`.
    pub fn master_url(&self) -> String {
        self.master.url()
    }

    /// The replicas' URLs, `redis://127.0.0.1:PORT`, in start order.
    pub fn replica_urls(&self) -> Vec<String> {
        self.replicas.iter().map(RedisServer::url).collect()
    }

    /// Cuts every replica off: paused (`SIGSTOP`) and its link killed, so that nothing the
    /// master accepts from now on is confirmed by `WAIT` until the replicas are resumed.
    pub fn cut_off_replicas(&self) {
        for replica in &self.replicas {
            replica.pause();
        }
        self.master.kill_replica_links();
    }

    /// Waits until every replica has applied everything the master has accepted so far:
    /// each replica's `slave_repl_offset` reaches the master's `master_repl_offset` as read
    /// at the call.
    ///
    /// (`WAIT` is not used: it only waits for the writes of the connection it is sent on.)
    ///
    /// # Panics
    ///
    /// If a server does not answer or a replica lags behind for more than 5 seconds.
    pub fn wait_replicated(&self) {
        let target = repl_offset(self.master.port(), "master_repl_offset")
            .unwrap_or_else(|err| panic!("{err}\n{}", self.diagnostics()));
        let started = Instant::now();
        let caught_up = wait_until(CATCH_UP_TIMEOUT, || {
            for replica in &self.replicas {
                let offset = repl_offset(replica.port(), "slave_repl_offset")?;
                if offset < target {
                    return Err(format!(
                        "replica {} is at offset {offset}, the master was at {target}",
                        replica.port()
                    ));
                }
            }
            Ok(())
        });
        if let Err(lag) = caught_up {
            panic!(
                "the replicas did not catch up within {:?}: {lag}\n{}",
                started.elapsed(),
                self.diagnostics()
            );
        }
    }

    /// `Ok` once the master sees every replica and every replica's link is up, else what
    /// is still missing.
    fn check_in_sync(&self) -> Result<(), String> {
        let info: String = query_port(self.master.port(), redis::cmd("INFO").arg("replication"))
            .map_err(|err| format!("INFO replication on the master failed: {err}"))?;
        let connected = info_field(&info, "connected_slaves");
        if connected != Some(&self.replicas.len().to_string()) {
            return Err(format!("master reports connected_slaves:{connected:?}"));
        }
        for replica in &self.replicas {
            let info: String = query_port(replica.port(), redis::cmd("INFO").arg("replication"))
                .map_err(|err| {
                    format!(
                        "INFO replication on replica {} failed: {err}",
                        replica.port()
                    )
                })?;
            let link = info_field(&info, "master_link_status");
            if link != Some("up") {
                return Err(format!(
                    "replica {} reports master_link_status:{link:?}",
                    replica.port()
                ));
            }
        }
        self.check_streaming()
    }

    /// `Ok` once every replica confirms a write by `WAIT`. A replica whose link is up may
    /// not be streamed the master's writes yet: after a diskless sync the master holds
    /// them back until the replica's first `REPLCONF ACK`, sent up to a second later, so
    /// a test's first `WAIT` could time out. (`PUBLISH` is propagated, and leaves no key.)
    fn check_streaming(&self) -> Result<(), String> {
        let wanted = self.replicas.len();
        let (_, confirmed): (u64, usize) = redis::pipe()
            .cmd("PUBLISH")
            .arg("dlock-tests:replication-check")
            .arg("")
            .cmd("WAIT")
            .arg(wanted)
            .arg(100)
            .query(&mut self.master.connection())
            .map_err(|err| format!("PUBLISH and WAIT on the master failed: {err}"))?;
        if confirmed < wanted {
            return Err(format!(
                "WAIT saw {confirmed} of {wanted} replicas confirm a write"
            ));
        }
        Ok(())
    }

    /// Every server's log, for panic messages.
    fn diagnostics(&self) -> String {
        let mut text = format!(
            "master {}:\n{}\n",
            self.master.port(),
            self.master.diagnostics()
        );
        for replica in &self.replicas {
            let _ = writeln!(
                text,
                "replica {}:\n{}",
                replica.port(),
                replica.diagnostics()
            );
        }
        text
    }
}

/// A replication offset field of `INFO replication` on the server at `port`.
pub(crate) fn repl_offset(port: u16, field: &str) -> Result<u64, String> {
    let info: String = query_port(port, redis::cmd("INFO").arg("replication"))
        .map_err(|err| format!("INFO replication on {port} failed: {err}"))?;
    info_field(&info, field)
        .and_then(|offset| offset.parse().ok())
        .ok_or_else(|| format!("INFO replication on {port} has no numeric {field}: {info}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn info_replication(server: &RedisServer) -> String {
        redis::cmd("INFO")
            .arg("replication")
            .query(&mut server.connection())
            .unwrap()
    }

    #[test]
    fn a_write_reaches_every_replica() {
        let set = RedisReplicaSet::start(2);
        assert_eq!(set.replicas.len(), 2);
        assert_eq!(set.master_url(), set.master.url());
        assert_eq!(
            set.replica_urls(),
            [set.replicas[0].url(), set.replicas[1].url()]
        );
        assert_eq!(
            info_field(&info_replication(&set.master), "role"),
            Some("master")
        );
        for replica in &set.replicas {
            let info = info_replication(replica);
            assert_eq!(info_field(&info, "role"), Some("slave"), "{info}");
            assert_eq!(
                info_field(&info, "master_port"),
                Some(set.master.port().to_string().as_str()),
                "{info}"
            );
        }

        let () = redis::cmd("SET")
            .arg("replicated-key")
            .arg("replicated-value")
            .query(&mut set.master.connection())
            .unwrap();
        set.wait_replicated();
        for replica in &set.replicas {
            let mut connection = replica.connection();
            let value: Option<String> = redis::cmd("GET")
                .arg("replicated-key")
                .query(&mut connection)
                .unwrap();
            assert_eq!(
                value.as_deref(),
                Some("replicated-value"),
                "{}",
                replica.url()
            );
            // Replicas are read-only.
            let write: redis::RedisResult<()> = redis::cmd("SET")
                .arg("other-key")
                .arg("x")
                .query(&mut connection);
            let err = write.expect_err("a replica accepted a write");
            assert_eq!(err.code(), Some("READONLY"), "{err}");
        }
    }
}
