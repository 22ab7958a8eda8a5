//! A RedLock is for a minority of its servers being down, and that includes the moment a
//! process starts: it is created with the majority that answers, the others are connected
//! in the background and counted from the moment they answer; a majority down at start
//! is a clear error. Its server clients open no connection it does not use: a RedLock
//! waits by rounds, never by pub/sub, so no subscriber connection.

use std::time::{Duration, Instant};

use dlock::{redlock::RedLockClient, LockClient, LockError};
use dlock_tests::RedisServer;

fn servers(n: usize) -> Vec<RedisServer> {
    (0..n).map(|_| RedisServer::start()).collect()
}

fn urls(servers: &[RedisServer]) -> Vec<String> {
    servers.iter().map(RedisServer::url).collect()
}

fn builder() -> dlock::LockClientBuilder {
    LockClient::builder()
        .connect_timeout(Duration::from_millis(300))
        .command_timeout(Duration::from_millis(300))
        .retry_attempts(0)
}

fn key_exists(server: &RedisServer, key: &str) -> bool {
    redis::cmd("EXISTS")
        .arg(key)
        .query::<bool>(&mut server.connection())
        .unwrap()
}

/// Connections of `server` subscribed to something (`sub`, `psub` or `ssub` > 0 in
/// `CLIENT LIST`).
fn subscribed_connections(server: &RedisServer) -> usize {
    let list: String = redis::cmd("CLIENT")
        .arg("LIST")
        .query(&mut server.connection())
        .unwrap();
    list.lines()
        .filter(|line| {
            line.split(' ').any(|field| {
                matches!(field.split_once('='), Some(("sub" | "psub" | "ssub", n)) if n != "0")
            })
        })
        .count()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_redlock_starts_with_a_minority_down_and_counts_it_once_it_answers() {
    let servers = servers(5);
    // Two servers do not answer (paused: connections are accepted and never answered).
    servers[3].pause();
    servers[4].pause();
    let started = Instant::now();
    let redlock = RedLockClient::connect(builder(), &urls(&servers))
        .await
        .expect("a majority answers: the RedLock is created");
    eprintln!("created in {:?}", started.elapsed());
    assert_eq!((redlock.nodes(), redlock.connected_nodes()), (5, 3));
    let lock = redlock.lock("invoice:7");
    lock.try_lock().await.unwrap().unlock().await.unwrap();

    // The servers not connected count as failed: with one more down there is no quorum
    // (the oracle below can fire).
    servers[0].pause();
    match lock.try_lock_for(Duration::from_millis(400)).await {
        Err(LockError::NoQuorum { granted, .. }) => assert_eq!(granted, 2),
        other => panic!("2 of 5 answering: {other:?}"),
    }
    servers[0].resume();

    servers[3].resume();
    servers[4].resume();
    let resumed = Instant::now();
    let deadline = resumed + Duration::from_secs(15);
    while redlock.connected_nodes() < 5 {
        assert!(
            Instant::now() < deadline,
            "the resumed servers were never connected"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    eprintln!("all 5 connected {:?} after the resume", resumed.elapsed());

    // Now two of the first three are down and the late ones make the majority.
    servers[0].pause();
    servers[1].pause();
    let guard = lock
        .try_lock_for(Duration::from_secs(3))
        .await
        .expect("servers 2, 3 and 4 grant it");
    for late in &servers[3..] {
        assert!(key_exists(late, "invoice:7"), "a late server holds it");
    }
    servers[0].resume();
    servers[1].resume();
    guard.unlock().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_majority_down_at_start_is_a_connect_error() {
    let mut servers = servers(3);
    let urls = urls(&servers);
    servers[1].stop();
    servers[2].stop();
    match RedLockClient::connect(builder(), &urls).await {
        Err(error @ LockError::Connect { .. }) => eprintln!("{error}"),
        other => panic!("1 of 3 answering: {other:?}"),
    }
    // One down of three is a minority: created.
    let servers = self::servers(3);
    let mut urls = self::urls(&servers);
    urls[2] = {
        let mut gone = RedisServer::start();
        let url = gone.url();
        gone.stop();
        url
    };
    let redlock = RedLockClient::connect(builder(), &urls).await.unwrap();
    assert_eq!(redlock.connected_nodes(), 2);
    redlock
        .lock("a")
        .try_lock()
        .await
        .unwrap()
        .unlock()
        .await
        .unwrap();
}

/// A RedLock's rounds, waits and releases open no subscriber on its servers; a plain
/// client that waits does (the control: the count can see one).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redlock_servers_get_no_subscriber_connection() {
    let servers = servers(3);
    let redlock = RedLockClient::connect(builder(), &urls(&servers))
        .await
        .unwrap();
    let lock = redlock.lock("report");
    let held = lock.try_lock().await.unwrap();
    let waiting = tokio::spawn({
        let lock = lock.clone();
        async move { lock.try_lock_for(Duration::from_secs(5)).await }
    });
    tokio::time::sleep(Duration::from_millis(300)).await;
    held.unlock().await.unwrap();
    waiting.await.unwrap().unwrap().unlock().await.unwrap();
    for server in &servers {
        assert_eq!(subscribed_connections(server), 0);
    }

    let plain = LockClient::connect(&servers[0].url()).await.unwrap();
    let held = plain.lock("plain").lock().await.unwrap();
    let waiter = tokio::spawn({
        let plain = LockClient::connect(&servers[0].url()).await.unwrap();
        async move {
            plain
                .lock("plain")
                .try_lock_for(Duration::from_secs(5))
                .await
        }
    });
    let deadline = Instant::now() + Duration::from_secs(5);
    while subscribed_connections(&servers[0]) == 0 {
        assert!(
            Instant::now() < deadline,
            "a waiting plain client subscribes"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    held.unlock().await.unwrap();
    waiter.await.unwrap().unwrap().unlock().await.unwrap();
}
