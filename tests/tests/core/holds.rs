//! One hold per guard: every guard gives back exactly its own hold, the lock is free only
//! when the owner's last hold is released, a re-entry never stretches an explicit lease,
//! and a scope whose guard is gone hands out no re-entries.

use std::collections::HashMap;
use std::time::Duration;

use dlock::LockClient;
use dlock_tests::RedisServer;
use redis::Commands;

/// The owners' hold counts in the lock hash (without their fencing tokens, `<owner>:f`).
fn holds(server: &RedisServer, key: &str) -> HashMap<String, u32> {
    dlock_tests::keys::holders(&mut server.connection(), key)
}

fn pttl(server: &RedisServer, key: &str) -> i64 {
    server.connection().pttl(key).unwrap()
}

/// The inner guard leaves the outer guard's scope (guards are `Send + 'static`); releasing
/// the outer one must leave the lock held for the inner one.
#[tokio::test]
async fn releasing_the_outer_guard_keeps_the_lock_for_an_inner_guard_that_escaped_its_scope() {
    let server = RedisServer::start();
    let a = LockClient::connect(&server.url()).await.unwrap();
    let b = LockClient::connect(&server.url()).await.unwrap();
    let lock = a.lock("escaped");

    let outer = lock.lock().await.unwrap();
    let inner = outer
        .scope(lock.lock_with_lease(Duration::from_secs(60)))
        .await
        .unwrap();
    assert_eq!(holds(&server, "escaped").values().sum::<u32>(), 2);
    outer.unlock().await.unwrap();

    assert!(!inner.is_lost());
    assert_eq!(
        holds(&server, "escaped").values().sum::<u32>(),
        1,
        "the inner guard's hold remains"
    );
    let rival = b.lock("escaped").try_lock().await;
    assert!(
        rival.as_ref().is_err_and(|e| e.is_timeout()),
        "another client got a lock an inner guard still holds: {rival:?}"
    );
    assert_eq!(inner.hold_count().await.unwrap(), 1);
    inner.unlock().await.unwrap();
    assert!(holds(&server, "escaped").is_empty());
    b.lock("escaped")
        .try_lock()
        .await
        .unwrap()
        .unlock()
        .await
        .unwrap();
}

/// A task spawned inside a scope keeps the scope after the guard is released; what it
/// acquires there afterwards is a fresh acquisition, not a re-entry of a free lock.
#[tokio::test]
async fn a_spawned_scope_whose_guard_is_gone_hands_out_no_re_entries() {
    let server = RedisServer::start();
    let a = LockClient::connect(&server.url()).await.unwrap();
    let b = LockClient::connect(&server.url()).await.unwrap();
    let lock = a.lock("spawned");

    let outer = lock.lock().await.unwrap();
    let (go, wait) = tokio::sync::oneshot::channel::<()>();
    let in_scope = {
        let lock = lock.clone();
        tokio::spawn(outer.scope(async move {
            wait.await.unwrap();
            let guard = lock.lock().await.unwrap();
            let count = lock.hold_count().await.unwrap();
            (guard, count)
        }))
    };
    outer.unlock().await.unwrap();
    assert!(holds(&server, "spawned").is_empty(), "the lock is free");
    // Another client takes it; the spawned task must now wait for it, not re-enter.
    let rival = b.lock("spawned").lock().await.unwrap();
    go.send(()).unwrap();
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert!(
        !in_scope.is_finished(),
        "the spawned task acquired a lock another client holds"
    );
    rival.unlock().await.unwrap();
    let (guard, count) = tokio::time::timeout(Duration::from_secs(5), in_scope)
        .await
        .expect("the spawned task gets the lock once it is free")
        .unwrap();
    assert_eq!(
        count, 0,
        "outside a live guard's scope there is no call-chain owner"
    );
    assert_eq!(guard.hold_count().await.unwrap(), 1);
    guard.unlock().await.unwrap();
}

/// Re-entry without a lease inside an explicit 500 ms lease must not raise the TTL to the
/// watchdog timeout; a longer explicit inner lease may.
#[tokio::test]
async fn a_re_entry_never_stretches_an_explicit_lease_unless_it_asks_for_a_longer_one() {
    let server = RedisServer::start();
    let client = LockClient::connect(&server.url()).await.unwrap();
    let lock = client.lock("stretch");

    let outer = lock
        .lock_with_lease(Duration::from_millis(500))
        .await
        .unwrap();
    let inner = outer.scope(lock.lock()).await.unwrap();
    let ttl = pttl(&server, "stretch");
    assert!(
        (1..=500).contains(&ttl),
        "a watchdog re-entry raised the explicit lease to {ttl} ms"
    );
    tokio::time::sleep(Duration::from_millis(700)).await;
    assert_eq!(
        pttl(&server, "stretch"),
        -2,
        "the lock expired with its lease"
    );
    assert!(outer.is_lost() && inner.is_lost());
    drop((outer, inner));

    let outer = lock
        .lock_with_lease(Duration::from_millis(500))
        .await
        .unwrap();
    let inner = outer
        .scope(lock.lock_with_lease(Duration::from_secs(5)))
        .await
        .unwrap();
    let ttl = pttl(&server, "stretch");
    assert!(
        ttl > 4_000,
        "an explicit longer inner lease applies: {ttl} ms"
    );
    inner.unlock().await.unwrap();
    outer.unlock().await.unwrap();
    assert_eq!(pttl(&server, "stretch"), -2);
}

#[tokio::test]
async fn a_guard_reports_its_own_hold_count() {
    let server = RedisServer::start();
    let client = LockClient::connect(&server.url()).await.unwrap();
    let lock = client.lock("own");
    let outer = lock.lock().await.unwrap();
    assert!(outer.is_held().await.unwrap());
    assert_eq!(outer.hold_count().await.unwrap(), 1);
    let inner = outer.scope(lock.lock()).await.unwrap();
    assert_eq!(outer.hold_count().await.unwrap(), 2);
    assert_eq!(inner.hold_count().await.unwrap(), 2, "one owner, two holds");
    inner.unlock().await.unwrap();
    assert_eq!(outer.hold_count().await.unwrap(), 1);
    redis::cmd("DEL")
        .arg("own")
        .exec(&mut server.connection())
        .unwrap();
    assert!(!outer.is_held().await.unwrap());
    assert!(outer.unlock().await.unwrap_err().is_not_held());
}
