//! Guards the promise of `LockGuard::lost()`: the future never completes once the guard
//! was given back, by `unlock()` or by dropping it, whatever then happens to the lock
//! (the watchdog stops renewing it, its explicit lease runs out, another owner takes it
//! and that owner's lock is deleted).
//!
//! The wait (1.5 s) is five watchdog periods of the 300 ms watchdog used here; a control
//! in the same test shows that, in that wait, `lost()` of a guard that was not given back
//! does fire when its lock disappears.

use std::time::Duration;

use dlock::{LockClient, LockError, LockGuard};
use dlock_tests::RedisServer;

/// Longer than several watchdog periods and than every lease below.
const WAIT: Duration = Duration::from_millis(1500);

/// How a guard is given back.
#[derive(Debug, Clone, Copy)]
enum GiveBack {
    Unlock,
    Drop,
}

async fn give_back(guard: LockGuard, how: GiveBack) {
    match how {
        GiveBack::Unlock => guard.unlock().await.unwrap(),
        GiveBack::Drop => drop(guard),
    }
}

/// Takes `name` (watchdog or a 300 ms lease), starts waiting for `lost()`, gives the guard
/// back, lets `rival` take and then force-unlock the lock, and reports whether `lost()`
/// completed within [`WAIT`].
async fn lost_fires_after_release(
    client: &LockClient,
    rival: &LockClient,
    name: &str,
    lease: Option<Duration>,
    how: GiveBack,
) -> Option<LockError> {
    let lock = client.lock(name);
    let guard = match lease {
        Some(lease) => lock.lock_with_lease(lease).await.unwrap(),
        None => lock.lock().await.unwrap(),
    };
    let lost = tokio::spawn(guard.lost());
    give_back(guard, how).await;
    // Another owner takes the lock (waiting for a background release) and loses it.
    let taken = rival
        .lock(name)
        .try_lock_for(Duration::from_secs(2))
        .await
        .unwrap();
    assert!(rival.lock(name).force_unlock().await.unwrap());
    drop(taken);
    let fired = tokio::time::timeout(WAIT, lost).await;
    fired.ok().map(|joined| joined.unwrap())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lost_never_completes_after_unlock_or_drop() {
    let server = RedisServer::start();
    let client = LockClient::builder()
        .watchdog_timeout(Duration::from_millis(300))
        .connect(&server.url())
        .await
        .unwrap();
    let rival = LockClient::connect(&server.url()).await.unwrap();
    let lease = Some(Duration::from_millis(300));

    // Control: a guard that is not given back, its lock deleted: `lost()` fires in the wait.
    let kept = client.lock("control").lock().await.unwrap();
    let control = tokio::spawn(kept.lost());
    assert!(rival.lock("control").force_unlock().await.unwrap());

    let (watchdog_unlock, watchdog_drop, lease_unlock, lease_drop) = tokio::join!(
        lost_fires_after_release(&client, &rival, "wd-unlock", None, GiveBack::Unlock),
        lost_fires_after_release(&client, &rival, "wd-drop", None, GiveBack::Drop),
        lost_fires_after_release(&client, &rival, "lease-unlock", lease, GiveBack::Unlock),
        lost_fires_after_release(&client, &rival, "lease-drop", lease, GiveBack::Drop),
    );
    let control = tokio::time::timeout(WAIT, control).await;
    assert!(
        matches!(control, Ok(Ok(LockError::Lost { .. }))),
        "control: lost() of a kept guard whose lock was deleted did not fire: {control:?}"
    );
    assert!(kept.is_lost());
    for (case, fired) in [
        ("watchdog + unlock", watchdog_unlock),
        ("watchdog + drop", watchdog_drop),
        ("300 ms lease + unlock", lease_unlock),
        ("300 ms lease + drop", lease_drop),
    ] {
        assert!(
            fired.is_none(),
            "{case}: lost() completed after the guard was given back: {fired:?}"
        );
    }
}
