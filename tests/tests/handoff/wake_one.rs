//! Guards the promise that tasks of one client waiting for the same lock do not stampede:
//! only the first in the client's local line talks to Redis, so no release lets more than
//! that one's try reach Redis, and a woken waiter that is cancelled
//! passes its wake-up on to the next one at once (not after the 1 s `max_wait_recheck`).
//!
//! Acquire attempts are counted on the server, not in the client: the slow log records
//! every command (`slowlog-log-slower-than 0`) with its arguments, and an `EVALSHA` of the
//! acquire script is the one whose arguments carry the attempt kind (`fresh` / `reenter`).

use std::time::Duration;

use dlock::{LockClient, LockGuard};
use dlock_tests::command_log::{log_every_command, logged_commands, reset_log, script_runs};
use dlock_tests::RedisServer;
use redis::aio::MultiplexedConnection;
use tokio::sync::mpsc;
use tokio::time::Instant;

const WAITERS: usize = 6;

/// How many `SUBSCRIBE` / `UNSUBSCRIBE` commands the server saw since the last reset.
async fn subscription_changes(admin: &mut MultiplexedConnection) -> usize {
    logged_commands(admin)
        .await
        .iter()
        .filter(|args| {
            args[0].eq_ignore_ascii_case("subscribe") || args[0].eq_ignore_ascii_case("unsubscribe")
        })
        .count()
}

/// How many runs of the lock's acquire script the server saw since the last reset.
async fn acquire_attempts(admin: &mut MultiplexedConnection) -> usize {
    script_runs(admin, "lock_acquire").await
}

/// `WAITERS` tasks of one client wait behind a holder of another client; then each
/// acquirer releases in turn. The other client's release gives the lock to the waiting
/// client's head; that holder took the lock without waiting, so its release passes no
/// token counter, and the head, which wants a token, takes the given lock with one try
/// of its own. Each release within the waiting client gives the lock to the next task
/// itself: no acquire attempt reaches Redis. Lining up must cost the head's two attempts
/// only (the try and the re-try once subscribed), not two per waiter.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_release_lets_a_waiting_task_of_another_client_try_in_redis() {
    let server = RedisServer::start();
    let mut admin = server
        .client()
        .get_multiplexed_async_connection()
        .await
        .unwrap();
    log_every_command(&mut admin).await;
    // Default watchdog (30 s): no renewal script runs during the test.
    let waiting = LockClient::connect(&server.url()).await.unwrap();
    let other = LockClient::connect(&server.url()).await.unwrap();

    let holder = other.lock("hot").lock().await.unwrap();
    reset_log(&mut admin).await;
    let (acquired, mut acquirers) = mpsc::unbounded_channel::<(usize, LockGuard)>();
    for task in 0..WAITERS {
        let (lock, acquired) = (waiting.lock("hot"), acquired.clone());
        tokio::spawn(async move {
            let guard = lock.lock().await.unwrap();
            let _ = acquired.send((task, guard));
        });
    }
    // Well under the 1 s recheck: every task is in line, the head has tried and subscribed.
    tokio::time::sleep(Duration::from_millis(300)).await;
    let lining_up = acquire_attempts(&mut admin).await;
    assert!(
        (1..=2).contains(&lining_up),
        "{WAITERS} tasks lining up sent {lining_up} acquire attempts (the head's try and re-try expected)"
    );

    let mut current = holder;
    let mut served = Vec::new();
    let mut per_release = Vec::new();
    let mut churn = Vec::new();
    for _ in 0..WAITERS {
        reset_log(&mut admin).await;
        let released_at = Instant::now();
        current.unlock().await.unwrap();
        let (task, guard) = tokio::time::timeout(Duration::from_secs(2), acquirers.recv())
            .await
            .expect("nobody got the lock within 2 s of a release")
            .unwrap();
        let handoff = released_at.elapsed();
        // Room for any other waiter that was (wrongly) woken to reach Redis too.
        tokio::time::sleep(Duration::from_millis(150)).await;
        let attempts = acquire_attempts(&mut admin).await;
        let renewals = script_runs(&mut admin, "lock_renew").await
            + script_runs(&mut admin, "lock_extend").await;
        per_release.push(attempts);
        churn.push(subscription_changes(&mut admin).await);
        assert_eq!(
            (attempts, renewals),
            (usize::from(served.is_empty()), 0),
            "release {} (hand-off to task {task} in {handoff:?}): acquire attempts and renewals that reached Redis",
            served.len() + 1
        );
        served.push(task);
        current = guard;
    }
    reset_log(&mut admin).await;
    current.unlock().await.unwrap();
    tokio::time::sleep(Duration::from_millis(150)).await;
    assert_eq!(
        acquire_attempts(&mut admin).await,
        0,
        "the last release, with nobody waiting, caused an acquire attempt"
    );
    // The line keeps the channel subscribed while anyone waits: a hand-off does not
    // unsubscribe and subscribe again (only the last waiter, leaving, unsubscribes).
    assert!(
        churn[..WAITERS - 1].iter().all(|&changes| changes == 0) && churn[WAITERS - 1] <= 1,
        "(un)subscriptions per hand-off: {churn:?}"
    );
    served.sort_unstable();
    assert_eq!(
        served,
        (0..WAITERS).collect::<Vec<_>>(),
        "every task served once"
    );
    eprintln!(
        "lining up: {lining_up} attempts; per release: {per_release:?}; (un)subscriptions per release: {churn:?}"
    );
}

