//! The attribute's intents against a real Redis: `on_busy = "skip"` runs nothing and
//! returns the skipped value when another owner holds the lock (counted in
//! `Stats::skipped`, traced), `"fail"` tries once, `"wait"` waits as before.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use dlock::{distributed_lock, LockClient, LockError};
use dlock_tests::logs::{capture_logs, captured};
use dlock_tests::RedisServer;
use redis::Commands;

#[distributed_lock(key = "tick:<job>", on_busy = "skip", client = locks)]
async fn skip_option(locks: &LockClient, job: &str, runs: &AtomicUsize) -> Option<u32> {
    runs.fetch_add(1, Ordering::SeqCst);
    Some(7)
}

#[distributed_lock(key = "tick:<job>", on_busy = "skip", client = locks)]
async fn skip_result(
    locks: &LockClient,
    job: &str,
    runs: &AtomicUsize,
) -> Result<Option<u32>, LockError> {
    runs.fetch_add(1, Ordering::SeqCst);
    Ok(Some(7))
}

#[distributed_lock(key = "tick:<job>", on_busy = "skip", client = locks)]
async fn skip_unit(locks: &LockClient, job: &str, runs: &AtomicUsize) {
    runs.fetch_add(1, Ordering::SeqCst);
}

#[distributed_lock(key = "tick:<job>", on_busy = "fail", client = locks)]
async fn fail_when_busy(
    locks: &LockClient,
    job: &str,
    runs: &AtomicUsize,
) -> Result<u32, LockError> {
    runs.fetch_add(1, Ordering::SeqCst);
    Ok(7)
}

#[distributed_lock(key = "tick:<job>", on_busy = "wait", wait = "5s", client = locks)]
async fn wait_when_busy(
    locks: &LockClient,
    job: &str,
    runs: &AtomicUsize,
) -> Result<u32, LockError> {
    runs.fetch_add(1, Ordering::SeqCst);
    Ok(7)
}

async fn client(server: &RedisServer) -> LockClient {
    LockClient::connect(&server.url()).await.unwrap()
}

#[tokio::test]
async fn skip_runs_nothing_while_another_owner_holds_the_lock_and_counts_it() {
    capture_logs(tracing::Level::DEBUG);
    let server = RedisServer::start();
    let (locks, other) = (client(&server).await, client(&server).await);
    let runs = AtomicUsize::new(0);

    // Free: the body runs and its value comes back.
    assert_eq!(skip_option(&locks, "free", &runs).await, Some(7));
    assert_eq!(skip_result(&locks, "free", &runs).await.unwrap(), Some(7));
    skip_unit(&locks, "free", &runs).await;
    assert_eq!(runs.load(Ordering::SeqCst), 3);
    assert_eq!(locks.stats().skipped, 0);

    // Held by another client: nothing runs, at once, and each skip is counted.
    let held = other.lock("tick:busy").lock().await.unwrap();
    let started = Instant::now();
    assert_eq!(skip_option(&locks, "busy", &runs).await, None);
    assert_eq!(skip_result(&locks, "busy", &runs).await.unwrap(), None);
    skip_unit(&locks, "busy", &runs).await;
    assert!(
        started.elapsed() < Duration::from_secs(1),
        "a skip tries once: {:?}",
        started.elapsed()
    );
    assert_eq!(runs.load(Ordering::SeqCst), 3, "no body ran while busy");
    assert_eq!(locks.stats().skipped, 3);
    assert_eq!(other.stats().skipped, 0, "counted by the skipping client");
    let logs = captured();
    assert!(
        logs.lines().any(|line| line.contains("DEBUG")
            && line.contains("lock=tick:busy")
            && line.contains("the body did not run")),
        "a skip is traced naming the lock: {logs}"
    );
    held.unlock().await.unwrap();

    // Free again: runs again.
    assert_eq!(skip_option(&locks, "busy", &runs).await, Some(7));
    assert_eq!(locks.stats().skipped, 3);
}

/// Two processes' worth of clients firing the same tick together: exactly one body runs.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_skips_run_the_body_once() {
    #[distributed_lock(key = "tick:<job>", on_busy = "skip", client = locks)]
    async fn slow_tick(locks: &LockClient, job: &str, runs: &AtomicUsize) -> Option<()> {
        runs.fetch_add(1, Ordering::SeqCst);
        tokio::time::sleep(Duration::from_millis(300)).await;
        Some(())
    }

    let server = RedisServer::start();
    let clients = [
        client(&server).await,
        client(&server).await,
        client(&server).await,
    ];
    let runs = AtomicUsize::new(0);
    let results = futures_join(&clients, &runs).await;
    assert_eq!(runs.load(Ordering::SeqCst), 1, "{results:?}");
    assert_eq!(results.iter().filter(|r| r.is_some()).count(), 1);
    let skipped: u64 = clients.iter().map(|c| c.stats().skipped).sum();
    assert_eq!(skipped, 2);

    async fn futures_join(clients: &[LockClient; 3], runs: &AtomicUsize) -> Vec<Option<()>> {
        let (a, b, c) = tokio::join!(
            slow_tick(&clients[0], "once", runs),
            slow_tick(&clients[1], "once", runs),
            slow_tick(&clients[2], "once", runs),
        );
        vec![a, b, c]
    }
}

