//! Bad input is a clear error, never a panic, and never reaches Redis: lock names, key
//! prefixes, leases, waits and client settings at and beyond their limits.

use std::future::Future;
use std::time::{Duration, Instant};

use dlock::{
    limits::{MAX_LEASE, MAX_NAME_LEN},
    LockClient, LockError,
};
use dlock_tests::RedisServer;
use redis::Commands;

/// How many keys Redis holds besides the clients' own descriptions (`dlock:client:…`,
/// which every client writes when it connects).
/// Keys in `server` besides what connecting writes (each client's description, the key
/// prefix's layout version).
fn dbsize(server: &RedisServer) -> usize {
    let keys: Vec<String> = server.connection().keys("*").unwrap();
    keys.iter()
        .filter(|key| !dlock_tests::written_by_connecting(key))
        .count()
}

/// Every operation of a handle, each giving its error (an operation that succeeds is a
/// test failure).
async fn errors_of_every_operation(
    client: &LockClient,
    name: &str,
) -> Vec<(&'static str, LockError)> {
    let lock = client.lock(name);
    let second = Duration::from_secs(1);
    vec![
        ("lock", lock.lock().await.unwrap_err()),
        (
            "lock_with_lease",
            lock.lock_with_lease(second).await.unwrap_err(),
        ),
        ("try_lock", lock.try_lock().await.unwrap_err()),
        ("try_lock_for", lock.try_lock_for(second).await.unwrap_err()),
        (
            "try_lock_with_lease",
            lock.try_lock_with_lease(second, second).await.unwrap_err(),
        ),
        ("is_locked", lock.is_locked().await.unwrap_err()),
        ("is_held", lock.is_held().await.unwrap_err()),
        ("hold_count", lock.hold_count().await.unwrap_err()),
        ("remaining_lease", lock.remaining_lease().await.unwrap_err()),
        ("force_unlock", lock.force_unlock().await.unwrap_err()),
    ]
}

#[tokio::test]
async fn bad_lock_names_are_errors_that_say_why_and_send_nothing() {
    let server = RedisServer::start();
    let client = LockClient::connect(&server.url()).await.unwrap();
    let a64 = "a".repeat(64);
    let nul64 = "\\0".repeat(64);
    let too_long = "a lock name is at most 4096 bytes";
    let control = "a lock name must not contain ASCII control characters";
    let cases = [
        (
            String::new(),
            "invalid lock name \"\": a lock name must not be empty".to_owned(),
        ),
        (
            "a".repeat(64 * 1024),
            format!("invalid lock name \"{a64}…\" (65536 bytes): {too_long}"),
        ),
        (
            "a".repeat(MAX_NAME_LEN + 1),
            format!("invalid lock name \"{a64}…\" (4097 bytes): {too_long}"),
        ),
        // Length is checked first, and the control characters stay escaped when cut.
        (
            "\0".repeat(64 * 1024),
            format!("invalid lock name \"{nul64}…\" (65536 bytes): {too_long}"),
        ),
        (
            "ü".repeat(2049),
            format!(
                "invalid lock name \"{}…\" (4098 bytes): {too_long}",
                "ü".repeat(64)
            ),
        ),
        (
            "goods\0:42".to_owned(),
            format!("invalid lock name \"goods\\0:42\": {control}; found U+0000 at byte 5"),
        ),
        (
            "\0".to_owned(),
            format!("invalid lock name \"\\0\": {control}; found U+0000 at byte 0"),
        ),
        (
            "line\nbreak".to_owned(),
            format!("invalid lock name \"line\\nbreak\": {control}; found U+000A at byte 4"),
        ),
        (
            "tab\t".to_owned(),
            format!("invalid lock name \"tab\\t\": {control}; found U+0009 at byte 3"),
        ),
        (
            "del\x7f".to_owned(),
            format!("invalid lock name \"del\\u{{7f}}\": {control}; found U+007F at byte 3"),
        ),
        (
            "é\x1b[31m".to_owned(),
            format!("invalid lock name \"é\\u{{1b}}[31m\": {control}; found U+001B at byte 2"),
        ),
    ];
    for (name, expected) in &cases {
        for (operation, err) in errors_of_every_operation(&client, name).await {
            assert!(
                matches!(err, LockError::InvalidName { what: "lock name", len, .. } if len == name.len()),
                "{operation}: {err}"
            );
            assert_eq!(&err.to_string(), expected, "{operation}");
        }
    }
    assert_eq!(dbsize(&server), 0, "nothing may reach Redis for a bad name");
    let stats = client.stats();
    assert_eq!((stats.acquired, stats.timeouts), (0, 0));
}

