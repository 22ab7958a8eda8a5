//! The read-write lock's rules in one process: readers share, a writer excludes, both
//! re-enter, a writer may downgrade, an upgrade is refused at once, nested writes never
//! stretch the TTL, and the watchdog renews read holds (downgraded ones too).

use std::time::{Duration, Instant};

use dlock::{LockClient, LockError};
use dlock_tests::RedisServer;
use redis::Commands;

async fn client(server: &RedisServer, watchdog: Duration) -> LockClient {
    LockClient::builder()
        .watchdog_timeout(watchdog)
        .connect(&server.url())
        .await
        .unwrap()
}

#[tokio::test]
async fn readers_share_and_a_writer_excludes_everyone() {
    let server = RedisServer::start();
    let client = client(&server, Duration::from_secs(30)).await;
    let rw = client.rw_lock("shared");

    let first = rw.read().try_lock().await.unwrap();
    let second = rw.read().try_lock().await.unwrap();
    assert!(rw.write().try_lock().await.unwrap_err().is_timeout());
    first.unlock().await.unwrap();
    assert!(rw.write().try_lock().await.unwrap_err().is_timeout());
    second.unlock().await.unwrap();
    assert!(
        !rw.is_locked().await.unwrap(),
        "the last reader frees the key"
    );

    let writer = rw.write().try_lock().await.unwrap();
    assert!(rw.read().try_lock().await.unwrap_err().is_timeout());
    assert!(rw.write().try_lock().await.unwrap_err().is_timeout());
    writer.unlock().await.unwrap();
    let exists: bool = server.connection().exists("shared").unwrap();
    assert!(!exists);
}

#[tokio::test]
async fn reads_and_writes_reenter_inside_their_scope() {
    let server = RedisServer::start();
    let client = client(&server, Duration::from_secs(30)).await;
    let rw = client.rw_lock("reenter");

    let read = rw.read().lock().await.unwrap();
    read.scope(async {
        let again = rw.read().try_lock().await.unwrap();
        assert_eq!(again.hold_count().await.unwrap(), 2);
        again.unlock().await.unwrap();
    })
    .await;
    assert_eq!(read.hold_count().await.unwrap(), 1);
    read.unlock().await.unwrap();

    let write = rw.write().lock().await.unwrap();
    write
        .scope(async {
            let again = rw.write().try_lock().await.unwrap();
            assert_eq!(again.hold_count().await.unwrap(), 2);
            again.unlock().await.unwrap();
        })
        .await;
    write.unlock().await.unwrap();
    assert!(!rw.is_locked().await.unwrap());
}

#[tokio::test]
async fn an_upgrade_is_refused_at_once_and_the_read_hold_stays() {
    let server = RedisServer::start();
    let client = client(&server, Duration::from_secs(30)).await;
    let rw = client.rw_lock("upgrade");

    let read = rw.read().lock().await.unwrap();
    let (error, took) = read
        .scope(async {
            let started = Instant::now();
            // `lock()` would wait forever for its own read hold if it were not refused.
            let attempt = tokio::time::timeout(Duration::from_secs(5), rw.write().lock()).await;
            (
                attempt.expect("an upgrade must not wait").unwrap_err(),
                started.elapsed(),
            )
        })
        .await;
    assert!(
        matches!(&error, LockError::UpgradeNotSupported { name } if name == "upgrade"),
        "{error:?}"
    );
    assert!(
        error.to_string().contains("Release the read hold first"),
        "{error}"
    );
    assert!(took < Duration::from_millis(10), "refused after {took:?}");
    assert!(!read.is_lost());
    assert_eq!(read.hold_count().await.unwrap(), 1);
    read.unlock().await.unwrap();
}

#[tokio::test]
async fn a_writer_downgrades_and_other_readers_join_after_the_write_release() {
    let server = RedisServer::start();
    let client = client(&server, Duration::from_secs(30)).await;
    let rival = LockClient::connect(&server.url()).await.unwrap();
    let rw = client.rw_lock("downgrade");

    let write = rw.write().lock().await.unwrap();
    let read = write.scope(rw.read().try_lock()).await.unwrap();
    assert!(rival
        .rw_lock("downgrade")
        .read()
        .try_lock()
        .await
        .unwrap_err()
        .is_timeout());
    write.unlock().await.unwrap();

    let mode: String = server.connection().hget("downgrade", "mode").unwrap();
    assert_eq!(mode, "read");
    let other = rival.rw_lock("downgrade").read().try_lock().await.unwrap();
    assert!(rival
        .rw_lock("downgrade")
        .write()
        .try_lock()
        .await
        .unwrap_err()
        .is_timeout());
    other.unlock().await.unwrap();
    read.unlock().await.unwrap();
    assert!(!rw.is_locked().await.unwrap());
}

