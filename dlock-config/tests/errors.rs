//! Every kind of bad configuration gives an error that names the place and the fix.

use std::io::Write;
use std::time::Duration;

use dlock_config::{Config, ConfigError};

fn error(toml: &str) -> String {
    Config::from_toml_str(toml).unwrap_err().to_string()
}

#[test]
fn a_missing_file_names_the_file() {
    let err = Config::from_file("/definitely/not/here.toml").unwrap_err();
    assert!(matches!(err, ConfigError::Read { .. }));
    assert!(
        err.to_string()
            .starts_with("cannot read dlock config /definitely/not/here.toml: "),
        "{err}"
    );
}

#[test]
fn a_file_larger_than_any_config_is_refused_without_reading_it_all() {
    // A device that never ends is read up to the limit, then refused.
    let err = Config::from_file("/dev/zero").unwrap_err();
    assert!(
        matches!(err, ConfigError::TooLarge { limit, .. } if limit == dlock_config::MAX_CONFIG_BYTES),
        "{err:?}"
    );
    assert_eq!(
        err.to_string(),
        "dlock config /dev/zero is larger than 1048576 bytes; a dlock config is a few hundred bytes: is it the right file?"
    );
    // A file of exactly the limit is read (and then judged as TOML).
    let mut file = tempfile::NamedTempFile::new().unwrap();
    let mut text = b"[redis.single]\naddress = \"redis://127.0.0.1:6379\"\n".to_vec();
    text.resize(dlock_config::MAX_CONFIG_BYTES as usize, b'\n');
    file.write_all(&text).unwrap();
    assert_eq!(
        Config::from_file(file.path()).unwrap().to_string(),
        "single redis://127.0.0.1:6379"
    );
    // A referenced file (a TLS certificate) is bounded the same way.
    let mut config = tempfile::NamedTempFile::new().unwrap();
    config
        .write_all(b"[redis.single]\naddress = \"rediss://127.0.0.1:6379\"\n\n[connection]\ntls_ca_file = \"/dev/zero\"\n")
        .unwrap();
    let err = Config::from_file(config.path())
        .unwrap()
        .topology()
        .unwrap_err()
        .to_string();
    assert!(
        err.starts_with("cannot read tls_ca_file /dev/zero: larger than 1048576 bytes"),
        "{err}"
    );
}

#[test]
fn a_file_that_is_not_utf8_names_the_file_and_offset() {
    let mut file = tempfile::NamedTempFile::new().unwrap();
    file.write_all(b"[redis.single]\naddress = \"\xff\"\n")
        .unwrap();
    let err = Config::from_file(file.path()).unwrap_err().to_string();
    assert_eq!(
        err,
        format!(
            "dlock config {} is not UTF-8 text (invalid byte at offset 26); save it as UTF-8",
            file.path().display()
        )
    );
}

#[test]
fn invalid_toml_gives_line_and_column_with_the_file_name() {
    let mut file = tempfile::NamedTempFile::new().unwrap();
    file.write_all(b"[redis.single]\naddress = \"redis://127.0.0.1\"\n[lock\n")
        .unwrap();
    let err = Config::from_file(file.path()).unwrap_err().to_string();
    assert_eq!(
        err,
        format!(
            "{}:3:6: unclosed table, expected `]`",
            file.path().display()
        )
    );
}

#[test]
fn an_unknown_key_is_named_with_the_expected_ones() {
    assert_eq!(
        error("[redis.single]\naddress = \"redis://127.0.0.1\"\n\n[lock]\nwatchdog = \"30s\"\n"),
        "<string>:5:1: unknown field `watchdog`, expected one of `watchdog_timeout`, `key_prefix`, `wait`, `max_wait_recheck`, `failover_wait`, `replica_acks`, `scripts`"
    );
    assert_eq!(
        error("[redis.single]\naddress = \"redis://127.0.0.1\"\n[pool]\nsize = 4\n"),
        "<string>:3:2: unknown field `pool`, expected one of `redis`, `connection`, `lock`, `redlock`"
    );
}

