//! A six-node Redis Cluster: three masters with one replica each.

use std::fmt::Write as _;
use std::io::{ErrorKind, Read, Seek};
use std::process::{Command, Stdio};
use std::thread;
use std::time::{Duration, Instant};

use crate::server::{cluster_port, info_field, query_port, tail, wait_until, CLUSTER_BUS_OFFSET};
use crate::RedisServer;

/// Environment variable naming the `redis-cli` binary to run instead of the one on `PATH`.
pub const REDIS_CLI_ENV: &str = "DLOCK_REDIS_CLI";

/// Number of hash slots of a Redis Cluster.
const SLOTS: u32 = 16_384;
/// Number of masters of the cluster.
const MASTERS: usize = 3;
/// Number of nodes of the cluster (each master has one replica).
const NODES: usize = 6;
/// `cluster-node-timeout` of every node, in milliseconds.
const NODE_TIMEOUT_MS: &str = "2000";
/// How long `redis-cli --cluster create` may run.
const CREATE_TIMEOUT: Duration = Duration::from_secs(30);
/// How long [`RedisCluster::start`] waits, after `redis-cli`, for every node to agree.
const FORM_TIMEOUT: Duration = Duration::from_secs(30);
/// How long [`RedisCluster::failover_slot`] waits for every node to agree on the new owner.
const FAILOVER_TIMEOUT: Duration = Duration::from_secs(15);
/// Log lines quoted per node in panic messages.
const LOG_LINES: usize = 30;
/// Node flags that mean the cluster is not settled.
const UNSETTLED_FLAGS: [&str; 4] = ["fail", "fail?", "handshake", "noaddr"];

/// A Redis Cluster of six `redis-server` nodes on `127.0.0.1` (three masters, one replica
/// each), every node in its own temporary directory with `cluster-node-timeout 2000`.
///
/// A node's port and its cluster bus port (port + 10000) are both taken below 32768, out
/// of Linux' default ephemeral range. The cluster is created with
/// `redis-cli --cluster create ... --cluster-replicas 1 --cluster-yes` (the
/// `DLOCK_REDIS_CLI` environment variable, else `redis-cli` from `PATH`).
/// [`RedisCluster::start`] returns once every node reports `cluster_state:ok` and all of
/// them agree on the owner of every slot and on the replicas. Dropping the cluster kills
/// every node, also while a failing test unwinds.
///
/// Which node masters a slot changes with failovers: ask
/// [`RedisCluster::slot_owner_port`] rather than remembering it. Queries go to the first
/// node that answers; waits require every node that was not
/// [`stop`](RedisServer::stop)ped to answer.
#[derive(Debug)]
pub struct RedisCluster {
    nodes: Vec<RedisServer>,
}

/// One line of `CLUSTER NODES`: a node as seen by the node that answered.
#[derive(Debug, Clone, PartialEq, Eq)]
struct NodeEntry {
    id: String,
    port: u16,
    flags: Vec<String>,
    /// The id of the master this node replicates, for a replica.
    master_id: Option<String>,
    /// Inclusive slot ranges served by this node (importing/migrating entries skipped).
    slots: Vec<(u16, u16)>,
}

impl NodeEntry {
    fn is_master(&self) -> bool {
        self.flags.iter().any(|flag| flag == "master")
    }

    fn is_unsettled(&self) -> bool {
        self.flags
            .iter()
            .any(|flag| UNSETTLED_FLAGS.contains(&flag.as_str()))
    }
}

/// The cluster as seen by one node (`CLUSTER NODES`).
#[derive(Debug)]
struct View {
    entries: Vec<NodeEntry>,
}

impl View {
    /// Parses a `CLUSTER NODES` reply.
    fn parse(text: &str) -> Result<View, String> {
        let entries = text
            .lines()
            .filter(|line| !line.trim().is_empty())
            .map(parse_node_line)
            .collect::<Result<_, _>>()?;
        Ok(View { entries })
    }

    fn by_id(&self, id: &str) -> Option<&NodeEntry> {
        self.entries.iter().find(|entry| entry.id == id)
    }

    /// The master serving `slot`.
    fn owner_of(&self, slot: u16) -> Option<&NodeEntry> {
        self.entries.iter().find(|entry| {
            entry.is_master()
                && entry
                    .slots
                    .iter()
                    .any(|&(first, last)| (first..=last).contains(&slot))
        })
    }

