//! A client that stops waiting leaves nothing that would make a release choose it: a
//! release does not hand the lock to the releasing client, a wait that ends during its
//! first try (or a multi-lock cancelled then) leaves the registry, and a new wait right
//! after an old one is not undone by the old one's leaving.

use std::time::Duration;

use dlock::{LockClient, LockError, MultiLock};
use dlock_tests::liveness::slow_recheck;
use dlock_tests::RedisServer;
use tokio::time::Instant;

use crate::bound::*;

/// Client C waits for a lock that H holds with a 200 ms lease and never releases. C gets
/// it by a fresh grant once the lease ran out (nobody released it, so C is still in the
/// waiter registry), and gives it back at once, with no `.await` in between. That release
/// must leave the lock free (C is the only registered client and it is done), so a third
/// client E that asks right after gets it at once. Fails when the release wakes the oldest
/// registered client, C itself, and hands the lock to it: C no longer wants it, and E
/// finds it taken, registers and sleeps until its recheck.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_release_does_not_hand_the_lock_to_the_releasing_client() {
    const NAME: &str = "{self}";
    let server = RedisServer::start();
    let url = server.url();
    let holder = LockClient::connect(&url).await.unwrap();
    let (c, e) = (slow_recheck(&url).await, slow_recheck(&url).await);

    let expiring = holder
        .lock(NAME)
        .try_lock_with_lease(Duration::ZERO, Duration::from_millis(200))
        .await
        .unwrap();
    let lock = c.lock(NAME);
    let c_task = tokio::spawn(async move {
        let guard = lock.try_lock_for(WAIT).await?;
        // No `.await` between the acquisition and the release: the release is the next
        // thing this client sends for the lock.
        guard.unlock().await
    });
    // The trigger: C is registered while the lock is still H's, so the grant it gets when
    // the lease ends finds it in the registry.
    let c_id = c.id().to_string();
    until("C is registered", || is_registered(&server, NAME, &c_id)).await;
    tokio::time::timeout(GIVE_UP, c_task)
        .await
        .expect("C got the lock after the 200 ms lease ended")
        .unwrap()
        .expect("C took the lock and gave it back");
    let fields: Vec<String> = redis::cmd("HKEYS")
        .arg(NAME)
        .query(&mut server.connection())
        .unwrap();
    eprintln!(
        "item 1: after C's release the lock hash holds {fields:?}, the registry {:?} (C is {c_id})",
        registered(&server, NAME)
    );

    let started = Instant::now();
    let lock = e.lock(NAME);
    let e_task = acquiring(async move { lock.try_lock_for(WAIT).await });
    let guard =
        acquired_within_bound("item 1: E (asked right after C's release)", started, e_task).await;
    guard.unlock().await.unwrap();
    drop(expiring);
}

// ---------------------------------------------------------------------------------------
// 2. A waiter killed with SIGKILL while registered.
// ---------------------------------------------------------------------------------------

/// `try_lock_for(1 ms)` on a held lock: its first try registers the client as waiting,
/// and the wait is over by the time the busy answer comes (Redis is stalled 50 ms by
/// `DEBUG SLEEP` right before, so the try is queued there well past the 1 ms). The
/// client stops waiting; a real waiter (another client) then waits, and the holder
/// releases: the real waiter must get the lock within [`BOUND`], and nothing of the
/// 1 ms client may be left in the registry. Fails when a waiter that gives up without
/// ever subscribing does not leave the registry: the release chooses that client, and
/// the real waiter sleeps until its recheck.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_try_whose_wait_ends_during_its_first_try_leaves_the_registry() {
    const NAME: &str = "{brief}";
    let server = RedisServer::start();
    let url = server.url();
    let holder = LockClient::connect(&url).await.unwrap();
    let guard = holder.lock(NAME).lock().await.unwrap();
    let (brief, real) = (slow_recheck(&url).await, slow_recheck(&url).await);
    let brief_id = brief.id().to_string();

    let stalled = stall(&server, 0.05);
    tokio::time::sleep(Duration::from_millis(10)).await;
    let tried = Instant::now();
    let error = brief
        .lock(NAME)
        .try_lock_for(Duration::from_millis(1))
        .await
        .unwrap_err();
    let answered_after = tried.elapsed();
    assert!(error.is_timeout(), "{error:?}");
    stalled.await.unwrap();
    // The trigger: the busy answer came long after the 1 ms wait had ended.
    assert!(
        answered_after >= Duration::from_millis(20),
        "the 1 ms try was answered after {answered_after:?}, not held up by the stall"
    );
    eprintln!(
        "item 3: the 1 ms try ended after {answered_after:?}; registry {:?} (the 1 ms client is {brief_id})",
        registered(&server, NAME)
    );

    let lock = real.lock(NAME);
    let task = acquiring(async move { lock.try_lock_for(WAIT).await });
    waiting(&server, NAME, &real).await;
    let released = Instant::now();
    guard.unlock().await.unwrap();
    let acquired =
        acquired_within_bound("item 3: real waiter, from the release", released, task).await;
    acquired.unlock().await.unwrap();
    tokio::time::sleep(SETTLE).await;
    assert!(
        !is_registered(&server, NAME, &brief_id),
        "the 1 ms client is still registered: {:?}",
        registered(&server, NAME)
    );
}

