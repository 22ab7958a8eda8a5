//! Reentrancy follows the call chain; concurrent futures never share ownership.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use dlock::LockClient;
use dlock_tests::RedisServer;

/// The owners' hold counts in the lock hash (without their fencing tokens, `<owner>:f`).
fn holds(server: &RedisServer, key: &str) -> HashMap<String, u32> {
    dlock_tests::keys::holders(&mut server.connection(), key)
}

#[tokio::test]
async fn nested_acquisition_in_one_chain_counts_two_and_needs_two_releases() {
    let server = RedisServer::start();
    let client = LockClient::connect(&server.url()).await.unwrap();
    let lock = client.lock("nested");

    let outer = lock.lock().await.unwrap();
    outer
        .scope(async {
            // Bounded, so a broken re-entry fails the test instead of hanging it.
            let inner = lock.try_lock_for(Duration::from_secs(2)).await.unwrap();
            let fields = holds(&server, "nested");
            assert_eq!(fields.len(), 1, "one owner: {fields:?}");
            assert_eq!(fields.values().next(), Some(&2));
            assert_eq!(lock.hold_count().await.unwrap(), 2);

            inner.unlock().await.unwrap();
            assert_eq!(holds(&server, "nested").values().next(), Some(&1));
            assert!(lock.is_held().await.unwrap());
        })
        .await;
    assert!(lock.is_locked().await.unwrap(), "the outer hold remains");
    outer.unlock().await.unwrap();
    assert!(holds(&server, "nested").is_empty());
}

#[tokio::test]
async fn is_held_and_hold_count_are_per_call_chain() {
    let server = RedisServer::start();
    let client = LockClient::connect(&server.url()).await.unwrap();
    let lock = client.lock("chain");
    let guard = lock.lock().await.unwrap();
    // Outside the guard's scope there is no call-chain owner.
    assert!(!lock.is_held().await.unwrap());
    assert_eq!(lock.hold_count().await.unwrap(), 0);
    assert!(guard.scope(lock.is_held()).await.unwrap());
    // Another lock's scope says nothing about this one.
    let other = client.lock("other").lock().await.unwrap();
    assert!(!other.scope(lock.is_held()).await.unwrap());
    other.unlock().await.unwrap();
    guard.unlock().await.unwrap();
}

/// Five rounds of taking lock `name` for 20 ms; counts entries that found another future
/// inside.
async fn critical(
    client: LockClient,
    name: &str,
    inside: Arc<AtomicBool>,
    overlaps: Arc<AtomicUsize>,
) {
    for _ in 0..5 {
        let guard = client.lock(name).lock().await.unwrap();
        if inside.swap(true, Ordering::SeqCst) {
            overlaps.fetch_add(1, Ordering::SeqCst);
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
        inside.store(false, Ordering::SeqCst);
        guard.unlock().await.unwrap();
    }
}

/// Both futures hold the lock for a while; a shared flag catches any overlap.
#[tokio::test(flavor = "current_thread")]
async fn two_futures_joined_in_one_task_exclude_each_other() {
    let server = RedisServer::start();
    let client = LockClient::connect(&server.url()).await.unwrap();
    let inside = Arc::new(AtomicBool::new(false));
    let overlaps = Arc::new(AtomicUsize::new(0));
    tokio::join!(
        critical(client.clone(), "joined", inside.clone(), overlaps.clone()),
        critical(client.clone(), "joined", inside.clone(), overlaps.clone()),
    );
    assert_eq!(
        overlaps.load(Ordering::SeqCst),
        0,
        "two futures inside at once"
    );

    // Control: with distinct lock names the same futures do overlap, so the flag would
    // have caught a lock that let both in.
    tokio::join!(
        critical(client.clone(), "joined-a", inside.clone(), overlaps.clone()),
        critical(client.clone(), "joined-b", inside.clone(), overlaps.clone()),
    );
    assert!(
        overlaps.load(Ordering::SeqCst) > 0,
        "distinct locks never overlapped"
    );
}

#[tokio::test(flavor = "current_thread")]
async fn inside_a_scope_other_locks_still_exclude_joined_futures() {
    let server = RedisServer::start();
    let client = LockClient::connect(&server.url()).await.unwrap();
    let outer = client.lock("outer").lock().await.unwrap();
    let inside = Arc::new(AtomicBool::new(false));
    let overlaps = Arc::new(AtomicUsize::new(0));
    let joined = |a: &'static str, b: &'static str| {
        outer.scope(async {
            tokio::join!(
                critical(client.clone(), a, inside.clone(), overlaps.clone()),
                critical(client.clone(), b, inside.clone(), overlaps.clone()),
            )
        })
    };
    joined("inner", "inner").await;
    assert_eq!(
        overlaps.load(Ordering::SeqCst),
        0,
        "two futures inside `inner` at once"
    );

    // Control: the same scope with distinct inner locks lets both in together.
    joined("inner-a", "inner-b").await;
    assert!(
        overlaps.load(Ordering::SeqCst) > 0,
        "distinct locks never overlapped"
    );
    outer.unlock().await.unwrap();
}

#[tokio::test]
async fn different_clients_never_re_enter_each_others_locks() {
    let server = RedisServer::start();
    let a = LockClient::connect(&server.url()).await.unwrap();
    let b = LockClient::connect(&server.url()).await.unwrap();
    let guard = a.lock("shared").lock().await.unwrap();
    // Even inside a's scope, client b is a different owner.
    let attempt = guard.scope(b.lock("shared").try_lock()).await;
    assert!(attempt.unwrap_err().is_timeout());
    guard.unlock().await.unwrap();
}
