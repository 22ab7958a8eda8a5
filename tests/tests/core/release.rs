//! Release on every exit path, cancellation safety, safe retries and a dead Redis.

use std::time::{Duration, Instant};

use dlock::{LockClient, LockError};
use dlock_tests::commandstats::command_calls;
use dlock_tests::{keys, RedisServer, TcpProxy};
use redis::Commands;

/// Waits until the client's command connection went through the proxy (its subscriber
/// connection opens only with a wait), so that a lost reply hits a command and not the
/// connection's set-up.
async fn command_connection_up(proxy: &TcpProxy) -> usize {
    let deadline = Instant::now() + Duration::from_secs(2);
    while proxy.accepted() < 1 {
        assert!(
            Instant::now() < deadline,
            "the client did not open its command connection"
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    // Let the connection finish its handshake.
    tokio::time::sleep(Duration::from_millis(50)).await;
    proxy.accepted()
}

/// The message of a caught panic (`panic!` with a literal or a formatted message).
fn panic_message(payload: &(dyn std::any::Any + Send)) -> &str {
    payload
        .downcast_ref::<&str>()
        .copied()
        .or_else(|| payload.downcast_ref::<String>().map(String::as_str))
        .unwrap_or("<not a string>")
}

/// The hold counts in the lock hash `key`.
fn hold_counts(server: &RedisServer, key: &str) -> Vec<String> {
    dlock_tests::keys::holders(&mut server.connection(), key)
        .into_values()
        .map(|count| count.to_string())
        .collect()
}

/// A proxy in front of `server`, and a client connected through it with `command_timeout`:
/// the proxy can lose a reply or hold back the reconnection a retry makes.
async fn through_proxy(server: &RedisServer, command_timeout: Duration) -> (TcpProxy, LockClient) {
    let proxy = TcpProxy::start(server.addr());
    let client = LockClient::builder()
        .command_timeout(command_timeout)
        .connect(&proxy.url())
        .await
        .unwrap();
    (proxy, client)
}

/// Polls until `key` is gone; returns how long that took.
async fn gone_within(server: &RedisServer, key: &str, limit: Duration) -> Duration {
    keys::gone_within(&mut server.connection(), key, limit)
        .await
        .unwrap_or_else(|| panic!("{key} still locked after {limit:?}"))
}

#[tokio::test]
async fn dropping_a_guard_releases_within_100ms() {
    let server = RedisServer::start();
    let client = LockClient::connect(&server.url()).await.unwrap();
    let guard = client.lock("dropped").lock().await.unwrap();
    // Else "gone" below would hold for a lock never taken.
    let exists: bool = server.connection().exists("dropped").unwrap();
    assert!(exists, "not locked before the drop");
    drop(guard);
    gone_within(&server, "dropped", Duration::from_millis(100)).await;
}

#[tokio::test]
async fn a_panic_in_the_critical_section_releases_within_100ms() {
    let server = RedisServer::start();
    let client = LockClient::connect(&server.url()).await.unwrap();
    let lock = client.lock("panicked");
    let redis = server.client();
    let task = tokio::spawn(async move {
        let _guard = lock.lock().await.unwrap();
        let exists: bool = redis.get_connection().unwrap().exists("panicked").unwrap();
        assert!(exists, "not locked in the body");
        panic!("boom inside the critical section");
    });
    // The body's own panic, not a failed acquisition or check before it.
    let payload = task.await.unwrap_err().into_panic();
    assert_eq!(panic_message(&*payload), "boom inside the critical section");
    gone_within(&server, "panicked", Duration::from_millis(100)).await;
}

#[tokio::test]
async fn cancelling_the_holding_future_releases_within_100ms() {
    let server = RedisServer::start();
    let client = LockClient::connect(&server.url()).await.unwrap();
    let lock = client.lock("cancelled");
    let mut held = false;
    let holding = async {
        let _guard = lock.lock().await.unwrap();
        held = server.connection().exists("cancelled").unwrap();
        std::future::pending::<()>().await;
    };
    assert!(tokio::time::timeout(Duration::from_millis(500), holding)
        .await
        .is_err());
    assert!(held, "cancelled before the lock was held");
    gone_within(&server, "cancelled", Duration::from_millis(100)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn acquisitions_cancelled_at_random_points_leave_no_lock_behind() {
    let server = RedisServer::start();
    let client = LockClient::connect(&server.url()).await.unwrap();
    let mut guards: u64 = 0;
    let before = command_calls(&mut server.connection());
    for round in 0..8 {
        let name = format!("raced-{round}");
        let mut tasks = Vec::new();
        for i in 0..64u64 {
            let lock = client.lock(&name);
            tasks.push(tokio::spawn(async move {
                // Budgets from 0 to 3.15 ms cut attempts before, during and after the script.
                let budget = Duration::from_micros(i * 50);
                if let Ok(Ok(guard)) = tokio::time::timeout(budget, lock.lock()).await {
                    tokio::time::sleep(Duration::from_micros(300)).await;
                    drop(guard);
                    return 1;
                }
                0
            }));
        }
        for task in tasks {
            guards += task.await.unwrap();
        }
        gone_within(&server, &name, Duration::from_millis(500)).await;
    }
    // Every fresh grant mints one fencing token (INCR; nothing else here runs INCR, and a
    // retried grant reuses its token). Grants beyond the guards handed out are the
    // dangerous case: the script took the lock, the caller was cancelled before it saw
    // the reply; each round's lock is gone all the same (checked above).
    let after = command_calls(&mut server.connection());
    let calls =
        |name: &str| after.get(name).copied().unwrap_or(0) - before.get(name).copied().unwrap_or(0);
    let grants = calls("incr");
    let cancelled_after_grant = grants - guards;
    eprintln!("{grants} grants, {guards} guards handed out, {cancelled_after_grant} cancelled after the grant");
    assert!(
        cancelled_after_grant > 0,
        "no cancellation landed after the acquire script took the lock ({grants} grants, {guards} guards)"
    );
}

#[tokio::test]
async fn a_release_whose_reply_was_lost_is_retried_as_a_success() {
    let server = RedisServer::start();
    let (proxy, client) = through_proxy(&server, Duration::from_secs(2)).await;
    let guard = client.lock("lost-reply").lock().await.unwrap();
    let connections = command_connection_up(&proxy).await;
    let before = command_calls(&mut server.connection());

    proxy.lose_next_reply();
    guard
        .unlock()
        .await
        .expect("the retried release must report the first one's success");
    assert!(
        proxy.accepted() > connections,
        "the reply was lost and the client reconnected"
    );
    let exists: bool = server.connection().exists("lost-reply").unwrap();
    assert!(!exists);
    // The lost reply was the release's: its script ran twice, only the first one gave the
    // hold back (deleting the lock), and the retry, finding nothing of the owner's, was
    // taken as that success.
    let after = command_calls(&mut server.connection());
    let calls =
        |name: &str| after.get(name).copied().unwrap_or(0) - before.get(name).copied().unwrap_or(0);
    let scripts = calls("evalsha") + calls("eval");
    assert!(scripts >= 2, "the release ran {scripts} time(s): {after:?}");
    assert!(calls("hget") >= 2, "the retry never looked for the hold");
    assert_eq!(calls("del"), 1, "the hold was given back once");
    assert_eq!(calls("set"), 0, "a last hold's release keeps no memo");
}

/// A first send skips the memo lookup (it cannot find its own memo); its retry must not.
/// A re-entered hold's release is a decrement: lost reply, retry, and the owner still
/// holds the lock once, not zero times.
#[tokio::test]
async fn a_re_entered_release_whose_reply_was_lost_counts_once() {
    let server = RedisServer::start();
    let (proxy, client) = through_proxy(&server, Duration::from_secs(2)).await;
    let lock = client.lock("lost-decrement");
    let outer = lock.lock().await.unwrap();
    outer
        .scope(async {
            let inner = lock.lock().await.unwrap();
            assert_eq!(hold_counts(&server, "lost-decrement"), ["2"]);
            let connections = command_connection_up(&proxy).await;
            proxy.lose_next_reply();
            inner
                .unlock()
                .await
                .expect("the retry answers from the first send's memo");
            assert!(
                proxy.accepted() > connections,
                "the reply was lost and the client reconnected"
            );
        })
        .await;
    assert_eq!(
        hold_counts(&server, "lost-decrement"),
        ["1"],
        "the decrement counted once"
    );
    outer.unlock().await.unwrap();
    let exists: bool = server.connection().exists("lost-decrement").unwrap();
    assert!(!exists);
}

/// An unlock cancelled after its first send reached Redis goes on in the background, as
/// a send that may have been applied: for a re-entered hold the background send answers
/// from the memo and the owner still holds the lock once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cancelled_decrement_finished_in_the_background_counts_once() {
    let server = RedisServer::start();
    let (proxy, client) = through_proxy(&server, Duration::from_secs(3)).await;
    let lock = client.lock("cancelled-decrement");
    let outer = lock.lock().await.unwrap();
    outer
        .scope(async {
            let inner = lock.lock().await.unwrap();
            let connections = command_connection_up(&proxy).await;
            // The decrement is applied, its reply lost, and the retry's new connection
            // held: the unlock is cancelled while it waits.
            proxy.lose_next_reply();
            proxy.hold_new_connections();
            let unlock = tokio::time::timeout(Duration::from_millis(300), inner.unlock()).await;
            assert!(unlock.is_err(), "the unlock finished: {unlock:?}");
            assert!(proxy.accepted() > connections, "no retry was under way");
            assert_eq!(
                hold_counts(&server, "cancelled-decrement"),
                ["1"],
                "the first send was applied"
            );
            proxy.release_held();
            // The background send goes through; it must not decrement again.
            tokio::time::sleep(Duration::from_millis(500)).await;
        })
        .await;
    assert_eq!(
        hold_counts(&server, "cancelled-decrement"),
        ["1"],
        "the decrement counted once"
    );
    outer.unlock().await.unwrap();
    let exists: bool = server.connection().exists("cancelled-decrement").unwrap();
    assert!(!exists);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_retried_release_never_touches_a_lock_acquired_in_between() {
    let server = RedisServer::start();
    let (proxy, client) = through_proxy(&server, Duration::from_secs(3)).await;
    let rival = LockClient::connect(&server.url()).await.unwrap();
    let guard = client.lock("in-between").lock().await.unwrap();
    let connections = command_connection_up(&proxy).await;

    // The release reaches Redis, its reply is lost, and the retry is held back...
    proxy.lose_next_reply();
    proxy.hold_new_connections();
    let unlock = tokio::spawn(guard.unlock());
    // ...while the rival takes the freed lock.
    let taken = rival
        .lock("in-between")
        .try_lock_for(Duration::from_secs(2))
        .await
        .unwrap();
    // The retry is waiting on a new (held) connection.
    let deadline = Instant::now() + Duration::from_secs(2);
    while proxy.accepted() == connections {
        assert!(
            Instant::now() < deadline,
            "the client never reconnected to retry"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    proxy.release_held();

    unlock
        .await
        .unwrap()
        .expect("the retry reports the first release's success");
    // The rival's hold count (a grant may have left `!next` beside it: no hold).
    let fields = dlock_tests::keys::holders(&mut server.connection(), "in-between");
    assert_eq!(fields.len(), 1, "{fields:?}");
    assert!(fields
        .keys()
        .all(|f| f.starts_with(&rival.id().to_string())));
    assert_eq!(fields.values().next(), Some(&1));
    taken.unlock().await.unwrap();
}

#[tokio::test]
async fn with_redis_stopped_try_lock_fails_within_the_command_timeout() {
    let mut server = RedisServer::start();
    let client = LockClient::builder()
        .command_timeout(Duration::from_millis(500))
        .connect(&server.url())
        .await
        .unwrap();

    server.pause();
    let started = Instant::now();
    let err = client.lock("frozen").try_lock().await.unwrap_err();
    let took = started.elapsed();
    assert!(matches!(err, LockError::CommandTimeout { .. }), "{err}");
    assert!(took < Duration::from_millis(700), "took {took:?}");
    server.resume();

    server.stop();
    let started = Instant::now();
    let err = client.lock("dead").try_lock().await.unwrap_err();
    let took = started.elapsed();
    assert!(err.is_redis(), "{err}");
    assert!(took < Duration::from_millis(700), "took {took:?}");
    let err = client
        .lock("dead")
        .try_lock_for(Duration::from_secs(1))
        .await
        .unwrap_err();
    assert!(
        err.is_redis(),
        "waiting does not turn a dead server into a hang: {err}"
    );
}

/// The common release (an owner's only hold) leaves nothing in Redis: no memo per release
/// that a busy service would pay memory for (at 40,000 releases/s, 10 s memos were
/// 400,000 keys). Only the fencing-token counters, which never expire by design, remain.
#[tokio::test]
async fn plain_releases_leave_no_key_behind() {
    let server = RedisServer::start();
    let client = LockClient::connect(&server.url()).await.unwrap();
    for i in 0..200 {
        let lock = client.lock(&format!("plain-{}", i % 20));
        lock.lock().await.unwrap().unlock().await.unwrap();
        // A dropped guard's background release is the same release.
        drop(lock.lock().await.unwrap());
    }
    let started = Instant::now();
    let mut watcher = server.connection();
    let left = loop {
        let keys: Vec<String> = watcher.keys("*").unwrap();
        let left: Vec<String> = keys
            .into_iter()
            // Fencing counters never expire; what the client wrote by connecting lives as
            // it does.
            .filter(|key| {
                !key.starts_with("dlock:fence:") && !dlock_tests::written_by_connecting(key)
            })
            .collect();
        if left.is_empty() || started.elapsed() > Duration::from_secs(2) {
            break left;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    };
    assert!(left.is_empty(), "left behind: {left:?}");
}