/// A failure that is not a busy lock is not a skip: `Result<Option<T>, E>` returns it,
/// `Option<T>` returns `None` and logs a warning naming the function.
#[tokio::test]
async fn skip_reports_failures_that_are_not_busy() {
    capture_logs(tracing::Level::DEBUG);
    let server = RedisServer::start();
    let locks = client(&server).await;
    let runs = AtomicUsize::new(0);
    // The lock's key holds application data: acquiring fails with WrongType.
    let () = server.client().set("tick:data", "not a lock").unwrap();

    let error = skip_result(&locks, "data", &runs).await.unwrap_err();
    assert!(matches!(error, LockError::WrongType { .. }), "{error:?}");
    assert_eq!(skip_option(&locks, "data", &runs).await, None);
    assert_eq!(runs.load(Ordering::SeqCst), 0);
    assert_eq!(locks.stats().skipped, 0, "a failure is no skip");
    let logs = captured();
    assert!(
        logs.lines().any(|line| line.contains("WARN")
            && line.contains("attribute_intents::skip_option")
            && line.contains("tick:data")),
        "the swallowed failure is logged with the function: {logs}"
    );
}

#[tokio::test]
async fn fail_tries_once_and_wait_waits() {
    let server = RedisServer::start();
    // A client whose default wait is long: "fail" must not use it.
    let locks = LockClient::builder()
        .default_wait(Some(Duration::from_secs(30)))
        .connect(&server.url())
        .await
        .unwrap();
    let other = client(&server).await;
    let runs = AtomicUsize::new(0);

    let held = other.lock("tick:f").lock().await.unwrap();
    let started = Instant::now();
    let error = fail_when_busy(&locks, "f", &runs).await.unwrap_err();
    assert!(error.is_timeout(), "{error:?}");
    assert!(
        started.elapsed() < Duration::from_secs(1),
        "\"fail\" tries once: {:?}",
        started.elapsed()
    );
    assert_eq!(runs.load(Ordering::SeqCst), 0);
    assert_eq!(locks.stats().skipped, 0, "a failure is no skip");

    // "wait" waits for the release.
    let release = tokio::spawn(async move {
        tokio::time::sleep(Duration::from_millis(300)).await;
        held.unlock().await.unwrap();
    });
    let started = Instant::now();
    assert_eq!(wait_when_busy(&locks, "f", &runs).await.unwrap(), 7);
    assert!(started.elapsed() >= Duration::from_millis(250));
    release.await.unwrap();
    assert_eq!(fail_when_busy(&locks, "f", &runs).await.unwrap(), 7);
    assert_eq!(runs.load(Ordering::SeqCst), 2);
}

#[distributed_lock(key = "job:<name>", on_busy = "skip", min_hold = "1500ms", client = locks)]
async fn held_at_least(locks: &LockClient, name: &str, runs: &AtomicUsize) -> Option<u32> {
    runs.fetch_add(1, Ordering::SeqCst);
    Some(1)
}

#[distributed_lock(key = "job:<name>", wait = "5s", client = locks)]
async fn waits_for_job(locks: &LockClient, name: &str) -> Result<Instant, LockError> {
    Ok(Instant::now())
}

/// `min_hold`: after a quick body the lock stays taken until acquisition + min_hold (no
/// other node runs the job again in that window, a waiter is not woken before it ends),
/// then it is free.
#[tokio::test]
async fn min_hold_keeps_the_lock_until_it_ends() {
    let server = RedisServer::start();
    let (locks, other) = (client(&server).await, client(&server).await);
    let mut redis = server.client().get_connection().unwrap();
    let runs = AtomicUsize::new(0);

    let started = Instant::now();
    assert_eq!(held_at_least(&locks, "a", &runs).await, Some(1));
    let ttl: i64 = redis.pttl("job:a").unwrap();
    assert!(
        (1000..=1500).contains(&ttl),
        "the lock expires at acquisition + 1.5 s: PTTL {ttl} ms"
    );
    let fields: Vec<String> = redis.hkeys("job:a").unwrap();
    assert_eq!(fields, ["!held"], "our hold is gone, the lock stays busy");
    assert_eq!(locks.stats().released, 1);

    // Another node's tick inside the window: skipped.
    assert_eq!(held_at_least(&other, "a", &runs).await, None);
    assert_eq!(other.stats().skipped, 1);
    // A waiter is woken by the expiry, not before.
    let acquired_at = waits_for_job(&other, "a").await.unwrap();
    let held_for = acquired_at - started;
    assert!(
        held_for >= Duration::from_millis(1400),
        "the waiter got the lock {held_for:?} after the acquisition, before min_hold ended"
    );
    assert!(held_for < Duration::from_secs(4), "{held_for:?}");
    // Past the window the job runs again.
    assert_eq!(held_at_least(&other, "a", &runs).await, Some(1));
    assert_eq!(runs.load(Ordering::SeqCst), 2);
}