    /// Masters serving at least one slot.
    fn slot_masters(&self) -> impl Iterator<Item = &NodeEntry> {
        self.entries
            .iter()
            .filter(|entry| entry.is_master() && !entry.slots.is_empty())
    }

    fn replicas_of<'a>(&'a self, master: &'a NodeEntry) -> impl Iterator<Item = &'a NodeEntry> {
        self.entries
            .iter()
            .filter(move |entry| entry.master_id.as_deref() == Some(master.id.as_str()))
    }

    /// Slot ranges with their owner's port, sorted: the part every node must agree on.
    fn slot_map(&self) -> Vec<(u16, u16, u16)> {
        let mut map: Vec<(u16, u16, u16)> = self
            .slot_masters()
            .flat_map(|master| {
                master
                    .slots
                    .iter()
                    .map(move |&(first, last)| (first, last, master.port))
            })
            .collect();
        map.sort_unstable();
        map
    }

    /// `(replica port, master port)` pairs, sorted.
    fn replication_map(&self) -> Vec<(u16, Option<u16>)> {
        let mut map: Vec<(u16, Option<u16>)> = self
            .entries
            .iter()
            .filter(|entry| entry.master_id.is_some())
            .map(|entry| {
                let master = entry.master_id.as_deref().and_then(|id| self.by_id(id));
                (entry.port, master.map(|master| master.port))
            })
            .collect();
        map.sort_unstable();
        map
    }

    /// `Ok` if every slot is served by exactly one master.
    fn check_coverage(&self) -> Result<(), String> {
        let mut next: u32 = 0;
        for (first, last, port) in self.slot_map() {
            if u32::from(first) != next {
                return Err(format!(
                    "slot {next} is not served (next range {first}-{last} on {port})"
                ));
            }
            next = u32::from(last) + 1;
        }
        if next != SLOTS {
            return Err(format!("slots {next}-{} are not served", SLOTS - 1));
        }
        Ok(())
    }
}

impl RedisCluster {
    /// Starts six nodes in cluster mode, creates the cluster with
    /// `redis-cli --cluster create ... --cluster-replicas 1 --cluster-yes`, and waits
    /// until every node reports `cluster_state:ok` and lists all six nodes, all 16384
    /// slots are served by three masters with a replica each, no node is flagged failing
    /// or in handshake, and every node's `CLUSTER NODES` agrees on slot owners and
    /// replicas.
    ///
    /// # Panics
    ///
    /// If a node cannot be started, `redis-cli` cannot be run (the `DLOCK_REDIS_CLI`
    /// environment variable, else `redis-cli` from `PATH`), fails or runs longer than
    /// 30 seconds, or the nodes do not agree within 30 more seconds; the message quotes
    /// `redis-cli`'s output or every node's view and log.
    pub fn start() -> RedisCluster {
        let nodes = (0..NODES)
            .map(|_| {
                RedisServer::start_with_port_picker(
                    &cluster_port,
                    &[
                        "--cluster-enabled",
                        "yes",
                        "--cluster-config-file",
                        "nodes.conf",
                        "--cluster-node-timeout",
                        NODE_TIMEOUT_MS,
                    ],
                )
            })
            .collect();
        let cluster = RedisCluster { nodes };
        cluster.create();
        let started = Instant::now();
        if let Err(missing) = wait_until(FORM_TIMEOUT, || cluster.check_formed()) {
            panic!(
                "the cluster did not settle within {:?} after redis-cli: {missing}\n{}",
                started.elapsed(),
                cluster.diagnostics()
            );
        }
        cluster
    }

    /// The URLs of all six nodes, `redis://127.0.0.1:PORT`, masters and replicas alike.
    pub fn node_urls(&self) -> Vec<String> {
        self.nodes.iter().map(RedisServer::url).collect()
    }

    /// All six nodes, in start order.
    pub fn nodes(&self) -> &[RedisServer] {
        &self.nodes
    }

    /// The node listening on `port`, if any.
    pub fn node_on_port(&self, port: u16) -> Option<&RedisServer> {
        self.nodes.iter().find(|node| node.port() == port)
    }

    /// The node listening on `port`, if any, mutably (e.g. to
    /// [`stop`](RedisServer::stop) or [`pause`](RedisServer::pause) it).
    pub fn node_on_port_mut(&mut self, port: u16) -> Option<&mut RedisServer> {
        self.nodes.iter_mut().find(|node| node.port() == port)
    }

