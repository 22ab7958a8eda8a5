//! `LockClient::stats`: the counters a service exports move with what really happened.

use std::time::Duration;

use dlock::{inspect::LATENCY_BOUNDS, LockClient};
use dlock_tests::RedisServer;
use redis::Commands;

#[tokio::test]
async fn counters_follow_acquisitions_releases_timeouts_renewals_and_losses() {
    let server = RedisServer::start();
    let client = LockClient::builder()
        .watchdog_timeout(Duration::from_millis(900))
        .connect(&server.url())
        .await
        .unwrap();
    let rival = LockClient::connect(&server.url()).await.unwrap();

    for _ in 0..3 {
        client
            .lock("counted")
            .lock()
            .await
            .unwrap()
            .unlock()
            .await
            .unwrap();
    }
    // A dropped guard is released in the background, and counted when Redis confirms.
    drop(client.lock("dropped").lock().await.unwrap());

    let held = rival.lock("busy").lock().await.unwrap();
    assert!(client
        .lock("busy")
        .try_lock()
        .await
        .unwrap_err()
        .is_timeout());
    held.unlock().await.unwrap();

    // Renewed a few times, then deleted behind the holder's back: lost.
    let guard = client.lock("renewed").lock().await.unwrap();
    tokio::time::sleep(Duration::from_millis(700)).await;
    let _: () = server.connection().del("renewed").unwrap();
    let _ = tokio::time::timeout(Duration::from_secs(2), guard.lost())
        .await
        .unwrap();
    assert!(guard.unlock().await.unwrap_err().is_not_held());

    let stats = client.stats();
    assert_eq!(stats.acquired, 5, "{stats:?}");
    assert_eq!(
        stats.released, 4,
        "3 unlocks + 1 background release: {stats:?}"
    );
    assert_eq!(
        stats.release_errors, 1,
        "the unlock of the lost lock: {stats:?}"
    );
    assert_eq!(stats.timeouts, 1, "{stats:?}");
    assert_eq!(
        stats.acquire_attempts, 6,
        "5 acquisitions and the busy try, one script each: {stats:?}"
    );
    assert_eq!(stats.acquire_errors, 0, "{stats:?}");
    assert!(
        stats.renewals >= 2,
        "renewed every 300 ms for 700 ms: {stats:?}"
    );
    assert_eq!(stats.lost, 1, "{stats:?}");
    assert_eq!(stats.acquire_latency.len(), LATENCY_BOUNDS.len() + 1);
    assert_eq!(stats.acquire_latency.iter().sum::<u64>(), 5, "{stats:?}");
    assert_eq!(rival.stats().acquired, 1);
}
