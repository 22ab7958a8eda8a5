//! Property tests: whatever the URL form and wherever its password sits (userinfo, a
//! `pass`/`password` query parameter, with or without percent-encoding), nothing that
//! shows an address shows the password: [`redact`], `Debug` of a [`Topology`], the
//! deployment identity, and the error of a failed connect.

use std::time::Duration;

use proptest::prelude::*;
use proptest::sample::{select, Index};
use proptest::test_runner::TestCaseError;

use super::redact;
use crate::{LockClient, Topology};

/// Every scheme the redis crate (1.8) accepts (the first [`ACCEPTED`]), and some it does
/// not.
const SCHEMES: &[&str] = &[
    "redis",
    "rediss",
    "valkey",
    "valkeys",
    "redis+unix",
    "unix",
    "valkey+unix",
    "REDIS",
    "http",
    "garbage",
    "gar bage",
    "",
];

/// How many of [`SCHEMES`] the redis crate accepts.
const ACCEPTED: usize = 7;

/// The password: 8 to 16 characters, among them the ones that end or split a URL part.
const SECRET: &str = "[A-Za-z0-9@:/?#%&=]{8,16}";

/// Query parameter names the password goes in, as written: the redis crate reads the
/// first three as `pass`.
const SECRET_NAMES: &[&str] = &["pass", "pa%73s", "%70%61%73%73", "password", "p%61ssword"];

#[derive(Debug, Clone, Copy)]
enum Spot {
    /// `user:<secret>@`.
    Password,
    /// `<name>=<secret>` among the other query parameters.
    Query(&'static str),
}

#[derive(Debug, Clone, Copy)]
enum Form {
    /// As it is; in a query value an `&` is written `%26`, since an unencoded one would end
    /// the value (the redis crate would read only what comes before it as the password).
    AsIs,
    /// Every character but a letter or digit percent-encoded.
    Encoded,
    /// Every character percent-encoded.
    FullyEncoded,
}

#[derive(Debug, Clone)]
struct Case {
    url: String,
    secret: String,
}

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

fn written(secret: &str, spot: Spot, form: Form) -> String {
    match (form, spot) {
        (Form::AsIs, Spot::Password) => secret.to_owned(),
        (Form::AsIs, Spot::Query(_)) => secret.replace('&', "%26"),
        (Form::Encoded, _) => encoded(secret, false),
        (Form::FullyEncoded, _) => encoded(secret, true),
    }
}

fn strings(fixed: &'static [&'static str], random: &'static str) -> BoxedStrategy<String> {
    prop_oneof![
        select(fixed).prop_map(str::to_owned),
        proptest::string::string_regex(random).unwrap(),
    ]
    .boxed()
}

fn any_host() -> BoxedStrategy<String> {
    strings(
        &[
            "127.0.0.1",
            "localhost",
            "[::1]",
            "redis.internal",
            "",
            "h^st",
        ],
        "[a-z][a-z0-9-]{0,6}",
    )
}

fn any_port() -> BoxedStrategy<String> {
    strings(&["", ":6379", ":1", ":notaport"], ":[0-9]{1,5}")
}

fn any_path() -> BoxedStrategy<String> {
    strings(
        &["", "/", "/0", "/15", "/run/redis.sock"],
        "/[a-z0-9._-]{1,7}",
    )
}

fn spot() -> impl Strategy<Value = Spot> {
    prop_oneof![
        Just(Spot::Password),
        select(SECRET_NAMES).prop_map(Spot::Query),
    ]
}

fn form() -> impl Strategy<Value = Form> {
    prop_oneof![
        Just(Form::AsIs),
        Just(Form::Encoded),
        Just(Form::FullyEncoded)
    ]
}