    /// The ports of the masters currently serving slots, sorted, per `CLUSTER NODES` on
    /// the first node that answers.
    ///
    /// # Panics
    ///
    /// If no node answers.
    pub fn master_ports(&self) -> Vec<u16> {
        let mut ports: Vec<u16> = self
            .any_view()
            .slot_masters()
            .map(|master| master.port)
            .collect();
        ports.sort_unstable();
        ports
    }

    /// The port of the master currently serving `slot`, per `CLUSTER NODES` on the first
    /// node that answers.
    ///
    /// # Panics
    ///
    /// If no node answers or none serves the slot (e.g. `slot` >= 16384).
    pub fn slot_owner_port(&self, slot: u16) -> u16 {
        let view = self.any_view();
        view.owner_of(slot)
            .unwrap_or_else(|| panic!("no master serves slot {slot}: {view:?}"))
            .port
    }

    /// The hash slot of `key` (`CLUSTER KEYSLOT` on the first node that answers).
    ///
    /// # Panics
    ///
    /// If no node answers.
    pub fn key_slot(&self, key: &str) -> u16 {
        self.query_any(redis::cmd("CLUSTER").arg("KEYSLOT").arg(key))
    }

    /// Runs `CLUSTER FAILOVER` on a replica of the master serving `slot`, then waits
    /// until that replica reports `role:master`, every node's `CLUSTER NODES` shows it
    /// serving `slot` and agrees on all slot owners, and every node reports
    /// `cluster_state:ok`; returns the new owner's port.
    ///
    /// # Panics
    ///
    /// If no node answers, the owner has no running replica, `CLUSTER FAILOVER` fails, or
    /// the failover is not observed everywhere within 15 seconds; the message quotes every
    /// node's view and log.
    pub fn failover_slot(&self, slot: u16) -> u16 {
        let view = self.any_view();
        let owner = view
            .owner_of(slot)
            .unwrap_or_else(|| panic!("no master serves slot {slot}: {view:?}"));
        let replica = view
            .replicas_of(owner)
            .find(|replica| {
                !replica.is_unsettled()
                    && self
                        .node_on_port(replica.port)
                        .is_some_and(|node| !node.is_stopped())
            })
            .unwrap_or_else(|| {
                panic!(
                    "master {} (slot {slot}) has no running replica: {view:?}",
                    owner.port
                )
            });
        let new_port = replica.port;
        if let Err(err) = query_port::<()>(new_port, redis::cmd("CLUSTER").arg("FAILOVER")) {
            panic!(
                "CLUSTER FAILOVER on replica {new_port} of master {} failed: {err}\n{}",
                owner.port,
                self.diagnostics()
            );
        }
        let started = Instant::now();
        if let Err(missing) = wait_until(FAILOVER_TIMEOUT, || self.check_moved(slot, new_port)) {
            panic!(
                "slot {slot} not moved from {} to {new_port} everywhere within {:?}: {missing}\n{}",
                owner.port,
                started.elapsed(),
                self.diagnostics()
            );
        }
        new_port
    }

    /// Runs `redis-cli --cluster create` and waits for it to exit.
    fn create(&self) {
        let binary = std::env::var(REDIS_CLI_ENV)
            .ok()
            .filter(|value| !value.trim().is_empty())
            .unwrap_or_else(|| "redis-cli".to_owned());
        let mut output = tempfile::tempfile().expect("cannot create a file for redis-cli's output");
        let stdout = output
            .try_clone()
            .expect("cannot duplicate redis-cli's output file handle");
        let stderr = output
            .try_clone()
            .expect("cannot duplicate redis-cli's output file handle");
        let mut command = Command::new(&binary);
        command
            .args(["--cluster", "create"])
            .args(
                self.nodes
                    .iter()
                    .map(|node| format!("127.0.0.1:{}", node.port())),
            )
            .args(["--cluster-replicas", "1", "--cluster-yes"])
            .stdin(Stdio::null())
            .stdout(stdout)
            .stderr(stderr);
        let mut child = match command.spawn() {
            Ok(child) => child,
            Err(err) if err.kind() == ErrorKind::NotFound => panic!(
                "cannot run `{binary}`: not found; install it with \
                 `apt-get install -y redis-tools` or point the {REDIS_CLI_ENV} environment \
                 variable at a redis-cli binary"
            ),
            Err(err) => panic!("cannot run `{binary}`: {err}"),
        };
        let mut read_output = || {
            let mut text = String::new();
            let _ = output.rewind();
            let _ = output.read_to_string(&mut text);
            text
        };
        let started = Instant::now();
        let status = loop {
            match child.try_wait() {
                Ok(Some(status)) => break status,
                Ok(None) if started.elapsed() < CREATE_TIMEOUT => {
                    thread::sleep(Duration::from_millis(50));
                }
                Ok(None) => {
                    let _ = child.kill();
                    let _ = child.wait();
                    panic!(
                        "`{binary} --cluster create` still running after {CREATE_TIMEOUT:?}, \
                         killed; its output:\n{}\n{}",
                        read_output(),
                        self.diagnostics()
                    );
                }
                Err(err) => panic!("cannot poll the redis-cli process: {err}"),
            }
        };
        if !status.success() {
            panic!(
                "`{binary} --cluster create` failed ({status}); its output:\n{}\n{}",
                read_output(),
                self.diagnostics()
            );
        }
    }

