//! Guards the spans dlock opens: `dlock.acquire` around every acquisition (the lock's
//! name, its kind, the attribute's key template, the wait budget, and the outcome and the
//! time waited recorded when it ends) and, for `#[distributed_lock]`, `dlock.hold` around
//! the body, open as long as the body holds the lock.
//!
//! Spans are captured by a subscriber of the harness (`dlock_tests::spans`); tests in this
//! binary run in parallel, so each looks only at spans naming its own locks.

use std::time::Duration;

use dlock::{distributed_lock, redlock::RedLockClient, LockClient, LockError, MultiLock};
use dlock_tests::spans::{capture_spans, closed_spans, ClosedSpan};
use dlock_tests::RedisServer;

/// The closed spans called `name` whose `lock` field is `lock`.
fn spans_of(name: &str, lock: &str) -> Vec<ClosedSpan> {
    closed_spans()
        .into_iter()
        .filter(|span| span.name == name && span.field("lock") == Some(lock))
        .collect()
}

/// The one closed `dlock.acquire` span of `lock`.
fn the_acquisition(lock: &str) -> ClosedSpan {
    let spans = spans_of("dlock.acquire", lock);
    assert_eq!(
        spans.len(),
        1,
        "{lock}: one acquisition span expected: {spans:?}"
    );
    spans.into_iter().next().unwrap()
}

/// The body sleeps `hold` with the lock held.
#[distributed_lock(key = "spans:report:<day>", wait = "2s", client = locks)]
async fn report(locks: &LockClient, day: u32, hold: Duration) -> Result<u32, LockError> {
    tokio::time::sleep(hold).await;
    Ok(day)
}

/// Two accounts, all or none.
#[distributed_lock(keys = ["spans:account:<from>", "spans:account:<to>"], client = locks)]
async fn transfer(locks: &LockClient, from: u32, to: u32) -> Result<(), LockError> {
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_attribute_traces_its_acquisition_with_the_template_and_its_body_as_the_hold() {
    capture_spans();
    let server = RedisServer::start();
    let locks = LockClient::connect(&server.url()).await.unwrap();

    assert_eq!(
        report(&locks, 7, Duration::from_millis(150)).await.unwrap(),
        7
    );

    let acquire = the_acquisition("spans:report:7");
    assert_eq!(acquire.field("kind"), Some("lock"));
    assert_eq!(acquire.field("key_template"), Some("spans:report:<day>"));
    assert_eq!(acquire.field("wait"), Some("2s"));
    assert_eq!(acquire.field("outcome"), Some("acquired"));
    let waited: u64 = acquire.field("waited_ms").unwrap().parse().unwrap();
    assert!(waited < 2_000, "waited {waited} ms for a free lock");

    let holds = spans_of("dlock.hold", "spans:report:7");
    assert_eq!(holds.len(), 1, "one hold span expected: {holds:?}");
    let hold = &holds[0];
    assert_eq!(hold.field("kind"), Some("lock"));
    assert_eq!(hold.field("key_template"), Some("spans:report:<day>"));
    assert!(
        hold.lasted >= Duration::from_millis(150),
        "the hold span covers the body: {:?}",
        hold.lasted
    );

    transfer(&locks, 1, 2).await.unwrap();
    let acquire = the_acquisition("spans:account:1, spans:account:2");
    assert_eq!(acquire.field("kind"), Some("multi_lock"));
    assert_eq!(
        acquire.field("key_template"),
        Some("spans:account:<from>, spans:account:<to>")
    );
    assert_eq!(acquire.field("wait"), Some("unbounded"));
    let holds = spans_of("dlock.hold", "spans:account:1, spans:account:2");
    assert_eq!(holds.len(), 1, "one hold span expected: {holds:?}");
    // The multi-lock takes its locks as one acquisition: none of its own per lock.
    assert!(spans_of("dlock.acquire", "spans:account:1").is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn manual_acquisitions_record_their_outcome_and_no_template() {
    capture_spans();
    let server = RedisServer::start();
    let locks = LockClient::connect(&server.url()).await.unwrap();
    let others = LockClient::connect(&server.url()).await.unwrap();

    let held = others.lock("spans:busy").lock().await.unwrap();
    let busy = locks
        .lock("spans:busy")
        .try_lock_for(Duration::from_millis(200))
        .await;
    assert!(busy.unwrap_err().is_timeout());
    held.unlock().await.unwrap();
    let acquisitions = spans_of("dlock.acquire", "spans:busy");
    assert_eq!(acquisitions.len(), 2, "{acquisitions:?}");
    let timeout = acquisitions
        .iter()
        .find(|span| span.field("outcome") == Some("timeout"))
        .expect("the timed-out acquisition's span");
    assert_eq!(timeout.field("wait"), Some("200ms"));
    assert_eq!(timeout.field("key_template"), None, "no template by hand");
    let waited: u64 = timeout.field("waited_ms").unwrap().parse().unwrap();
    assert!(waited >= 200, "waited {waited} ms of a 200 ms budget");
    assert!(timeout.lasted >= Duration::from_millis(200));
    // Only the attribute opens a hold span.
    assert!(spans_of("dlock.hold", "spans:busy").is_empty());

    // A cancelled acquisition says so.
    let held = others.lock("spans:cancelled").lock().await.unwrap();
    let cancelled = tokio::time::timeout(
        Duration::from_millis(100),
        locks.lock("spans:cancelled").lock(),
    )
    .await;
    assert!(cancelled.is_err(), "the acquisition was cancelled");
    held.unlock().await.unwrap();
    let acquisitions = spans_of("dlock.acquire", "spans:cancelled");
    let outcomes: Vec<_> = acquisitions
        .iter()
        .map(|span| span.field("outcome"))
        .collect();
    assert!(outcomes.contains(&Some("cancelled")), "{acquisitions:?}");
    assert!(outcomes.contains(&Some("acquired")), "{acquisitions:?}");

    // Every primitive's acquisition is traced, with its kind.
    let kinds = [
        ("spans:fair", "fair_lock"),
        ("spans:rw", "read"),
        ("spans:sem", "semaphore"),
    ];
    let fair = locks.fair_lock("spans:fair").lock().await.unwrap();
    let read = locks.rw_lock("spans:rw").read().lock().await.unwrap();
    let permit = locks.semaphore("spans:sem", 2).acquire(1).await.unwrap();
    let multi = MultiLock::sequential([locks.lock("spans:m1"), locks.lock("spans:m2")])
        .unwrap()
        .lock()
        .await
        .unwrap();
    for guard in [fair, read] {
        guard.unlock().await.unwrap();
    }
    permit.unlock().await.unwrap();
    multi.unlock().await.unwrap();
    for (lock, kind) in kinds {
        assert_eq!(the_acquisition(lock).field("kind"), Some(kind), "{lock}");
    }
    let servers: Vec<_> = (0..3).map(|_| RedisServer::start()).collect();
    let urls: Vec<String> = servers.iter().map(RedisServer::url).collect();
    let redlock = RedLockClient::connect(LockClient::builder(), &urls)
        .await
        .unwrap();
    redlock
        .lock("spans:red")
        .lock()
        .await
        .unwrap()
        .unlock()
        .await
        .unwrap();
    let red = the_acquisition("spans:red");
    assert_eq!(red.field("kind"), Some("redlock"));
    assert_eq!(red.field("outcome"), Some("acquired"));
    let multi = the_acquisition("spans:m1, spans:m2");
    assert_eq!(multi.field("kind"), Some("multi_lock"));
    // Taken one by one, its locks are not acquisitions of their own.
    assert!(spans_of("dlock.acquire", "spans:m1").is_empty());
}
