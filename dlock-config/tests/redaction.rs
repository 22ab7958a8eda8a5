//! A password written in an address never comes out of dlock-config: not in the message
//! (`Display`) or `Debug` of an error, whether the address is refused or not a URL at all,
//! and not in the `Display` or `Debug` of a config that loaded, or of its topology.

use dlock_config::Config;
use proptest::prelude::*;
use proptest::test_runner::TestCaseError;

use dlock_tests::secret_urls::{self, any_scheme, check, mostly, strings, Case};

/// Addresses mostly of the shapes dlock-config accepts (so that both its errors and its
/// loaded configs are looked at), with a password in every place and spelling.
fn case() -> impl Strategy<Value = Case> {
    secret_urls::case(
        mostly(&["redis", "rediss"], any_scheme()),
        &["://"],
        mostly(
            &["127.0.0.1", "[::1]", "cache.internal"],
            strings(&["localhost", "", "h^st"], "[a-z][a-z0-9-]{0,6}"),
        ),
        mostly(&["", ":6379"], strings(&[":notaport"], ":[0-9]{1,5}")),
        mostly(
            &["", "/", "/0"],
            strings(&["/run/redis.sock"], "/[a-z0-9._-]{1,7}"),
        ),
    )
}

/// Loads `text` and checks everything that can be shown of the outcome; whether it
/// loaded.
fn check_loaded(case: &Case, text: &str) -> Result<bool, TestCaseError> {
    match Config::from_toml_str(text) {
        Err(error) => {
            check(case, "Display of the error", &error.to_string())?;
            check(case, "Debug of the error", &format!("{error:?}"))?;
            Ok(false)
        }
        Ok(config) => {
            check(case, "Display of the config", &config.to_string())?;
            check(case, "Debug of the config", &format!("{config:?}"))?;
            if let Ok(topology) = config.topology() {
                check(case, "Debug of the topology", &format!("{topology:?}"))?;
            }
            Ok(true)
        }
    }
}

/// Documents with `url` (a TOML string literal) in every place an address goes.
fn documents(url: &str) -> Vec<String> {
    let other = "\"redis://127.0.0.1:7001\"";
    vec![
        format!("[redis.single]\naddress = {url}\n"),
        format!("[redis.master_slave]\nmaster = {url}\nreplicas = [{url}]\n"),
        format!("[redis.master_slave]\nmaster = {other}\nreplicas = [{other}, {url}]\n"),
        format!("[redis.sentinel]\nmaster_name = \"mymaster\"\nsentinels = [{other}, {url}]\n"),
        format!("[redis.cluster]\nnodes = [{url}]\n"),
        // Three servers, or the same one twice (an error that names it).
        format!("[redlock]\nservers = [{url}, {other}, \"redis://127.0.0.1:7002\"]\n"),
        format!("[redlock]\nservers = [{url}, {other}, {url}]\n"),
        // Malformed TOML around the address.
        format!("[redis.single]\naddress = {url}, 1\n"),
        format!("[redis.single]\naddress = {}\n", &url[..url.len() - 1]),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn no_message_or_display_shows_a_password_of_an_address(case in case()) {
        let literal = toml::Value::String(case.url.clone()).to_string();
        for text in documents(&literal) {
            check_loaded(&case, &text)?;
        }
        // The same address from the environment.
        let config = Config::from_toml_str("[redis.single]\naddress = \"redis://127.0.0.1\"\n")
            .unwrap();
        let address = |name: &str| (name == dlock_config::ADDRESS_ENV).then(|| case.url.clone());
        match config.with_overrides(address) {
            Err(error) => {
                check(&case, "Display of the override error", &error.to_string())?;
                check(&case, "Debug of the override error", &format!("{error:?}"))?;
            }
            Ok(config) => {
                check(&case, "Display of the overridden config", &config.to_string())?;
                check(&case, "Debug of the overridden config", &format!("{config:?}"))?;
            }
        }
    }
}

/// Not vacuous: both outcomes occur, so both the errors and the loaded configs are looked
/// at.
#[test]
fn the_generated_addresses_often_load_and_often_do_not() {
    use proptest::strategy::ValueTree;
    let mut runner = proptest::test_runner::TestRunner::deterministic();
    let (mut loaded, mut refused) = (0, 0);
    for _ in 0..256 {
        let case = case().new_tree(&mut runner).unwrap().current();
        let literal = toml::Value::String(case.url.clone()).to_string();
        let text = format!("[redis.single]\naddress = {literal}\n");
        match check_loaded(&case, &text) {
            Ok(true) => loaded += 1,
            Ok(false) => refused += 1,
            Err(error) => panic!("{error}"),
        }
    }
    assert!(
        loaded >= 16 && refused >= 16,
        "{loaded} loaded, {refused} refused"
    );
}

/// The messages of addresses with a password in each form, exactly.
#[test]
fn refused_addresses_are_shown_without_their_password() {
    let message = |url: &str| {
        Config::from_toml_str(&format!("[redis.single]\naddress = \"{url}\"\n"))
            .unwrap_err()
            .to_string()
    };
    assert_eq!(
        message("redis+unix:///run/redis.sock?user=app&pass=s3cret"),
        "<string>:2:11: invalid Redis address \"redis+unix:///run/redis.sock?user=app&pass=***\": expected a URL like \"redis://127.0.0.1:6379\" (or rediss:// for TLS)"
    );
    assert_eq!(
        message("unix:///run/redis.sock?pa%73s=s3cret&db=2"),
        "<string>:2:11: invalid Redis address \"unix:///run/redis.sock?pa%73s=***&db=2\": expected a URL like \"redis://127.0.0.1:6379\" (or rediss:// for TLS)"
    );
    assert_eq!(
        message("valkey://app:s3cret@127.0.0.1:6379"),
        "<string>:2:11: invalid Redis address \"valkey://app:***@127.0.0.1:6379\": expected a URL like \"redis://127.0.0.1:6379\" (or rediss:// for TLS)"
    );
    // Not a URL: the `/` in the password ends the userinfo, `se` is no port.
    assert_eq!(
        message("redis://app:se/cret@127.0.0.1:6379"),
        "<string>:2:11: invalid Redis address \"redis://app:***@127.0.0.1:6379\": expected redis://[user:password@]host:port[/db]"
    );
    assert_eq!(
        message("redis://s3cret@h^st:6379/0?pass=s3cret"),
        "<string>:2:11: invalid Redis address \"redis://***@h^st:6379/0?pass=***\": expected redis://[user:password@]host:port[/db]"
    );
}

/// A config that loads shows its addresses without the password, in each form.
#[test]
fn loaded_addresses_are_shown_without_their_password() {
    let config = Config::from_toml_str(
        "[redis.sentinel]\nmaster_name = \"mymaster\"\nsentinels = [\"redis://app:p%40ss@127.0.0.1:26379\", \"rediss://127.0.0.1:26380/?pass=s3cret#insecure\"]\n",
    )
    .unwrap();
    assert_eq!(
        config.to_string(),
        "sentinel \"mymaster\" via redis://app:***@127.0.0.1:26379, rediss://127.0.0.1:26380/?pass=***#insecure"
    );
    assert!(!format!("{config:?}").contains("p%40ss"), "{config:?}");
    assert!(!format!("{config:?}").contains("s3cret"), "{config:?}");
}
