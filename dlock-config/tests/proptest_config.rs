//! Property tests of the loader: whatever the text, `from_toml_str` returns a config or an
//! error with a message, never a panic; and a config it returns can be turned into a
//! topology and client settings without a panic.

use dlock_config::{Config, ConfigError};
use proptest::prelude::*;
use proptest::test_runner::TestCaseError;
use toml::Value;

/// Every section and its keys, as the loader knows them.
const SECTIONS: &[(&str, &[&str])] = &[
    ("redis.single", &["address"]),
    ("redis.master_slave", &["master", "replicas"]),
    ("redis.sentinel", &["master_name", "sentinels"]),
    ("redis.cluster", &["nodes"]),
    (
        "connection",
        &[
            "username",
            "password",
            "database",
            "tls_ca_file",
            "connect_timeout",
            "command_timeout",
            "retry_attempts",
            "retry_delay",
        ],
    ),
    (
        "lock",
        &[
            "watchdog_timeout",
            "key_prefix",
            "wait",
            "max_wait_recheck",
            "failover_wait",
        ],
    ),
];

/// Loads `text` and, when that succeeds, uses the config the way an application would.
fn check(text: &str) -> Result<bool, TestCaseError> {
    match Config::from_toml_str(text) {
        Err(error) => {
            let message = error.to_string();
            prop_assert!(!message.trim().is_empty(), "empty message for {:?}", text);
            if let ConfigError::Invalid { line, column, .. } = error {
                prop_assert!(line >= 1 && column >= 1, "{}", message);
                prop_assert!(line <= text.lines().count().max(1) + 1, "{}", message);
            }
            Ok(false)
        }
        Ok(config) => {
            let _ = config.to_string();
            let _ = format!("{config:?}");
            if let Err(error) = config.topology() {
                prop_assert!(!error.to_string().is_empty());
            }
            let _ = format!("{:?}", config.client_builder());
            let overridden = config.with_overrides(|name| Some(format!("redis://{name}:1")));
            if let Err(error) = overridden {
                prop_assert!(!error.to_string().is_empty());
            }
            Ok(true)
        }
    }
}

/// Strings humantime may or may not accept: numbers up to beyond `u64`, signs, fractions,
/// units real and not.
fn duration_like() -> impl Strategy<Value = String> {
    let number = prop_oneof![
        (0u64..2000).prop_map(|n| n.to_string()),
        any::<u64>().prop_map(|n| n.to_string()),
        Just("18446744073709551616".to_owned()),
        "[0-9]{1,3}\\.[0-9]{1,12}",
    ];
    let unit = prop_oneof![
        Just(""),
        Just("ns"),
        Just("ms"),
        Just("s"),
        Just("m"),
        Just("h"),
        Just("days"),
        Just("years"),
        Just("µs"),
        Just("parsecs"),
    ];
    let sign = prop_oneof![Just(""), Just(""), Just("-"), Just("+"), Just(" ")];
    prop::collection::vec((sign, number, unit), 0..3).prop_map(|parts| {
        parts
            .into_iter()
            .map(|(sign, number, unit)| format!("{sign}{number}{unit}"))
            .collect::<Vec<_>>()
            .join(" ")
    })
}

/// Mostly valid Redis URLs, some almost valid, some not URLs at all.
fn url_like() -> impl Strategy<Value = String> {
    prop_oneof![
        Just("redis://127.0.0.1:6379".to_owned()),
        Just("rediss://app:s3cret@cache.internal:6380/2".to_owned()),
        Just("redis://[::1]:7000".to_owned()),
        (
            prop_oneof![
                Just("redis://"),
                Just("rediss://"),
                Just("unix://"),
                Just("")
            ],
            "[a-z0-9.:@/%?=&\\[\\]#-]{0,24}",
        )
            .prop_map(|(scheme, rest)| format!("{scheme}{rest}")),
        (0u64..100_000).prop_map(|port| format!("redis://127.0.0.1:{port}")),
    ]
}

