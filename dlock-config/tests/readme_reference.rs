//! The README's annotated `dlock.toml` is a valid config whose values are the defaults it
//! claims, so that the reference a reader copies never drifts from the parser.

use std::time::Duration;

use dlock_config::Config;

/// How the reference starts in the README.
const START: &str = "```toml\n# dlock.toml";

fn readme_reference() -> String {
    let readme = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../README.md"))
        .expect("the workspace README");
    let start = readme
        .find(START)
        .expect("the annotated dlock.toml in the README")
        + 8;
    let end = start + readme[start..].find("\n```").expect("its closing fence") + 1;
    readme[start..end].to_owned()
}

#[test]
fn the_readme_reference_parses_with_the_defaults_it_states() {
    let config = Config::from_toml_str(&readme_reference()).unwrap();
    let connection = &config.connection;
    assert_eq!(connection.connect_timeout, Some(Duration::from_secs(5)));
    assert_eq!(connection.command_timeout, Some(Duration::from_secs(3)));
    assert_eq!(connection.retry_attempts, Some(3));
    assert_eq!(connection.retry_delay, Some(Duration::from_millis(50)));
    let lock = &config.lock;
    assert_eq!(lock.watchdog_timeout, Some(Duration::from_secs(30)));
    assert_eq!(lock.max_wait_recheck, Some(Duration::from_secs(1)));
    assert_eq!(lock.failover_wait, Some(Duration::from_secs(10)));
}

#[test]
fn every_commented_setting_of_the_reference_is_a_real_one() {
    // Uncomment the optional settings of [connection] and [lock] (the alternatives of
    // [redis.*] are other topologies, left out): the file must still parse.
    let mut table = "";
    let mut text = String::new();
    for line in readme_reference().lines() {
        let trimmed = line.trim_start();
        if trimmed.starts_with('[') {
            table = trimmed.split_whitespace().next().unwrap_or("");
        }
        let optional = trimmed.starts_with("# ") && trimmed.contains(" = ");
        if optional && (table == "[connection]" || table == "[lock]") {
            let setting = trimmed.trim_start_matches("# ");
            // Files named by the TLS settings would have to exist; their names are checked
            // by the model's field list (an unknown key fails below all the same).
            if !setting.starts_with("tls_") {
                text.push_str(setting);
                text.push('\n');
            }
            continue;
        }
        text.push_str(line);
        text.push('\n');
    }
    let config = Config::from_toml_str(&text).unwrap_or_else(|e| panic!("{e}\n{text}"));
    assert_eq!(config.connection.username.as_deref(), Some("dlock"));
    assert_eq!(config.lock.wait, Some(Duration::from_secs(10)));
}

#[test]
fn a_connection_setting_under_a_topology_points_to_its_table() {
    let err = Config::from_toml_str(
        "[redis.single]\naddress = \"redis://127.0.0.1:6379\"\npassword = \"secret\"\n",
    )
    .unwrap_err()
    .to_string();
    assert_eq!(
        err,
        "<string>:3:1: unknown field `password`, expected `address`; this setting belongs in the [connection] table, which applies to every topology (see the annotated dlock.toml in the README)"
    );
    assert!(!err.contains("secret"));
    let err = Config::from_toml_str(
        "[redis.single]\naddress = \"redis://127.0.0.1:6379\"\nkey_prefix = \"shop:\"\n",
    )
    .unwrap_err()
    .to_string();
    assert!(err.contains("belongs in the [lock] table"), "{err}");
    // At the top of the file, too.
    let err = Config::from_toml_str(
        "password = \"secret\"\n[redis.single]\naddress = \"redis://127.0.0.1:6379\"\n",
    )
    .unwrap_err()
    .to_string();
    assert!(err.contains("belongs in the [connection] table"), "{err}");
}
