//! TLS fixtures: a throw-away certificate authority with a server certificate for
//! `127.0.0.1` and a client certificate (made with the `openssl` command), a Sentinel
//! group whose servers and sentinel answer clients only over TLS, and a cluster whose
//! nodes do; both check client certificates.

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use crate::sentinel::{config_quote, is_retryable_refusal};
use crate::server::{free_port, info_field, query_port, tail, wait_until, Launch};
use crate::RedisServer;

/// The name the sentinel of a [`TlsSentinelGroup`] monitors the master under.
const MASTER_NAME: &str = "mymaster";
/// How long [`TlsSentinelGroup::start`] waits for replication and discovery.
const READY_TIMEOUT: Duration = Duration::from_secs(20);
/// How long [`TlsSentinelGroup::failover`] waits for the new master.
const FAILOVER_TIMEOUT: Duration = Duration::from_secs(15);
/// Log lines quoted per process in panic messages.
const LOG_LINES: usize = 40;

/// A certificate authority (`ca.pem`, `ca.key`), a server certificate for `127.0.0.1`
/// (`server.pem`, `server.key`) and a client certificate (`client.pem`, `client.key`)
/// it signed, in a temporary directory deleted when dropped.
///
/// # Panics
///
/// The constructors panic when `openssl` is missing or fails (`apt-get install -y
/// openssl`), quoting its complaint.
#[derive(Debug)]
pub struct TestCertificates {
    dir: tempfile::TempDir,
}

impl TestCertificates {
    /// Makes the CA, the server and the client certificate (RSA 2048, valid for two
    /// days).
    pub fn new() -> TestCertificates {
        let dir = tempfile::tempdir().expect("a temporary directory for certificates");
        let certificates = TestCertificates { dir };
        certificates.make_ca("ca");
        certificates.sign("server", "/CN=127.0.0.1", "subjectAltName=IP:127.0.0.1");
        certificates.sign(
            "client",
            "/CN=dlock test client",
            "extendedKeyUsage=clientAuth",
        );
        certificates
    }

    /// A key `<name>.key` and a certificate `<name>.pem` for `subject` with the X.509
    /// extension `extension`, signed by the CA.
    fn sign(&self, name: &str, subject: &str, extension: &str) {
        let path = self.dir();
        let (key, csr, pem, ext) = (
            format!("{name}.key"),
            format!("{name}.csr"),
            format!("{name}.pem"),
            format!("{name}.ext"),
        );
        std::fs::write(path.join(&ext), format!("{extension}\n"))
            .unwrap_or_else(|err| panic!("writing {ext}: {err}"));
        openssl(
            path,
            &[
                "req", "-newkey", "rsa:2048", "-nodes", "-keyout", &key, "-out", &csr, "-subj",
                subject,
            ],
        );
        openssl(
            path,
            &[
                "x509",
                "-req",
                "-in",
                &csr,
                "-CA",
                "ca.pem",
                "-CAkey",
                "ca.key",
                "-CAcreateserial",
                "-out",
                &pem,
                "-days",
                "2",
                "-extfile",
                &ext,
            ],
        );
    }

    /// The client certificate and its key, PEM, as
    /// `Topology::tls_client_certificate` takes them.
    pub fn client_certificate(&self) -> (Vec<u8>, Vec<u8>) {
        let read = |file: &str| {
            std::fs::read(self.path(file)).unwrap_or_else(|err| panic!("reading {file}: {err}"))
        };
        (read("client.pem"), read("client.key"))
    }

    /// Another self-signed CA, `<name>.pem` and `<name>.key`, which signed nothing.
    pub fn make_ca(&self, name: &str) {
        let key = format!("{name}.key");
        let pem = format!("{name}.pem");
        let subject = format!("/CN=dlock test CA {name}");
        openssl(
            self.dir(),
            &[
                "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", &key, "-out", &pem,
                "-days", "2", "-subj", &subject,
            ],
        );
    }

    /// The directory holding the files.
    pub fn dir(&self) -> &Path {
        self.dir.path()
    }

    /// The path of `file` in [`dir`](TestCertificates::dir).
    pub fn path(&self, file: &str) -> PathBuf {
        self.dir().join(file)
    }

