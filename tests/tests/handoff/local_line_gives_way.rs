//! The local line never keeps a lock its tasks cannot use: a force unlock frees the lock
//! for the former holder's client, and a release kept for a task cancelled meanwhile
//! reaches the other client.

use std::time::Duration;

use dlock::{LockClient, LockGuard};
use dlock_tests::liveness::slow_recheck;
use dlock_tests::RedisServer;
use tokio::task::JoinHandle;
use tokio::time::Instant;

use crate::bound::*;

/// Client A holds `{x}` and keeps the guard; client B force-unlocks it. Another task of A
/// then asks for `{x}`: the lock is free in Redis, so it must get it within [`BOUND`].
/// Fails when A's local line still counts the old guard as the holder: the task waits in
/// A's line until a recheck finds the hold gone (its 10 s recheck, or the watchdog's next
/// renewal, 10 s with the default 30 s watchdog).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_force_unlock_frees_the_lock_for_the_former_holder_s_client() {
    const NAME: &str = "{forced}";
    let server = RedisServer::start();
    let url = server.url();
    let a = slow_recheck(&url).await;
    let b = LockClient::connect(&url).await.unwrap();
    let kept = a.lock(NAME).lock().await.unwrap();
    assert!(b.lock(NAME).force_unlock().await.unwrap());

    let started = Instant::now();
    let lock = a.lock(NAME);
    let task = acquiring(async move { lock.try_lock_for(WAIT).await });
    let acquired = acquired_within_bound(
        "item 8: A's other task after the force unlock, from its call",
        started,
        task,
    )
    .await;
    acquired.unlock().await.unwrap();
    drop(kept);
}

/// As [`a_force_unlock_frees_the_lock_for_the_former_holder_s_client`], with A's other
/// task already waiting in A's local line when B force-unlocks: it must get the lock
/// within [`BOUND`] of the force unlock.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_force_unlock_frees_the_lock_for_a_task_waiting_behind_the_former_holder() {
    const NAME: &str = "{forced2}";
    let server = RedisServer::start();
    let url = server.url();
    let a = slow_recheck(&url).await;
    let b = LockClient::connect(&url).await.unwrap();
    let kept = a.lock(NAME).lock().await.unwrap();
    let lock = a.lock(NAME);
    let task = acquiring(async move { lock.try_lock_for(WAIT).await });
    // The task waits in A's line behind `kept`, and has watched it longer than any grace.
    tokio::time::sleep(SETTLE).await;
    assert!(!task.is_finished(), "A's second task did not wait");
    let subscribers: Vec<(String, u64)> = redis::cmd("PUBSUB")
        .arg("NUMSUB")
        .arg(registry(NAME))
        .query(&mut server.connection())
        .unwrap();
    eprintln!(
        "item 8b: subscribers of the lock's channel before the force unlock: {subscribers:?}"
    );

    let forced = Instant::now();
    assert!(b.lock(NAME).force_unlock().await.unwrap());
    let acquired = acquired_within_bound(
        "item 8b: A's waiting task, from the force unlock",
        forced,
        task,
    )
    .await;
    acquired.unlock().await.unwrap();
    drop(kept);
}

// ---------------------------------------------------------------------------------------
// 9. A release that gives the lock to a local task that is cancelled meanwhile.
// ---------------------------------------------------------------------------------------

/// Sends `t1`'s release while Redis sleeps 300 ms (so the release, built while A's task
/// `t2` waited behind `t1`, is queued at Redis), cancels `t2` before Redis runs it, and
/// returns the guard of the other client's waiting `d_task`, which must get the lock
/// within [`BOUND`] of the end of the stall.
async fn release_kept_for_a_task_cancelled_meanwhile(
    server: &RedisServer,
    label: &str,
    t1: LockGuard,
    t2: JoinHandle<dlock::Result<()>>,
    d_task: JoinHandle<dlock::Result<(LockGuard, Instant)>>,
) -> LockGuard {
    let stalled = stall(server, 0.3);
    tokio::time::sleep(Duration::from_millis(50)).await;
    let releasing = tokio::spawn(t1.unlock());
    tokio::time::sleep(Duration::from_millis(50)).await;
    t2.abort();
    assert!(
        !releasing.is_finished(),
        "the release was answered before T2 was cancelled"
    );
    let stall_ended = stalled.await.unwrap();
    assert!(
        t2.await.unwrap_err().is_cancelled(),
        "T2 ended before it was cancelled"
    );
    releasing.await.unwrap().unwrap();
    acquired_within_bound(
        &format!("{label}: D, from the release (end of the stall)"),
        stall_ended,
        d_task,
    )
    .await
}