#[tokio::test]
async fn nested_writes_never_stretch_the_ttl_past_the_lease() {
    let server = RedisServer::start();
    let client = client(&server, Duration::from_secs(30)).await;
    let rw = client.rw_lock("nested");
    let lease = Duration::from_secs(30);

    let outer = rw.write().lock_with_lease(lease).await.unwrap();
    let mut guards = vec![];
    let mut current = outer;
    for _ in 0..4 {
        let next = current
            .scope(rw.write().lock_with_lease(lease))
            .await
            .unwrap();
        guards.push(current);
        current = next;
    }
    assert_eq!(current.hold_count().await.unwrap(), 5);
    let pttl: i64 = server.connection().pttl("nested").unwrap();
    // The lease and the one millisecond every server-side deadline adds (a hold taken
    // during a millisecond lasts to its end: see `scripts/clock.lua`).
    assert!(
        pttl > 0 && pttl <= lease.as_millis() as i64 + 1,
        "PTTL {pttl} ms after 5 nested writes of {lease:?}"
    );
    current.unlock().await.unwrap();
    for guard in guards.into_iter().rev() {
        guard.unlock().await.unwrap();
    }
    assert!(!rw.is_locked().await.unwrap());
}

#[tokio::test]
async fn the_watchdog_renews_a_read_hold_and_a_downgraded_one_past_their_lease() {
    let server = RedisServer::start();
    let client = client(&server, Duration::from_millis(600)).await;
    let rival = LockClient::connect(&server.url()).await.unwrap();
    let rw = client.rw_lock("renewed");
    let writer = rival.rw_lock("renewed").write();

    let read = rw.read().lock().await.unwrap();
    tokio::time::sleep(Duration::from_millis(1500)).await;
    assert!(!read.is_lost());
    assert!(
        writer.try_lock().await.unwrap_err().is_timeout(),
        "read hold expired"
    );
    read.unlock().await.unwrap();

    let write = rw.write().lock().await.unwrap();
    let downgraded = write.scope(rw.read().lock()).await.unwrap();
    write.unlock().await.unwrap();
    tokio::time::sleep(Duration::from_millis(1500)).await;
    assert!(!downgraded.is_lost());
    assert!(
        writer.try_lock().await.unwrap_err().is_timeout(),
        "the downgraded read hold expired after the write release"
    );
    downgraded.unlock().await.unwrap();
    writer.try_lock().await.unwrap().unlock().await.unwrap();
}

#[tokio::test]
async fn a_waiting_writer_holds_new_readers_back_but_not_reentrant_ones() {
    let server = RedisServer::start();
    let client = client(&server, Duration::from_secs(30)).await;
    let rw = client.rw_lock("preference");

    let read = rw.read().lock().await.unwrap();
    let writer = tokio::spawn({
        let rw = rw.clone();
        async move { rw.write().try_lock_for(Duration::from_secs(10)).await }
    });
    // Wait until the writer's entry is in Redis.
    let started = Instant::now();
    let mut watcher = server.connection();
    loop {
        let keys: Vec<String> = watcher.keys("dlock:rwwait:*").unwrap();
        if !keys.is_empty() {
            break;
        }
        assert!(
            started.elapsed() < Duration::from_secs(2),
            "writer never queued"
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    assert!(
        rw.read().try_lock().await.unwrap_err().is_timeout(),
        "a new reader passed a waiting writer"
    );
    let again = read.scope(rw.read().try_lock()).await.unwrap();
    again.unlock().await.unwrap();
    read.unlock().await.unwrap();
    let write = writer.await.unwrap().unwrap();
    write.unlock().await.unwrap();
    // The writer left the queue when it got in: readers pass again.
    rw.read().try_lock().await.unwrap().unlock().await.unwrap();
}

#[tokio::test]
async fn a_writer_that_gives_up_leaves_the_queue_and_readers_pass() {
    let server = RedisServer::start();
    let client = client(&server, Duration::from_secs(30)).await;
    let rw = client.rw_lock("gives-up");

    let read = rw.read().lock().await.unwrap();
    let error = rw
        .write()
        .try_lock_for(Duration::from_millis(300))
        .await
        .unwrap_err();
    assert!(error.is_timeout());
    let keys: Vec<String> = server.connection().keys("dlock:rwwait:*").unwrap();
    let mut waiting = 0;
    for key in keys {
        let n: u64 = server.connection().zcard(&key).unwrap();
        waiting += n;
    }
    assert_eq!(waiting, 0, "the writer's entry stayed");
    rw.read().try_lock().await.unwrap().unlock().await.unwrap();
    read.unlock().await.unwrap();
}
