//! A password written in an address never comes out of dlock-config: not in the message
//! (`Display`) or `Debug` of an error, whether the address is refused or not a URL at all,
//! and not in the `Display` or `Debug` of a config that loaded, or of its topology.

use dlock_config::Config;
use proptest::prelude::*;
use proptest::sample::{select, Index};
use proptest::test_runner::TestCaseError;

/// Every scheme the redis crate (1.8) accepts, and some it does not.
const SCHEMES: &[&str] = &[
    "redis",
    "rediss",
    "valkey",
    "valkeys",
    "redis+unix",
    "unix",
    "valkey+unix",
    "http",
    "garbage",
    "",
];

/// The password: 8 to 16 characters, among them the ones that end or split a URL part.
const SECRET: &str = "[A-Za-z0-9@:/?#%&=]{8,16}";

/// Query parameter names the password goes in, as written: the redis crate reads the
/// first three as `pass`.
const SECRET_NAMES: &[&str] = &["pass", "pa%73s", "%70%61%73%73", "password", "p%61ssword"];

#[derive(Debug, Clone)]
struct Case {
    url: String,
    secret: String,
}

/// `text` percent-encoded: every byte, or every byte but letters and digits.
fn encoded(text: &str, all: bool) -> String {
    text.bytes()
        .map(|b| {
            if b.is_ascii_alphanumeric() && !all {
                char::from(b).to_string()
            } else {
                format!("%{b:02X}")
            }
        })
        .collect()
}

fn strings(fixed: &'static [&'static str], random: &'static str) -> BoxedStrategy<String> {
    prop_oneof![
        select(fixed).prop_map(str::to_owned),
        proptest::string::string_regex(random).unwrap(),
    ]
    .boxed()
}

/// Mostly one of `valid` (what dlock-config accepts), sometimes anything `other` gives.
fn mostly(valid: &'static [&'static str], other: BoxedStrategy<String>) -> BoxedStrategy<String> {
    prop_oneof![3 => select(valid).prop_map(str::to_owned), 2 => other].boxed()
}

/// A URL with the password as the userinfo password (`name` none) or as the value of the
/// password parameter `name` among others; written as is (in a query value with `&` as
/// `%26`, which would end the value), percent-encoded, or fully percent-encoded (`form`
/// 0, 1, 2).
fn case() -> impl Strategy<Value = Case> {
    let shape = (
        mostly(
            &["redis", "rediss"],
            select(SCHEMES).prop_map(str::to_owned).boxed(),
        ),
        strings(&["", "app"], "[a-z]{1,7}"),
        mostly(
            &["127.0.0.1", "[::1]", "cache.internal"],
            strings(&["localhost", "", "h^st"], "[a-z][a-z0-9-]{0,6}"),
        ),
        mostly(&["", ":6379"], strings(&[":notaport"], ":[0-9]{1,5}")),
        mostly(
            &["", "/", "/0"],
            strings(&["/run/redis.sock"], "/[a-z0-9._-]{1,7}"),
        ),
    );
    let rest = (
        proptest::collection::vec(
            strings(&["db=1", "protocol=3", "x"], "[a-z]{1,5}=[a-z0-9]{0,5}"),
            0..3,
        ),
        any::<Index>(),
        proptest::option::of(strings(&["insecure"], "[a-z]{1,6}")),
        SECRET,
        proptest::option::of(select(SECRET_NAMES)),
        0..3u8,
    );
    (shape, rest).prop_map(
        |((scheme, user, host, port, path), (mut params, at, fragment, secret, name, form))| {
            let value = match form {
                0 if name.is_some() => secret.replace('&', "%26"),
                0 => secret.clone(),
                1 => encoded(&secret, false),
                _ => encoded(&secret, true),
            };
            let userinfo = match name {
                None => format!("{user}:{value}@"),
                Some(_) if user.is_empty() => String::new(),
                Some(_) => format!("{user}@"),
            };
            if let Some(name) = name {
                params.insert(at.index(params.len() + 1), format!("{name}={value}"));
            }
            let mut url = format!("{scheme}://{userinfo}{host}{port}{path}");
            if !params.is_empty() {
                url.push('?');
                url.push_str(&params.join("&"));
            }
            if let Some(fragment) = fragment {
                url.push('#');
                url.push_str(&fragment);
            }
            Case { url, secret }
        },
    )
}

/// `shown` (from `what`) contains neither the password nor any spelling of it, nor the
/// password the redis crate itself reads from the URL.
fn check(case: &Case, what: &str, shown: &str) -> Result<(), TestCaseError> {
    let mut spellings = vec![
        case.secret.clone(),
        encoded(&case.secret, false),
        encoded(&case.secret, true),
        case.secret.replace('&', "%26"),
    ];
    // Only a long one can be looked for without finding it by chance elsewhere.
    use redis::IntoConnectionInfo;
    if let Ok(info) = case.url.as_str().into_connection_info() {
        if let Some(password) = info.redis_settings().password() {
            if password.len() >= 8 {
                spellings.push(password.to_owned());
            }
        }
    }
    for spelling in spellings {
        prop_assert!(
            !shown.contains(&spelling),
            "{} shows the password {:?} of {:?}: {}",
            what,
            spelling,
            case.url,
            shown
        );
    }
    Ok(())
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