/// TOML values of every shape: strings (durations, URLs, anything), integers including
/// negative and extreme ones, floats, booleans, and arrays and tables of those.
fn value() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        3 => duration_like().prop_map(Value::String),
        3 => url_like().prop_map(Value::String),
        1 => any::<String>().prop_map(Value::String),
        1 => "[a-z:{}]{0,8}".prop_map(Value::String),
        1 => prop_oneof![
            Just(0i64),
            Just(-1),
            Just(i64::MIN),
            Just(i64::MAX),
            Just(i64::from(u32::MAX) + 1),
            any::<i64>(),
            0i64..16,
        ]
        .prop_map(Value::Integer),
        1 => any::<f64>().prop_map(Value::Float),
        1 => any::<bool>().prop_map(Value::Boolean),
    ];
    leaf.prop_recursive(2, 12, 4, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..4).prop_map(Value::Array),
            prop::collection::btree_map("[a-z_]{1,8}", inner, 0..3)
                .prop_map(|map| Value::Table(map.into_iter().collect())),
        ]
    })
}

/// A value of the shape `key` takes (valid or not), or of any shape.
fn value_for(key: &str) -> BoxedStrategy<Value> {
    let urls = || prop::collection::vec(url_like().prop_map(Value::String), 0..3);
    let fitting = match key {
        "address" | "master" => url_like().prop_map(Value::String).boxed(),
        "replicas" | "sentinels" | "nodes" => urls().prop_map(Value::Array).boxed(),
        "database" | "retry_attempts" => prop_oneof![0i64..16, any::<i64>()]
            .prop_map(Value::Integer)
            .boxed(),
        "master_name" | "username" | "password" | "key_prefix" | "tls_ca_file" => {
            any::<String>().prop_map(Value::String).boxed()
        }
        _ => duration_like().prop_map(Value::String).boxed(),
    };
    prop_oneof![6 => fitting, 1 => value()].boxed()
}

/// A key: usually one of `section`'s, sometimes another section's or an unknown one.
fn key(section: usize) -> impl Strategy<Value = String> {
    let own = SECTIONS[section].1;
    prop_oneof![
        12 => prop::sample::select(own).prop_map(str::to_owned),
        1 => prop::sample::select(SECTIONS).prop_flat_map(|(_, keys)| prop::sample::select(keys)).prop_map(str::to_owned),
        1 => "[a-z_]{1,10}",
    ]
}

/// One `[section]` with some keys and values, rendered as TOML; `index` picks the section
/// from [`SECTIONS`], and the header is sometimes wrong.
fn section(index: usize) -> impl Strategy<Value = String> {
    let header = prop_oneof![
        12 => Just(SECTIONS[index].0.to_owned()),
        1 => Just("redis".to_owned()),
        1 => "[a-z_.]{1,12}",
    ];
    let entry = key(index).prop_flat_map(|key| (Just(key.clone()), value_for(&key)));
    (header, prop::collection::vec(entry, 0..4)).prop_map(|(header, entries)| {
        let mut text = format!("[{header}]\n");
        let mut seen = Vec::new();
        // Repeated keys only test the TOML parser; repeated sections still do.
        for (key, value) in entries {
            if !seen.contains(&key) {
                text.push_str(&format!("{key} = {value}\n"));
                seen.push(key);
            }
        }
        text
    })
}

/// A document: usually one topology, then maybe `[connection]`, `[lock]` and any other
/// sections.
fn document() -> impl Strategy<Value = String> {
    let topology = prop_oneof![9 => (0usize..4).prop_map(Some), 1 => Just(None)];
    let maybe = |index: usize| prop::option::of(section(index));
    (
        topology.prop_flat_map(move |index| prop::option::of(section(index.unwrap_or(0)))),
        maybe(4),
        maybe(5),
        prop_oneof![
            4 => Just(Vec::new()),
            1 => prop::collection::vec((0..SECTIONS.len()).prop_flat_map(section), 1..3),
        ],
    )
        .prop_map(|(topology, connection, lock, others)| {
            let mut text = String::new();
            for section in [topology, connection, lock]
                .into_iter()
                .flatten()
                .chain(others)
            {
                text.push_str(&section);
            }
            text
        })
}

