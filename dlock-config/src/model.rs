//! The shape of the TOML file.

use std::time::Duration;

use dlock_core::admin::redact_url as redact;
use serde::{Deserialize, Deserializer};
use toml::Spanned;

/// The whole file.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Config {
    /// Exactly one topology table: `[redis.single]`, `[redis.master_slave]`,
    /// `[redis.sentinel]` or `[redis.cluster]`; `None` only in a file with a `[redlock]`
    /// table (such a file builds a RedLock, not a `LockClient`).
    #[serde(default)]
    pub redis: Option<Redis>,
    /// Connection options shared by every topology.
    #[serde(default)]
    pub connection: Connection,
    /// Lock behaviour.
    #[serde(default)]
    pub lock: LockSection,
    /// `[redlock]`: independent servers for a `RedLockClient` (see
    /// [`Config::build_redlock`](crate::Config::build_redlock)).
    #[serde(default)]
    pub redlock: Option<RedLockSection>,
    /// Directory of the file the config came from: relative paths start here.
    #[serde(skip)]
    pub(crate) base_dir: Option<std::path::PathBuf>,
}

/// Which Redis deployment to use.
#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "snake_case", deny_unknown_fields)]
pub enum Redis {
    /// `[redis.single]`: one server.
    Single(Single),
    /// `[redis.master_slave]` (also accepted as `[redis.master_replicas]`, the name of
    /// `Topology::master_replicas`): a master with replicas; locks use the master only.
    #[serde(alias = "master_replicas")]
    MasterSlave(MasterSlave),
    /// `[redis.sentinel]`: a Sentinel-managed master.
    Sentinel(Sentinel),
    /// `[redis.cluster]`: a Redis Cluster.
    Cluster(Cluster),
}

/// `[redis.single]`
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Single {
    /// `redis://host:port` (`rediss://` for TLS).
    pub address: Address,
}

/// `[redis.master_slave]`
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MasterSlave {
    /// The master: every lock operation goes here.
    pub master: Address,
    /// The replicas. Lock operations never read them (a replica may lag behind the
    /// master); they are checked to be valid addresses and documented here.
    #[serde(default)]
    pub replicas: Vec<Address>,
}

/// `[redis.sentinel]`
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Sentinel {
    /// The name the sentinels monitor the master under.
    pub master_name: String,
    /// Sentinel addresses (at least one).
    pub sentinels: Addresses,
    /// User for the sentinels themselves (Redis 6.2+ ACL), overriding the sentinel URLs';
    /// the data nodes use `[connection] username`.
    pub sentinel_username: Option<String>,
    /// Password for the sentinels, separate from `[connection] password` (the data
    /// nodes'). Never shown.
    pub sentinel_password: Option<Secret>,
}

/// `[redis.cluster]`
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Cluster {
    /// Seed nodes (at least one); the rest of the cluster is discovered.
    pub nodes: Addresses,
}

/// `[redlock]`: the independent servers of a RedLock, each a single server with the
/// credentials, TLS trust and timeouts of `[connection]`.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RedLockSection {
    /// At least 3 distinct addresses (5 is typical), e.g.
    /// `["redis://10.0.0.1:6379", "redis://10.0.0.2:6379", "redis://10.0.0.3:6379"]`.
    pub servers: Spanned<Addresses>,
}

/// `[connection]`: options for every topology.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Connection {
    /// ACL username for the data nodes.
    pub username: Option<String>,
    /// Password for the data nodes; `DLOCK_PASSWORD` overrides it. Never printed.
    pub password: Option<Secret>,
    /// Database number (not allowed with `[redis.cluster]`).
    pub database: Option<Spanned<i64>>,
    /// PEM file of the certificate authority trusted for `rediss://` addresses (data
    /// nodes, sentinels, and the master `rediss://` sentinels report) instead of the
    /// system's roots; relative to the config file.
    pub tls_ca_file: Option<std::path::PathBuf>,
    /// PEM file of the client certificate (the leaf first, then any intermediates)
    /// presented on `rediss://` connections, for servers that check clients
    /// (`tls-auth-clients yes`, Redis's default once TLS is on); relative to the config
    /// file. Needs `tls_key_file`.
    pub tls_cert_file: Option<Spanned<std::path::PathBuf>>,
    /// PEM file of the client certificate's private key; relative to the config file.
    /// Needs `tls_cert_file`.
    pub tls_key_file: Option<Spanned<std::path::PathBuf>>,
    /// Longest wait for a connection. Default 5 s, at least 1 ms.
    #[serde(default, deserialize_with = "connect_timeout")]
    pub connect_timeout: Option<Duration>,
    /// Longest wait for one answer. Default 3 s, at least 1 ms.
    #[serde(default, deserialize_with = "command_timeout")]
    pub command_timeout: Option<Duration>,
    /// Retries of a call that failed on a dropped connection. Default 3.
    pub retry_attempts: Option<u32>,
    /// First pause before a retry, doubled each time. Default 50 ms, at most 366 days.
    #[serde(default, deserialize_with = "retry_delay")]
    pub retry_delay: Option<Duration>,
    /// The service's name on its connections (`CLIENT SETNAME`) and in the description
    /// operators see next to its locks; see `dlock::LockClientBuilder::client_name`.
    /// Default `dlock-` and the first 8 characters of the client id.
    pub client_name: Option<String>,
}

