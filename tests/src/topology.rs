//! The lock behaviour every topology must show, run against a client built from one of
//! the sample files in `examples/config/`.

use std::time::{Duration, Instant};

use crate::workload::{increment_counter_on, Guarding};
use dlock::config::Config;
use dlock::LockClient;

/// `examples/config/<mode>.toml` with the sample ports replaced by real ones and the
/// `watchdog_timeout` set.
pub fn sample(mode: &str, ports: &[(u16, u16)], watchdog: &str) -> Config {
    let path = format!(
        "{}/../examples/config/{mode}.toml",
        env!("CARGO_MANIFEST_DIR")
    );
    let mut text = std::fs::read_to_string(&path).unwrap();
    for (sample, real) in ports {
        text = text.replace(
            &format!("127.0.0.1:{sample}\""),
            &format!("127.0.0.1:{real}\""),
        );
    }
    let text = text.replace(
        "watchdog_timeout = \"30s\"",
        &format!("watchdog_timeout = \"{watchdog}\""),
    );
    Config::from_toml_str(&text).unwrap_or_else(|e| panic!("{path}: {e}"))
}

/// The shared scenarios, in order; each panics with the scenario's name on failure.
pub async fn lock_suite<C>(config: &Config, fast_watchdog: &Config, counter: C, counter_key: &str)
where
    C: redis::aio::ConnectionLike + Clone + Send + Sync + 'static,
{
    let a = config.build().await.expect("client from the sample file");
    let b = config.build().await.expect("second client");
    exclusion(&a, &b, counter, counter_key).await;
    reentrancy(&a).await;
    waiter_woken_by_unlock(&a, &b).await;
    try_lock_for_times_out(&a, &b).await;
    force_unlock_wakes_a_waiter(&a, &b).await;
    let renewing = fast_watchdog.build().await.unwrap();
    watchdog_renews(&renewing, &b).await;
}

/// 2 clients × 8 tasks × 25 non-atomic increments under the lock: the counter is exact.
async fn exclusion<C>(a: &LockClient, b: &LockClient, counter: C, counter_key: &str)
where
    C: redis::aio::ConnectionLike + Clone + Send + Sync + 'static,
{
    let started = Instant::now();
    tokio::join!(
        increment_counter_on(
            a,
            counter.clone(),
            "suite:counter",
            counter_key,
            Guarding::Locked,
            8,
            25
        ),
        increment_counter_on(
            b,
            counter.clone(),
            "suite:counter",
            counter_key,
            Guarding::Locked,
            8,
            25
        ),
    );
    let mut conn = counter;
    let total: i64 = redis::cmd("GET")
        .arg(counter_key)
        .query_async(&mut conn)
        .await
        .unwrap();
    assert_eq!(total, 400, "exclusion: the counter lost updates");
    eprintln!(
        "exclusion: 400 locked increments in {:?}",
        started.elapsed()
    );
}

async fn reentrancy(client: &LockClient) {
    let lock = client.lock("suite:nested");
    let outer = lock.lock().await.unwrap();
    let count = outer
        .scope(async {
            let inner = lock
                .try_lock_for(Duration::from_secs(2))
                .await
                .expect("reentrancy: re-entry");
            let count = lock.hold_count().await.unwrap();
            inner.unlock().await.unwrap();
            count
        })
        .await;
    assert_eq!(count, 2, "reentrancy: hold count");
    assert!(
        lock.is_locked().await.unwrap(),
        "reentrancy: outer hold remains"
    );
    outer.unlock().await.unwrap();
    assert!(!lock.is_locked().await.unwrap(), "reentrancy: released");
}

/// `holder` takes `name`, `waiter` starts waiting for it, `holder` releases 200 ms later:
/// the time from the release until the waiter holds the lock.
pub async fn handoff(holder: &LockClient, waiter: &LockClient, name: &str) -> Duration {
    let guard = holder.lock(name).lock().await.unwrap();
    let lock = waiter.lock(name);
    let waiting = tokio::spawn(async move {
        let guard = lock.lock().await.unwrap();
        let at = Instant::now();
        guard.unlock().await.unwrap();
        at
    });
    tokio::time::sleep(Duration::from_millis(200)).await;
    let released = Instant::now();
    guard.unlock().await.unwrap();
    waiting.await.unwrap().saturating_duration_since(released)
}

async fn waiter_woken_by_unlock(a: &LockClient, b: &LockClient) {
    let mut worst = Duration::ZERO;
    for _ in 0..3 {
        worst = worst.max(handoff(a, b, "suite:handoff").await);
    }
    // A missed unlock message costs the 1 s recheck; 150 ms is slack for a loaded machine.
    assert!(
        worst <= Duration::from_millis(150),
        "wake-up: hand-off took {worst:?}"
    );
    eprintln!("wake-up: worst hand-off {worst:?}");
}

async fn try_lock_for_times_out(a: &LockClient, b: &LockClient) {
    let guard = a.lock("suite:busy").lock().await.unwrap();
    let started = Instant::now();
    let err = b
        .lock("suite:busy")
        .try_lock_for(Duration::from_millis(300))
        .await
        .unwrap_err();
    let waited = started.elapsed();
    assert!(err.is_timeout(), "timeout: {err}");
    assert!(
        (Duration::from_millis(300)..Duration::from_millis(600)).contains(&waited),
        "timeout: waited {waited:?}"
    );
    guard.unlock().await.unwrap();
}

async fn force_unlock_wakes_a_waiter(a: &LockClient, b: &LockClient) {
    let old = a.lock("suite:forced").lock().await.unwrap();
    let lock = b.lock("suite:forced");
    let waiting = tokio::spawn(async move { (lock.lock().await.unwrap(), Instant::now()) });
    tokio::time::sleep(Duration::from_millis(150)).await;
    let forced = Instant::now();
    assert!(
        b.lock("suite:forced").force_unlock().await.unwrap(),
        "force unlock: deleted"
    );
    let (new, at) = waiting.await.unwrap();
    assert!(
        at - forced < Duration::from_millis(100),
        "force unlock: waiter woken after {:?}",
        at - forced
    );
    assert!(
        old.unlock().await.unwrap_err().is_not_held(),
        "force unlock: old holder is not the owner"
    );
    new.unlock().await.unwrap();
}

/// A 1 s watchdog keeps a lock held for 3 s; nobody else gets in.
async fn watchdog_renews(holder: &LockClient, rival: &LockClient) {
    assert_eq!(holder.watchdog_timeout(), Duration::from_secs(1));
    let guard = holder.lock("suite:renewed").lock().await.unwrap();
    let started = Instant::now();
    while started.elapsed() < Duration::from_secs(3) {
        let attempt = rival.lock("suite:renewed").try_lock().await;
        assert!(
            attempt.unwrap_err().is_timeout(),
            "watchdog: rival got in after {:?}",
            started.elapsed()
        );
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    assert!(!guard.is_lost(), "watchdog: guard lost");
    guard.unlock().await.unwrap();
    assert!(!rival.lock("suite:renewed").is_locked().await.unwrap());
}