    fn running_nodes(&self) -> impl Iterator<Item = &RedisServer> {
        self.nodes.iter().filter(|node| !node.is_stopped())
    }

    /// The reply of the first running node that answers `cmd`.
    fn query_any<T: redis::FromRedisValue>(&self, cmd: &redis::Cmd) -> T {
        let mut errors = Vec::new();
        for node in self.running_nodes() {
            match query_port(node.port(), cmd) {
                Ok(value) => return value,
                Err(err) => errors.push(format!("{}: {err}", node.port())),
            }
        }
        let words: Vec<String> = cmd
            .args_iter()
            .map(|arg| match arg {
                redis::Arg::Simple(bytes) => String::from_utf8_lossy(bytes).into_owned(),
                _ => "?".to_owned(),
            })
            .collect();
        panic!(
            "no cluster node answers `{}`: {}",
            words.join(" "),
            errors.join("; ")
        );
    }

    /// `CLUSTER NODES` of the first running node that answers.
    fn any_view(&self) -> View {
        let text: String = self.query_any(redis::cmd("CLUSTER").arg("NODES"));
        View::parse(&text).unwrap_or_else(|err| panic!("{err}"))
    }

    /// `Ok` once the freshly created cluster is complete and settled on every node.
    fn check_formed(&self) -> Result<(), String> {
        let views = self.agreed_views()?;
        for (port, view) in &views {
            let known = view.entries.len();
            if known != NODES {
                return Err(format!("node {port} knows {known} nodes, not {NODES}"));
            }
            let masters: Vec<&NodeEntry> = view.slot_masters().collect();
            if masters.len() != MASTERS {
                return Err(format!(
                    "node {port} sees {} masters serving slots, not {MASTERS}",
                    masters.len()
                ));
            }
            if let Some(lonely) = masters
                .iter()
                .find(|master| view.replicas_of(master).next().is_none())
            {
                return Err(format!(
                    "node {port} sees master {} without a replica",
                    lonely.port
                ));
            }
        }
        Ok(())
    }

    /// `Ok` once `new_port` is a master and every running node agrees it serves `slot`.
    fn check_moved(&self, slot: u16, new_port: u16) -> Result<(), String> {
        let info: String = query_port(new_port, redis::cmd("INFO").arg("replication"))
            .map_err(|err| format!("INFO replication on {new_port} failed: {err}"))?;
        let role = info_field(&info, "role");
        if role != Some("master") {
            return Err(format!("node {new_port} reports role:{role:?}"));
        }
        let views = self.agreed_views()?;
        for (port, view) in &views {
            let owner = view.owner_of(slot).map(|owner| owner.port);
            if owner != Some(new_port) {
                return Err(format!(
                    "node {port} sees slot {slot} served by {owner:?}, not {new_port}"
                ));
            }
        }
        Ok(())
    }