#[test]
fn an_unknown_topology_lists_the_valid_ones() {
    assert_eq!(
        error("[redis.replicated]\naddress = \"redis://127.0.0.1\"\n"),
        "<string>:1:8: unknown Redis topology: unknown variant `replicated`, expected one of `single`, `master_replicas`, `master_slave`, `sentinel`, `cluster`"
    );
}

#[test]
fn no_topology_is_an_error() {
    assert_eq!(
        error("[lock]\nkey_prefix = \"x\"\n"),
        "<string>:1:1: no Redis topology: add exactly one of [redis.single], [redis.master_slave], [redis.sentinel] or [redis.cluster], or a [redlock] table"
    );
    assert_eq!(
        error("[redis]\n"),
        "<string>:1:1: [redis] names no topology: add exactly one of [redis.single], [redis.master_slave], [redis.sentinel] or [redis.cluster]"
    );
}

#[test]
fn two_topologies_are_an_error() {
    assert_eq!(
        error("[redis.single]\naddress = \"redis://127.0.0.1\"\n\n[redis.cluster]\nnodes = [\"redis://127.0.0.1:7000\"]\n"),
        "<string>:1:2: more than one Redis topology: keep exactly one of [redis.single], [redis.master_slave], [redis.sentinel] or [redis.cluster]"
    );
}

#[test]
fn an_empty_address_list_is_an_error() {
    assert_eq!(
        error("[redis.cluster]\nnodes = []\n"),
        "<string>:2:9: empty address list: give at least one address, e.g. [\"redis://127.0.0.1:6379\"]"
    );
    assert_eq!(
        error("[redis.sentinel]\nmaster_name = \"m\"\nsentinels = []\n"),
        "<string>:3:13: empty address list: give at least one address, e.g. [\"redis://127.0.0.1:6379\"]"
    );
}

#[test]
fn a_bad_url_is_named_without_its_password() {
    assert_eq!(
        error("[redis.single]\naddress = \"127.0.0.1:6379\"\n"),
        "<string>:2:11: invalid Redis address \"127.0.0.1:6379\": expected a URL like \"redis://127.0.0.1:6379\" (or rediss:// for TLS)"
    );
    let err = error("[redis.master_slave]\nmaster = \"redis://127.0.0.1\"\nreplicas = [\"redis://app:hunter2@127.0.0.1:notaport\"]\n");
    assert_eq!(
        err,
        "<string>:3:12: invalid Redis address \"redis://app:***@127.0.0.1:notaport\": expected redis://[user:password@]host:port[/db]"
    );
    assert!(!err.contains("hunter2"), "{err}");
}

#[test]
fn a_bad_duration_says_how_to_write_one() {
    assert_eq!(
        error("[redis.single]\naddress = \"redis://127.0.0.1\"\n[lock]\nwatchdog_timeout = \"30 parsecs\"\n"),
        "<string>:4:20: invalid duration \"30 parsecs\" for `watchdog_timeout`: unknown time unit \"parsecs\", supported units: ns, us/µs, ms, sec, min, hours, days, weeks, months, years (and few variations); write e.g. \"500ms\", \"30s\" or \"2m\""
    );
}

/// `[section]\nkey = value` under a valid topology; the value is on line 4.
fn with_option(section: &str, key: &str, value: &str) -> String {
    format!("[redis.single]\naddress = \"redis://127.0.0.1\"\n[{section}]\n{key} = {value}\n")
}

#[test]
fn negative_empty_and_overflowing_durations_name_their_key() {
    let too_large = "the number is too large to represent, or finer than 1ns";
    let write = "write e.g. \"500ms\", \"30s\" or \"2m\"";
    let leave_out = "leave `wait` out to wait as long as it takes";
    for (section, key, value, problem) in [
        (
            "connection",
            "command_timeout",
            "-5s",
            "a duration cannot be negative".to_owned(),
        ),
        (
            "lock",
            "wait",
            " -1ms",
            "a duration cannot be negative".to_owned(),
        ),
        ("lock", "watchdog_timeout", "", "it is empty".to_owned()),
        ("connection", "retry_delay", "   ", "it is empty".to_owned()),
        (
            "lock",
            "wait",
            "99999999999999999999s",
            format!("{too_large}; {leave_out}"),
        ),
        (
            "lock",
            "wait",
            "18446744073709551615ms",
            format!("{too_large}; {leave_out}"),
        ),
        (
            "lock",
            "failover_wait",
            "600000000000 years",
            format!("{too_large}; {write}"),
        ),
        (
            "lock",
            "max_wait_recheck",
            "0.0000000001s",
            format!("{too_large}; {write}"),
        ),
        (
            "connection",
            "connect_timeout",
            "5",
            format!("time unit needed, for example 5sec or 5ms; {write}"),
        ),
    ] {
        assert_eq!(
            error(&with_option(section, key, &format!("\"{value}\""))),
            format!(
                "<string>:4:{}: invalid duration \"{value}\" for `{key}`: {problem}",
                key.len() + 4
            ),
            "{key} = {value:?}"
        );
    }
}