/// A document that is mostly well-formed: a valid topology and `[connection]` / `[lock]`
/// keys each with a value of the right shape, so that the success path runs often.
fn plausible_document() -> impl Strategy<Value = String> {
    let duration = prop_oneof![
        3 => prop_oneof![Just("1ms"), Just("100ms"), Just("30s"), Just("366days"), Just("0s")]
            .prop_map(str::to_owned),
        2 => duration_like(),
    ];
    let setting = prop_oneof![
        (
            prop::sample::select(
                &[
                    "connection.connect_timeout",
                    "connection.command_timeout",
                    "connection.retry_delay",
                    "lock.watchdog_timeout",
                    "lock.wait",
                    "lock.max_wait_recheck",
                    "lock.failover_wait",
                ][..]
            ),
            duration.prop_map(Value::String),
        ),
        (
            prop::sample::select(&["connection.retry_attempts", "connection.database"][..]),
            prop_oneof![0i64..16, any::<i64>()].prop_map(Value::Integer),
        ),
        (
            prop::sample::select(
                &[
                    "connection.username",
                    "connection.password",
                    "lock.key_prefix",
                ][..]
            ),
            any::<String>().prop_map(Value::String),
        ),
    ];
    (url_like(), prop::collection::vec(setting, 0..6)).prop_map(|(url, settings)| {
        let mut text = format!("[redis.single]\naddress = {}\n", Value::String(url));
        let mut sections: Vec<(&str, Vec<String>)> = vec![("connection", vec![]), ("lock", vec![])];
        for (path, value) in settings {
            let (section, key) = path.split_once('.').unwrap_or(("lock", path));
            if let Some((_, lines)) = sections.iter_mut().find(|(name, _)| *name == section) {
                lines.push(format!("{key} = {value}"));
            }
        }
        for (section, lines) in sections {
            text.push_str(&format!("[{section}]\n{}\n", lines.join("\n")));
        }
        text
    })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(3000))]

    #[test]
    fn any_text_loads_or_is_refused_with_a_message(text in any::<String>()) {
        check(&text)?;
    }
}

proptest! {
    // Regex-generated text is slower to produce: fewer cases.
    #![proptest_config(ProptestConfig::with_cases(1000))]

    #[test]
    fn toml_like_text_loads_or_is_refused_with_a_message(
        text in "([\\[\\]a-z_.=\"{},\\n #0-9-]|redis|single|lock|wait|\"30s\"){0,60}",
    ) {
        check(&text)?;
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(1500))]

    #[test]
    fn documents_of_real_sections_and_keys_load_or_are_refused(text in document()) {
        check(&text)?;
    }

    #[test]
    fn plausible_documents_load_or_are_refused(text in plausible_document()) {
        check(&text)?;
    }
}

/// The generators are only worth their cases if the success path runs too.
#[test]
fn the_generated_documents_often_load() {
    use proptest::strategy::ValueTree;
    use proptest::test_runner::TestRunner;

    let mut runner = TestRunner::deterministic();
    let mut loaded = |strategy: &dyn Fn(&mut TestRunner) -> String| {
        (0..400)
            .filter(|_| Config::from_toml_str(&strategy(&mut runner)).is_ok())
            .count()
    };
    let plausible = loaded(&|r| plausible_document().new_tree(r).unwrap().current());
    let any_document = loaded(&|r| document().new_tree(r).unwrap().current());
    assert!(
        plausible >= 100,
        "{plausible} of 400 plausible documents loaded"
    );
    assert!(any_document >= 8, "{any_document} of 400 documents loaded");
}
