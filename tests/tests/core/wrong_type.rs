//! Lock names share the keyspace with application data (the default key prefix is empty):
//! a key of another type is reported for what it is, affects only its own lock, and is
//! never written or deleted by dlock.

use std::time::Duration;

use dlock::{LockClient, LockError, LossReason};
use dlock_tests::RedisServer;
use redis::Commands;

/// One watchdog lock's key is overwritten with a string while 100 others are held in the
/// same renewal batch: the 100 stay held for 5 periods and only the overwritten guard is
/// lost, with the type named.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_key_of_another_type_is_lost_alone_and_its_batch_keeps_renewing() {
    let server = RedisServer::start();
    let client = LockClient::builder()
        .watchdog_timeout(Duration::from_millis(600))
        .connect(&server.url())
        .await
        .unwrap();
    let mut guards = Vec::new();
    for i in 0..101 {
        guards.push(client.lock(&format!("batch:{i}")).lock().await.unwrap());
    }
    let overwritten = guards.pop().unwrap();
    let _: () = server.connection().set("batch:100", "app data").unwrap();

    let err = tokio::time::timeout(Duration::from_secs(2), overwritten.lost())
        .await
        .expect("the overwritten lock is found lost at the next renewal");
    assert!(
        matches!(
            err,
            LockError::Lost {
                reason: LossReason::WrongType { found: "string" },
                ..
            }
        ),
        "{err}"
    );
    assert_eq!(
        err.to_string(),
        "lock \"batch:100\" was lost while held: its key now holds a Redis string: something overwrote it"
    );
    // Five renewal periods (200 ms each) with a lease of three.
    tokio::time::sleep(Duration::from_millis(1_000)).await;
    let mut conn = server.connection();
    for (i, guard) in guards.iter().enumerate() {
        assert!(!guard.is_lost(), "batch:{i} was lost");
        let ttl: i64 = conn.pttl(format!("batch:{i}")).unwrap();
        assert!(ttl > 0, "batch:{i} has no lease left: {ttl}");
    }
    assert_eq!(client.stats().lost, 1);
    let data: String = conn.get("batch:100").unwrap();
    assert_eq!(data, "app data", "the application's value is untouched");
    drop(overwritten);
    for guard in guards {
        guard.unlock().await.unwrap();
    }
}

/// Acquiring over application data: a clear error at once, nothing written, and no
/// compensating release queued (it would log a misleading warning).
#[tokio::test]
async fn acquiring_a_key_of_another_type_is_a_clear_error_that_writes_nothing() {
    let server = RedisServer::start();
    let client = LockClient::connect(&server.url()).await.unwrap();
    let mut conn = server.connection();
    let _: () = conn.rpush("orders", "o-1").unwrap();

    for attempt in [
        client.lock("orders").try_lock().await,
        client.lock("orders").lock().await,
        client
            .lock("orders")
            .try_lock_with_lease(Duration::from_secs(1), Duration::from_secs(5))
            .await,
    ] {
        let err = attempt.unwrap_err();
        assert!(
            matches!(&err, LockError::WrongType { found, .. } if found == "list"),
            "{err}"
        );
        assert_eq!(
            err.to_string(),
            "lock \"orders\": its key holds a Redis list, not a lock; use another name or a key prefix"
        );
    }
    // A re-entry attempt over a key that changed type behind a holder: same error.
    let guard = client
        .lock("retyped")
        .lock_with_lease(Duration::from_secs(5))
        .await
        .unwrap();
    let _: () = conn.del("retyped").unwrap();
    let _: () = conn.set("retyped", "x").unwrap();
    let err = guard
        .scope(client.lock("retyped").lock())
        .await
        .unwrap_err();
    assert!(matches!(err, LockError::WrongType { .. }), "{err}");
    drop(guard);

    tokio::time::sleep(Duration::from_millis(100)).await;
    let list: Vec<String> = conn.lrange("orders", 0, -1).unwrap();
    assert_eq!(list, ["o-1"]);
    let value: String = conn.get("retyped").unwrap();
    assert_eq!(value, "x");
    let stats = client.stats();
    assert_eq!(stats.acquire_errors, 4);
    // The dropped guard's release found nothing of its own; no acquisition queued one.
    assert_eq!(stats.released, 0);
    assert_eq!(stats.release_errors, 1);
}

#[tokio::test]
async fn force_unlock_leaves_a_key_of_another_type_alone() {
    let server = RedisServer::start();
    let client = LockClient::connect(&server.url()).await.unwrap();
    let mut conn = server.connection();
    let _: () = conn.set("config", "keep me").unwrap();
    let err = client.lock("config").force_unlock().await.unwrap_err();
    assert!(matches!(err, LockError::WrongType { .. }), "{err}");
    let value: String = conn.get("config").unwrap();
    assert_eq!(value, "keep me");
}

/// The fencing counter of a lock's slot overwritten with text while a task of the holder's
/// client waits next: the holder's `unlock` still succeeds (the release gives the next
/// task nothing rather than a hold without a token), the next task's own acquisition
/// reports the counter, and the counter is left as it was. Fails when the release takes
/// the counter's error for its own: `unlock` returns it although the hold went.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fencing_counter_of_another_type_fails_the_next_acquisition_not_the_release() {
    let server = RedisServer::start();
    let client = LockClient::connect(&server.url()).await.unwrap();
    let mut conn = server.connection();
    let lock = client.lock("{ledger}:row");
    let holder = lock.lock().await.unwrap();
    let next = {
        let lock = lock.clone();
        tokio::spawn(async move { lock.try_lock_for(Duration::from_secs(5)).await })
    };
    tokio::time::sleep(Duration::from_millis(100)).await;
    let counters: Vec<String> = conn.keys("dlock:fence:*").unwrap();
    assert_eq!(counters.len(), 1, "{counters:?}");
    let _: () = conn.set(&counters[0], "not a number").unwrap();

    holder.unlock().await.unwrap();
    let err = next.await.unwrap().unwrap_err();
    assert!(
        err.to_string().contains("not an integer"),
        "the next task's acquisition: {err}"
    );
    let value: String = conn.get(&counters[0]).unwrap();
    assert_eq!(value, "not a number");
    let exists: bool = conn.exists("{ledger}:row").unwrap();
    assert!(!exists, "the lock was left behind");
}