    /// Every running node's view, once each reports `cluster_state:ok`, flags no node as
    /// failing or in handshake, sees every slot served, and all agree on slot owners and
    /// replicas.
    fn agreed_views(&self) -> Result<Vec<(u16, View)>, String> {
        let mut views: Vec<(u16, View)> = Vec::new();
        for node in self.running_nodes() {
            let port = node.port();
            let info: String = query_port(port, redis::cmd("CLUSTER").arg("INFO"))
                .map_err(|err| format!("CLUSTER INFO on {port} failed: {err}"))?;
            let state = info_field(&info, "cluster_state");
            if state != Some("ok") {
                return Err(format!("node {port} reports cluster_state:{state:?}"));
            }
            let text: String = query_port(port, redis::cmd("CLUSTER").arg("NODES"))
                .map_err(|err| format!("CLUSTER NODES on {port} failed: {err}"))?;
            let view = View::parse(&text)?;
            if let Some(entry) = view.entries.iter().find(|entry| entry.is_unsettled()) {
                return Err(format!(
                    "node {port} flags node {} as {:?}",
                    entry.port, entry.flags
                ));
            }
            view.check_coverage()
                .map_err(|missing| format!("node {port}: {missing}"))?;
            if let Some((first_port, first)) = views.first() {
                if view.slot_map() != first.slot_map() {
                    return Err(format!(
                        "nodes {first_port} and {port} disagree on slot owners: {:?} vs {:?}",
                        first.slot_map(),
                        view.slot_map()
                    ));
                }
                if view.replication_map() != first.replication_map() {
                    return Err(format!(
                        "nodes {first_port} and {port} disagree on replicas: {:?} vs {:?}",
                        first.replication_map(),
                        view.replication_map()
                    ));
                }
            }
            views.push((port, view));
        }
        if views.is_empty() {
            return Err("every node of the cluster was stopped".to_owned());
        }
        Ok(views)
    }

    /// Every node's `CLUSTER NODES` and log tail, for panic messages.
    fn diagnostics(&self) -> String {
        let mut text = String::new();
        for node in &self.nodes {
            let port = node.port();
            let view = if node.is_stopped() {
                "(stopped)".to_owned()
            } else {
                match query_port::<String>(port, redis::cmd("CLUSTER").arg("NODES")) {
                    Ok(view) => view,
                    Err(err) => format!("(CLUSTER NODES failed: {err})"),
                }
            };
            let _ = writeln!(
                text,
                "=== node {port} (bus {}) CLUSTER NODES:\n{}\n--- log:\n{}",
                u32::from(port) + u32::from(CLUSTER_BUS_OFFSET),
                view.trim_end(),
                tail(&node.log(), LOG_LINES)
            );
        }
        text
    }
}