#[test]
fn a_duration_of_another_type_names_its_key() {
    assert_eq!(
        error(&with_option("lock", "wait", "-5")),
        "<string>:4:8: invalid type: integer `-5`, expected a duration string for `wait`, e.g. \"500ms\", \"30s\" or \"2m\""
    );
    assert_eq!(
        error(&with_option("connection", "command_timeout", "3.5")),
        "<string>:4:19: invalid type: floating point `3.5`, expected a duration string for `command_timeout`, e.g. \"500ms\", \"30s\" or \"2m\""
    );
    assert_eq!(
        error(&with_option("lock", "watchdog_timeout", "[\"30s\"]")),
        "<string>:4:20: invalid type: sequence, expected a duration string for `watchdog_timeout`, e.g. \"500ms\", \"30s\" or \"2m\""
    );
}

#[test]
fn zero_is_rejected_where_the_client_cannot_use_it() {
    for (section, key) in [
        ("connection", "connect_timeout"),
        ("connection", "command_timeout"),
        ("lock", "max_wait_recheck"),
    ] {
        for value in ["0s", "999us"] {
            assert_eq!(
                error(&with_option(section, key, &format!("\"{value}\""))),
                format!(
                    "<string>:4:{}: invalid duration \"{value}\" for `{key}`: shorter than 1ms; it must be at least 1ms",
                    key.len() + 4
                )
            );
        }
    }
    for value in ["0s", "99ms"] {
        assert_eq!(
            error(&with_option("lock", "watchdog_timeout", &format!("\"{value}\""))),
            format!("<string>:4:20: invalid duration \"{value}\" for `watchdog_timeout`: shorter than 100ms; renewal runs every third of it and needs time for a round trip")
        );
    }
}

#[test]
fn lease_and_retry_pauses_over_a_year_are_rejected() {
    assert_eq!(
        error(&with_option("lock", "watchdog_timeout", "\"367days\"")),
        "<string>:4:20: invalid duration \"367days\" for `watchdog_timeout`: longer than the maximum of 366 days"
    );
    assert_eq!(
        error(&with_option("connection", "retry_delay", "\"18446744073709551615s\"")),
        "<string>:4:15: invalid duration \"18446744073709551615s\" for `retry_delay`: longer than the maximum of 366 days"
    );
}

#[test]
fn a_command_timeout_over_a_minute_is_rejected() {
    assert_eq!(
        error(&with_option("connection", "command_timeout", "\"61s\"")),
        "<string>:4:19: invalid duration \"61s\" for `command_timeout`: longer than the maximum of 60s; release memos live three command timeouts in Redis"
    );
    let config =
        Config::from_toml_str(&with_option("connection", "command_timeout", "\"60s\"")).unwrap();
    assert_eq!(
        config.connection.command_timeout,
        Some(dlock_core::limits::MAX_COMMAND_TIMEOUT)
    );
}