/// `[lock]`: lock behaviour.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LockSection {
    /// Lease of locks without an explicit one, renewed every third of it. Default 30 s;
    /// 100 ms to 366 days.
    #[serde(default, deserialize_with = "watchdog_timeout")]
    pub watchdog_timeout: Option<Duration>,
    /// Prefix of every lock key. Default none.
    pub key_prefix: Option<String>,
    /// How long `lock()` (and `#[distributed_lock]` without `wait`) waits before failing.
    /// Default: as long as it takes. Waits up to `"18446744073709551615s"` are accepted; one
    /// whose deadline the clock cannot represent also means as long as it takes.
    #[serde(default, deserialize_with = "wait")]
    pub wait: Option<Duration>,
    /// A waiter re-checks at least this often without an unlock message. Default 1 s, at
    /// least 1 ms.
    #[serde(default, deserialize_with = "max_wait_recheck")]
    pub max_wait_recheck: Option<Duration>,
    /// How long a waiting acquisition keeps trying through a failover. Default 10 s.
    #[serde(default, deserialize_with = "failover_wait")]
    pub failover_wait: Option<Duration>,
    /// Replicas that must confirm each acquisition (Redis `WAIT`), e.g.
    /// `replica_acks = { replicas = 1, within = "100ms" }`. Default: not waited for.
    pub replica_acks: Option<ReplicaAcksSection>,
    /// How dlock's scripts run: `"auto"` (default: dlock's function library when an
    /// administrator loaded it, scripts otherwise), `"eval"` (scripts the client loads) or
    /// `"functions"` (the library only; the client refuses to connect without it). See
    /// `dlock::ScriptMode`.
    pub scripts: Option<ScriptsSetting>,
}

/// `[lock] scripts`: see `dlock::ScriptMode`.
#[derive(Debug, Clone, Copy, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum ScriptsSetting {
    /// `"auto"`: [`dlock::ScriptMode::Auto`](dlock_core::ScriptMode::Auto).
    Auto,
    /// `"eval"`: [`dlock::ScriptMode::Eval`](dlock_core::ScriptMode::Eval).
    Eval,
    /// `"functions"`: [`dlock::ScriptMode::Functions`](dlock_core::ScriptMode::Functions).
    Functions,
}

impl From<ScriptsSetting> for dlock_core::ScriptMode {
    fn from(setting: ScriptsSetting) -> Self {
        match setting {
            ScriptsSetting::Auto => dlock_core::ScriptMode::Auto,
            ScriptsSetting::Eval => dlock_core::ScriptMode::Eval,
            ScriptsSetting::Functions => dlock_core::ScriptMode::Functions,
        }
    }
}

/// `[lock] replica_acks`: see `LockClientBuilder::replica_acks`.
#[derive(Debug, Clone, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct ReplicaAcksSection {
    /// How many replicas must confirm; at least 1.
    pub replicas: u32,
    /// How long to wait for them: at least 1 ms, shorter than the command timeout.
    #[serde(deserialize_with = "replica_ack_wait")]
    pub within: Duration,
}

/// The range a duration option accepts, with the reason given when a value is outside.
struct Bounds {
    min: Duration,
    too_short: &'static str,
    max: Duration,
    /// Why there is a maximum, after "longer than the maximum of <max>"; may be empty.
    too_long: &'static str,
    /// Advice for a number too large to represent.
    huge: &'static str,
}