/// URLs with a password in one place, the rest (scheme, user, host, port, path, other
/// parameters, fragment) drawn from `schemes`, `hosts`, `ports`, `paths` and a few fixed
/// sets.
fn case(
    schemes: &'static [&'static str],
    hosts: BoxedStrategy<String>,
    ports: BoxedStrategy<String>,
    paths: BoxedStrategy<String>,
) -> impl Strategy<Value = Case> {
    let shape = (
        select(schemes),
        select(if schemes == SCHEMES {
            &["://", "://", "://", ":"][..]
        } else {
            &["://"][..]
        }),
        strings(&["", "app"], "[a-z]{1,7}"),
        hosts,
        ports,
        paths,
    );
    let rest = (
        proptest::collection::vec(
            strings(
                &["db=1", "protocol=3", "user=app", "x"],
                "[a-z]{1,5}=[a-z0-9]{0,5}",
            ),
            0..3,
        ),
        any::<Index>(),
        proptest::option::of(strings(&["insecure"], "[a-z]{1,6}")),
        SECRET,
        spot(),
        form(),
    );
    (shape, rest).prop_map(
        |(
            (scheme, separator, user, host, port, path),
            (mut params, at, fragment, secret, spot, form),
        )| {
            let value = written(&secret, spot, form);
            let userinfo = match spot {
                Spot::Password => format!("{user}:{value}@"),
                Spot::Query(_) if user.is_empty() => String::new(),
                Spot::Query(_) => format!("{user}@"),
            };
            if let Spot::Query(name) = spot {
                params.insert(at.index(params.len() + 1), format!("{name}={value}"));
            }
            let mut url = format!("{scheme}{separator}{userinfo}{host}{port}{path}");
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
    // A password cut short by an unencoded `/`, `?` or `#` is still a password; only a
    // long one can be looked for without finding it by chance elsewhere.
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

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn redact_never_shows_the_password(case in case(SCHEMES, any_host(), any_port(), any_path())) {
        check(&case, "redact", &redact(&case.url))?;
        check(&case, "redact_url", &crate::redact_url(&case.url))?;
    }

    #[test]
    fn redact_takes_any_text(text in any::<String>()) {
        let _ = redact(&text);
    }

    #[test]
    fn redact_takes_any_url_like_text(text in "[a-z+:/@?#%&=\\[\\]^. 0-9]{0,40}") {
        let _ = redact(&text);
    }
}

/// Whether connecting to `url` can only reach this machine: a URL mangled by its password
/// may name another host (`redis://app:12/x@127.0.0.1` is host `app`, port 12).
fn local_only(url: &str) -> bool {
    match url::Url::parse(url) {
        Ok(url) => matches!(
            url.host_str(),
            None | Some("" | "127.0.0.1" | "localhost" | "[::1]")
        ),
        // The redis crate refuses it before connecting.
        Err(_) => true,
    }
}

/// A port nothing listens on: connects fail at once.
fn unused_port() -> u16 {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    listener.local_addr().unwrap().port()
}

/// URLs the redis crate accepts unless the password mangles them, with only local hosts,
/// a port nothing listens on and a socket path that does not exist, so that connects fail
/// fast and reach no server.
fn connect_case(port: u16) -> impl Strategy<Value = Case> {
    let hosts = select(&["127.0.0.1", "localhost", "[::1]"][..])
        .prop_map(str::to_owned)
        .boxed();
    let ports = Just(format!(":{port}")).boxed();
    let paths = select(&["", "/0", "/no-such-dlock-dir/redis.sock"][..])
        .prop_map(str::to_owned)
        .boxed();
    case(&SCHEMES[..ACCEPTED], hosts, ports, paths)
}

#[test]
fn connect_errors_and_topologies_never_show_the_password() {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    // A runner outside `proptest!` knows no source file to keep failures in.
    let config = ProptestConfig {
        cases: 64,
        failure_persistence: None,
        ..ProptestConfig::default()
    };
    let mut runner = proptest::test_runner::TestRunner::new(config);
    // Connects that got as far as trying the address (the others failed on the URL).
    let refused = std::cell::Cell::new(0);
    let result = runner.run(&connect_case(unused_port()), |case| {
        let url = case.url.clone();
        let topologies = [
            Topology::single(url.clone()),
            Topology::master_replicas(url.clone(), vec![url.clone()]),
            Topology::sentinel("mymaster", vec![url.clone()]),
            Topology::cluster(vec![url.clone()]),
        ];
        for topology in &topologies {
            check(&case, "Debug of Topology", &format!("{topology:?}"))?;
            check(
                &case,
                "deployment identity",
                &crate::client::deployment_identity(topology),
            )?;
            if !local_only(&url) {
                continue;
            }
            let connected = runtime.block_on(
                LockClient::builder()
                    .connect_timeout(Duration::from_millis(20))
                    .connect_to(topology),
            );
            match connected {
                Ok(_) => prop_assert!(false, "connected to {:?}", url),
                Err(error) => {
                    if let crate::LockError::Connect { .. } = error {
                        refused.set(refused.get() + 1);
                    }
                    check(&case, "Display of the connect error", &error.to_string())?;
                    check(&case, "Debug of the connect error", &format!("{error:?}"))?;
                }
            }
        }
        Ok(())
    });
    if let Err(error) = result {
        panic!("{error}");
    }
    // About a quarter of the attempts; far fewer would mean the URLs hardly ever parse.
    assert!(
        refused.get() >= 16,
        "only {} connects tried the address",
        refused.get()
    );
}
