//! Every kind of bad configuration gives an error that names the place and the fix.

use std::io::Write;

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
        "<string>:5:1: unknown field `watchdog`, expected one of `watchdog_timeout`, `key_prefix`, `wait`, `max_wait_recheck`, `failover_wait`"
    );
    assert_eq!(
        error("[redis.single]\naddress = \"redis://127.0.0.1\"\n[pool]\nsize = 4\n"),
        "<string>:3:2: unknown field `pool`, expected one of `redis`, `connection`, `lock`"
    );
}

#[test]
fn an_unknown_topology_lists_the_valid_ones() {
    assert_eq!(
        error("[redis.replicated]\naddress = \"redis://127.0.0.1\"\n"),
        "<string>:1:8: unknown Redis topology: unknown variant `replicated`, expected one of `single`, `master_slave`, `sentinel`, `cluster`"
    );
}

#[test]
fn no_topology_is_an_error() {
    assert_eq!(
        error("[lock]\nkey_prefix = \"x\"\n"),
        "<string>:1:1: no Redis topology: add exactly one of [redis.single], [redis.master_slave], [redis.sentinel] or [redis.cluster]"
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
        "<string>:4:20: invalid value: string \"30 parsecs\", expected a duration; write e.g. \"500ms\", \"30s\" or \"2m\""
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
    let dlock_config::Redis::Cluster(cluster) = &config.redis else {
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