#[test]
fn extreme_but_meaningful_durations_are_accepted() {
    let parse = |section, key, value: &str| {
        Config::from_toml_str(&with_option(section, key, &format!("\"{value}\"")))
            .unwrap_or_else(|e| panic!("{key} = {value:?}: {e}"))
    };
    // The longest waits humantime can write: the client treats a wait whose deadline
    // cannot be represented as no deadline.
    let config = parse("lock", "wait", "18446744073709551615s");
    assert_eq!(config.lock.wait, Some(Duration::from_secs(u64::MAX)));
    let config = parse("lock", "wait", "18446744073709ms");
    assert_eq!(
        config.lock.wait,
        Some(Duration::from_millis(18_446_744_073_709))
    );
    let config = parse("lock", "wait", "0s");
    assert_eq!(config.lock.wait, Some(Duration::ZERO), "zero: try once");
    let config = parse("lock", "failover_wait", "0s");
    assert_eq!(config.lock.failover_wait, Some(Duration::ZERO));
    let config = parse("lock", "watchdog_timeout", "366days");
    assert_eq!(
        config.lock.watchdog_timeout,
        Some(dlock_core::limits::MAX_LEASE)
    );
    let config = parse("lock", "watchdog_timeout", "100ms");
    assert_eq!(
        config.lock.watchdog_timeout,
        Some(Duration::from_millis(100))
    );
    let config = parse("connection", "command_timeout", " 1ms ");
    assert_eq!(
        config.connection.command_timeout,
        Some(Duration::from_millis(1))
    );
    let config = parse("connection", "retry_delay", "0s");
    assert_eq!(config.connection.retry_delay, Some(Duration::ZERO));
}

#[tokio::test]
async fn a_bad_key_prefix_is_reported_by_build_without_connecting() {
    // Port 1: nothing listens, so reaching the network would give a connect error instead.
    let build = |prefix: &str| {
        let toml = format!(
            "[redis.single]\naddress = \"redis://127.0.0.1:1\"\n[lock]\nkey_prefix = \"{prefix}\"\n"
        );
        async move { Config::from_toml_str(&toml).unwrap().build().await }
    };
    let err = build("shop\\u0000:").await.unwrap_err();
    assert!(
        matches!(
            err,
            ConfigError::Lock(dlock_core::LockError::InvalidName { .. })
        ),
        "{err}"
    );
    assert_eq!(
        err.to_string(),
        "invalid key prefix \"shop\\0:\": a key prefix must not contain ASCII control characters; found U+0000 at byte 4"
    );
    let err = build(&"p".repeat(dlock_core::limits::MAX_NAME_LEN + 1))
        .await
        .unwrap_err();
    assert_eq!(
        err.to_string(),
        format!(
            "invalid key prefix \"{}…\" (4097 bytes): a key prefix is at most 4096 bytes",
            "p".repeat(64)
        )
    );
}

#[test]
fn a_database_in_cluster_mode_is_an_error() {
    assert_eq!(
        error("[redis.cluster]\nnodes = [\"redis://127.0.0.1:7000\"]\n\n[connection]\ndatabase = 2\n"),
        "<string>:5:12: `database` is not supported with [redis.cluster]: a Redis Cluster only has database 0; remove it"
    );
}

#[test]
fn a_wrong_value_type_is_located() {
    assert_eq!(
        error("[redis.single]\naddress = \"redis://127.0.0.1\"\n[connection]\nretry_attempts = \"three\"\n"),
        "<string>:4:18: invalid type: string \"three\", expected u32"
    );
}

#[test]
fn debug_and_display_never_show_the_password() {
    let config = Config::from_toml_str(
        "[redis.single]\naddress = \"redis://app:hunter2@127.0.0.1:6379\"\n[connection]\npassword = \"s3cret\"\n",
    )
    .unwrap();
    for shown in [
        format!("{config:?}"),
        config.to_string(),
        format!("{:?}", config.topology().unwrap()),
    ] {
        assert!(
            !shown.contains("hunter2") && !shown.contains("s3cret"),
            "{shown}"
        );
    }
    assert_eq!(config.to_string(), "single redis://app:***@127.0.0.1:6379");
}