/// Client A: task T1 holds `{kept}`, task T2 waits behind it in A's line; client D waits
/// too (registered). Redis is stalled 300 ms; T1's `unlock` is sent during the stall
/// (so it says "a task of mine is next" and is queued at Redis), and T2 is aborted
/// meanwhile. When the stall ends the release runs and gives the lock to T2, which is gone:
/// D must get the lock within [`BOUND`] of that moment. Fails when nobody gives the lock
/// back for the cancelled task (A's line does, once the release's answer names T2): D
/// sleeps until T2's lease or its own recheck. See
/// [`a_release_kept_for_a_cancelled_local_task_of_a_registered_client_reaches_the_other_client`]
/// for the case where A is still registered.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_release_kept_for_a_cancelled_local_task_reaches_the_other_client() {
    const NAME: &str = "{kept}";
    let server = RedisServer::start();
    let url = server.url();
    let (a, d) = (slow_recheck(&url).await, slow_recheck(&url).await);
    let t1 = a.lock(NAME).lock().await.unwrap();
    let lock = a.lock(NAME);
    let t2 = tokio::spawn(async move { lock.try_lock_for(WAIT).await.map(drop) });
    tokio::time::sleep(SETTLE).await;
    let lock = d.lock(NAME);
    let d_task = acquiring(async move { lock.try_lock_for(WAIT).await });
    waiting(&server, NAME, &d).await;
    assert!(!t2.is_finished());

    let acquired =
        release_kept_for_a_task_cancelled_meanwhile(&server, "item 9", t1, t2, d_task).await;
    acquired.unlock().await.unwrap();
}

/// As [`a_release_kept_for_a_cancelled_local_task_reaches_the_other_client`], with client
/// A still registered as waiting when T1 releases: T1 got the lock by a fresh grant when
/// the previous holder's 400 ms lease ran out (no release chose A, so A stayed in the
/// registry), while T2 waited behind T1 in A's line; then D registered, behind A. T1's release is sent
/// during a 300 ms stall with T2 still in line, T2 is cancelled meanwhile: D must get the
/// lock within [`BOUND`] of the end of the stall. Fails when the release gives the lock to
/// A's cancelled task and nothing gives it back: D sleeps until that task's lease or its
/// own recheck.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_release_kept_for_a_cancelled_local_task_of_a_registered_client_reaches_the_other_client()
{
    const NAME: &str = "{kept2}";
    let server = RedisServer::start();
    let url = server.url();
    let holder = LockClient::connect(&url).await.unwrap();
    let (a, d) = (slow_recheck(&url).await, slow_recheck(&url).await);
    let expiring = holder
        .lock(NAME)
        .try_lock_with_lease(Duration::ZERO, Duration::from_millis(400))
        .await
        .unwrap();
    let lock = a.lock(NAME);
    let t1 = acquiring(async move { lock.try_lock_for(WAIT).await });
    let a_id = a.id().to_string();
    until("A is registered", || is_registered(&server, NAME, &a_id)).await;
    let lock = a.lock(NAME);
    let t2 = tokio::spawn(async move { lock.try_lock_for(WAIT).await.map(drop) });
    // The lease ends: T1 gets the lock by a fresh grant, A stays registered. (D starts
    // waiting only now: waiting through the expiry too, it could take the lock first.)
    let (t1, _) = tokio::time::timeout(GIVE_UP, t1)
        .await
        .expect("T1 got the lock when the lease ran out")
        .unwrap()
        .unwrap();
    let lock = d.lock(NAME);
    let d_task = acquiring(async move { lock.try_lock_for(WAIT).await });
    let d_id = d.id().to_string();
    waiting(&server, NAME, &d).await;
    assert!(!t2.is_finished() && !d_task.is_finished());
    eprintln!(
        "item 9b: T1 holds; registry {:?} (A is {a_id}, D is {d_id})",
        registered(&server, NAME)
    );

    let acquired =
        release_kept_for_a_task_cancelled_meanwhile(&server, "item 9b", t1, t2, d_task).await;
    acquired.unlock().await.unwrap();
    drop(expiring);
}

// ---------------------------------------------------------------------------------------
// 10. Two kinds on one name.
// ---------------------------------------------------------------------------------------
