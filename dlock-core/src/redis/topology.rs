//! Which Redis deployment a [`LockClient`](crate::LockClient) talks to.

use crate::error::LockError;

/// A Redis deployment: one server, a master with replicas, a Sentinel-managed master, or a
/// Cluster. Pass it to [`LockClientBuilder::connect_to`](crate::LockClientBuilder::connect_to);
/// `dlock-config` builds it from a TOML file.
///
/// Addresses are URLs: `redis://[user:password@]host:port[/db]`, or `rediss://` for TLS
/// (with the `tls` feature, on by default; the system's root certificates are trusted
/// unless [`tls_root_ca`](Topology::tls_root_ca) names a CA, and
/// [`tls_client_certificate`](Topology::tls_client_certificate) gives servers that check
/// clients a certificate). Lock operations behave the same in every mode; what differs is
/// how a failover is followed:
///
/// - **single**: one server; the connection reconnects after a drop.
/// - **master/replicas**: every lock operation goes to the master. The replicas are not
///   read: a replica may lag, and a lock state read there could be stale. They are listed
///   so one configuration describes the deployment.
/// - **sentinel**: the master is resolved through the sentinels and re-resolved when a
///   sentinel announces `+switch-master`, when the connection fails and when the server
///   answers `READONLY` (a demoted master); the subscriber connection follows. The master
///   is reached over TLS exactly when the sentinel URLs are `rediss://` (they must agree).
/// - **cluster**: keys are routed by slot (every lock key, channel and memo of one lock
///   shares a slot), `MOVED`/`ASK` and failovers are followed, and waiting uses sharded
///   pub/sub (`SSUBSCRIBE`/`SPUBLISH`), so an unlock message only reaches the lock's shard.
#[derive(Clone)]
pub struct Topology {
    pub(crate) kind: TopologyKind,
    pub(crate) auth: Auth,
    /// Credentials for the sentinels (a Sentinel deployment only).
    pub(crate) sentinel_auth: Auth,
    /// What `rediss://` connections trust and present beyond their URL.
    pub(crate) tls: TlsFiles,
}

/// What TLS connections trust and present beyond their URL.
#[derive(Clone, Default)]
pub(crate) struct TlsFiles {
    /// PEM root certificate(s) trusted instead of the system's.
    pub(crate) root_ca: Option<Vec<u8>>,
    /// The PEM client certificate (chain) and its private key, for servers that ask for
    /// one (`tls-auth-clients`).
    pub(crate) client: Option<ClientCertificate>,
}

impl TlsFiles {
    /// Nothing beyond the URL: the system's roots, no client certificate.
    pub(crate) fn is_default(&self) -> bool {
        self.root_ca.is_none() && self.client.is_none()
    }

    /// An error saying which part is wrong when the client certificate or its key holds
    /// no PEM block of its kind (a file swapped for another, or not PEM): the TLS library
    /// would report it as the server's fault ("peer sent no certificates").
    pub(crate) fn check(&self) -> Result<(), LockError> {
        let Some(client) = &self.client else {
            return Ok(());
        };
        let holds = |pem: &[u8], label: &str| {
            pem.windows(label.len())
                .any(|window| window == label.as_bytes())
        };
        if !holds(&client.certificate, "-----BEGIN CERTIFICATE-----") {
            return Err(LockError::Config(
                "the TLS client certificate (`tls_cert_file`, `Topology::tls_client_certificate`) holds no PEM certificate (no \"-----BEGIN CERTIFICATE-----\" line)".to_owned(),
            ));
        }
        if !holds(&client.key, "PRIVATE KEY-----") {
            return Err(LockError::Config(
                "the TLS client key (`tls_key_file`, `Topology::tls_client_certificate`) holds no PEM private key (no \"-----BEGIN ... PRIVATE KEY-----\" line)".to_owned(),
            ));
        }
        Ok(())
    }
}

/// A client certificate and its key, both PEM. Never printed.
#[derive(Clone)]
#[cfg_attr(not(feature = "tls"), allow(dead_code))]
pub(crate) struct ClientCertificate {
    pub(crate) certificate: Vec<u8>,
    pub(crate) key: Vec<u8>,
}

#[derive(Clone)]
pub(crate) enum TopologyKind {
    Single {
        address: String,
    },
    MasterReplicas {
        master: String,
        replicas: Vec<String>,
    },
    Sentinel {
        master_name: String,
        sentinels: Vec<String>,
    },
    Cluster {
        nodes: Vec<String>,
    },
}

/// Credentials and database applied to every data node, or credentials for the sentinels.
#[derive(Clone, Default)]
pub(crate) struct Auth {
    pub(crate) username: Option<String>,
    pub(crate) password: Option<String>,
    pub(crate) database: Option<i64>,
}

impl Topology {
    /// One Redis server.
    pub fn single(address: impl Into<String>) -> Topology {
        Topology::new(TopologyKind::Single {
            address: address.into(),
        })
    }

    /// A master with replicas; lock operations all go to the master. The same name as
    /// dlock-config's `[redis.master_slave]` (Redisson's `masterSlaveServersConfig`);
    /// [`master_replicas`](Topology::master_replicas) is another name for it.
    pub fn master_slave(master: impl Into<String>, replicas: Vec<String>) -> Topology {
        Topology::new(TopologyKind::MasterReplicas {
            master: master.into(),
            replicas,
        })
    }

    /// [`master_slave`](Topology::master_slave) under Redis' newer word for a replica
    /// (dlock-config accepts `[redis.master_replicas]` too).
    pub fn master_replicas(master: impl Into<String>, replicas: Vec<String>) -> Topology {
        Topology::master_slave(master, replicas)
    }

