//! A client outlives the Tokio runtime that built it: the usual case is `set_global` in
//! one `#[tokio::test]` and use in the next. Its background work (renewal, waking
//! waiters, releasing dropped guards) must go on on whatever runtime uses it.

use std::time::{Duration, Instant};

use dlock::{LockClient, LockGuard};
use dlock_tests::RedisServer;
use redis::Commands;

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap()
}

/// How long a waiter of the client under test may sleep before it asks Redis again: far
/// beyond the tests' waits, so that only a message (its client's subscriber at work on
/// the new runtime) can wake it in time.
const RECHECK: Duration = Duration::from_secs(30);

/// How soon after the rival's release the waiter must hold the lock. Generous, for a
/// loaded machine (a wake-up 300 ms after the waiter's try could find its subscription
/// still being confirmed, and then the waiter takes the lock once it is): what it tells
/// apart is a message from the recheck, 30 s away.
const WOKEN_WITHIN: Duration = Duration::from_secs(3);

/// A waiter of `client` (whose recheck is [`RECHECK`]) on `name`, held by `rival`, gets
/// the lock promptly after the rival's release: it was told, not left to its recheck;
/// returns its guard.
async fn woken_by_a_release(client: &LockClient, rival: &LockClient, name: &str) -> LockGuard {
    let held = rival.lock(name).lock().await.unwrap();
    let lock = client.lock(name);
    let waiter = tokio::spawn(async move {
        let guard = lock.try_lock_for(Duration::from_secs(10)).await.unwrap();
        (guard, Instant::now())
    });
    tokio::time::sleep(Duration::from_millis(300)).await;
    let released_at = Instant::now();
    held.unlock().await.unwrap();
    let (guard, acquired_at) = waiter.await.unwrap();
    assert!(
        acquired_at - released_at < WOKEN_WITHIN,
        "woken after {:?} (recheck {RECHECK:?}): no subscriber",
        acquired_at - released_at
    );
    guard
}

#[test]
fn a_client_keeps_renewing_waking_and_releasing_on_the_next_runtime() {
    let server = RedisServer::start();
    let first = runtime();
    let client = first.block_on(async {
        let client = LockClient::builder()
            .watchdog_timeout(Duration::from_millis(600))
            .max_wait_recheck(RECHECK)
            .connect(&server.url())
            .await
            .unwrap();
        // Used once on its own runtime, so every background task has started.
        client
            .lock("warm-up")
            .lock()
            .await
            .unwrap()
            .unlock()
            .await
            .unwrap();
        client
    });
    drop(first);

    let second = runtime();
    second.block_on(async {
        let rival = LockClient::connect(&server.url()).await.unwrap();
        // Renewal: held for three watchdog timeouts, nobody else gets in.
        let guard = client.lock("renewed").lock().await.unwrap();
        tokio::time::sleep(Duration::from_millis(1_800)).await;
        assert!(
            !guard.is_lost(),
            "the watchdog stopped with the old runtime"
        );
        let attempt = rival.lock("renewed").try_lock().await;
        assert!(
            attempt.as_ref().is_err_and(|e| e.is_timeout()),
            "{attempt:?}"
        );
        guard.unlock().await.unwrap();

        // Waking: a waiter of this client is woken by another client's release.
        let guard = woken_by_a_release(&client, &rival, "woken").await;

        // Releasing in the background: a dropped guard's lock is gone at once.
        drop(guard);
        let dropped_at = Instant::now();
        let mut conn = server.connection();
        while conn.exists::<_, bool>("woken").unwrap() {
            assert!(
                dropped_at.elapsed() < Duration::from_millis(500),
                "a dropped guard was not released"
            );
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    });
}

/// The first call on the new runtime must not pay for the old one: the connections the
/// client opened died with their runtime, and a call that does not wait (`try_lock`,
/// `is_locked`) has no second attempt to hide that behind.
fn first_calls_on_a_new_runtime_succeed(topology: dlock::Topology) {
    let first = runtime();
    let client = first.block_on(async {
        let client = LockClient::builder()
            .max_wait_recheck(RECHECK)
            .connect_to(&topology)
            .await
            .unwrap();
        let guard = client.lock("before").try_lock().await.unwrap();
        guard.unlock().await.unwrap();
        client
    });
    drop(first);

    runtime().block_on(async {
        let lock = client.lock("after");
        assert!(!lock.is_locked().await.unwrap());
        let guard = lock.try_lock().await.unwrap();
        assert!(lock.is_locked().await.unwrap());
        guard.unlock().await.unwrap();

        // The subscriber follows as well: a release by another client wakes a waiter.
        let rival = LockClient::builder().connect_to(&topology).await.unwrap();
        let guard = woken_by_a_release(&client, &rival, "woken").await;
        guard.unlock().await.unwrap();
    });
}

#[test]
fn first_calls_on_a_new_runtime_succeed_on_one_server() {
    let server = RedisServer::start();
    first_calls_on_a_new_runtime_succeed(dlock::Topology::single(server.url()));
}

#[test]
fn first_calls_on_a_new_runtime_succeed_on_a_cluster() {
    let cluster = dlock_tests::RedisCluster::start();
    first_calls_on_a_new_runtime_succeed(dlock::Topology::cluster(cluster.node_urls()));
}
