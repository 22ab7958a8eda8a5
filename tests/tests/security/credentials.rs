//! Wrong credentials are clear errors, and no password reaches a log, `Debug` output or an
//! error.

use super::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn wrong_credentials_are_clear_errors_without_the_password() {
    capture_logs(tracing::Level::TRACE);
    let (server, mut admin) = server_with_shop_user();
    let connect = |url: String| async move {
        let started = Instant::now();
        let result = LockClient::builder()
            .connect_timeout(Duration::from_secs(2))
            .connect(&url)
            .await;
        (result, started.elapsed())
    };
    let check = |what: &str, err: &dyn std::error::Error, shown: String, elapsed: Duration| {
        eprintln!("{what}: {shown} (after {elapsed:?})");
        let debug = format!("{err:?}");
        for secret in [ACL_PASSWORD, WRONG_PASSWORD] {
            assert!(!shown.contains(secret), "{what}: {shown}");
            assert!(!debug.contains(secret), "{what}: {debug}");
        }
        assert!(elapsed < Duration::from_secs(2), "{what}: {elapsed:?}");
    };

    let port = server.port();
    for (what, user) in [("wrong password", "dlock"), ("unknown user", "nobody")] {
        let (result, elapsed) =
            connect(format!("redis://{user}:{WRONG_PASSWORD}@127.0.0.1:{port}")).await;
        let err = result.unwrap_err();
        assert!(
            matches!(&err, LockError::Connect { source: Some(source), .. }
                if source.kind() == redis::ErrorKind::AuthenticationFailed),
            "{what}: {err:?}"
        );
        assert_eq!(
            err.to_string(),
            format!("could not connect to Redis at redis://{user}:***@127.0.0.1:{port}: Password authentication failed - AuthenticationFailed"),
            "{what}"
        );
        check(what, &err, err.to_string(), elapsed);
    }

    // The same through a configuration file's [connection] section.
    let config = Config::from_toml_str(&format!(
        "[redis.single]\naddress = \"redis://127.0.0.1:{port}\"\n[connection]\nusername = \"dlock\"\npassword = \"{WRONG_PASSWORD}\"\nconnect_timeout = \"2s\"\n"
    ))
    .unwrap();
    let started = Instant::now();
    let err = config.build().await.unwrap_err();
    assert!(
        matches!(&err, ConfigError::Lock(LockError::Connect { source: Some(source), .. })
            if source.kind() == redis::ErrorKind::AuthenticationFailed),
        "{err:?}"
    );
    assert!(err.to_string().contains("authentication failed"), "{err}");
    check("config", &err, err.to_string(), started.elapsed());

    // A server with a password for the default user (`requirepass`; set after start, as
    // the harness' readiness probe does not authenticate), reached without one.
    redis::cmd("CONFIG")
        .arg("SET")
        .arg("requirepass")
        .arg(ACL_PASSWORD)
        .query::<()>(&mut admin)
        .unwrap();
    let (result, elapsed) = connect(server.url()).await;
    let err = result.unwrap_err();
    assert!(
        matches!(&err, LockError::Connect { source: Some(source), .. }
            if source.code() == Some("NOAUTH")),
        "{err:?}"
    );
    assert!(err.to_string().contains("Authentication required"), "{err}");
    check("no password", &err, err.to_string(), elapsed);
    let (result, _) = connect(format!("redis://:{ACL_PASSWORD}@127.0.0.1:{port}")).await;
    result.expect("the default user with the requirepass password");
}