    /// The master called `master_name` of a Sentinel group, found through `sentinels`
    /// (sentinel URLs). The master's credentials come from
    /// [`credentials`](Topology::credentials) and [`database`](Topology::database).
    pub fn sentinel(master_name: impl Into<String>, sentinels: Vec<String>) -> Topology {
        Topology::new(TopologyKind::Sentinel {
            master_name: master_name.into(),
            sentinels,
        })
    }

    /// A Redis Cluster reached through any of the seed `nodes`.
    pub fn cluster(nodes: Vec<String>) -> Topology {
        Topology::new(TopologyKind::Cluster { nodes })
    }

    fn new(kind: TopologyKind) -> Topology {
        Topology {
            kind,
            auth: Auth::default(),
            sentinel_auth: Auth::default(),
            tls: TlsFiles::default(),
        }
    }

    /// Username (Redis 6 ACL) and password for every data node, overriding those in the
    /// URLs. Sentinels themselves are contacted with
    /// [`sentinel_credentials`](Topology::sentinel_credentials), else as their URLs say.
    #[must_use]
    pub fn credentials(mut self, username: Option<String>, password: Option<String>) -> Topology {
        self.auth.username = username.or(self.auth.username);
        self.auth.password = password.or(self.auth.password);
        self
    }

    /// Username and password for the sentinels of a Sentinel deployment, overriding those
    /// in the sentinel URLs; separate from the data nodes'
    /// ([`credentials`](Topology::credentials)), since sentinels usually have users of
    /// their own (Redisson's `sentinelUsername` / `sentinelPassword`). Ignored by the
    /// other deployments.
    ///
    /// ```
    /// let topology = dlock::Topology::sentinel("mymaster", vec!["redis://127.0.0.1:26379".into()])
    ///     .sentinel_credentials(Some("watcher".into()), Some("s3cret".into()))
    ///     .credentials(Some("app".into()), Some("other".into()));
    /// assert!(!format!("{topology:?}").contains("s3cret"));
    /// ```
    #[must_use]
    pub fn sentinel_credentials(
        mut self,
        username: Option<String>,
        password: Option<String>,
    ) -> Topology {
        self.sentinel_auth.username = username.or(self.sentinel_auth.username);
        self.sentinel_auth.password = password.or(self.sentinel_auth.password);
        self
    }

    /// The database number on every data node, overriding the URLs' (not for a cluster,
    /// which has only database 0).
    #[must_use]
    pub fn database(mut self, database: i64) -> Topology {
        self.auth.database = Some(database);
        self
    }

    /// Trusts the PEM certificate authority `pem` (instead of the system's roots) for
    /// every `rediss://` address: data nodes, sentinels, and the master a sentinel
    /// reports, which is reached over TLS exactly when the sentinels are. Needs the `tls`
    /// feature (on by default).
    #[must_use]
    pub fn tls_root_ca(mut self, pem: Vec<u8>) -> Topology {
        self.tls.root_ca = Some(pem);
        self
    }

    /// Presents the PEM client certificate `certificate` (the leaf first, then any
    /// intermediates) with its PEM private key `key` on every `rediss://` connection: data
    /// nodes, sentinels and the master a sentinel reports. Needed by servers that check
    /// clients (`tls-auth-clients yes`, Redis's default once TLS is on); a server that
    /// does not ask ignores it. A certificate and key that do not parse or do not match
    /// are reported when connecting. Needs the `tls` feature (on by default).
    #[must_use]
    pub fn tls_client_certificate(mut self, certificate: Vec<u8>, key: Vec<u8>) -> Topology {
        self.tls.client = Some(ClientCertificate { certificate, key });
        self
    }

    /// A short name of the mode: `single`, `master_slave`, `sentinel` or `cluster`.
    pub fn mode(&self) -> &'static str {
        match self.kind {
            TopologyKind::Single { .. } => "single",
            TopologyKind::MasterReplicas { .. } => "master_slave",
            TopologyKind::Sentinel { .. } => "sentinel",
            TopologyKind::Cluster { .. } => "cluster",
        }
    }
}

/// Never shows passwords.
impl std::fmt::Debug for Topology {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        use crate::redact::redact;
        let all = |urls: &[String]| urls.iter().map(|u| redact(u)).collect::<Vec<_>>();
        let password = self.auth.password.as_ref().map(|_| "***");
        match &self.kind {
            TopologyKind::Single { address } => f
                .debug_struct("Single")
                .field("address", &redact(address))
                .field("username", &self.auth.username)
                .field("password", &password)
                .field("database", &self.auth.database)
                .finish(),
            TopologyKind::MasterReplicas { master, replicas } => f
                .debug_struct("MasterReplicas")
                .field("master", &redact(master))
                .field("replicas", &all(replicas))
                .field("username", &self.auth.username)
                .field("password", &password)
                .field("database", &self.auth.database)
                .finish(),
            TopologyKind::Sentinel {
                master_name,
                sentinels,
            } => f
                .debug_struct("Sentinel")
                .field("master_name", master_name)
                .field("sentinels", &all(sentinels))
                .field("sentinel_username", &self.sentinel_auth.username)
                .field(
                    "sentinel_password",
                    &self.sentinel_auth.password.as_ref().map(|_| "***"),
                )
                .field("username", &self.auth.username)
                .field("password", &password)
                .field("database", &self.auth.database)
                .finish(),
            TopologyKind::Cluster { nodes } => f
                .debug_struct("Cluster")
                .field("nodes", &all(nodes))
                .field("username", &self.auth.username)
                .field("password", &password)
                .finish(),
        }
    }
}
