//! A subscriber connection that stops answering (half open: requests go out, nothing comes
//! back) must not stall wake-ups for good. Subscribing is bounded by the command timeout;
//! after it the subscriber reconnects, and releases wake waiters within milliseconds
//! again, not at their next recheck.

use std::time::{Duration, Instant};

use dlock::{LockClient, LockGuard};
use dlock_tests::{RedisServer, TcpProxy};

const RECHECK: Duration = Duration::from_secs(3);
const COMMAND_TIMEOUT: Duration = Duration::from_millis(500);

/// How long after the holder's release a waiter of `client` on `name` got the lock, the
/// holder releasing `hold_for` after the waiter started.
async fn hand_off(
    client: &LockClient,
    holder: &LockClient,
    name: &str,
    hold_for: Duration,
) -> Duration {
    let held = holder.lock(name).lock().await.unwrap();
    let lock = client.lock(name);
    let waiter = tokio::spawn(async move {
        let guard: LockGuard = lock.try_lock_for(Duration::from_secs(10)).await.unwrap();
        (Instant::now(), guard)
    });
    tokio::time::sleep(hold_for).await;
    let released_at = Instant::now();
    held.unlock().await.unwrap();
    let (acquired_at, guard) = waiter.await.unwrap();
    guard.unlock().await.unwrap();
    acquired_at - released_at
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_silent_subscriber_connection_is_replaced() {
    let server = RedisServer::start();
    let proxy = TcpProxy::start(server.addr());
    let client = LockClient::builder()
        .max_wait_recheck(RECHECK)
        .command_timeout(COMMAND_TIMEOUT)
        .connect(&proxy.url())
        .await
        .unwrap();
    let holder = LockClient::connect(&server.url()).await.unwrap();
    // Connection 1 carries the commands; connection 2, the subscriber, opens with the
    // first wait.
    assert_eq!(
        proxy.accepted(),
        1,
        "a subscriber connection before any wait"
    );
    let healthy = hand_off(
        &client,
        &holder,
        "stall:healthy",
        Duration::from_millis(100),
    )
    .await;
    assert!(
        healthy < Duration::from_millis(150),
        "healthy hand-off {healthy:?}"
    );
    assert_eq!(proxy.accepted(), 2, "the first wait opened the subscriber");

    assert!(proxy.silence(2));
    let started = Instant::now();
    assert!(!client.lock("stall:other").is_locked().await.unwrap());
    assert!(
        started.elapsed() < Duration::from_millis(100),
        "silenced the command connection instead of the subscriber"
    );

    // The first waiter's SUBSCRIBE goes unanswered: it still gets the lock by rechecking.
    let during = hand_off(&client, &holder, "stall:during", Duration::from_millis(100)).await;
    assert!(
        during < RECHECK + Duration::from_millis(100),
        "a waiter during the stall got the lock {during:?} after the release"
    );
    // Once the subscribe timed out, the subscriber is on a new connection: releases wake
    // waiters again, long before their recheck.
    tokio::time::sleep(COMMAND_TIMEOUT * 2).await;
    let after = hand_off(&client, &holder, "stall:after", Duration::from_millis(300)).await;
    println!(
        "silent subscriber connection: hand-off before {healthy:?}, during {during:?}, after the subscriber reconnected {after:?} (recheck {RECHECK:?}, command timeout {COMMAND_TIMEOUT:?}); {} connections accepted",
        proxy.accepted()
    );
    assert!(
        after < Duration::from_millis(200),
        "woken {after:?} after the release: the subscriber is still stuck"
    );
    assert!(proxy.accepted() >= 3, "the subscriber never reconnected");
}
