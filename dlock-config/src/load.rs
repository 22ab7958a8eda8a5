//! Reading a configuration: TOML text to [`Config`], with precise error locations, and
//! environment overrides.

use std::path::Path;

use crate::error::{ConfigError, Result};
use crate::interpolate::{interpolate, Lookup};
use crate::model::{check_address, Address, Addresses, Config, Redis, Secret};

/// Environment variable naming the config file for [`Config::from_env`].
pub const CONFIG_ENV: &str = "DLOCK_CONFIG";
/// Overrides `[connection] password`.
pub const PASSWORD_ENV: &str = "DLOCK_PASSWORD";
/// Overrides `[connection] username`.
pub const USERNAME_ENV: &str = "DLOCK_USERNAME";
/// Overrides the topology's address(es): `address` (single), `master` (master_slave),
/// `sentinels` (sentinel) or `nodes` (cluster); a comma-separated list for the last two.
pub const ADDRESS_ENV: &str = "DLOCK_ADDRESS";

/// The largest configuration file, and file a configuration refers to (a PEM
/// certificate or key), that is read: 1 MiB. A dlock configuration is a few hundred
/// bytes and a certificate a few KiB, so a larger file is the wrong one, and reading
/// stops there rather than filling memory (a device, a log, a dump).
pub const MAX_CONFIG_BYTES: u64 = 1 << 20;

/// The contents of `path`, at most [`MAX_CONFIG_BYTES`]; `Ok(None)` when it is larger.
pub(crate) fn read_bounded(path: &Path) -> std::io::Result<Option<Vec<u8>>> {
    use std::io::Read;
    let mut bytes = Vec::new();
    std::fs::File::open(path)?
        .take(MAX_CONFIG_BYTES + 1)
        .read_to_end(&mut bytes)?;
    Ok((bytes.len() as u64 <= MAX_CONFIG_BYTES).then_some(bytes))
}

const TOPOLOGIES: &str =
    "[redis.single], [redis.master_slave], [redis.sentinel] or [redis.cluster]";

impl Config {
    /// Parses TOML text; errors name `<string>` as the origin. `${VAR}` and
    /// `${VAR:-default}` in string values are filled in from the process environment
    /// (`$${` is a literal `${`); nothing else is read.
    ///
    /// ```
    /// let config = dlock_config::Config::from_toml_str(
    ///     "[redis.single]\naddress = \"redis://${DLOCK_DOC_HOST:-127.0.0.1}:6379\"\n",
    /// )?;
    /// assert_eq!(config.to_string(), "single redis://127.0.0.1:6379");
    /// # Ok::<(), dlock_config::ConfigError>(())
    /// ```
    ///
    /// # Errors
    ///
    /// [`ConfigError::Invalid`] with line and column for malformed TOML, unknown keys,
    /// a missing or repeated topology, bad addresses or durations, a database in
    /// cluster mode, and a `${VAR}` whose variable is unset (without a default) or not
    /// UTF-8.
    pub fn from_toml_str(text: &str) -> Result<Config> {
        parse(text, "<string>", &process_env)
    }

    /// [`from_toml_str`](Config::from_toml_str) with the `${VAR}` references looked up by
    /// `lookup` (`None`: unset) instead of the process environment. Pure.
    ///
    /// # Errors
    ///
    /// As for [`from_toml_str`](Config::from_toml_str).
    pub fn from_toml_str_with(
        text: &str,
        lookup: impl Fn(&str) -> Option<String>,
    ) -> Result<Config> {
        parse(text, "<string>", &|name| Ok(lookup(name)))
    }

    /// Reads and parses `path`; errors name the file. Reads nothing else but the
    /// environment variables its `${VAR}` references name (see
    /// [`from_toml_str`](Config::from_toml_str)).
    ///
    /// # Errors
    ///
    /// [`ConfigError::Read`] when the file cannot be read, [`ConfigError::TooLarge`] over
    /// [`MAX_CONFIG_BYTES`], [`ConfigError::NotUtf8`], and everything
    /// [`from_toml_str`](Config::from_toml_str) reports.
    pub fn from_file(path: impl AsRef<Path>) -> Result<Config> {
        let path = path.as_ref();
        let shown = path.display().to_string();
        let bytes = read_bounded(path)
            .map_err(|source| ConfigError::Read {
                path: shown.clone(),
                source,
            })?
            .ok_or_else(|| ConfigError::TooLarge {
                path: shown.clone(),
                limit: MAX_CONFIG_BYTES,
            })?;
        let text = String::from_utf8(bytes).map_err(|e| ConfigError::NotUtf8 {
            path: shown.clone(),
            offset: e.utf8_error().valid_up_to(),
        })?;
        let mut config = parse(&text, &shown, &process_env)?;
        config.base_dir = path.parent().map(Path::to_path_buf);
        Ok(config)
    }

