//! `LockClient::shutdown` waits for what the client still owes Redis (the releases of
//! dropped guards, the cleanups of acquisitions that ended without a guard), so that a
//! process that exits right after leaves nothing behind; it is bounded when Redis does not
//! answer.

use std::time::Duration;

use dlock::{LockClient, LockError};
use dlock_tests::{RedisServer, TcpProxy};
use redis::Commands;
use tokio::time::Instant;

/// The client's replies are held back by a proxy while a guard is dropped and a waiter is
/// cancelled: their release and cleanup are queued, unanswered. `shutdown` returns only
/// once Redis answered both, and then the lock key and the waiter's registration are
/// gone. Fails when `shutdown` does not wait for the background releases (it returns at
/// once, with the key still there).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shutdown_waits_for_dropped_guards_and_cancelled_waiters() {
    let server = RedisServer::start();
    let proxy = TcpProxy::start(server.addr());
    let client = LockClient::connect(&proxy.url()).await.unwrap();
    let other = LockClient::connect(&server.url()).await.unwrap();

    // A waiter of `client` for a lock `other` holds: registered, then cancelled.
    let held = other.lock("{shut}held").lock().await.unwrap();
    let lock = client.lock("{shut}held");
    let waiter = tokio::spawn(async move { lock.try_lock_for(Duration::from_secs(10)).await });
    let started = Instant::now();
    loop {
        let registered: usize = server
            .connection()
            .zcard("dlock:unlock:{shut}:{shut}held")
            .unwrap();
        if registered == 1 {
            break;
        }
        assert!(
            started.elapsed() < Duration::from_secs(5),
            "the waiter never registered"
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    // A guard of `client` on another lock.
    let guard = client.lock("{shut}mine").lock().await.unwrap();

    proxy.hold_replies();
    drop(guard);
    waiter.abort();
    let _ = waiter.await;
    tokio::time::sleep(Duration::from_millis(100)).await;
    let replies_held = Instant::now();
    let settled = tokio::spawn({
        let client = client.clone();
        async move { client.shutdown().await }
    });
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(
        !settled.is_finished(),
        "shutdown returned while Redis had not answered"
    );
    proxy.release_replies();
    settled.await.unwrap().unwrap();
    eprintln!(
        "shutdown returned {:?} after the replies were held",
        replies_held.elapsed()
    );

    let mut conn = server.connection();
    let mine: bool = conn.exists("{shut}mine").unwrap();
    assert!(!mine, "the dropped guard's lock is still there");
    let registered: usize = conn.zcard("dlock:unlock:{shut}:{shut}held").unwrap();
    assert_eq!(registered, 0, "the cancelled waiter is still registered");
    held.unlock().await.unwrap();

    // With nothing owed, it returns at once.
    let started = Instant::now();
    client.shutdown().await.unwrap();
    assert!(started.elapsed() < Duration::from_millis(100));
}

/// Redis never answers: `shutdown` does not wait past its bound (two command timeouts and
/// a second) and says what was not done (`ShutdownIncomplete`: the dropped guard's release
/// still running, or given up after its command timeout). Fails when `shutdown` reports
/// success for a release Redis never answered, or waits without end.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shutdown_is_bounded_when_redis_does_not_answer() {
    let server = RedisServer::start();
    let proxy = TcpProxy::start(server.addr());
    let client = LockClient::builder()
        .command_timeout(Duration::from_millis(300))
        .connect(&proxy.url())
        .await
        .unwrap();
    let guard = client.lock("frozen").lock().await.unwrap();
    proxy.hold_replies();
    drop(guard);

    let started = Instant::now();
    let error = client.shutdown().await.unwrap_err();
    let took = started.elapsed();
    eprintln!("shutdown gave up after {took:?}: {error}");
    match error {
        LockError::ShutdownIncomplete {
            pending, failed, ..
        } => assert_eq!(pending + failed, 1),
        other => panic!("{other:?}"),
    }
    assert!(took < Duration::from_millis(2_100), "{took:?}");
    proxy.release_replies();
}