const WRITE_E_G: &str = "write e.g. \"500ms\", \"30s\" or \"2m\"";

/// Any duration.
const ANY: Bounds = Bounds {
    min: Duration::ZERO,
    too_short: "",
    max: Duration::MAX,
    too_long: "",
    huge: WRITE_E_G,
};

/// A timeout or interval, which dlock-core rejects when zero.
const AT_LEAST_1MS: Bounds = Bounds {
    min: Duration::from_millis(1),
    too_short: "shorter than 1ms; it must be at least 1ms",
    ..ANY
};

// One function per option, so that every message names its key. The checks repeat the
// client builder's, which only runs at `build()` and cannot say where in the file the
// value is.

fn connect_timeout<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Duration>, D::Error> {
    duration(d, "connect_timeout", &AT_LEAST_1MS)
}

fn command_timeout<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Duration>, D::Error> {
    let bounds = Bounds {
        max: dlock_core::limits::MAX_COMMAND_TIMEOUT,
        too_long: "; release memos live three command timeouts in Redis",
        ..AT_LEAST_1MS
    };
    duration(d, "command_timeout", &bounds)
}

fn retry_delay<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Duration>, D::Error> {
    let bounds = Bounds {
        max: dlock_core::limits::MAX_LEASE,
        ..ANY
    };
    duration(d, "retry_delay", &bounds)
}

fn watchdog_timeout<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Duration>, D::Error> {
    let bounds = Bounds {
        min: Duration::from_millis(100),
        too_short:
            "shorter than 100ms; renewal runs every third of it and needs time for a round trip",
        max: dlock_core::limits::MAX_LEASE,
        ..ANY
    };
    duration(d, "watchdog_timeout", &bounds)
}

fn wait<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Duration>, D::Error> {
    let bounds = Bounds {
        huge: "leave `wait` out to wait as long as it takes",
        ..ANY
    };
    duration(d, "wait", &bounds)
}

fn max_wait_recheck<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Duration>, D::Error> {
    duration(d, "max_wait_recheck", &AT_LEAST_1MS)
}

fn failover_wait<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Duration>, D::Error> {
    duration(d, "failover_wait", &ANY)
}

fn replica_ack_wait<'de, D: Deserializer<'de>>(d: D) -> Result<Duration, D::Error> {
    duration(d, "within", &AT_LEAST_1MS).map(Option::unwrap_or_default)
}

/// A duration string such as `"500ms"` or `"2m 30s"` for option `key`, within `bounds`.
fn duration<'de, D: Deserializer<'de>>(
    deserializer: D,
    key: &'static str,
    bounds: &Bounds,
) -> Result<Option<Duration>, D::Error> {
    let text = deserializer.deserialize_str(DurationText(key))?;
    parse_duration(&text, key, bounds)
        .map(Some)
        .map_err(serde::de::Error::custom)
}

/// Parses `text` with humantime and checks it against `bounds`.
fn parse_duration(text: &str, key: &str, bounds: &Bounds) -> Result<Duration, String> {
    let trimmed = text.trim();
    let problem = if trimmed.is_empty() {
        "it is empty".to_owned()
    } else if trimmed.starts_with('-') {
        "a duration cannot be negative".to_owned()
    } else {
        match humantime::parse_duration(trimmed) {
            Ok(value) if value < bounds.min => bounds.too_short.to_owned(),
            Ok(value) if value > bounds.max => format!(
                "longer than the maximum of {}{}",
                shown(bounds.max),
                bounds.too_long
            ),
            Ok(value) => return Ok(value),
            Err(humantime::DurationError::NumberOverflow) => format!(
                "the number is too large to represent, or finer than 1ns; {}",
                bounds.huge
            ),
            Err(e) => format!("{e}; {WRITE_E_G}"),
        }
    };
    Err(format!("invalid duration {text:?} for `{key}`: {problem}"))
}

/// A maximum as the messages show it: whole days as "366 days", whole seconds as "60s".
fn shown(max: Duration) -> String {
    const DAY: u64 = 24 * 60 * 60;
    match max.as_secs() {
        secs if secs >= DAY && secs % DAY == 0 && max.subsec_nanos() == 0 => {
            format!("{} days", secs / DAY)
        }
        secs if max.subsec_nanos() == 0 => format!("{secs}s"),
        _ => humantime::format_duration(max).to_string(),
    }
}

