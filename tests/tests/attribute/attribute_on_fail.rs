//! Guards the run-time promise of `#[distributed_lock(on_fail = handler)]`: when the lock
//! cannot be acquired (busy with try-once semantics, the wait running out, an invalid
//! key, no client) the body does not run and the function returns exactly what
//! `handler(error)` returned — also for a `Result` function, whose failure would
//! otherwise be `Err(error.into())`. When the lock is free, the body runs and the handler
//! is not called.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use dlock::{distributed_lock, LockClient, LockError};
use dlock_tests::RedisServer;
use tokio::time::Instant;

/// The handler's value names the error, so the test sees which error it was given.
fn busy(error: LockError) -> String {
    match &error {
        e if e.is_timeout() => format!("busy (timeout): {error}"),
        LockError::InvalidName { .. } => format!("busy (invalid name): {error}"),
        _ => format!("busy (other): {error}"),
    }
}

/// Try once; the body counts its runs.
#[distributed_lock(key = "report:<id>", wait = "0s", client = locks, on_fail = busy)]
async fn report_now(locks: &LockClient, id: &str, runs: &AtomicUsize) -> String {
    runs.fetch_add(1, Ordering::SeqCst);
    format!("report {id}")
}

/// Wait at most 300 ms.
#[distributed_lock(key = "report:<id>", wait = "300ms", client = locks, on_fail = busy)]
async fn report_soon(locks: &LockClient, id: &str, runs: &AtomicUsize) -> String {
    runs.fetch_add(1, Ordering::SeqCst);
    format!("report {id}")
}

#[derive(Debug, PartialEq)]
enum ShopError {
    Lock(String),
    SoldOut,
}

impl From<LockError> for ShopError {
    fn from(error: LockError) -> Self {
        ShopError::Lock(error.to_string())
    }
}

/// A fallback that answers `Ok`: without `on_fail` the function would return `Err`.
fn nothing_sold(error: LockError) -> Result<u32, ShopError> {
    assert!(error.is_timeout(), "unexpected error: {error}");
    Ok(0)
}

#[distributed_lock(key = "goods:<id>", wait = "0s", client = locks, on_fail = nothing_sold)]
async fn sell(locks: &LockClient, id: u64, runs: &AtomicUsize) -> Result<u32, ShopError> {
    runs.fetch_add(1, Ordering::SeqCst);
    Err(ShopError::SoldOut)
}

/// The same function without `on_fail`, for comparison.
#[distributed_lock(key = "goods:<id>", wait = "0s", client = locks)]
async fn sell_plain(locks: &LockClient, id: u64, runs: &AtomicUsize) -> Result<u32, ShopError> {
    runs.fetch_add(1, Ordering::SeqCst);
    Err(ShopError::SoldOut)
}

/// No `client =` and no global client in this test binary: acquisition always fails.
fn no_client(error: LockError) -> Option<u32> {
    assert!(matches!(error, LockError::NoClient { .. }), "{error:?}");
    None
}

#[distributed_lock(key = "global:<id>", on_fail = no_client)]
async fn through_global(id: u64, runs: &AtomicUsize) -> Option<u32> {
    runs.fetch_add(1, Ordering::SeqCst);
    Some(1)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_busy_lock_returns_the_handlers_value_without_running_the_body() {
    let server = RedisServer::start();
    let locks = LockClient::connect(&server.url()).await.unwrap();
    let other = LockClient::connect(&server.url()).await.unwrap();
    let runs = AtomicUsize::new(0);

    // Free: the body runs, the handler is not involved.
    assert_eq!(report_now(&locks, "7", &runs).await, "report 7");
    assert_eq!(runs.load(Ordering::SeqCst), 1);

    let held = other.lock("report:7").lock().await.unwrap();
    let started = Instant::now();
    let answer = report_now(&locks, "7", &runs).await;
    let tried = started.elapsed();
    assert!(answer.starts_with("busy (timeout): "), "{answer}");
    assert!(
        answer.contains("report:7"),
        "the handler got this lock's error: {answer}"
    );
    assert!(
        tried < Duration::from_millis(250),
        "try-once took {tried:?}"
    );

    let started = Instant::now();
    let answer = report_soon(&locks, "7", &runs).await;
    let waited = started.elapsed();
    assert!(answer.starts_with("busy (timeout): "), "{answer}");
    assert!(
        (Duration::from_millis(300)..Duration::from_millis(800)).contains(&waited),
        "the 300 ms wait took {waited:?}"
    );
    assert_eq!(
        runs.load(Ordering::SeqCst),
        1,
        "the body ran while the lock was busy"
    );

    // The handler's error came from an acquisition that left nothing behind.
    assert!(held.is_held().await.unwrap());
    held.unlock().await.unwrap();
    assert_eq!(report_soon(&locks, "7", &runs).await, "report 7");
    assert_eq!(runs.load(Ordering::SeqCst), 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_fail_replaces_the_err_a_result_function_would_return() {
    let server = RedisServer::start();
    let locks = LockClient::connect(&server.url()).await.unwrap();
    let other = LockClient::connect(&server.url()).await.unwrap();
    let runs = AtomicUsize::new(0);

    assert_eq!(sell(&locks, 1, &runs).await, Err(ShopError::SoldOut));
    assert_eq!(runs.load(Ordering::SeqCst), 1);

    let held = other.lock("goods:1").lock().await.unwrap();
    assert_eq!(sell(&locks, 1, &runs).await, Ok(0), "the handler's Ok(0)");
    let plain = sell_plain(&locks, 1, &runs).await;
    assert!(
        matches!(&plain, Err(ShopError::Lock(message)) if message.contains("goods:1")),
        "without on_fail: {plain:?}"
    );
    assert_eq!(
        runs.load(Ordering::SeqCst),
        1,
        "the body ran while the lock was busy"
    );
    held.unlock().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn other_acquisition_failures_go_to_the_handler_too() {
    let server = RedisServer::start();
    let locks = LockClient::connect(&server.url()).await.unwrap();
    let runs = AtomicUsize::new(0);

    // An invalid key (a control character) fails before anything is sent.
    let answer = report_now(&locks, "bad\nid", &runs).await;
    assert!(answer.starts_with("busy (invalid name): "), "{answer}");
    // No client: none is registered in this test binary.
    assert_eq!(through_global(1, &runs).await, None);
    assert_eq!(
        runs.load(Ordering::SeqCst),
        0,
        "a body ran without its lock"
    );
}