// ---------- secrets in logs, Debug and errors

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn passwords_never_reach_logs_debug_output_or_errors() {
    capture_logs(tracing::Level::TRACE);
    let server = RedisServer::start();
    let port = server.port();
    let mut admin = server.connection();
    set_user(
        &mut admin,
        "app",
        LEAK_PASSWORD,
        &acl_rule(Mode::Single, "leak:"),
    );

    // URL form.
    let url = format!("redis://app:{LEAK_PASSWORD}@127.0.0.1:{port}");
    let topology = Topology::single(url.as_str());
    let a = LockClient::builder()
        .key_prefix("leak:")
        .connect_to(&topology)
        .await
        .unwrap();
    // Config form, with the password in [connection] and with DLOCK_PASSWORD.
    let text = format!(
        "[redis.single]\naddress = \"redis://127.0.0.1:{port}\"\n[connection]\nusername = \"app\"\npassword = \"{LEAK_PASSWORD}\"\n[lock]\nkey_prefix = \"leak:\"\n"
    );
    let config = Config::from_toml_str(&text).unwrap();
    let b = config.build().await.unwrap();
    let from_env =
        Config::from_toml_str(&text.replace(&format!("password = \"{LEAK_PASSWORD}\"\n"), ""))
            .unwrap()
            .with_overrides(|name| {
                (name == dlock::config::PASSWORD_ENV).then(|| LEAK_PASSWORD.to_owned())
            })
            .unwrap();
    let c = from_env.build().await.unwrap();

    handoff(&a, &b, "goods:1").await;

    // Force every connection to reconnect and authenticate again: the subscriber while
    // a waiter is subscribed, then the command connections; the waiter still gets the
    // lock, and locking works afterwards.
    let guard = b.lock("goods:1").lock().await.unwrap();
    let waiting = c.lock("goods:1");
    let waiter = tokio::spawn(async move { waiting.lock().await });
    tokio::time::sleep(Duration::from_millis(200)).await;
    let kill = |kind: &str, admin: &mut redis::Connection| -> i64 {
        redis::cmd("CLIENT")
            .arg("KILL")
            .arg("TYPE")
            .arg(kind)
            .query(admin)
            .unwrap()
    };
    let killed_pubsub = kill("pubsub", &mut admin);
    let killed = kill("normal", &mut admin);
    assert!(
        killed_pubsub >= 1 && killed >= 3,
        "{killed_pubsub} {killed}"
    );
    tokio::time::sleep(Duration::from_millis(300)).await;
    guard.unlock().await.unwrap();
    waiter.await.unwrap().unwrap().unlock().await.unwrap();
    let after_reconnect = handoff(&b, &c, "goods:1").await;
    handoff(&c, &a, "goods:1").await;
    eprintln!("hand-off after the reconnects: {after_reconnect:?}");

    // Failed connections, in both forms.
    let wrong_url = format!("redis://app:{LEAK_WRONG_PASSWORD}@127.0.0.1:{port}");
    let url_error = LockClient::connect(&wrong_url).await.unwrap_err();
    let wrong_config =
        Config::from_toml_str(&text.replace(LEAK_PASSWORD, LEAK_WRONG_PASSWORD)).unwrap();
    let config_error = wrong_config.build().await.unwrap_err();

    let in_address =
        Config::from_toml_str(&format!("[redis.single]\naddress = \"{url}\"\n")).unwrap();
    let with_credentials = Topology::single(format!("redis://127.0.0.1:{port}"))
        .credentials(Some("app".to_owned()), Some(LEAK_PASSWORD.to_owned()));
    let shown = [
        format!("{in_address:?}"),
        format!("{in_address}"),
        format!("{a:?}"),
        format!("{b:?}"),
        format!("{c:?}"),
        format!("{topology:?}"),
        format!("{with_credentials:?}"),
        format!("{config:?}"),
        format!("{config}"),
        format!("{from_env:?}"),
        format!("{:?}", config.topology().unwrap()),
        format!("{wrong_config:?}"),
        format!("{url_error}"),
        format!("{url_error:?}"),
        format!("{config_error}"),
        format!("{config_error:?}"),
        dlock::admin::redact_url(&url),
    ];
    assert_no_password_in(&shown.iter().map(String::as_str).collect::<Vec<_>>());
    // Not vacuous: the places that could show a password show its mask.
    assert!(format!("{topology:?}").contains("app:***@"), "{topology:?}");
    assert!(
        format!("{with_credentials:?}").contains("password: Some(\"***\")"),
        "{with_credentials:?}"
    );
    assert!(format!("{in_address}").contains("app:***@"), "{in_address}");
    assert!(
        format!("{in_address:?}").contains("app:***@"),
        "{in_address:?}"
    );
    assert!(
        format!("{config:?}").contains("password: Some(***)"),
        "{config:?}"
    );
    assert!(url_error.to_string().contains("app:***@"), "{url_error}");

    let log = captured();
    assert_no_password_in(&[&log]);
    // Not vacuous: the log saw the clients, the lost connections and the failed one.
    for expected in [
        "dlock: client started",
        "dlock: subscriber connection lost; reconnecting",
        "dlock: acquired",
    ] {
        assert!(log.contains(expected), "{expected:?} not logged:\n{log}");
    }
    eprintln!(
        "captured {} log lines, {} bytes; none holds a password",
        log.lines().count(),
        log.len()
    );
}

// ---------- key prefixes

/// A password written without quotes is a TOML type error; the message must not quote
/// the value.
#[test]
fn a_password_mistyped_as_a_number_is_not_quoted_in_the_error() {
    let text = "[redis.single]\naddress = \"redis://127.0.0.1:6379\"\n[connection]\npassword = 31415926535\n";
    let err = Config::from_toml_str(text).unwrap_err();
    assert!(!err.to_string().contains("31415926535"), "{err}");
    assert!(!format!("{err:?}").contains("31415926535"), "{err:?}");
}
