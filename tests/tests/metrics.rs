//! Guards what the `metrics` feature records, read back through a Prometheus recorder:
//! every counter, histogram and gauge counts exactly what happened, under the attribute's
//! key template or, for the manual API, the template `*`; never under a lock's name.
//!
//! The recorder is global and the labels are shared by every lock of a kind and template,
//! so the whole story is one test, step by step, each step checking the numbers it moved.

use std::sync::Arc;
use std::time::Duration;

use dlock::{distributed_lock, LockClient, LockError};
use dlock_tests::RedisServer;
use metrics_exporter_prometheus::{PrometheusBuilder, PrometheusHandle};
use tokio::sync::Notify;

/// The value of the series `name{kind="…",key_template="…"}`, 0 when absent.
fn value(handle: &PrometheusHandle, name: &str, kind: &str, template: &str) -> f64 {
    let series = format!("{name}{{kind=\"{kind}\",key_template=\"{template}\"}} ");
    let text = handle.render();
    text.lines()
        .find_map(|line| line.strip_prefix(&series))
        .map_or(0.0, |number| number.parse().expect("a number"))
}

/// Waits until the series reads `expected` (gauges move when other tasks get there).
async fn until(handle: &PrometheusHandle, name: &str, kind: &str, template: &str, expected: f64) {
    for _ in 0..200 {
        if value(handle, name, kind, template) == expected {
            return;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    panic!(
        "{name}{{{kind}, {template}}} stayed {} (expected {expected})\n{}",
        value(handle, name, kind, template),
        handle.render()
    );
}

const SALE: &str = "metrics:sale:<id>";

/// Holds its lock for `hold`, or until `gate` opens when given one.
#[distributed_lock(key = "metrics:sale:<id>", wait = "150ms", client = locks)]
async fn sell(
    locks: &LockClient,
    id: u32,
    hold: Duration,
    gate: Option<Arc<Notify>>,
) -> Result<u32, LockError> {
    match gate {
        Some(gate) => gate.notified().await,
        None => tokio::time::sleep(hold).await,
    }
    Ok(id)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_metric_matches_the_run() {
    let handle = PrometheusBuilder::new()
        .install_recorder()
        .expect("the only recorder of this binary");
    let m = &handle;
    let server = RedisServer::start();
    let locks = LockClient::builder()
        .watchdog_timeout(Duration::from_millis(300))
        .connect(&server.url())
        .await
        .unwrap();
    let others = LockClient::connect(&server.url()).await.unwrap();

    // Five sales under the attribute: acquisitions, waits and holds under the template.
    for id in 0..5 {
        sell(&locks, id, Duration::from_millis(20), None)
            .await
            .unwrap();
    }
    assert_eq!(value(m, "dlock_acquisitions_total", "lock", SALE), 5.0);
    assert_eq!(value(m, "dlock_wait_seconds_count", "lock", SALE), 5.0);
    assert_eq!(value(m, "dlock_hold_seconds_count", "lock", SALE), 5.0);
    let held_for = value(m, "dlock_hold_seconds_sum", "lock", SALE);
    assert!(held_for >= 0.1, "5 holds of 20 ms summed to {held_for} s");
    assert_eq!(value(m, "dlock_locks_held", "lock", SALE), 0.0);
    assert!(
        !m.render().contains("metrics:sale:0"),
        "a lock's name is never a label:\n{}",
        m.render()
    );

    // Busy: a waiter shows in the gauge, then times out (wait = "150ms").
    let blocker = others.lock("metrics:sale:9").lock().await.unwrap();
    let waiting = tokio::spawn({
        let locks = locks.clone();
        async move { sell(&locks, 9, Duration::ZERO, None).await }
    });
    until(m, "dlock_waiters", "lock", SALE, 1.0).await;
    assert!(waiting.await.unwrap().unwrap_err().is_timeout());
    assert_eq!(value(m, "dlock_waiters", "lock", SALE), 0.0);
    assert_eq!(value(m, "dlock_timeouts_total", "lock", SALE), 1.0);
    assert_eq!(value(m, "dlock_acquisitions_total", "lock", SALE), 5.0);
    blocker.unlock().await.unwrap();

    // Held: the gauge counts the body's lock until the body ends.
    let gate = Arc::new(Notify::new());
    let selling = tokio::spawn({
        let (locks, gate) = (locks.clone(), Arc::clone(&gate));
        async move { sell(&locks, 1, Duration::ZERO, Some(gate)).await }
    });
    until(m, "dlock_locks_held", "lock", SALE, 1.0).await;
    gate.notify_one();
    assert_eq!(selling.await.unwrap().unwrap(), 1);
    until(m, "dlock_locks_held", "lock", SALE, 0.0).await;
    assert_eq!(value(m, "dlock_hold_seconds_count", "lock", SALE), 6.0);

    // The manual API counts under the template `*`: the blocker above was one.
    assert_eq!(value(m, "dlock_acquisitions_total", "lock", "*"), 1.0);

    // A release that finds the lock gone is a release error.
    let guard = locks.lock("metrics:manual:a").lock().await.unwrap();
    assert!(others
        .lock("metrics:manual:a")
        .force_unlock()
        .await
        .unwrap());
    assert!(matches!(
        guard.unlock().await,
        Err(LockError::NotHeld { .. })
    ));
    assert_eq!(value(m, "dlock_release_errors_total", "lock", "*"), 1.0);

    // A lock the watchdog finds gone is a loss.
    let guard = locks.lock("metrics:manual:b").lock().await.unwrap();
    assert_eq!(value(m, "dlock_locks_held", "lock", "*"), 1.0);
    assert!(others
        .lock("metrics:manual:b")
        .force_unlock()
        .await
        .unwrap());
    tokio::time::timeout(Duration::from_secs(3), guard.lost())
        .await
        .expect("the watchdog notices the loss");
    assert_eq!(value(m, "dlock_losses_total", "lock", "*"), 1.0);
    drop(guard);
    until(m, "dlock_locks_held", "lock", "*", 0.0).await;
    // The dropped guard's background release finds the lock gone: a release error too.
    until(m, "dlock_release_errors_total", "lock", "*", 2.0).await;
    assert_eq!(value(m, "dlock_acquisitions_total", "lock", "*"), 3.0);
    assert_eq!(value(m, "dlock_hold_seconds_count", "lock", "*"), 3.0);

    // A cancelled acquisition stops counting as a waiter and counts as nothing else.
    let blocker = others.lock("metrics:manual:c").lock().await.unwrap();
    let cancelled = tokio::time::timeout(
        Duration::from_millis(100),
        locks.lock("metrics:manual:c").lock(),
    )
    .await;
    assert!(cancelled.is_err(), "the acquisition was cancelled");
    assert_eq!(value(m, "dlock_waiters", "lock", "*"), 0.0);
    blocker.unlock().await.unwrap();
    assert_eq!(value(m, "dlock_acquisitions_total", "lock", "*"), 4.0);
    assert_eq!(value(m, "dlock_timeouts_total", "lock", "*"), 0.0);

    // Bad input is an acquisition error, not a timeout.
    let refused = locks.lock("").lock().await;
    assert!(
        matches!(refused, Err(LockError::InvalidName { .. })),
        "{refused:?}"
    );
    assert_eq!(value(m, "dlock_acquire_errors_total", "lock", "*"), 1.0);

    // Other kinds count under their own label.
    let permit = locks.semaphore("metrics:pool", 1).acquire(1).await.unwrap();
    let busy = locks.semaphore("metrics:pool", 1).try_acquire(1).await;
    assert!(busy.unwrap_err().is_timeout());
    permit.unlock().await.unwrap();
    assert_eq!(value(m, "dlock_acquisitions_total", "semaphore", "*"), 1.0);
    assert_eq!(value(m, "dlock_timeouts_total", "semaphore", "*"), 1.0);
}
