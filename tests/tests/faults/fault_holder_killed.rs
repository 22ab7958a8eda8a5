//! Fault scenarios 1 and 2: the process holding a lock is killed with SIGKILL, so it can
//! neither release nor renew. Another process must get the lock once the lease the dead
//! holder last wrote runs out — soon after, never before.
//!
//! The holder is a separate OS process (`dlock-hold`); the rival is a client in this test,
//! already waiting when the holder dies. "Never before" is checked against the key's PTTL
//! read just before the kill: the key cannot expire earlier than that.

use std::time::{Duration, Instant};

use dlock::LockClient;
use dlock_tests::{HoldProcess, RedisServer};

/// Slack for the rival's own round trips after the key expired.
const SLACK: Duration = Duration::from_millis(200);
/// PTTL is whole milliseconds; the expiry may come this much before `read + pttl`.
const PTTL_ROUNDING: Duration = Duration::from_millis(2);

/// What one kill showed.
struct Handover {
    /// From the kill to the rival holding the lock.
    after_kill: Duration,
    /// From the key's expiry (per the PTTL read before the kill) to the rival holding it;
    /// negative would mean the rival got a lock that had not expired.
    after_expiry: Duration,
    /// The lease left on the key when the holder died.
    lease_left: Duration,
}

/// Kills the holder `hold_for` after it acquired, with a rival waiting; returns when the
/// rival holds the lock.
async fn kill_and_hand_over(
    server: &RedisServer,
    rival: &LockClient,
    name: &str,
    keep: &[&str],
    hold_for: Duration,
) -> Handover {
    let url = server.url();
    let args: Vec<&str> = [url.as_str(), name]
        .into_iter()
        .chain(keep.iter().copied())
        .collect();
    let mut holder = HoldProcess::start(env!("CARGO_BIN_EXE_dlock-hold"), &args);
    let lock = rival.lock(name);
    let waiting = tokio::spawn(async move {
        let guard = lock.try_lock_for(Duration::from_secs(30)).await;
        (Instant::now(), guard)
    });
    tokio::time::sleep(hold_for).await;
    assert!(
        !waiting.is_finished(),
        "the rival got {name} while the holder was alive"
    );

    // Killed before the lease is read (see `HoldProcess::kill`).
    let killed_at = Instant::now();
    holder.kill();
    let mut admin = server.connection();
    let read_at = Instant::now();
    let pttl: i64 = redis::cmd("PTTL").arg(name).query(&mut admin).unwrap();
    let lease_left = Duration::from_millis(u64::try_from(pttl).unwrap_or_else(|_| {
        panic!("{name} should still be held with a lease just after the kill, PTTL {pttl}")
    }));

    let (acquired_at, guard) = waiting.await.unwrap();
    let guard = guard.unwrap_or_else(|e| panic!("the rival never got {name}: {e}"));
    let expiry = read_at + lease_left;
    assert!(
        acquired_at + PTTL_ROUNDING >= expiry,
        "the rival got {name} {:?} before the dead holder's lease ran out",
        expiry - acquired_at
    );
    guard.unlock().await.unwrap();
    Handover {
        after_kill: acquired_at - killed_at,
        after_expiry: acquired_at.saturating_duration_since(expiry),
        lease_left,
    }
}

/// Scenario 1: watchdog lock (timeout 2 s), holder killed at three points of its renewal
/// period (renewals every 2/3 s). Another process acquires within 2 s + 200 ms of the
/// kill, and not before the lease ran out.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn killed_watchdog_holder_is_replaced_when_its_lease_runs_out() {
    let server = RedisServer::start();
    let rival = LockClient::connect(&server.url()).await.unwrap();
    let watchdog = Duration::from_secs(2);
    for (round, hold_for) in [300u64, 1_000, 1_700].into_iter().enumerate() {
        let name = format!("fault:killed-watchdog:{round}");
        let handover = kill_and_hand_over(
            &server,
            &rival,
            &name,
            &["--watchdog", "2s"],
            Duration::from_millis(hold_for),
        )
        .await;
        println!(
            "scenario 1, killed {hold_for} ms after acquiring: lease left {:?}, rival acquired {:?} after the kill, {:?} after the expiry",
            handover.lease_left, handover.after_kill, handover.after_expiry
        );
        assert!(
            handover.after_kill <= watchdog + SLACK,
            "the rival waited {:?} after the kill (watchdog timeout {watchdog:?})",
            handover.after_kill
        );
        assert!(
            handover.after_expiry <= SLACK,
            "the rival acquired {:?} after the lease ran out",
            handover.after_expiry
        );
    }
}

/// Scenario 2: an explicit 1 s lease (no watchdog), holder killed 100 ms after acquiring.
/// Another process acquires when the lease runs out: within 1 s + 200 ms of the
/// acquisition, never before.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn killed_lease_holder_is_replaced_when_its_lease_runs_out() {
    let server = RedisServer::start();
    let rival = LockClient::connect(&server.url()).await.unwrap();
    let lease = Duration::from_secs(1);
    for round in 0..2 {
        let name = format!("fault:killed-lease:{round}");
        let started = Instant::now();
        let handover = kill_and_hand_over(
            &server,
            &rival,
            &name,
            &["--lease", "1s"],
            Duration::from_millis(100),
        )
        .await;
        println!(
            "scenario 2, 1 s lease: lease left at the kill {:?}, rival acquired {:?} after the kill, {:?} after the expiry",
            handover.lease_left, handover.after_kill, handover.after_expiry
        );
        assert!(
            handover.lease_left <= lease,
            "an explicit lease is never extended: {:?} left",
            handover.lease_left
        );
        assert!(
            handover.after_kill <= lease + SLACK,
            "the rival waited {:?} after the kill (lease {lease:?})",
            handover.after_kill
        );
        assert!(
            started.elapsed() < lease + Duration::from_secs(3),
            "round took {:?}",
            started.elapsed()
        );
    }
}
