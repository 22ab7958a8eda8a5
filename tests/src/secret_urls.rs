//! Redis URLs with a known password in every place and spelling the `redis` crate (1.8)
//! reads one from, for the property tests that nothing showing an address shows its
//! password: dlock-core's redaction, topologies and connect errors, dlock-config's errors
//! and configs.

use proptest::prelude::*;
use proptest::sample::{select, Index};
use proptest::test_runner::TestCaseError;

/// Every scheme the redis crate accepts (the first [`ACCEPTED`]), and some it does not.
pub const SCHEMES: &[&str] = &[
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
pub const ACCEPTED: usize = 7;

/// The password: 8 to 16 characters, among them the ones that end or split a URL part.
const SECRET: &str = "[A-Za-z0-9@:/?#%&=]{8,16}";

/// Query parameter names the password goes in, as written: the redis crate reads the
/// first three as `pass`.
const SECRET_NAMES: &[&str] = &["pass", "pa%73s", "%70%61%73%73", "password", "p%61ssword"];

/// Where the password is written.
#[derive(Debug, Clone, Copy)]
enum Spot {
    /// `user:<secret>@`.
    Password,
    /// `<name>=<secret>` among the other query parameters.
    Query(&'static str),
}

/// How the password is written.
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

/// A URL and the password written in it.
#[derive(Debug, Clone)]
pub struct Case {
    /// The URL.
    pub url: String,
    /// The password, as it was before being written into the URL.
    pub secret: String,
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

/// One of `fixed`, or a string matching the regular expression `random`.
pub fn strings(fixed: &'static [&'static str], random: &'static str) -> BoxedStrategy<String> {
    prop_oneof![
        select(fixed).prop_map(str::to_owned),
        proptest::string::string_regex(random).expect("a valid regular expression"),
    ]
    .boxed()
}

/// Mostly one of `valid`, sometimes whatever `other` gives.
pub fn mostly(
    valid: &'static [&'static str],
    other: BoxedStrategy<String>,
) -> BoxedStrategy<String> {
    prop_oneof![3 => select(valid).prop_map(str::to_owned), 2 => other].boxed()
}

/// Any of [`SCHEMES`].
pub fn any_scheme() -> BoxedStrategy<String> {
    select(SCHEMES).prop_map(str::to_owned).boxed()
}

/// Hosts, good and bad.
pub fn any_host() -> BoxedStrategy<String> {
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

/// Ports (with their `:`), good and bad, or none.
pub fn any_port() -> BoxedStrategy<String> {
    strings(&["", ":6379", ":1", ":notaport"], ":[0-9]{1,5}")
}

/// Paths: none, a database, a socket.
pub fn any_path() -> BoxedStrategy<String> {
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

/// URLs with a password in one place and spelling, the rest drawn from `schemes`
/// (followed by one of `separators`: `://`, or `:` for a URL without authority), `hosts`,
/// `ports`, `paths`, and a few fixed sets (user, other parameters, fragment).
pub fn case(
    schemes: BoxedStrategy<String>,
    separators: &'static [&'static str],
    hosts: BoxedStrategy<String>,
    ports: BoxedStrategy<String>,
    paths: BoxedStrategy<String>,
) -> impl Strategy<Value = Case> {
    let shape = (
        schemes,
        select(separators),
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

/// Fails unless `shown` (from `what`) contains neither the password nor any spelling of
/// it, nor the password the redis crate itself reads from the URL.
///
/// # Errors
///
/// A test case failure naming `what`, the spelling found and the URL.
pub fn check(case: &Case, what: &str, shown: &str) -> Result<(), TestCaseError> {
    let mut spellings = vec![
        case.secret.clone(),
        encoded(&case.secret, false),
        encoded(&case.secret, true),
        case.secret.replace('&', "%26"),
    ];
    // A password cut short by an unencoded `/`, `?` or `#` is still a password; only a
    // long one can be looked for without finding it by chance elsewhere.
    use redis::IntoConnectionInfo;
    if let Ok(info) = case.url.as_str().into_connection_info()
        && let Some(password) = info.redis_settings().password()
        && password.len() >= 8
    {
        spellings.push(password.to_owned());
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