// ---------------------------------------------------------------------------------------
// 4. A same-slot MultiLock dropped during its first try.
// ---------------------------------------------------------------------------------------

/// A same-slot multi-lock over `{m}a` (held by H) and `{m}b` is cancelled while its first
/// try is queued at Redis (stalled 300 ms by `DEBUG SLEEP`; the task is aborted 100 ms
/// into it). That try runs after the stall and registers the multi-lock's client as
/// waiting for `{m}a`. A real waiter of a third client then waits for `{m}a` and H
/// releases: the real waiter must get it within [`BOUND`]. Fails when a multi-lock
/// cancelled before it had a waiter (a subscription) does not leave the registry: the
/// release chooses its client, which nobody waits in.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_same_slot_multi_lock_cancelled_during_its_first_try_leaves_the_registry() {
    const HELD: &str = "{m}a";
    let server = RedisServer::start();
    let url = server.url();
    let holder = LockClient::connect(&url).await.unwrap();
    let guard = holder.lock(HELD).lock().await.unwrap();
    let (multi_client, real) = (slow_recheck(&url).await, slow_recheck(&url).await);
    let multi = MultiLock::same_slot(&multi_client, [HELD, "{m}b"]).unwrap();

    let stalled = stall(&server, 0.3);
    tokio::time::sleep(Duration::from_millis(50)).await;
    let cancelled = tokio::spawn(async move { multi.try_lock_for(WAIT).await.map(drop) });
    until("the multi-lock sent its first try", || {
        multi_client.stats().acquire_attempts >= 1
    })
    .await;
    tokio::time::sleep(Duration::from_millis(50)).await;
    cancelled.abort();
    stalled.await.unwrap();
    assert!(
        cancelled.await.unwrap_err().is_cancelled(),
        "the multi-lock's try was answered before it was cancelled"
    );
    eprintln!(
        "item 4: after the stall the registry of {HELD} is {:?} (the multi-lock's client is {})",
        registered(&server, HELD),
        multi_client.id()
    );

    let lock = real.lock(HELD);
    let task = acquiring(async move { lock.try_lock_for(WAIT).await });
    waiting(&server, HELD, &real).await;
    let released = Instant::now();
    guard.unlock().await.unwrap();
    let acquired =
        acquired_within_bound("item 4: real waiter, from the release", released, task).await;
    acquired.unlock().await.unwrap();
}

// ---------------------------------------------------------------------------------------
// 5. min_hold.
// ---------------------------------------------------------------------------------------

/// A retry loop: C's `try_lock_for(50 ms)` on a held lock times out, and C at once calls
/// `try_lock_for` again; H releases 50 ms after the second wait started: C must get the
/// lock within [`BOUND`] of the release. Nobody else waits. Repeated five times, so that
/// the race below happens. Fails when the first wait's leaving the registry (sent when it
/// ends) reaches Redis after the second wait's registration and undoes it: the release
/// then finds nobody registered, wakes nobody, and C sleeps until its recheck.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn waiting_again_right_after_a_wait_ended_is_woken_by_the_release() {
    const NAME: &str = "{retry}";
    const ROUNDS: usize = 5;
    let server = RedisServer::start();
    let url = server.url();
    let holder = LockClient::connect(&url).await.unwrap();
    let c = slow_recheck(&url).await;
    for round in 1..=ROUNDS {
        let guard = holder.lock(NAME).lock().await.unwrap();
        let lock = c.lock(NAME);
        let (second_wait, started) = tokio::sync::oneshot::channel();
        let task = acquiring(async move {
            let first = lock.try_lock_for(Duration::from_millis(50)).await;
            assert!(
                first.as_ref().is_err_and(LockError::is_timeout),
                "{first:?}"
            );
            // Straight into the next wait, as a retry loop does.
            let _ = second_wait.send(Instant::now());
            lock.try_lock_for(WAIT).await
        });
        started.await.unwrap();
        tokio::time::sleep(Duration::from_millis(50)).await;
        let released = Instant::now();
        guard.unlock().await.unwrap();
        let label = format!("item 7 round {round}/{ROUNDS}: C's second wait, from the release");
        let acquired = acquired_within_bound(&label, released, task).await;
        acquired.unlock().await.unwrap();
    }
}

// ---------------------------------------------------------------------------------------
// 8. Force unlock by another client while this client's guard is alive.
// ---------------------------------------------------------------------------------------
