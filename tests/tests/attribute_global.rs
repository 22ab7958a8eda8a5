//! `#[distributed_lock]` without `client = ...` uses the client registered with
//! `dlock::set_global`. Its own test binary: the registration is process-wide.

use std::time::Duration;

use dlock::{distributed_lock, LockClient, LockError};
use dlock_tests::RedisServer;
use redis::Commands;

#[distributed_lock(key = "global:<id>", lease = "2s")]
async fn ttl_under_global_lock(id: u64, redis: &redis::Client) -> Result<i64, LockError> {
    Ok(redis
        .get_connection()
        .unwrap()
        .pttl(format!("global:{id}"))
        .unwrap())
}

#[tokio::test]
async fn the_registered_global_client_is_used() {
    let server = RedisServer::start();
    let client = LockClient::builder()
        .key_prefix("app:")
        .connect(&server.url())
        .await
        .unwrap();
    assert!(dlock::global_client().is_err(), "nothing registered yet");
    assert!(dlock::set_global(client.clone()).is_ok());
    // The start-up check passes once a client is registered.
    dlock::global_client().expect("the registered client");
    let again = LockClient::connect(&server.url()).await.unwrap();
    assert!(
        dlock::set_global(again).is_err(),
        "the first registration stays"
    );

    // The key prefix of the global client applies: the lock is `app:global:9`.
    let ttl = ttl_under_global_lock(9, &server.client()).await.unwrap();
    assert_eq!(ttl, -2, "no key without the prefix");
    let held = client.lock("global:9").lock().await.unwrap();
    let result = tokio::time::timeout(
        Duration::from_millis(300),
        ttl_under_global_lock(9, &server.client()),
    )
    .await;
    assert!(
        result.is_err(),
        "the annotated call waits for the held lock"
    );
    held.unlock().await.unwrap();
}
