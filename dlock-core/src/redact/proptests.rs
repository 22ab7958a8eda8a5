//! Property tests: whatever the URL form and wherever its password sits (userinfo, a
//! `pass`/`password` query parameter, with or without percent-encoding), nothing that
//! shows an address shows the password: [`redact`], `Debug` of a [`Topology`], the
//! deployment identity, and the error of a failed connect.

use std::time::Duration;

use proptest::prelude::*;
use proptest::sample::select;

use super::redact;
use crate::{LockClient, Topology};
use dlock_tests::secret_urls::{
    any_host, any_path, any_port, any_scheme, case, check, Case, ACCEPTED, SCHEMES,
};

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn redact_never_shows_the_password(
        case in case(any_scheme(), &["://", "://", "://", ":"], any_host(), any_port(), any_path())
    ) {
        check(&case, "redact", &redact(&case.url))?;
        check(&case, "redact_url", &crate::admin::redact_url(&case.url))?;
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
    let schemes = select(&SCHEMES[..ACCEPTED]).prop_map(str::to_owned).boxed();
    case(schemes, &["://"], hosts, ports, paths)
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