/// Reads the string of a duration option; any other type is an error naming the option.
struct DurationText(&'static str);

impl serde::de::Visitor<'_> for DurationText {
    type Value = String;

    fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "a duration string for `{}`, e.g. \"500ms\", \"30s\" or \"2m\"",
            self.0
        )
    }

    fn visit_str<E: serde::de::Error>(self, text: &str) -> Result<String, E> {
        Ok(text.to_owned())
    }
}

/// A Redis URL, checked when the file is read.
#[derive(Clone, PartialEq, Eq)]
pub struct Address(pub(crate) String);

impl Address {
    /// The URL as written.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl std::fmt::Debug for Address {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&redact(&self.0))
    }
}

impl std::fmt::Display for Address {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&redact(&self.0))
    }
}

impl<'de> Deserialize<'de> for Address {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let url = String::deserialize(deserializer)?;
        check_address(&url).map_err(serde::de::Error::custom)?;
        Ok(Address(url))
    }
}

/// Checks a Redis URL; the message never repeats a password.
pub(crate) fn check_address(url: &str) -> Result<(), String> {
    use redis::IntoConnectionInfo;
    let shown = redact(url);
    if !(url.starts_with("redis://") || url.starts_with("rediss://")) {
        return Err(format!(
            "invalid Redis address {shown:?}: expected a URL like \"redis://127.0.0.1:6379\" (or rediss:// for TLS)"
        ));
    }
    url.into_connection_info().map(|_| ()).map_err(|_| {
        format!("invalid Redis address {shown:?}: expected redis://[user:password@]host:port[/db]")
    })
}

/// A non-empty list of Redis URLs.
#[derive(Debug, Clone)]
pub struct Addresses(pub(crate) Vec<Address>);

impl Addresses {
    /// The URLs as written.
    pub fn urls(&self) -> Vec<String> {
        self.0.iter().map(|a| a.0.clone()).collect()
    }
}

impl<'de> Deserialize<'de> for Addresses {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let list = Vec::<Address>::deserialize(deserializer)?;
        if list.is_empty() {
            return Err(serde::de::Error::custom(
                "empty address list: give at least one address, e.g. [\"redis://127.0.0.1:6379\"]",
            ));
        }
        Ok(Addresses(list))
    }
}

/// A password: shown as `***` by `Debug`.
#[derive(Clone, PartialEq, Eq)]
pub struct Secret(pub(crate) String);

/// Why a non-string password is refused; unlike serde's usual message it does not quote
/// the value, which may be the password written without quotes.
const SECRET_NOT_A_STRING: &str =
    "a password must be a string in quotes, e.g. password = \"...\" (the value is not shown)";

impl<'de> Deserialize<'de> for Secret {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Secret, D::Error> {
        deserializer.deserialize_any(SecretVisitor)
    }
}

struct SecretVisitor;

impl<'de> serde::de::Visitor<'de> for SecretVisitor {
    type Value = Secret;

    fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("a password string")
    }

    fn visit_str<E: serde::de::Error>(self, value: &str) -> Result<Secret, E> {
        Ok(Secret(value.to_owned()))
    }

    fn visit_string<E: serde::de::Error>(self, value: String) -> Result<Secret, E> {
        Ok(Secret(value))
    }

    fn visit_bool<E: serde::de::Error>(self, _: bool) -> Result<Secret, E> {
        Err(E::custom(SECRET_NOT_A_STRING))
    }

    fn visit_i64<E: serde::de::Error>(self, _: i64) -> Result<Secret, E> {
        Err(E::custom(SECRET_NOT_A_STRING))
    }

    fn visit_u64<E: serde::de::Error>(self, _: u64) -> Result<Secret, E> {
        Err(E::custom(SECRET_NOT_A_STRING))
    }

    fn visit_f64<E: serde::de::Error>(self, _: f64) -> Result<Secret, E> {
        Err(E::custom(SECRET_NOT_A_STRING))
    }

    fn visit_seq<A: serde::de::SeqAccess<'de>>(self, _: A) -> Result<Secret, A::Error> {
        Err(serde::de::Error::custom(SECRET_NOT_A_STRING))
    }

    fn visit_map<A: serde::de::MapAccess<'de>>(self, _: A) -> Result<Secret, A::Error> {
        Err(serde::de::Error::custom(SECRET_NOT_A_STRING))
    }
}

impl Secret {
    /// The secret itself; handle with care.
    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl std::fmt::Debug for Secret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("***")
    }
}