#[test]
fn environment_overrides_replace_password_and_addresses() {
    let config =
        Config::from_toml_str("[redis.cluster]\nnodes = [\"redis://127.0.0.1:7000\"]\n").unwrap();
    let vars = |name: &str| match name {
        "DLOCK_PASSWORD" => Some("from-env".to_owned()),
        "DLOCK_ADDRESS" => Some("redis://127.0.0.1:7100, redis://127.0.0.1:7101".to_owned()),
        _ => None,
    };
    let config = config.with_overrides(vars).unwrap();
    assert_eq!(
        config.connection.password.as_ref().map(|p| p.expose()),
        Some("from-env")
    );
    let Some(dlock_config::Redis::Cluster(cluster)) = &config.redis else {
        panic!("still a cluster")
    };
    assert_eq!(
        cluster.nodes.urls(),
        ["redis://127.0.0.1:7100", "redis://127.0.0.1:7101"]
    );

    let bad = Config::from_toml_str("[redis.single]\naddress = \"redis://127.0.0.1\"\n")
        .unwrap()
        .with_overrides(|name| (name == "DLOCK_ADDRESS").then(|| "localhost:1".to_owned()))
        .unwrap_err();
    assert!(
        bad.to_string()
            .starts_with("environment variable DLOCK_ADDRESS: invalid Redis address"),
        "{bad}"
    );
}

#[test]
fn the_sample_files_parse() {
    for mode in ["single", "master_slave", "sentinel", "cluster"] {
        let path = format!(
            "{}/../examples/config/{mode}.toml",
            env!("CARGO_MANIFEST_DIR")
        );
        let config = Config::from_file(&path).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(config.topology().unwrap().mode(), mode);
    }
}

#[test]
fn an_unreadable_tls_ca_file_names_the_file_relative_to_the_config() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("dlock.toml");
    std::fs::write(
        &path,
        "[redis.single]\naddress = \"rediss://127.0.0.1:6379\"\n[connection]\ntls_ca_file = \"missing-ca.pem\"\n",
    )
    .unwrap();
    let err = Config::from_file(&path)
        .unwrap()
        .topology()
        .unwrap_err()
        .to_string();
    let expected = format!(
        "cannot read tls_ca_file {}: ",
        dir.path().join("missing-ca.pem").display()
    );
    assert!(err.starts_with(&expected), "{err}");
}

#[test]
fn a_client_certificate_and_its_key_come_together() {
    let base = "[redis.single]\naddress = \"rediss://127.0.0.1:6379\"\n[connection]\n";
    assert_eq!(
        error(&format!("{base}tls_cert_file = \"client.pem\"\n")),
        "<string>:4:17: `tls_cert_file` needs `tls_key_file`: a client certificate is presented with its private key; add both or neither"
    );
    assert_eq!(
        error(&format!("{base}tls_key_file = \"client.key\"\n")),
        "<string>:4:16: `tls_key_file` needs `tls_cert_file`: a private key is presented with its client certificate; add both or neither"
    );
}

#[test]
fn unreadable_client_certificate_files_are_named_relative_to_the_config() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("dlock.toml");
    std::fs::write(
        dir.path().join("client.pem"),
        "-----BEGIN CERTIFICATE-----\n",
    )
    .unwrap();
    for (cert, key, missing, option) in [
        ("gone.pem", "client.pem", "gone.pem", "tls_cert_file"),
        ("client.pem", "gone.key", "gone.key", "tls_key_file"),
    ] {
        std::fs::write(
            &path,
            format!("[redis.single]\naddress = \"rediss://127.0.0.1:6379\"\n[connection]\ntls_cert_file = \"{cert}\"\ntls_key_file = \"{key}\"\n"),
        )
        .unwrap();
        let err = Config::from_file(&path)
            .unwrap()
            .topology()
            .unwrap_err()
            .to_string();
        let expected = format!(
            "cannot read {option} {}: ",
            dir.path().join(missing).display()
        );
        assert!(err.starts_with(&expected), "{err}");
    }
}

#[test]
fn a_password_that_is_not_a_string_is_refused_without_showing_it() {
    for value in [
        "31415926535",
        "true",
        "3.14",
        "[\"hunter2\"]",
        "{ p = \"hunter2\" }",
    ] {
        let text = format!(
            "[redis.single]\naddress = \"redis://127.0.0.1:6379\"\n[connection]\npassword = {value}\n"
        );
        assert_eq!(
            error(&text),
            "<string>:4:12: a password must be a string in quotes, e.g. password = \"...\" (the value is not shown)",
            "{value}"
        );
    }
}