#[tokio::test]
async fn names_at_the_limits_are_ordinary_locks() {
    let server = RedisServer::start();
    let client = LockClient::connect(&server.url()).await.unwrap();
    for name in [
        "a".repeat(MAX_NAME_LEN),
        format!("{}ü", "a".repeat(MAX_NAME_LEN - 2)),
        // Non-ASCII control characters (C1, U+0085) are not ASCII control characters.
        "next\u{85}line".to_owned(),
        "ключ:🔒".to_owned(),
        " ".to_owned(),
    ] {
        let lock = client.lock(&name);
        let guard = lock.try_lock().await.unwrap();
        assert!(lock.is_locked().await.unwrap());
        let exists: bool = server.connection().exists(&name).unwrap();
        assert!(exists, "the key is the name ({} bytes)", name.len());
        guard.unlock().await.unwrap();
        assert!(!lock.is_locked().await.unwrap());
    }
}

#[tokio::test]
async fn a_bad_key_prefix_is_refused_when_the_client_is_built() {
    let server = RedisServer::start();
    let url = server.url();
    let build = |prefix: String| LockClient::builder().key_prefix(prefix).connect(&url);
    let err = build("shop\r\n".to_owned()).await.unwrap_err();
    assert!(
        matches!(
            err,
            LockError::InvalidName {
                what: "key prefix",
                ..
            }
        ),
        "{err}"
    );
    assert_eq!(
        err.to_string(),
        "invalid key prefix \"shop\\r\\n\": a key prefix must not contain ASCII control characters; found U+000D at byte 4"
    );
    let err = build("p".repeat(64 * 1024)).await.unwrap_err();
    assert_eq!(
        err.to_string(),
        format!(
            "invalid key prefix \"{}…\" (65536 bytes): a key prefix is at most 4096 bytes",
            "p".repeat(64)
        )
    );
    let client = build("p".repeat(MAX_NAME_LEN)).await.unwrap();
    client
        .lock("x")
        .try_lock()
        .await
        .unwrap()
        .unlock()
        .await
        .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn braces_in_odd_places_lock_exclude_and_release() {
    let server = RedisServer::start();
    // A key prefix comes before the hash tag of dlock's own names, so it may not open a
    // tag of its own; a closing brace is harmless.
    for prefix in ["{shop}:", "x{"] {
        let refused = LockClient::builder()
            .key_prefix(prefix)
            .connect(&server.url())
            .await
            .unwrap_err();
        assert!(
            matches!(&refused, LockError::InvalidName { .. })
                && refused.to_string().contains("must not contain `{`"),
            "{prefix}: {refused}"
        );
    }
    for prefix in ["", "sh}op:"] {
        let first = LockClient::builder()
            .key_prefix(prefix)
            .connect(&server.url())
            .await
            .unwrap();
        let second = LockClient::builder()
            .key_prefix(prefix)
            .connect(&server.url())
            .await
            .unwrap();
        for name in [
            "{", "}", "{}", "}{", "a{b", "{{a}}", "a}b{", "{a}{b}", "{}{x}",
        ] {
            let key = format!("{prefix}{name}");
            assert_eq!(first.lock(name).key(), key);
            let guard = first.lock(name).lock().await.unwrap();
            let exists: bool = server.connection().exists(&key).unwrap();
            assert!(exists, "{key}");
            let err = second.lock(name).try_lock().await.unwrap_err();
            assert!(err.is_timeout(), "{key}: {err}");

            // The waiter is woken through the lock's channel, well before its 1 s recheck.
            let waiter = second.lock(name);
            let waiting = tokio::spawn(async move {
                let guard = waiter.try_lock_for(Duration::from_secs(10)).await;
                (guard, Instant::now())
            });
            tokio::time::sleep(Duration::from_millis(100)).await;
            let released_at = Instant::now();
            guard.unlock().await.unwrap();
            let (guard, acquired_at) = waiting.await.unwrap();
            let guard = guard.unwrap_or_else(|e| panic!("{key}: {e}"));
            let handoff = acquired_at.saturating_duration_since(released_at);
            assert!(
                handoff < Duration::from_millis(500),
                "{key}: hand-off took {handoff:?}"
            );
            guard.unlock().await.unwrap();
            let exists: bool = server.connection().exists(&key).unwrap();
            assert!(!exists, "{key} released");
        }
    }
}

/// Runs `acquire` against a free lock (it must succeed at once), then against a lock
/// `holder` releases after 100 ms (it must succeed right after).
async fn acquires_free_and_after_release<F, Fut>(server: &RedisServer, name: &str, acquire: F)
where
    F: Fn() -> Fut,
    Fut: Future<Output = dlock::Result<dlock::LockGuard>> + Send + 'static,
{
    let started = Instant::now();
    let guard = acquire()
        .await
        .unwrap_or_else(|e| panic!("{name}, free: {e}"));
    assert!(
        started.elapsed() < Duration::from_secs(1),
        "{name}: free lock took {:?}",
        started.elapsed()
    );
    guard.unlock().await.unwrap();

    let holder = LockClient::connect(&server.url()).await.unwrap();
    let held = holder.lock(name).lock().await.unwrap();
    let waiting = tokio::spawn(acquire());
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert!(!waiting.is_finished(), "{name}: acquired a held lock");
    let released_at = Instant::now();
    held.unlock().await.unwrap();
    let guard = tokio::time::timeout(Duration::from_secs(5), waiting)
        .await
        .unwrap_or_else(|_| panic!("{name}: still waiting 5 s after the release"))
        .unwrap()
        .unwrap_or_else(|e| panic!("{name}, after release: {e}"));
    assert!(released_at.elapsed() < Duration::from_secs(2), "{name}");
    guard.unlock().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wait_too_long_for_a_deadline_means_no_deadline() {
    let server = RedisServer::start();
    let client = LockClient::connect(&server.url()).await.unwrap();
    for (name, wait) in [
        ("wait-u64-max-ms", Duration::from_millis(u64::MAX)),
        ("wait-max", Duration::MAX),
    ] {
        let lock = client.lock(name);
        acquires_free_and_after_release(&server, name, || {
            let lock = lock.clone();
            async move { lock.try_lock_for(wait).await }
        })
        .await;
        let lock = client.lock(name);
        acquires_free_and_after_release(&server, name, || {
            let lock = lock.clone();
            async move { lock.try_lock_with_lease(wait, Duration::from_secs(5)).await }
        })
        .await;
    }

    let patient = LockClient::builder()
        .default_wait(Some(Duration::from_millis(u64::MAX)))
        .connect(&server.url())
        .await
        .unwrap();
    let lock = patient.lock("default-wait");
    acquires_free_and_after_release(&server, "default-wait", || {
        let lock = lock.clone();
        async move { lock.lock().await }
    })
    .await;

    // The longest wait a config file can write.
    let config = dlock::config::Config::from_toml_str(&format!(
        "[redis.single]\naddress = \"{}\"\n[lock]\nwait = \"18446744073709551615s\"\n",
        server.url()
    ))
    .unwrap();
    let configured = config.build().await.unwrap();
    let lock = configured.lock("config-wait");
    acquires_free_and_after_release(&server, "config-wait", || {
        let lock = lock.clone();
        async move { lock.lock().await }
    })
    .await;
}

#[dlock::distributed_lock(key = "macro-wait:<id>", wait = "18446744073709551615ns", client = client)]
async fn with_the_longest_macro_wait(client: &LockClient, id: u32) -> Result<u32, LockError> {
    Ok(id)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_attribute_with_the_longest_wait_acquires() {
    let server = RedisServer::start();
    let client = LockClient::connect(&server.url()).await.unwrap();
    assert_eq!(with_the_longest_macro_wait(&client, 7).await.unwrap(), 7);

    let held = client.lock("macro-wait:7").lock().await.unwrap();
    let waiting = {
        let client = client.clone();
        tokio::spawn(async move { with_the_longest_macro_wait(&client, 7).await })
    };
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert!(!waiting.is_finished());
    held.unlock().await.unwrap();
    let result = tokio::time::timeout(Duration::from_secs(5), waiting).await;
    assert_eq!(
        result
            .expect("acquired after the release")
            .unwrap()
            .unwrap(),
        7
    );
}

#[tokio::test]
async fn zero_and_over_a_year_leases_are_refused_before_redis() {
    let server = RedisServer::start();
    let client = LockClient::connect(&server.url()).await.unwrap();
    let lock = client.lock("lease");
    let too_short = "shorter than 1ms; Redis expiries have millisecond resolution and a 0ms expiry deletes the lock at once";
    let too_long = "longer than the maximum of 366 days; use the watchdog (no lease) for long critical sections";
    for (lease, expected) in [
        (Duration::ZERO, format!("invalid lease 0s: {too_short}")),
        (
            Duration::from_nanos(999_999),
            format!("invalid lease 999us 999ns: {too_short}"),
        ),
        (
            MAX_LEASE + Duration::from_secs(1),
            format!("invalid lease 1year 18h 1s: {too_long}"),
        ),
        (
            Duration::from_millis(u64::MAX),
            format!("invalid lease 584542046years 1month 2days 15h 52m 15s 615ms: {too_long}"),
        ),
    ] {
        for err in [
            lock.lock_with_lease(lease).await.unwrap_err(),
            lock.try_lock_with_lease(Duration::ZERO, lease)
                .await
                .unwrap_err(),
            lock.try_lock_with_lease(Duration::from_millis(u64::MAX), lease)
                .await
                .unwrap_err(),
        ] {
            assert!(
                matches!(err, LockError::InvalidDuration { what: "lease", .. }),
                "{err}"
            );
            assert_eq!(err.to_string(), expected);
        }
    }
    assert_eq!(dbsize(&server), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn absurd_client_settings_are_refused_or_work() {
    let server = RedisServer::start();
    let err = LockClient::builder()
        .retry_delay(Duration::MAX)
        .connect(&server.url())
        .await
        .unwrap_err();
    assert!(
        matches!(
            err,
            LockError::InvalidDuration {
                what: "retry_delay",
                ..
            }
        ),
        "{err}"
    );
    assert!(
        err.to_string()
            .ends_with(": longer than the maximum of 366 days"),
        "{err}"
    );

    // A command timeout past 60 s would keep release memos that long: refused.
    let err = LockClient::builder()
        .command_timeout(Duration::MAX)
        .connect(&server.url())
        .await
        .unwrap_err();
    assert_eq!(
        err.to_string(),
        format!(
            "invalid command_timeout {}: longer than the maximum of 60s; release memos live three command timeouts in Redis",
            humantime::format_duration(Duration::MAX)
        )
    );

    // Timeouts and waits beyond any deadline, the longest command timeout and retry pause:
    // usable, no overflow.
    let client = LockClient::builder()
        .command_timeout(dlock::limits::MAX_COMMAND_TIMEOUT)
        .connect_timeout(Duration::MAX)
        .max_wait_recheck(Duration::MAX)
        .failover_wait(Duration::MAX)
        .default_wait(Some(Duration::MAX))
        .retry_delay(MAX_LEASE)
        .retry_attempts(u32::MAX)
        .connect(&server.url())
        .await
        .unwrap();
    let lock = client.lock("absurd");
    acquires_free_and_after_release(&server, "absurd", || {
        let lock = lock.clone();
        async move { lock.lock().await }
    })
    .await;
    let guard = lock.lock().await.unwrap();
    assert!(lock.try_lock().await.unwrap_err().is_timeout());
    // Giving back one of two holds keeps a release memo (a retry must not give back a
    // second one); it lives three command timeouts and a second, no longer: this client's
    // 3 × 60 s + 1 s.
    guard
        .scope(lock.lock())
        .await
        .unwrap()
        .unlock()
        .await
        .unwrap();
    guard.unlock().await.unwrap();
    let memos: Vec<String> = server
        .connection()
        .keys(format!("dlock:release:*{}*", client.id()))
        .unwrap();
    assert!(!memos.is_empty());
    for memo in memos {
        let ttl: i64 = server.connection().pttl(&memo).unwrap();
        assert!(ttl > 180_000 && ttl <= 181_000, "{memo}: PTTL {ttl}");
    }
}
