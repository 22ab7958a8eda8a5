//! Dropping a client releases everything it opened: every connection to the server and to
//! each sentinel, and every background task with them, within a second of the last handle
//! going away. The same for a connect cancelled half-way.
//!
//! The oracle is `CLIENT LIST` on each server, against a baseline taken before the client
//! existed (the test's own connection included in both).

use std::time::{Duration, Instant};

use dlock::{LockClient, Topology};
use dlock_tests::{RedisSentinelGroup, RedisServer};

/// How many connections `server` has now.
fn connections(admin: &mut redis::Connection) -> usize {
    let list: String = redis::cmd("CLIENT").arg("LIST").query(admin).unwrap();
    list.lines().count()
}

/// The count once it stays the same for 300 ms (sentinels open their links to each other
/// and to the servers for a while after start).
fn settled(admin: &mut redis::Connection) -> usize {
    let mut last = connections(admin);
    for _ in 0..50 {
        std::thread::sleep(Duration::from_millis(300));
        let now = connections(admin);
        if now == last {
            return now;
        }
        last = now;
    }
    panic!("the connection count never settled");
}

/// Waits (at most 1 s) until every server is back at its baseline; returns how long it took.
async fn back_to_baseline(admins: &mut [(String, redis::Connection, usize)]) -> Duration {
    let dropped = Instant::now();
    loop {
        let above: Vec<String> = admins
            .iter_mut()
            .filter_map(|(name, admin, baseline)| {
                let now = connections(admin);
                (now > *baseline).then(|| {
                    let list: String = redis::cmd("CLIENT").arg("LIST").query(admin).unwrap();
                    format!("{name}: {now} (baseline {baseline}): {list}")
                })
            })
            .collect();
        if above.is_empty() {
            return dropped.elapsed();
        }
        assert!(
            dropped.elapsed() < Duration::from_secs(1),
            "connections left 1 s after the client was dropped: {above:?}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Uses every part of a client: the command connection, the subscriber (a waiter woken by
/// a release), the watchdog and a background release.
async fn exercise(client: &LockClient) {
    let held = client.lock("drop:held").lock().await.unwrap();
    let lock = client.lock("drop:held");
    let waiter = tokio::spawn(async move { lock.try_lock_for(Duration::from_secs(5)).await });
    tokio::time::sleep(Duration::from_millis(100)).await;
    held.unlock().await.unwrap();
    drop(waiter.await.unwrap().unwrap());
    let _ = client.lock("drop:other").is_locked().await.unwrap();
}

fn admins(servers: &[(&str, &RedisServer)]) -> Vec<(String, redis::Connection, usize)> {
    servers
        .iter()
        .map(|(name, server)| {
            let mut admin = server.connection();
            let baseline = settled(&mut admin);
            ((*name).to_owned(), admin, baseline)
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dropped_client_closes_its_connections() {
    let server = RedisServer::start();
    let mut admins = admins(&[("server", &server)]);
    let client = LockClient::connect(&server.url()).await.unwrap();
    exercise(&client).await;
    assert!(connections(&mut admins[0].1) > admins[0].2);
    drop(client);
    let took = back_to_baseline(&mut admins).await;
    println!("single server: back to the baseline {took:?} after the drop");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dropped_sentinel_client_closes_its_connections_everywhere() {
    let group = RedisSentinelGroup::start();
    let mut servers = vec![("master", group.master_server())];
    for sentinel in group.sentinels() {
        servers.push(("sentinel", sentinel));
    }
    let mut admins = admins(&servers);
    let topology = Topology::sentinel(group.master_name(), group.sentinel_urls());

    let client = LockClient::builder().connect_to(&topology).await.unwrap();
    exercise(&client).await;
    for (name, admin, baseline) in &mut admins {
        assert!(
            connections(admin) > *baseline,
            "{name}: no connection of the client"
        );
    }
    drop(client);
    let took = back_to_baseline(&mut admins).await;

    // A connect cancelled at any point leaves nothing either.
    // A connect takes a few milliseconds here: cancel across that span.
    let mut cancelled = 0;
    for delay_ms in (0..=6).chain(0..=6) {
        let connecting = LockClient::builder().connect_to(&topology);
        let finished = tokio::time::timeout(Duration::from_millis(delay_ms), connecting)
            .await
            .is_ok();
        cancelled += u32::from(!finished);
    }
    let cancelled_took = back_to_baseline(&mut admins).await;
    println!(
        "sentinel: back to the baseline on the master and 3 sentinels {took:?} after the drop; {cancelled} of 14 connects cancelled, baseline again {cancelled_took:?} later"
    );
    assert!(cancelled >= 6, "only {cancelled} connects were cancelled");
}

/// A client whose command connection went silent replaced it and keeps the old one open
/// for a while (a paused server may still run what it holds); dropping the client closes
/// that one too, at once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replaced_silent_connection_goes_with_the_client() {
    let server = RedisServer::start();
    let proxy = dlock_tests::TcpProxy::start(server.addr());
    let mut admins = admins(&[("server", &server)]);
    let client = LockClient::builder()
        .command_timeout(Duration::from_millis(300))
        .connect(&proxy.url())
        .await
        .unwrap();
    assert!(proxy.silence(1));
    let silent = client.lock("drop:silent").is_locked().await;
    assert!(
        silent.is_err(),
        "an answer on a silent connection: {silent:?}"
    );
    // The replacement answers.
    let replaced = Instant::now();
    while client.lock("drop:silent").is_locked().await.is_err() {
        assert!(
            replaced.elapsed() < Duration::from_secs(3),
            "never replaced"
        );
    }
    assert!(proxy.accepted() >= 2, "no new connection");
    drop(client);
    let took = back_to_baseline(&mut admins).await;
    println!(
        "a client with a replaced silent connection: connections closed {took:?} after the drop"
    );
}