    /// Reads the file named by `DLOCK_CONFIG` and applies the environment overrides
    /// (see [`with_env_overrides`](Config::with_env_overrides)).
    ///
    /// # Errors
    ///
    /// [`ConfigError::Environment`] when `DLOCK_CONFIG` is not set or empty, and everything
    /// [`from_file`](Config::from_file) reports.
    pub fn from_env() -> Result<Config> {
        // `var_os`: a file name need not be UTF-8, and such a file is still readable.
        let path = std::env::var_os(CONFIG_ENV).ok_or_else(|| ConfigError::Environment {
            variable: CONFIG_ENV,
            message: "not set; point it at a dlock TOML file".to_owned(),
        })?;
        if path.is_empty() {
            return Err(ConfigError::Environment {
                variable: CONFIG_ENV,
                message: "is set but empty; point it at a dlock TOML file".to_owned(),
            });
        }
        Config::from_file(path)?.with_env_overrides()
    }

    /// Applies `DLOCK_PASSWORD`, `DLOCK_USERNAME` and `DLOCK_ADDRESS` when they are set.
    ///
    /// # Errors
    ///
    /// [`ConfigError::Environment`] for an invalid `DLOCK_ADDRESS`, and for any of the
    /// three that is set but not UTF-8 (rather than silently ignoring a password).
    pub fn with_env_overrides(self) -> Result<Config> {
        let password = env_var(PASSWORD_ENV)?;
        let username = env_var(USERNAME_ENV)?;
        let address = env_var(ADDRESS_ENV)?;
        self.with_overrides(|name| match name {
            PASSWORD_ENV => password.clone(),
            USERNAME_ENV => username.clone(),
            ADDRESS_ENV => address.clone(),
            _ => None,
        })
    }

    /// [`with_env_overrides`](Config::with_env_overrides) with the variables looked up by
    /// `lookup` instead of the process environment.
    ///
    /// # Errors
    ///
    /// [`ConfigError::Environment`] for an invalid address override.
    pub fn with_overrides(mut self, lookup: impl Fn(&str) -> Option<String>) -> Result<Config> {
        if let Some(password) = lookup(PASSWORD_ENV) {
            self.connection.password = Some(Secret(password));
        }
        if let Some(username) = lookup(USERNAME_ENV) {
            self.connection.username = Some(username);
        }
        if let Some(addresses) = lookup(ADDRESS_ENV) {
            let invalid = |message: String| ConfigError::Environment {
                variable: ADDRESS_ENV,
                message,
            };
            let mut list = Vec::new();
            for url in addresses
                .split(',')
                .map(str::trim)
                .filter(|u| !u.is_empty())
            {
                check_address(url).map_err(invalid)?;
                list.push(Address(url.to_owned()));
            }
            let Some(first) = list.first().cloned() else {
                return Err(invalid("empty: give at least one address".to_owned()));
            };
            let Some(redis) = &mut self.redis else {
                return Err(invalid(
                    "the config has no [redis] table to override (only [redlock]); unset it or add a [redis] table".to_owned(),
                ));
            };
            match redis {
                Redis::Single(single) => single.address = first,
                Redis::MasterSlave(master_slave) => master_slave.master = first,
                Redis::Sentinel(sentinel) => sentinel.sentinels = Addresses(list),
                Redis::Cluster(cluster) => cluster.nodes = Addresses(list),
            }
        }
        Ok(self)
    }
}

/// The value of `variable`, `None` when unset; an error when it is not UTF-8. The message
/// does not quote the value, which may be a password.
fn env_var(variable: &'static str) -> Result<Option<String>> {
    match std::env::var(variable) {
        Ok(value) => Ok(Some(value)),
        Err(std::env::VarError::NotPresent) => Ok(None),
        Err(std::env::VarError::NotUnicode(raw)) => {
            let offset = std::str::from_utf8(raw.as_encoded_bytes())
                .err()
                .map_or(0, |e| e.valid_up_to());
            Err(ConfigError::Environment {
                variable,
                message: format!(
                    "not UTF-8 text (invalid byte at offset {offset}); set it to UTF-8 or unset it"
                ),
            })
        }
    }
}

/// A `${VAR}` reference's variable from the process environment; one that is set but
/// not UTF-8 is an error rather than "unset" (its default would silently win).
fn process_env(name: &str) -> std::result::Result<Option<String>, String> {
    match std::env::var(name) {
        Ok(value) => Ok(Some(value)),
        Err(std::env::VarError::NotPresent) => Ok(None),
        Err(std::env::VarError::NotUnicode(_)) => Err("is not UTF-8 text".to_owned()),
    }
}