/// Parses one `CLUSTER NODES` line:
/// `<id> <ip:port@cport[,hostname]> <flags> <master> <ping-sent> <pong-recv> <epoch>
/// <link-state> <slot> ...`.
fn parse_node_line(line: &str) -> Result<NodeEntry, String> {
    let bad = |what: &str| format!("bad CLUSTER NODES line ({what}): {line:?}");
    let fields: Vec<&str> = line.split_whitespace().collect();
    if fields.len() < 8 {
        return Err(bad("fewer than 8 fields"));
    }
    let address = fields[1].split(['@', ',']).next().unwrap_or_default();
    let port = address
        .rsplit_once(':')
        .and_then(|(_, port)| port.parse().ok())
        .ok_or_else(|| bad("address"))?;
    let master_id = (fields[3] != "-").then(|| fields[3].to_owned());
    let mut slots = Vec::new();
    // `[slot->-id]` / `[slot-<-id]` entries are migrations in progress, not ownership.
    for range in fields[8..].iter().filter(|field| !field.starts_with('[')) {
        let (first, last) = range.split_once('-').unwrap_or((range, range));
        let first = first.parse().map_err(|_| bad("slot"))?;
        let last = last.parse().map_err(|_| bad("slot"))?;
        slots.push((first, last));
    }
    Ok(NodeEntry {
        id: fields[0].to_owned(),
        port,
        flags: fields[2].split(',').map(str::to_owned).collect(),
        master_id,
        slots,
    })
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeSet;

    use super::*;

    /// The distinct ports in `ports`, sorted.
    fn sorted(ports: impl IntoIterator<Item = u16>) -> Vec<u16> {
        ports
            .into_iter()
            .collect::<BTreeSet<_>>()
            .into_iter()
            .collect()
    }

    #[test]
    fn parses_cluster_nodes_lines() {
        let view = View::parse(
            "07c3 127.0.0.1:30004@40004,host4 slave e7d1 0 1426238317239 4 connected\n\
             e7d1 127.0.0.1:30001@40001 myself,master - 0 0 1 connected 0-5460 [5461->-67ed]\n\
             67ed 127.0.0.1:30002@40002 master - 0 1426238316232 2 connected 5461-16383\n",
        )
        .unwrap();
        assert_eq!(view.entries.len(), 3);
        assert_eq!(view.entries[0].port, 30004);
        assert_eq!(view.entries[0].master_id.as_deref(), Some("e7d1"));
        assert_eq!(view.entries[1].slots, [(0, 5460)]);
        assert!(view.entries[1].is_master());
        assert_eq!(view.owner_of(5461).map(|owner| owner.port), Some(30002));
        assert_eq!(view.owner_of(0).map(|owner| owner.port), Some(30001));
        assert_eq!(view.replication_map(), [(30004, Some(30001))], "{view:?}");
        assert_eq!(view.check_coverage(), Ok(()));
        let partial =
            View::parse("e7d1 127.0.0.1:30001@40001 master - 0 0 1 connected 1-16383").unwrap();
        assert!(partial.check_coverage().is_err());
        assert!(View::parse("nonsense").is_err());
    }

    fn set_and_get(cluster: &RedisCluster, key: &str, value: &str) {
        let slot = cluster.key_slot(key);
        let owner = cluster.slot_owner_port(slot);
        let node = cluster
            .node_on_port(owner)
            .expect("the owner is one of our nodes");
        let mut connection = node.connection();
        let () = redis::cmd("SET")
            .arg(key)
            .arg(value)
            .query(&mut connection)
            .unwrap_or_else(|err| panic!("SET {key} on owner {owner} of slot {slot}: {err}"));
        let read: Option<String> = redis::cmd("GET").arg(key).query(&mut connection).unwrap();
        assert_eq!(read.as_deref(), Some(value));
    }

    #[test]
    fn keys_live_on_their_slot_owner_and_failover_moves_ownership() {
        let started = Instant::now();
        let cluster = RedisCluster::start();
        eprintln!("cluster started in {:?}", started.elapsed());

        assert_eq!(cluster.nodes().len(), 6);
        assert_eq!(cluster.node_urls().len(), 6);
        let all_ports = sorted(cluster.nodes().iter().map(RedisServer::port));
        assert_eq!(all_ports.len(), 6, "two nodes share a port");
        for &port in &all_ports {
            assert!(port <= 55_535, "bus port of {port} out of range");
        }
        let masters = cluster.master_ports();
        assert_eq!(masters.len(), 3, "{masters:?}");

        // Keys spread over the masters; each is written on its slot's owner.
        let keys = ["alpha", "bravo", "charlie", "delta", "echo", "foxtrot"];
        let owners = sorted(
            keys.iter()
                .map(|key| cluster.slot_owner_port(cluster.key_slot(key))),
        );
        assert!(owners.len() >= 2, "all keys on one master: {owners:?}");
        for key in keys {
            set_and_get(&cluster, key, "before");
        }

        // A non-owner redirects instead of answering.
        let slot = cluster.key_slot("alpha");
        let owner = cluster.slot_owner_port(slot);
        let other = masters.iter().find(|&&port| port != owner).unwrap();
        let redirected: redis::RedisResult<Option<String>> = redis::cmd("GET")
            .arg("alpha")
            .query(&mut cluster.node_on_port(*other).unwrap().connection());
        let err = redirected.expect_err("a non-owner answered GET");
        assert_eq!(err.code(), Some("MOVED"), "{err}");

        let started = Instant::now();
        let new_owner = cluster.failover_slot(slot);
        eprintln!("cluster failover took {:?}", started.elapsed());
        assert_ne!(new_owner, owner);
        assert_eq!(cluster.slot_owner_port(slot), new_owner);
        let new_masters = cluster.master_ports();
        assert_eq!(new_masters.len(), 3, "{new_masters:?}");
        assert!(new_masters.contains(&new_owner), "{new_masters:?}");
        assert!(!new_masters.contains(&owner), "{new_masters:?}");

        // The replica had the data, and the new owner takes writes.
        let mut connection = cluster.node_on_port(new_owner).unwrap().connection();
        let read: Option<String> = redis::cmd("GET")
            .arg("alpha")
            .query(&mut connection)
            .unwrap();
        assert_eq!(read.as_deref(), Some("before"), "the failover lost a write");
        set_and_get(&cluster, "alpha", "after");

        // The old owner became the new owner's replica: failing over again moves the slot
        // back.
        let started = Instant::now();
        assert_eq!(cluster.failover_slot(slot), owner);
        eprintln!("second cluster failover took {:?}", started.elapsed());
        assert_eq!(cluster.slot_owner_port(slot), owner);
        set_and_get(&cluster, "alpha", "again");
    }
}
