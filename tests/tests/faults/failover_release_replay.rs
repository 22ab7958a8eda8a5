//! A release sent to the old master after a Sentinel promoted a replica, but before the
//! client heard of it, must not leave the lock held on the new master for a whole lease.
//!
//! The client reaches the sentinels through proxies that hold back what the sentinels
//! send, so the failover announcement reaches it late — deterministically. Its unlock in
//! between goes to the old master (still writable), leaving a stale copy of the lock on
//! the new one; once the announcement arrives, the client replays its recent releases there.

use std::time::{Duration, Instant};

use dlock::{LockClient, Topology};
use dlock_tests::{RedisSentinelGroup, TcpProxy};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_release_sent_to_the_old_master_is_replayed_on_the_new_one() {
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
        .connect_to(&topology)
        .await
        .unwrap();

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