#[test]
fn replica_acks_need_both_fields_and_a_real_wait() {
    let base = "[redis.single]\naddress = \"redis://127.0.0.1:6379\"\n[lock]\n";
    assert_eq!(
        error(&format!("{base}replica_acks = {{ replicas = 1 }}\n")),
        "<string>:4:16: missing field `within`"
    );
    assert_eq!(
        error(&format!("{base}replica_acks = {{ replicas = 1, within = \"0ms\" }}\n")),
        "<string>:4:41: invalid duration \"0ms\" for `within`: shorter than 1ms; it must be at least 1ms"
    );
    assert_eq!(
        error(&format!(
            "{base}replica_acks = {{ replicas = 1, within = \"1s\", wait = true }}\n"
        )),
        "<string>:4:47: unknown field `wait`, expected `replicas` or `within`"
    );
    let config = Config::from_toml_str(&format!(
        "{base}replica_acks = {{ replicas = 2, within = \"150ms\" }}\n"
    ))
    .unwrap();
    let acks = config.lock.replica_acks.unwrap();
    assert_eq!(
        (acks.replicas, acks.within),
        (2, Duration::from_millis(150))
    );
}

#[test]
fn a_redlock_table_needs_three_distinct_servers() {
    let base = "[redis.single]\naddress = \"redis://127.0.0.1:6379\"\n[redlock]\n";
    let two = format!("{base}servers = [\"redis://127.0.0.1:7001\", \"redis://127.0.0.1:7002\"]\n");
    assert_eq!(
        error(&two),
        "<string>:4:11: [redlock] servers: a RedLock needs at least 3 independent servers (5 is typical), got 2"
    );
    let dup = format!(
        "{base}servers = [\"redis://127.0.0.1:7001\", \"redis://127.0.0.1:7002\", \"redis://127.0.0.1:7001\"]\n"
    );
    assert_eq!(
        error(&dup),
        "<string>:4:11: [redlock] servers: entries 1 and 3 are the same server redis://127.0.0.1:7001; list each independent server once"
    );
    let bad = format!(
        "{base}servers = [\"redis://127.0.0.1:7001\", \"http://127.0.0.1:7002\", \"redis://127.0.0.1:7003\"]\n"
    );
    assert!(
        error(&bad).starts_with("<string>:4:11: invalid Redis address \"http://127.0.0.1:7002\""),
        "{}",
        error(&bad)
    );
    let unknown = format!("{base}server = []\n");
    assert!(
        error(&unknown).contains("unknown field `server`"),
        "{}",
        error(&unknown)
    );
}

#[tokio::test]
async fn build_redlock_without_the_table_says_so() {
    let config =
        Config::from_toml_str("[redis.single]\naddress = \"redis://127.0.0.1:6379\"\n").unwrap();
    let err = config.build_redlock().await.unwrap_err();
    assert!(matches!(err, ConfigError::NoRedLock), "{err}");
    assert!(err.to_string().contains("no [redlock] table"), "{err}");
}

#[tokio::test]
async fn a_file_with_only_a_redlock_table_loads_and_build_says_there_is_no_redis() {
    let config = Config::from_toml_str(
        "[redlock]\nservers = [\"redis://127.0.0.1:7001\", \"redis://127.0.0.1:7002\", \"redis://127.0.0.1:7003\"]\n",
    )
    .unwrap();
    assert!(config.redis.is_none());
    assert_eq!(config.to_string(), "redlock over 3 servers");
    let err = config.build().await.unwrap_err();
    assert!(matches!(err, ConfigError::NoRedis), "{err}");
    let message = err.to_string();
    assert!(
        message.contains("no [redis] table") && message.contains("build_redlock"),
        "{message}"
    );
    assert!(matches!(config.topology(), Err(ConfigError::NoRedis)));
}

#[test]
fn a_file_with_neither_table_names_both() {
    let message = error("[connection]\ncommand_timeout = \"1s\"\n");
    assert!(
        message.contains("[redis.single]") && message.contains("[redlock]"),
        "{message}"
    );
}

#[test]
fn an_unknown_script_mode_names_the_choices() {
    assert_eq!(
        error("[redis.single]\naddress = \"redis://127.0.0.1\"\n[lock]\nscripts = \"lua\"\n"),
        "<string>:4:11: unknown variant `lua`, expected one of `auto`, `eval`, `functions`"
    );
}

