//! A release sent to the old master after a Sentinel promoted a replica, but before the
//! client heard of it, must not leave the lock held on the new master for a whole lease;
//! nor may the cleanup of an acquisition that gave up in that time leave its owner
//! registered there.
//!
//! The client reaches the sentinels through proxies that hold back what the sentinels
//! send, so the failover announcement reaches it late — deterministically. Its unlock in
//! between goes to the old master (still writable), leaving a stale copy of the lock on
//! the new one; once the announcement arrives, the client replays its recent releases there.

use std::time::{Duration, Instant};

use dlock::{LockClient, Topology};
use dlock_tests::keys::LockKeys;
use dlock_tests::{RedisSentinelGroup, TcpProxy};

/// A Sentinel group, proxies in front of its sentinels, and a client (waiters rechecking
/// every `recheck`) that reaches the sentinels through them.
async fn proxied(recheck: Duration) -> (RedisSentinelGroup, Vec<TcpProxy>, LockClient) {
    let group = RedisSentinelGroup::start();
    let proxies: Vec<TcpProxy> = group
        .sentinel_addrs()
        .into_iter()
        .map(TcpProxy::start)
        .collect();
    let topology = Topology::sentinel(
        group.master_name(),
        proxies.iter().map(TcpProxy::url).collect(),
    );
    let client = LockClient::builder()
        .command_timeout(Duration::from_millis(500))
        .max_wait_recheck(recheck)
        .connect_to(&topology)
        .await
        .unwrap();
    (group, proxies, client)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_release_sent_to_the_old_master_is_replayed_on_the_new_one() {
    let (group, proxies, client) = proxied(Duration::from_secs(5)).await;

    let guard = client.lock("replay:stale").lock().await.unwrap();
    tokio::task::block_in_place(|| group.wait_replicated());
    for proxy in &proxies {
        proxy.hold_replies();
    }
    let new_master = tokio::task::block_in_place(|| group.failover());
    // The client has not heard: its release goes to the old master.
    guard.unlock().await.unwrap();
    let mut new = group.server_on_port(new_master).unwrap().connection();
    let stale: i64 = redis::cmd("PTTL")
        .arg("replay:stale")
        .query(&mut new)
        .unwrap();
    assert!(
        stale > 20_000,
        "the new master should still hold the promoted copy of the lock (PTTL {stale})"
    );

    let told = Instant::now();
    for proxy in &proxies {
        proxy.release_replies();
    }
    loop {
        let exists: bool = redis::cmd("EXISTS")
            .arg("replay:stale")
            .query(&mut new)
            .unwrap();
        if !exists {
            break;
        }
        assert!(
            told.elapsed() < Duration::from_secs(3),
            "the stale lock is still on the new master {:?} after the announcement",
            told.elapsed()
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    println!(
        "release replay: stale lock ({stale} ms of lease left) removed from the new master {:?} after the client heard of the failover",
        told.elapsed()
    );
    // And the lock works on the new master.
    let again = client.lock("replay:stale").try_lock().await.unwrap();
    again.unlock().await.unwrap();
}

/// An acquisition whose wait runs out after its busy try registered it cleans up in the
/// foreground (its `withdraw`). Sent to the old master after the promotion, that cleanup
/// never reaches the new one, which keeps the owner registered, and passes the lock to
/// it, until the registry lapses (three rechecks and a second: 31 s here); the client
/// replays it there as it replays a guard's release.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cleanup_sent_to_the_old_master_is_replayed_on_the_new_one() {
    let (group, proxies, client) = proxied(Duration::from_secs(10)).await;
    let name = "replay:{cleanup}";
    let keys = LockKeys::new("", name);

    // Another owner's hold, written on the master: the client's try is busy and registers.
    let old_master = group.current_master_port();
    let mut old = group.server_on_port(old_master).unwrap().connection();
    redis::pipe()
        .cmd("HSET")
        .arg(&keys.key)
        .arg("elsewhere:1")
        .arg(1)
        .cmd("PEXPIRE")
        .arg(&keys.key)
        .arg(60_000)
        .query::<()>(&mut old)
        .unwrap();
    // Its wait outlasts the failover (a second or two; the old master stays writable
    // about ten more) and ends before the client hears of it.
    let lock = client.lock(name);
    let waiting = tokio::spawn(async move { lock.try_lock_for(Duration::from_secs(8)).await });
    let registered = Instant::now();
    while dlock_tests::keys::registered(&mut old, &keys.registry).is_empty() {
        assert!(
            registered.elapsed() < Duration::from_secs(3),
            "the busy try never registered its owner"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    tokio::task::block_in_place(|| group.wait_replicated());
    for proxy in &proxies {
        proxy.hold_replies();
    }
    let failing_over = Instant::now();
    let new_master = tokio::task::block_in_place(|| group.failover());
    assert!(
        !waiting.is_finished(),
        "the failover took {:?}, longer than the acquisition's wait",
        failing_over.elapsed()
    );

    // The client has not heard: its wait runs out and its cleanup goes to the old master.
    let outcome = waiting.await.unwrap();
    assert!(outcome.is_err(), "the lock was held elsewhere: {outcome:?}");
    let mut new = group.server_on_port(new_master).unwrap().connection();
    assert!(
        dlock_tests::keys::registered(&mut old, &keys.registry).is_empty(),
        "the cleanup should have reached the old master"
    );
    assert_eq!(
        dlock_tests::keys::registered(&mut new, &keys.registry).len(),
        1,
        "the new master should still have the owner registered"
    );

    let told = Instant::now();
    for proxy in &proxies {
        proxy.release_replies();
    }
    while !dlock_tests::keys::registered(&mut new, &keys.registry).is_empty() {
        assert!(
            told.elapsed() < Duration::from_secs(5),
            "the owner is still registered on the new master {:?} after the announcement",
            told.elapsed()
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    println!(
        "cleanup replay: the owner left the new master's registry {:?} after the client heard of the failover",
        told.elapsed()
    );
}