    /// `redis-server` arguments for a TLS port `tls_port` with the server certificate,
    /// trusting this CA; `check_clients` asks every client for a certificate this CA
    /// signed (`tls-auth-clients yes`), else none is asked for.
    pub fn server_args(&self, tls_port: u16, check_clients: bool) -> Vec<String> {
        let file = |name: &str| self.path(name).display().to_string();
        vec![
            "--tls-port".to_owned(),
            tls_port.to_string(),
            "--tls-cert-file".to_owned(),
            file("server.pem"),
            "--tls-key-file".to_owned(),
            file("server.key"),
            "--tls-ca-cert-file".to_owned(),
            file("ca.pem"),
            "--tls-auth-clients".to_owned(),
            if check_clients { "yes" } else { "no" }.to_owned(),
        ]
    }
}

impl Default for TestCertificates {
    fn default() -> Self {
        TestCertificates::new()
    }
}

/// Runs `openssl` with `args` in `dir`.
fn openssl(dir: &Path, args: &[&str]) {
    let output = Command::new("openssl")
        .args(args)
        .current_dir(dir)
        .output()
        .expect("openssl must be installed (apt-get install -y openssl)");
    assert!(
        output.status.success(),
        "openssl {args:?}: {}",
        String::from_utf8_lossy(&output.stderr)
    );
}

/// One data server of a [`TlsSentinelGroup`]: the plain port the harness administers it
/// on, and the TLS port the sentinel reports to clients.
#[derive(Debug)]
struct TlsNode {
    server: RedisServer,
    tls_port: u16,
}

/// A master and one replica monitored by one sentinel (quorum 1) as `mymaster`, on free
/// `127.0.0.1` ports, speaking TLS with a [`TestCertificates`] certificate.
///
/// Every process also keeps a plain port for the harness; what a client learns is TLS
/// only: replication runs over TLS (`tls-replication yes`), so the replica announces its
/// TLS port, and the sentinel monitors the TLS ports. A client that reaches the master
/// through the sentinel by the reported address therefore has to speak TLS to it, with a
/// CA that trusts the certificate. Every TLS port, the sentinel's included, asks clients
/// for a certificate the CA signed ([`TestCertificates::client_certificate`]).
///
/// Dropping the group kills the sentinel first, then the servers.
#[derive(Debug)]
pub struct TlsSentinelGroup {
    // Dropped first: it must not start a failover while the servers are killed.
    sentinel: RedisServer,
    sentinel_tls_port: u16,
    nodes: Vec<TlsNode>,
    certificates: TestCertificates,
}

impl TlsSentinelGroup {
    /// Starts the master, the replica (waiting until its link is up) and the sentinel
    /// (waiting until it reports the master and a healthy replica, by their TLS ports).
    ///
    /// # Panics
    ///
    /// If a process cannot start or the group is not ready within 20 seconds; the message
    /// quotes every log.
    pub fn start() -> TlsSentinelGroup {
        let certificates = TestCertificates::new();
        let start_node = |replica_of: Option<u16>| {
            let tls_port = free_port();
            let mut args = certificates.server_args(tls_port, true);
            args.extend(["--tls-replication".to_owned(), "yes".to_owned()]);
            if let Some(master) = replica_of {
                args.extend([
                    "--replicaof".to_owned(),
                    "127.0.0.1".to_owned(),
                    master.to_string(),
                ]);
            }
            let args: Vec<&str> = args.iter().map(String::as_str).collect();
            TlsNode {
                server: RedisServer::start_with(&args),
                tls_port,
            }
        };
        let master = start_node(None);
        let replica = start_node(Some(master.tls_port));
        let sentinel_tls_port = free_port();
        let sentinel = start_tls_sentinel(&certificates, sentinel_tls_port, master.tls_port);
        let group = TlsSentinelGroup {
            sentinel,
            sentinel_tls_port,
            nodes: vec![master, replica],
            certificates,
        };
        let started = Instant::now();
        if let Err(missing) = wait_until(READY_TIMEOUT, || group.check_ready()) {
            panic!(
                "the TLS sentinel group was not ready within {:?}: {missing}\n{}",
                started.elapsed(),
                group.diagnostics()
            );
        }
        group
    }