/// `scripts = "functions"` reaches the client: without dlock's function library on the
/// server it refuses to connect, naming the library; `"eval"` connects.
#[tokio::test]
async fn the_script_mode_reaches_the_client() {
    let server = dlock_tests::RedisServer::start();
    let toml = |mode: &str| {
        format!(
            "[redis.single]\naddress = \"{}\"\n[lock]\nscripts = \"{mode}\"\n",
            server.url()
        )
    };
    let refused = Config::from_toml_str(&toml("functions"))
        .unwrap()
        .build()
        .await
        .unwrap_err();
    assert!(
        matches!(
            &refused,
            ConfigError::Lock(dlock_core::LockError::FunctionLibraryMissing { .. })
        ),
        "{refused:?}"
    );
    let client = Config::from_toml_str(&toml("eval"))
        .unwrap()
        .build()
        .await
        .unwrap();
    client
        .lock("a")
        .lock()
        .await
        .unwrap()
        .unlock()
        .await
        .unwrap();
}

/// `${VAR}` references: filled in from the lookup, in any string value, written so that a
/// value cannot change the file's structure; mistakes are errors at the reference, and
/// later errors still point into the file as written.
#[test]
fn variable_references_are_filled_in_and_their_mistakes_located() {
    let env = |name: &str| match name {
        "HOST" => Some("127.0.0.7".to_owned()),
        "PREFIX" => Some("shop:\"x".to_owned()),
        _ => None,
    };
    let load = |text: &str| Config::from_toml_str_with(text, env);
    let config = load(
        "[redis.single]\naddress = \"redis://${HOST}:${PORT:-6380}\"\n[lock]\nkey_prefix = \"${PREFIX}\"\n",
    )
    .unwrap();
    assert_eq!(config.to_string(), "single redis://127.0.0.7:6380");
    assert_eq!(config.lock.key_prefix.as_deref(), Some("shop:\"x"));
    // Comments are not filled in; `$${` is a literal `${`.
    let config = load(
        "# ${NOPE}\n[redis.single]\naddress = \"redis://127.0.0.1\"\n[lock]\nkey_prefix = \"$${HOST}\"\n",
    )
    .unwrap();
    assert_eq!(config.lock.key_prefix.as_deref(), Some("${HOST}"));
    assert_eq!(
        load("[redis.single]\naddress = \"redis://${REDIS_HOST}:6379\"\n")
            .unwrap_err()
            .to_string(),
        "<string>:2:20: environment variable REDIS_HOST is not set (used as ${REDIS_HOST}); set it, or give a default: ${REDIS_HOST:-...}"
    );
    // After a substitution that lengthens line 2, an error on line 3 keeps its column.
    assert_eq!(
        load("[redis.single]\naddress = \"redis://${HOST:-a-much-longer-default-host}\"\n  bogus = 1\n")
            .unwrap_err()
            .to_string(),
        "<string>:3:3: unknown field `bogus`, expected `address`"
    );
}

/// The master/replicas topology has one name in the API and the config
/// (`master_slave`), and the other (`master_replicas`) is accepted in both.
#[test]
fn master_replicas_is_another_name_for_master_slave() {
    let text = |table: &str| {
        format!("[redis.{table}]\nmaster = \"redis://127.0.0.1:6379\"\nreplicas = [\"redis://127.0.0.1:6380\"]\n")
    };
    let (slave, replicas) = (
        Config::from_toml_str(&text("master_slave")).unwrap(),
        Config::from_toml_str(&text("master_replicas")).unwrap(),
    );
    assert_eq!(slave.to_string(), replicas.to_string());
    assert_eq!(
        format!("{:?}", slave.topology().unwrap()),
        format!(
            "{:?}",
            dlock_core::Topology::master_replicas(
                "redis://127.0.0.1:6379",
                vec!["redis://127.0.0.1:6380".to_owned()]
            )
        )
    );
    assert_eq!(
        format!("{:?}", slave.topology().unwrap()),
        format!(
            "{:?}",
            dlock_core::Topology::master_slave(
                "redis://127.0.0.1:6379",
                vec!["redis://127.0.0.1:6380".to_owned()]
            )
        )
    );
}
