//! While Redis is down every primitive's wait is bounded, and a RedLock's with a majority
//! of its servers down.

use std::time::Duration;

use dlock::{redlock::RedLockClient, LockClient};
use dlock_tests::liveness::slow_recheck;
use dlock_tests::RedisServer;
use tokio::time::Instant;

use crate::bound::*;

/// Clients connect, then the server is stopped (SIGKILL). For each of lock, fair lock,
/// read lock, write lock and semaphore, `try_lock_for(2 s)` (each on a client of its own,
/// all at once) must return an error within 2 s + 300 ms. Fails when some primitive's
/// wait is not bounded by `wait` while Redis is unreachable (it rides the outage out for
/// `failover_wait`, or a connection attempt is not bounded by the deadline).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_primitive_s_wait_is_bounded_while_redis_is_down() {
    const KINDS_DOWN: [&str; 5] = ["lock", "fair_lock", "read", "write", "semaphore"];
    let wait = Duration::from_secs(2);
    let limit = wait + Duration::from_millis(300);
    let mut server = RedisServer::start();
    let url = server.url();
    let mut clients = Vec::new();
    for _ in KINDS_DOWN {
        clients.push(slow_recheck(&url).await);
    }
    server.stop();

    let mut tasks = Vec::new();
    for (kind, client) in KINDS_DOWN.into_iter().zip(clients) {
        tasks.push(tokio::spawn(async move {
            let name = format!("{{down}}{kind}");
            let started = Instant::now();
            let outcome = match kind {
                "lock" => client.lock(&name).try_lock_for(wait).await.map(drop),
                "fair_lock" => client.fair_lock(&name).try_lock_for(wait).await.map(drop),
                "read" => client
                    .rw_lock(&name)
                    .read()
                    .try_lock_for(wait)
                    .await
                    .map(drop),
                "write" => client
                    .rw_lock(&name)
                    .write()
                    .try_lock_for(wait)
                    .await
                    .map(drop),
                _ => client
                    .semaphore(&name, 1)
                    .try_acquire_for(1, wait)
                    .await
                    .map(drop),
            };
            (kind, started.elapsed(), outcome)
        }));
    }
    let mut late = Vec::new();
    for task in tasks {
        let (kind, took, outcome) = tokio::time::timeout(Duration::from_secs(20), task)
            .await
            .expect("every wait ended within 20 s")
            .unwrap();
        eprintln!("item 11: {kind}: try_lock_for({wait:?}) returned after {took:?} (limit {limit:?}): {outcome:?}");
        assert!(outcome.is_err(), "{kind} acquired with Redis down");
        if took > limit {
            late.push(format!("{kind} after {took:?}"));
        }
    }
    assert!(late.is_empty(), "waits over {limit:?}: {late:?}");
}

/// A RedLock over 5 servers, 3 of them stopped after the client connected:
/// `try_lock_for(1 s)` must return (no quorum) within 1 s + 200 ms.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_redlock_wait_is_bounded_with_a_majority_down() {
    let wait = Duration::from_secs(1);
    let limit = wait + Duration::from_millis(200);
    let mut servers: Vec<RedisServer> = (0..5).map(|_| RedisServer::start()).collect();
    let urls: Vec<String> = servers.iter().map(RedisServer::url).collect();
    let redlock =
        RedLockClient::connect(LockClient::builder().max_wait_recheck(SLOW_RECHECK), &urls)
            .await
            .unwrap();
    for server in &mut servers[..3] {
        server.stop();
    }
    let started = Instant::now();
    let outcome = tokio::time::timeout(
        Duration::from_secs(20),
        redlock.lock("{down}redlock").try_lock_for(wait),
    )
    .await
    .expect("the RedLock wait ended within 20 s");
    let took = started.elapsed();
    eprintln!(
        "item 11: RedLock with 3 of 5 servers down: try_lock_for({wait:?}) returned after {took:?} (limit {limit:?}): {:?}",
        outcome.as_ref().map(|_| ())
    );
    assert!(outcome.is_err(), "the RedLock was granted with 3 of 5 down");
    assert!(took <= limit, "returned after {took:?}, over {limit:?}");
}

// ---------------------------------------------------------------------------------------
// 12-13. Found by the liveness property test (`proptest_liveness`).
// ---------------------------------------------------------------------------------------