    /// The name the sentinel monitors the master under: `"mymaster"`.
    pub fn master_name(&self) -> &str {
        MASTER_NAME
    }

    /// The sentinel's TLS URL, `rediss://127.0.0.1:PORT`.
    pub fn sentinel_tls_url(&self) -> String {
        format!("rediss://127.0.0.1:{}", self.sentinel_tls_port)
    }

    /// The certificates every process uses (`ca.pem` is the CA to trust).
    pub fn certificates(&self) -> &TestCertificates {
        &self.certificates
    }

    /// The TLS port of the master, as the sentinel reports it.
    ///
    /// # Panics
    ///
    /// If the sentinel does not answer.
    pub fn master_tls_port(&self) -> u16 {
        self.reported_master()
            .unwrap_or_else(|err| panic!("{err}\n{}", self.diagnostics()))
    }

    /// The master, to administer on its plain port.
    ///
    /// # Panics
    ///
    /// If the sentinel does not answer or reports a port of no server of the group.
    pub fn master_server(&self) -> &RedisServer {
        let port = self.master_tls_port();
        &self
            .nodes
            .iter()
            .find(|node| node.tls_port == port)
            .unwrap_or_else(|| panic!("the sentinel reports master port {port}, not ours"))
            .server
    }

    /// Sends `SENTINEL FAILOVER mymaster` (retrying the sentinel's temporary refusals)
    /// and waits until the sentinel reports the other server, which answers `ROLE` as a
    /// master; returns its TLS port.
    ///
    /// # Panics
    ///
    /// If that does not happen within 15 seconds; the message quotes every log.
    pub fn failover(&self) -> u16 {
        let old = self.master_tls_port();
        let started = Instant::now();
        let moved = wait_until(FAILOVER_TIMEOUT, || {
            match query_port::<()>(
                self.sentinel.port(),
                redis::cmd("SENTINEL").arg("FAILOVER").arg(MASTER_NAME),
            ) {
                Ok(()) => Ok(()),
                Err(err) if is_retryable_refusal(&err) => Err(err.to_string()),
                Err(err) => panic!("SENTINEL FAILOVER failed: {err}\n{}", self.diagnostics()),
            }
        })
        .and_then(|()| {
            wait_until(FAILOVER_TIMEOUT, || {
                let port = self.reported_master()?;
                if port == old {
                    return Err(format!("the sentinel still reports {port}"));
                }
                let node = self
                    .nodes
                    .iter()
                    .find(|node| node.tls_port == port)
                    .ok_or_else(|| format!("the sentinel reports {port}, not ours"))?;
                let info: String =
                    query_port(node.server.port(), redis::cmd("INFO").arg("replication"))
                        .map_err(|err| format!("INFO on the new master failed: {err}"))?;
                match info_field(&info, "role") {
                    Some("master") => Ok(port),
                    role => Err(format!("the new master {port} has role {role:?}")),
                }
            })
        });
        moved.unwrap_or_else(|missing| {
            panic!(
                "no failover from {old} after {:?}: {missing}\n{}",
                started.elapsed(),
                self.diagnostics()
            )
        })
    }

    /// The master's TLS port according to the sentinel.
    fn reported_master(&self) -> Result<u16, String> {
        let address: Option<(String, u16)> = query_port(
            self.sentinel.port(),
            redis::cmd("SENTINEL")
                .arg("GET-MASTER-ADDR-BY-NAME")
                .arg(MASTER_NAME),
        )
        .map_err(|err| format!("SENTINEL GET-MASTER-ADDR-BY-NAME failed: {err}"))?;
        address
            .map(|(_, port)| port)
            .ok_or_else(|| format!("the sentinel knows no {MASTER_NAME}"))
    }

