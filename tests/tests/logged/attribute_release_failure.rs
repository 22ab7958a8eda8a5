//! Guards the promise of `#[distributed_lock]` that a release failing after the body ran
//! cannot change the body's result and is logged (a `tracing` warning naming the lock):
//! the key replaced by another owner during the body (`NotHeld`), every reply from Redis
//! held back during the release (`CommandTimeout`), the connection reset with Redis
//! unreachable during the release.
//!
//! Log lines are captured by a `tracing` subscriber writing to a buffer; tests in this
//! binary run in parallel, so each looks only at lines naming its own lock.

use std::sync::Mutex;
use std::time::Duration;

use dlock::{distributed_lock, LockClient, LockError, LockGuard};
use dlock_tests::logs::{capture_logs, captured};
use dlock_tests::{RedisServer, TcpProxy};
use tokio::time::Instant;

/// Captured WARN lines about `lock` that report the attribute's failed release.
fn release_warnings(lock: &str) -> Vec<String> {
    captured()
        .lines()
        .filter(|line| line.contains("WARN"))
        .filter(|line| line.contains(&format!("lock={lock}")))
        .filter(|line| line.contains("release failed after the body ran"))
        .map(str::to_owned)
        .collect()
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

/// The body hands the lock to someone else: it deletes the key and another client takes
/// the lock, so the release finds it not held.
#[distributed_lock(key = "replaced:<id>", lease = "10s", client = locks)]
async fn replaced(
    locks: &LockClient,
    id: u32,
    server: &RedisServer,
    other: &LockClient,
    theirs: &Mutex<Vec<LockGuard>>,
    outcome: Result<u32, ShopError>,
) -> Result<u32, ShopError> {
    redis::cmd("DEL")
        .arg(format!("replaced:{id}"))
        .exec(&mut server.connection())
        .unwrap();
    let taken = other.lock(&format!("replaced:{id}")).try_lock().await;
    theirs
        .lock()
        .unwrap()
        .push(taken.expect("the other client takes the deleted lock"));
    outcome
}

/// The body's last act cuts the client off: `hold` is applied to the proxy.
#[distributed_lock(key = "cut:<id>", client = locks)]
async fn cut_off(
    locks: &LockClient,
    id: u32,
    proxy: &TcpProxy,
    reset: bool,
    outcome: Result<u32, ShopError>,
) -> Result<u32, ShopError> {
    if reset {
        proxy.hold_new_connections();
        proxy.reset_all();
    } else {
        proxy.hold_replies();
    }
    outcome
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lock_replaced_during_the_body_is_logged_and_the_result_kept() {
    capture_logs(tracing::Level::DEBUG);
    let server = RedisServer::start();
    let locks = LockClient::connect(&server.url()).await.unwrap();
    let other = LockClient::connect(&server.url()).await.unwrap();

    let theirs = Mutex::new(Vec::new());
    let ok = replaced(&locks, 1, &server, &other, &theirs, Ok(42)).await;
    assert_eq!(ok, Ok(42));
    let err = replaced(&locks, 2, &server, &other, &theirs, Err(ShopError::SoldOut)).await;
    assert_eq!(err, Err(ShopError::SoldOut));
    for lock in ["replaced:1", "replaced:2"] {
        let warnings = release_warnings(lock);
        assert_eq!(
            warnings.len(),
            1,
            "{lock}: one warning about the failed release expected"
        );
        assert!(warnings[0].contains("not held"), "{}", warnings[0]);
        // The other owner's lock was left alone.
        assert!(other.lock(lock).is_locked().await.unwrap());
    }
    for guard in theirs.into_inner().unwrap() {
        guard.unlock().await.unwrap();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unreachable_redis_during_the_release_is_logged_and_the_result_kept() {
    capture_logs(tracing::Level::DEBUG);
    let server = RedisServer::start();
    let proxy = TcpProxy::start(server.addr());
    let locks = LockClient::builder()
        .command_timeout(Duration::from_millis(400))
        .connect(&proxy.url())
        .await
        .unwrap();
    let cases = [
        ("cut:1", 1, false, Ok(7)),
        ("cut:2", 2, false, Err(ShopError::SoldOut)),
        ("cut:3", 3, true, Ok(7)),
        ("cut:4", 4, true, Err(ShopError::SoldOut)),
    ];
    for (lock, id, reset, outcome) in cases {
        let expected = match &outcome {
            Ok(n) => Ok(*n),
            Err(_) => Err(ShopError::SoldOut),
        };
        let started = Instant::now();
        let returned = cut_off(&locks, id, &proxy, reset, outcome).await;
        let took = started.elapsed();
        proxy.release_replies();
        proxy.release_held();
        assert_eq!(returned, expected, "{lock}: the body's result changed");
        assert!(
            took < Duration::from_secs(2),
            "{lock}: the call took {took:?} (command timeout 400 ms)"
        );
        let warnings = release_warnings(lock);
        assert_eq!(
            warnings.len(),
            1,
            "{lock} (reset: {reset}): one warning about the failed release expected"
        );
        // The release is finished in the background once Redis is reachable again.
        let mut admin = server.connection();
        let settled = Instant::now();
        while redis::cmd("EXISTS")
            .arg(lock)
            .query::<bool>(&mut admin)
            .unwrap()
        {
            assert!(
                settled.elapsed() < Duration::from_secs(3),
                "{lock}: still held after Redis was reachable again"
            );
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        eprintln!(
            "{lock}: returned {returned:?} after {took:?}; logged: {}",
            warnings[0]
        );
    }
}