fn parse(text: &str, origin: &str, lookup: Lookup<'_>) -> Result<Config> {
    let filled =
        interpolate(text, lookup).map_err(|e| invalid(text, origin, e.offset, e.message))?;
    // Errors below point into the file as written, not into the filled-in text.
    let invalid = |offset: usize, message: String| {
        invalid(text, origin, filled.original_offset(offset), message)
    };
    let config: Config = toml::from_str(&filled.text).map_err(|e| {
        let offset = e.span().map_or(0, |span| span.start);
        invalid(offset, explain(e.message()))
    })?;
    if config.redis.is_none() && config.redlock.is_none() {
        return Err(invalid(
            0,
            format!("no Redis topology: add exactly one of {TOPOLOGIES}, or a [redlock] table"),
        ));
    }
    if let (Some(Redis::Cluster(_)), Some(database)) = (&config.redis, &config.connection.database)
    {
        return Err(invalid(
            database.span().start,
            "`database` is not supported with [redis.cluster]: a Redis Cluster only has database 0; remove it".to_owned(),
        ));
    }
    match (
        &config.connection.tls_cert_file,
        &config.connection.tls_key_file,
    ) {
        (Some(cert), None) => {
            return Err(invalid(
                cert.span().start,
                "`tls_cert_file` needs `tls_key_file`: a client certificate is presented with its private key; add both or neither".to_owned(),
            ));
        }
        (None, Some(key)) => {
            return Err(invalid(
                key.span().start,
                "`tls_key_file` needs `tls_cert_file`: a private key is presented with its client certificate; add both or neither".to_owned(),
            ));
        }
        _ => {}
    }
    if let Some(redlock) = &config.redlock {
        check_redlock_servers(redlock.servers.get_ref())
            .map_err(|message| invalid(redlock.servers.span().start, message))?;
    }
    Ok(config)
}

/// At least 3 servers, all different: one server listed twice would count twice toward
/// the majority.
fn check_redlock_servers(servers: &Addresses) -> std::result::Result<(), String> {
    let list = &servers.0;
    if list.len() < 3 {
        return Err(format!(
            "[redlock] servers: a RedLock needs at least 3 independent servers (5 is typical), got {}",
            list.len()
        ));
    }
    for (i, server) in list.iter().enumerate() {
        if let Some(first) = list[..i].iter().position(|seen| seen.0 == server.0) {
            return Err(format!(
                "[redlock] servers: entries {} and {} are the same server {server}; list each independent server once",
                first + 1,
                i + 1
            ));
        }
    }
    Ok(())
}

/// Rewrites the parser's messages that do not say what to do.
fn explain(message: &str) -> String {
    if message.starts_with("wanted exactly 1 element, more than 1") {
        format!("more than one Redis topology: keep exactly one of {TOPOLOGIES}")
    } else if message.starts_with("wanted exactly 1 element, found 0") {
        format!("[redis] names no topology: add exactly one of {TOPOLOGIES}")
    } else if message.starts_with("unknown variant") && message.contains("`single`") {
        format!("unknown Redis topology: {message}")
    } else if let Some(table) = home_of_misplaced_field(message) {
        format!("{message}; this setting belongs in the {table} table, which applies to every topology (see the annotated dlock.toml in the README)")
    } else {
        message.to_owned()
    }
}

/// The table a field reported unknown belongs in, when it is a `[connection]` or `[lock]`
/// setting written at the top of the file or under a topology or `[redlock]` table (the
/// usual slip: a `password` under `[redis.single]`). Sub-tables of `[lock]` are left
/// alone: their own field list is the answer there.
fn home_of_misplaced_field(message: &str) -> Option<&'static str> {
    const HOSTS: &[&str] = &[
        "`address`",
        "`master`",
        "`master_name`",
        "`nodes`",
        "`servers`",
        "`connection`",
    ];
    const CONNECTION: &[&str] = &[
        "username",
        "password",
        "database",
        "tls_ca_file",
        "tls_cert_file",
        "tls_key_file",
        "connect_timeout",
        "command_timeout",
        "retry_attempts",
        "retry_delay",
        "client_name",
    ];
    const LOCK: &[&str] = &[
        "watchdog_timeout",
        "key_prefix",
        "wait",
        "max_wait_recheck",
        "failover_wait",
        "replica_acks",
        "scripts",
    ];
    let field = message.strip_prefix("unknown field `")?.split('`').next()?;
    let (_, expected) = message.split_once("expected")?;
    if !HOSTS.iter().any(|host| expected.contains(host)) {
        return None;
    }
    if CONNECTION.contains(&field) {
        Some("[connection]")
    } else if LOCK.contains(&field) {
        Some("[lock]")
    } else {
        None
    }
}

fn invalid(text: &str, origin: &str, offset: usize, message: String) -> ConfigError {
    // Spans from the parser are character boundaries; never slice mid-character if not.
    let end = (0..=offset.min(text.len()))
        .rev()
        .find(|&i| text.is_char_boundary(i))
        .unwrap_or(0);
    let before = &text[..end];
    let line = before.matches('\n').count() + 1;
    let column = before.rsplit('\n').next().map_or(0, |l| l.chars().count()) + 1;
    ConfigError::Invalid {
        origin: origin.to_owned(),
        line,
        column,
        message,
    }
}