    /// `Ok` once the replica's link is up and the sentinel reports the master and one
    /// healthy replica by their TLS ports.
    fn check_ready(&self) -> Result<(), String> {
        let replica = &self.nodes[1];
        let info: String = query_port(replica.server.port(), redis::cmd("INFO").arg("replication"))
            .map_err(|err| format!("INFO on the replica failed: {err}"))?;
        if info_field(&info, "master_link_status") != Some("up") {
            return Err("the replica's link to the master is not up".to_owned());
        }
        let master = self.reported_master()?;
        if master != self.nodes[0].tls_port {
            return Err(format!("the sentinel reports master {master}"));
        }
        let replicas: Vec<std::collections::HashMap<String, String>> = query_port(
            self.sentinel.port(),
            redis::cmd("SENTINEL").arg("REPLICAS").arg(MASTER_NAME),
        )
        .map_err(|err| format!("SENTINEL REPLICAS failed: {err}"))?;
        let healthy = replicas.iter().any(|peer| {
            let flags = peer.get("flags").map_or("", String::as_str);
            peer.get("port") == Some(&replica.tls_port.to_string())
                && !flags.contains("down")
                && !flags.contains("disconnected")
        });
        if !healthy {
            return Err(format!(
                "the sentinel lists no healthy replica on TLS port {}: {replicas:?}",
                replica.tls_port
            ));
        }
        Ok(())
    }

    fn diagnostics(&self) -> String {
        let mut text = format!(
            "=== sentinel (TLS port {}) log:\n{}\n",
            self.sentinel_tls_port,
            tail(&self.sentinel.log(), LOG_LINES)
        );
        for node in &self.nodes {
            text.push_str(&format!(
                "=== server (TLS port {}) log:\n{}\n",
                node.tls_port,
                tail(&node.server.log(), LOG_LINES)
            ));
        }
        text
    }
}

/// Starts a sentinel answering on a plain port (for the harness) and on `tls_port`,
/// monitoring the master on TLS port `master_tls_port` over TLS with quorum 1.
fn start_tls_sentinel(
    certificates: &TestCertificates,
    tls_port: u16,
    master_tls_port: u16,
) -> RedisServer {
    let file = |name: &str| config_quote(&certificates.path(name));
    let write_config = |dir: &Path, port: u16, log_path: &Path| -> Vec<OsString> {
        let config_path = dir.join("sentinel.conf");
        let config = format!(
            "port {port}\n\
             tls-port {tls_port}\n\
             tls-cert-file {cert}\n\
             tls-key-file {key}\n\
             tls-ca-cert-file {ca}\n\
             tls-auth-clients yes\n\
             tls-replication yes\n\
             bind 127.0.0.1\n\
             protected-mode no\n\
             daemonize no\n\
             dir {dir}\n\
             logfile {log}\n\
             sentinel monitor {MASTER_NAME} 127.0.0.1 {master_tls_port} 1\n\
             sentinel down-after-milliseconds {MASTER_NAME} 1000\n\
             sentinel failover-timeout {MASTER_NAME} 5000\n",
            cert = file("server.pem"),
            key = file("server.key"),
            ca = file("ca.pem"),
            dir = config_quote(dir),
            log = config_quote(log_path),
        );
        std::fs::write(&config_path, config).unwrap_or_else(|err| {
            panic!("cannot write {}: {err}", config_path.display());
        });
        vec![config_path.into(), "--sentinel".into()]
    };
    RedisServer::launch(&Launch {
        role: "redis-sentinel",
        description: format!("over TLS, monitoring TLS port {master_tls_port}"),
        log_name: "sentinel.log",
        pick_port: &free_port,
        args: &write_config,
    })
}

/// Masters of a [`TlsCluster`].
const CLUSTER_MASTERS: usize = 3;

/// A three-master Redis Cluster (no replicas) whose clients and cluster bus speak TLS
/// with a [`TestCertificates`] certificate, on free `127.0.0.1` ports.
///
/// With `tls-cluster yes` the nodes announce their TLS ports, so a client learns only TLS
/// addresses from `CLUSTER SLOTS`; each node keeps a plain port that only the harness
/// uses. Created with `redis-cli --cluster create --tls`. The TLS ports ask clients for a
/// certificate the CA signed ([`TestCertificates::client_certificate`]).
#[derive(Debug)]
pub struct TlsCluster {
    nodes: Vec<TlsNode>,
    certificates: TestCertificates,
}

