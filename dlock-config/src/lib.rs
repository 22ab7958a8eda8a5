//! One TOML file chooses the Redis deployment behind a [`dlock::LockClient`](dlock_core::LockClient): a single
//! server, a master with replicas, a Sentinel group or a Redis Cluster. Application code
//! does not change between them.
//!
//! ```toml
//! [redis.sentinel]             # or [redis.single], [redis.master_slave], [redis.cluster]
//! master_name = "mymaster"
//! sentinels   = ["redis://127.0.0.1:26379", "redis://127.0.0.1:26380"]
//!
//! [connection]                 # optional, every key optional
//! username        = "app"
//! password        = "secret"   # DLOCK_PASSWORD overrides; never printed
//! database        = 0          # not with [redis.cluster]
//! connect_timeout = "5s"
//! command_timeout = "3s"
//! tls_ca_file     = "ca.pem"   # for rediss:// addresses; relative to this file
//! tls_cert_file   = "client.pem" # a client certificate, for servers that check clients
//! tls_key_file    = "client.key" # its private key
//! retry_attempts  = 3
//! retry_delay     = "50ms"
//! client_name     = "billing" # CLIENT SETNAME, and shown by `dlock inspect`
//!
//! [lock]                       # optional, every key optional
//! watchdog_timeout = "30s"
//! key_prefix       = "shop:"
//! wait             = "10s"     # default wait of lock(); absent: as long as it takes
//! max_wait_recheck = "1s"
//! failover_wait    = "10s"
//! ```
//!
//! ```
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), dlock_config::ConfigError> {
//! # let server = dlock_tests::RedisServer::start();
//! let toml = format!("[redis.single]\naddress = \"{}\"\n[lock]\nkey_prefix = \"shop:\"\n", server.url());
//! let client = dlock_config::Config::from_toml_str(&toml)?.build().await?;
//! assert_eq!(client.lock("goods:42").key(), "shop:goods:42");
//! # Ok(())
//! # }
//! ```
//!
//! Sample files for every mode are in `examples/config/`. Every error names the file,
//! the line and the column, and says what is expected:
//!
//! ```
//! let err = dlock_config::Config::from_toml_str("[redis.single]\naddres = \"redis://127.0.0.1\"\n").unwrap_err();
//! assert_eq!(err.to_string(), "<string>:2:1: unknown field `addres`, expected `address`");
//! ```
//!
//! Environment: `DLOCK_CONFIG` names the file for [`Config::from_env`], which also applies
//! `DLOCK_PASSWORD`, `DLOCK_USERNAME` and `DLOCK_ADDRESS` (see
//! [`Config::with_env_overrides`]).

#![warn(missing_debug_implementations, unreachable_pub)]
mod error;
mod interpolate;
mod load;
mod model;

pub use error::{ConfigError, Result};
pub use load::{ADDRESS_ENV, CONFIG_ENV, MAX_CONFIG_BYTES, PASSWORD_ENV, USERNAME_ENV};
pub use model::{
    Address, Addresses, Cluster, Config, Connection, LockSection, MasterSlave, RedLockSection,
    Redis, ReplicaAcksSection, ScriptsSetting, Secret, Sentinel, Single,
};

use dlock_core::{redlock::RedLockClient, LockClient, LockClientBuilder, Topology};

impl Config {
    /// The deployment this file describes, with its credentials and TLS trust.
    ///
    /// # Errors
    ///
    /// [`ConfigError::NoRedis`] for a file with only a `[redlock]` table;
    /// [`ConfigError::Referenced`] when `tls_ca_file`, `tls_cert_file` or `tls_key_file`
    /// cannot be read.
    pub fn topology(&self) -> Result<Topology> {
        let topology = match self.redis.as_ref().ok_or(ConfigError::NoRedis)? {
            Redis::Single(single) => Topology::single(single.address.as_str()),
            Redis::MasterSlave(master_slave) => Topology::master_replicas(
                master_slave.master.as_str(),
                master_slave
                    .replicas
                    .iter()
                    .map(|a| a.as_str().to_owned())
                    .collect(),
            ),
            Redis::Sentinel(sentinel) => {
                Topology::sentinel(sentinel.master_name.clone(), sentinel.sentinels.urls())
                    .sentinel_credentials(
                        sentinel.sentinel_username.clone(),
                        sentinel.sentinel_password.as_ref().map(|p| p.0.clone()),
                    )
            }
            Redis::Cluster(cluster) => Topology::cluster(cluster.nodes.urls()),
        };
        self.with_connection(topology)
    }

    /// `topology` with the credentials, database and TLS trust of `[connection]`.
    fn with_connection(&self, topology: Topology) -> Result<Topology> {
        let connection = &self.connection;
        let topology = topology.credentials(
            connection.username.clone(),
            connection.password.as_ref().map(|p| p.expose().to_owned()),
        );
        let topology = match &connection.database {
            Some(database) => topology.database(*database.get_ref()),
            None => topology,
        };
        let topology = match &connection.tls_ca_file {
            Some(file) => topology.tls_root_ca(self.read_referenced("tls_ca_file", file)?),
            None => topology,
        };
        match (&connection.tls_cert_file, &connection.tls_key_file) {
            (Some(certificate), Some(key)) => Ok(topology.tls_client_certificate(
                self.read_referenced("tls_cert_file", certificate.get_ref())?,
                self.read_referenced("tls_key_file", key.get_ref())?,
            )),
            // Loading refused a file with only one of the two.
            _ => Ok(topology),
        }
    }

    /// The contents of the file the option `key` names, relative to the config file.
    fn read_referenced(&self, key: &'static str, file: &std::path::Path) -> Result<Vec<u8>> {
        let path = match &self.base_dir {
            Some(base) => base.join(file),
            None => file.to_path_buf(),
        };
        let referenced = |source| ConfigError::Referenced {
            key,
            path: path.display().to_string(),
            source,
        };
        load::read_bounded(&path).map_err(referenced)?.ok_or_else(|| {
            referenced(std::io::Error::new(
                std::io::ErrorKind::InvalidData,
                format!("larger than {MAX_CONFIG_BYTES} bytes; a PEM file is a few KiB: is it the right file?"),
            ))
        })
    }

    /// The client settings of `[connection]` and `[lock]`.
    pub fn client_builder(&self) -> LockClientBuilder {
        let mut builder = LockClient::builder();
        let (c, l) = (&self.connection, &self.lock);
        if let Some(v) = c.connect_timeout {
            builder = builder.connect_timeout(v);
        }
        if let Some(v) = c.command_timeout {
            builder = builder.command_timeout(v);
        }
        if let Some(v) = c.retry_attempts {
            builder = builder.retry_attempts(v);
        }
        if let Some(v) = c.retry_delay {
            builder = builder.retry_delay(v);
        }
        if let Some(v) = &c.client_name {
            builder = builder.client_name(v.clone());
        }
        if let Some(v) = l.watchdog_timeout {
            builder = builder.watchdog_timeout(v);
        }
        if let Some(v) = &l.key_prefix {
            builder = builder.key_prefix(v.clone());
        }
        if let Some(v) = l.max_wait_recheck {
            builder = builder.max_wait_recheck(v);
        }
        if let Some(v) = l.failover_wait {
            builder = builder.failover_wait(v);
        }
        if let Some(acks) = &l.replica_acks {
            builder = builder.replica_acks(acks.replicas, acks.within);
        }
        if let Some(scripts) = l.scripts {
            builder = builder.script_mode(scripts.into());
        }
        builder.default_wait(l.wait)
    }

    /// Connects and returns the client.
    ///
    /// # Errors
    ///
    /// [`ConfigError::Lock`] with the [`dlock::LockError`](dlock_core::LockError): an invalid setting (e.g.
    /// a watchdog timeout under 100 ms) or Redis unreachable; [`ConfigError::NoRedis`] for
    /// a file with only a `[redlock]` table (use [`build_redlock`](Config::build_redlock)).
    pub async fn build(&self) -> Result<LockClient> {
        let topology = self.topology()?;
        Ok(self.client_builder().connect_to(&topology).await?)
    }

    /// Connects to every server of `[redlock]` (each a single server with the settings of
    /// `[connection]` and `[lock]`) and returns the RedLock over them.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), dlock_config::ConfigError> {
    /// # let s: Vec<_> = (0..3).map(|_| dlock_tests::RedisServer::start()).collect();
    /// let toml = format!(
    ///     "[redlock]\nservers = [\"{}\", \"{}\", \"{}\"]\n",
    ///     s[0].url(), s[1].url(), s[2].url()
    /// );
    /// let redlock = dlock_config::Config::from_toml_str(&toml)?.build_redlock().await?;
    /// assert_eq!(redlock.quorum(), 2);
    /// # Ok(())
    /// # }
    /// ```
    ///
    /// # Errors
    ///
    /// [`ConfigError::NoRedLock`] without a `[redlock]` table; [`ConfigError::Referenced`]
    /// when a TLS file (`tls_ca_file`, `tls_cert_file`, `tls_key_file`) cannot be read;
    /// [`ConfigError::Lock`] when a server is
    /// unreachable or a setting invalid.
    pub async fn build_redlock(&self) -> Result<RedLockClient> {
        let servers = self.redlock_servers()?;
        let mut nodes = Vec::with_capacity(servers.len());
        for (_, topology) in &servers {
            nodes.push(self.client_builder().connect_to(topology).await?);
        }
        Ok(RedLockClient::new(nodes)?)
    }

    /// Each server of `[redlock]`, in the file's order: its address as shown (password
    /// hidden) and its single-server topology with the credentials, database and TLS
    /// trust of `[connection]`. What [`build_redlock`](Config::build_redlock) connects
    /// to, for a tool that must talk to each server on its own (the `dlock` operator
    /// tool reads what each holds).
    ///
    /// # Errors
    ///
    /// [`ConfigError::NoRedLock`] without a `[redlock]` table; [`ConfigError::Referenced`]
    /// when a TLS file (`tls_ca_file`, `tls_cert_file`, `tls_key_file`) cannot be read.
    pub fn redlock_servers(&self) -> Result<Vec<(String, Topology)>> {
        let section = self.redlock.as_ref().ok_or(ConfigError::NoRedLock)?;
        section
            .servers
            .get_ref()
            .0
            .iter()
            .map(|server| {
                let topology = self.with_connection(Topology::single(server.as_str()))?;
                Ok((server.to_string(), topology))
            })
            .collect()
    }

    /// Whether the file describes a RedLock only (a `[redlock]` table and no `[redis]`
    /// table): such a file builds a [`RedLockClient`], not a [`LockClient`].
    pub fn is_redlock_only(&self) -> bool {
        self.redis.is_none() && self.redlock.is_some()
    }
}

/// A one-line summary without secrets, e.g. `sentinel "mymaster" via redis://127.0.0.1:26379`.
impl std::fmt::Display for Config {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let list = |a: &Addresses| {
            a.0.iter()
                .map(ToString::to_string)
                .collect::<Vec<_>>()
                .join(", ")
        };
        let Some(redis) = &self.redis else {
            let servers = self
                .redlock
                .as_ref()
                .map_or(0, |r| r.servers.get_ref().0.len());
            return write!(f, "redlock over {servers} servers");
        };
        match redis {
            Redis::Single(single) => write!(f, "single {}", single.address),
            Redis::MasterSlave(m) => write!(
                f,
                "master_slave {} with {} replica(s)",
                m.master,
                m.replicas.len()
            ),
            Redis::Sentinel(s) => {
                write!(f, "sentinel {:?} via {}", s.master_name, list(&s.sentinels))
            }
            Redis::Cluster(c) => write!(f, "cluster via {}", list(&c.nodes)),
        }
    }
}