/// The holder releases, which hands the local turn to the first waiter; that waiter is
/// cancelled before it acted on the wake-up. The second waiter must get the lock at once,
/// not at its next recheck (1 s) nor never. Single-threaded, so the cancellation lands
/// deterministically between the hand-over and the woken task's first step.
#[tokio::test(flavor = "current_thread")]
async fn a_woken_waiter_cancelled_before_it_ran_passes_the_wake_up_on() {
    let server = RedisServer::start();
    let client = LockClient::connect(&server.url()).await.unwrap();
    let mut worst = Duration::ZERO;
    for round in 0..5 {
        let holder = client.lock("baton").lock().await.unwrap();
        let lock = client.lock("baton");
        let first = tokio::spawn(async move { lock.lock().await.unwrap() });
        tokio::time::sleep(Duration::from_millis(30)).await;
        let lock = client.lock("baton");
        let second = tokio::spawn(async move {
            let guard = lock.lock().await.unwrap();
            (guard, Instant::now())
        });
        tokio::time::sleep(Duration::from_millis(30)).await;

        holder.unlock().await.unwrap();
        // No await between the hand-over and the cancellation: `first` has not run.
        first.abort();
        let cancelled_at = Instant::now();
        let (guard, acquired_at) = tokio::time::timeout(Duration::from_secs(3), second)
            .await
            .unwrap_or_else(|_| panic!("round {round}: the second waiter never got the lock"))
            .unwrap();
        let late = acquired_at - cancelled_at;
        assert!(
            first.await.unwrap_err().is_cancelled(),
            "round {round}: the first waiter was not cancelled"
        );
        assert!(
            late < Duration::from_millis(200),
            "round {round}: the second waiter got the lock {late:?} after the first was cancelled"
        );
        worst = worst.max(late);
        guard.unlock().await.unwrap();
    }
    eprintln!("wake-up passed on: worst {worst:?}");
}

/// The same with two worker threads and the first waiter cancelled 0–2 ms after the
/// release, so that it is cancelled at every stage: before running, with its acquire
/// script in flight, or after it got the lock (its guard is then dropped, which releases
/// in the background). The second waiter must get the lock promptly every time.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_woken_waiter_cancelled_at_any_stage_does_not_strand_the_next() {
    let server = RedisServer::start();
    let client = LockClient::connect(&server.url()).await.unwrap();
    let mut seed = 0x9E37_79B9_7F4A_7C15_u64;
    let mut worst = Duration::ZERO;
    let mut first_won = 0;
    for round in 0..20 {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        let delay = Duration::from_micros(seed % 2000);
        let holder = client.lock("relay").lock().await.unwrap();
        let lock = client.lock("relay");
        let first = tokio::spawn(async move { lock.lock().await.unwrap() });
        tokio::time::sleep(Duration::from_millis(20)).await;
        let lock = client.lock("relay");
        let second = tokio::spawn(async move {
            let guard = lock.lock().await.unwrap();
            (guard, Instant::now())
        });
        tokio::time::sleep(Duration::from_millis(20)).await;

        holder.unlock().await.unwrap();
        // Below the timer's 1 ms resolution: yield until the delay has passed.
        let until = Instant::now() + delay;
        while Instant::now() < until {
            tokio::task::yield_now().await;
        }
        first.abort();
        let cancelled_at = Instant::now();
        if let Ok(guard) = first.await {
            first_won += 1;
            drop(guard);
        }
        let (guard, acquired_at) = tokio::time::timeout(Duration::from_secs(3), second)
            .await
            .unwrap_or_else(|_| panic!("round {round}: the second waiter never got the lock"))
            .unwrap();
        let late = acquired_at.saturating_duration_since(cancelled_at);
        assert!(
            late < Duration::from_millis(300),
            "round {round} (cancelled {delay:?} after the release): the second waiter got the lock {late:?} later"
        );
        worst = worst.max(late);
        guard.unlock().await.unwrap();
    }
    eprintln!("20 rounds: the first waiter had the lock when cancelled in {first_won}; worst hand-on {worst:?}");
}