impl TlsCluster {
    /// Starts the three nodes, creates the cluster and waits until every node reports
    /// `cluster_state:ok` with all three nodes known.
    ///
    /// # Panics
    ///
    /// If a node cannot start, `redis-cli` fails, or the cluster is not formed within 20
    /// seconds; the message quotes the logs.
    pub fn start() -> TlsCluster {
        let certificates = TestCertificates::new();
        let nodes = (0..CLUSTER_MASTERS)
            .map(|_| {
                // The cluster bus listens on the TLS port + 10000: `cluster_port` keeps
                // both free.
                let tls_port = crate::server::cluster_port();
                let mut args = certificates.server_args(tls_port, true);
                args.extend(
                    [
                        "--tls-cluster",
                        "yes",
                        "--tls-replication",
                        "yes",
                        "--cluster-enabled",
                        "yes",
                        "--cluster-config-file",
                        "nodes.conf",
                    ]
                    .map(str::to_owned),
                );
                let args: Vec<&str> = args.iter().map(String::as_str).collect();
                TlsNode {
                    server: RedisServer::start_with(&args),
                    tls_port,
                }
            })
            .collect();
        let cluster = TlsCluster {
            nodes,
            certificates,
        };
        cluster.create();
        let started = Instant::now();
        if let Err(missing) = wait_until(READY_TIMEOUT, || cluster.check_formed()) {
            panic!(
                "the TLS cluster was not formed within {:?}: {missing}\n{}",
                started.elapsed(),
                cluster.diagnostics()
            );
        }
        cluster
    }

    /// The nodes' TLS URLs, `rediss://127.0.0.1:PORT`.
    pub fn node_tls_urls(&self) -> Vec<String> {
        self.nodes
            .iter()
            .map(|node| format!("rediss://127.0.0.1:{}", node.tls_port))
            .collect()
    }

    /// The certificates every node uses (`ca.pem` is the CA to trust).
    pub fn certificates(&self) -> &TestCertificates {
        &self.certificates
    }

    /// The node whose TLS port is `tls_port`, to administer on its plain port.
    pub fn node_with_tls_port(&self, tls_port: u16) -> Option<&RedisServer> {
        self.nodes
            .iter()
            .find(|node| node.tls_port == tls_port)
            .map(|node| &node.server)
    }

    fn create(&self) {
        let binary = std::env::var(crate::REDIS_CLI_ENV)
            .ok()
            .filter(|value| !value.trim().is_empty())
            .unwrap_or_else(|| "redis-cli".to_owned());
        let output = Command::new(&binary)
            .args(["--tls", "--cacert"])
            .arg(self.certificates.path("ca.pem"))
            .arg("--cert")
            .arg(self.certificates.path("client.pem"))
            .arg("--key")
            .arg(self.certificates.path("client.key"))
            .args(["--cluster", "create"])
            .args(
                self.nodes
                    .iter()
                    .map(|node| format!("127.0.0.1:{}", node.tls_port)),
            )
            .args(["--cluster-replicas", "0", "--cluster-yes"])
            .stdin(std::process::Stdio::null())
            .output()
            .unwrap_or_else(|err| panic!("cannot run `{binary}`: {err}"));
        if !output.status.success() {
            panic!(
                "{binary} --cluster create failed: {}\n{}\n{}",
                output.status,
                String::from_utf8_lossy(&output.stdout),
                String::from_utf8_lossy(&output.stderr)
            );
        }
    }

    /// `Ok` once every node reports the cluster ok and knows every node.
    fn check_formed(&self) -> Result<(), String> {
        for node in &self.nodes {
            let port = node.server.port();
            let info: String = query_port(port, redis::cmd("CLUSTER").arg("INFO"))
                .map_err(|err| format!("CLUSTER INFO on {port} failed: {err}"))?;
            let known = info_field(&info, "cluster_known_nodes");
            if info_field(&info, "cluster_state") != Some("ok")
                || known != Some(CLUSTER_MASTERS.to_string().as_str())
            {
                return Err(format!(
                    "node {port}: cluster_state {:?}, {known:?} nodes known",
                    info_field(&info, "cluster_state")
                ));
            }
        }
        Ok(())
    }

    fn diagnostics(&self) -> String {
        self.nodes
            .iter()
            .map(|node| {
                format!(
                    "=== node (TLS port {}) log:\n{}\n",
                    node.tls_port,
                    tail(&node.server.log(), LOG_LINES)
                )
            })
            .collect()
    }
}