#[distributed_lock(key = "job:<name>", min_hold = "200ms", client = locks)]
async fn slow_job(locks: &LockClient, name: &str) -> Result<(), LockError> {
    tokio::time::sleep(Duration::from_millis(400)).await;
    Ok(())
}

/// A body that outlives `min_hold` releases the lock normally at its end.
#[tokio::test]
async fn min_hold_already_over_releases_normally() {
    let server = RedisServer::start();
    let locks = client(&server).await;
    let mut redis = server.client().get_connection().unwrap();
    slow_job(&locks, "slow").await.unwrap();
    let exists: bool = redis.exists("job:slow").unwrap();
    assert!(!exists, "released at once: min_hold was over");
}

#[distributed_lock(
    key = "job:<name>",
    min_hold = "2s",
    on_lost = "ignore",
    client = locks
)]
async fn job_taken_over(
    locks: &LockClient,
    name: &str,
    other: &LockClient,
) -> Result<dlock::LockGuard, LockError> {
    // Our lock is force-unlocked and another owner takes it while the body runs.
    assert!(other.lock("job:taken").force_unlock().await?);
    other
        .lock("job:taken")
        .lock_with_lease(Duration::from_secs(10))
        .await
}

/// The hold script is value-checked: another owner's lock keeps its owner and its TTL.
#[tokio::test]
async fn min_hold_never_touches_another_owners_lock() {
    let server = RedisServer::start();
    let (locks, other) = (client(&server).await, client(&server).await);
    let mut redis = server.client().get_connection().unwrap();
    let theirs = job_taken_over(&locks, "taken", &other).await.unwrap();
    let ttl: i64 = redis.pttl("job:taken").unwrap();
    assert!(
        ttl > 5000,
        "the other owner's 10 s lease is intact: PTTL {ttl} ms"
    );
    assert_eq!(
        theirs.hold_count().await.unwrap(),
        1,
        "the other owner still holds it"
    );
    let fields: Vec<String> = redis.hkeys("job:taken").unwrap();
    assert!(!fields.contains(&"!held".to_owned()), "{fields:?}");
    assert_eq!(locks.stats().release_errors, 1, "ours was found not held");
    theirs.unlock().await.unwrap();
}

#[distributed_lock(key = "fair:<job>", kind = "fair", on_busy = "skip", client = locks)]
async fn skip_fair(locks: &LockClient, job: &str) -> Option<()> {
    Some(())
}

#[distributed_lock(key = "rw:<job>", kind = "write", on_busy = "skip", client = locks)]
async fn skip_write(locks: &LockClient, job: &str) -> Option<()> {
    Some(())
}

#[distributed_lock(key = "pool:<job>", permits = 1, on_busy = "skip", client = locks)]
async fn skip_permit(locks: &LockClient, job: &str) -> Option<()> {
    Some(())
}

#[distributed_lock(keys = ["a:<job>", "b:<job>"], on_busy = "skip", client = locks)]
async fn skip_all(locks: &LockClient, job: &str) -> Option<()> {
    Some(())
}

/// Every lock the attribute takes skips when busy: a fair lock, a write lock, a semaphore
/// permit and a multi-lock one of whose locks is held.
#[tokio::test]
async fn skip_works_on_every_kind() {
    let server = RedisServer::start();
    let (locks, other) = (client(&server).await, client(&server).await);

    let fair = other.fair_lock("fair:x").lock().await.unwrap();
    let write = other.rw_lock("rw:x").read().lock().await.unwrap();
    let permit = other.semaphore("pool:x", 1).acquire(1).await.unwrap();
    let one_of_two = other.lock("b:x").lock().await.unwrap();
    assert_eq!(skip_fair(&locks, "x").await, None);
    assert_eq!(skip_write(&locks, "x").await, None, "a reader holds it");
    assert_eq!(skip_permit(&locks, "x").await, None);
    assert_eq!(skip_all(&locks, "x").await, None);
    assert_eq!(locks.stats().skipped, 4);
    let free: bool = server.connection().exists("a:x").unwrap();
    assert!(!free, "the multi-lock took none of its locks");

    fair.unlock().await.unwrap();
    write.unlock().await.unwrap();
    permit.unlock().await.unwrap();
    one_of_two.unlock().await.unwrap();
    assert_eq!(skip_fair(&locks, "x").await, Some(()));
    assert_eq!(skip_write(&locks, "x").await, Some(()));
    assert_eq!(skip_permit(&locks, "x").await, Some(()));
    assert_eq!(skip_all(&locks, "x").await, Some(()));
    assert_eq!(locks.stats().skipped, 4);
}
