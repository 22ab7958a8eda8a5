//! A waiter is served when a hold runs out by itself, with no release to wake it: the end
//! of a `min_hold`, the lease of a reader left holding.

use std::time::Duration;

use dlock::{distributed_lock, LockClient, LockError};
use dlock_tests::liveness::slow_recheck;
use dlock_tests::RedisServer;
use tokio::time::Instant;

use crate::bound::*;

/// Holds `{min-hold}` for about 100 ms; the lock stays taken until acquisition + 600 ms.
#[distributed_lock(key = "{min-hold}", min_hold = "600ms", lease = "5s", client = locks)]
async fn short_job_held_at_least_600ms(locks: &LockClient) -> Result<Instant, LockError> {
    tokio::time::sleep(Duration::from_millis(100)).await;
    Ok(Instant::now())
}

/// A `min_hold` of 600 ms with a 5 s lease: the body ends after ~100 ms and the lock stays
/// taken until acquisition + 600 ms. Another client that started waiting while the body
/// ran must get the lock within [`BOUND`] of that expiry. Fails when nothing wakes the
/// waiter at the end of the minimum hold: it naps until the TTL it saw when it tried,
/// the 5 s lease (or its recheck).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiter_gets_the_lock_when_min_hold_ends() {
    const NAME: &str = "{min-hold}";
    let server = RedisServer::start();
    let url = server.url();
    let locks = LockClient::connect(&url).await.unwrap();
    let other = slow_recheck(&url).await;
    let probe = other.lock(NAME);

    let (body_ended, (waiting_since, task)) =
        tokio::join!(short_job_held_at_least_600ms(&locks), async {
            // Start waiting while the body runs (the lock is taken).
            let started = Instant::now();
            while !probe.is_locked().await.unwrap() {
                assert!(started.elapsed() < Duration::from_secs(2), "never locked");
                tokio::time::sleep(Duration::from_millis(1)).await;
            }
            let lock = other.lock(NAME);
            (
                Instant::now(),
                acquiring(async move { lock.try_lock_for(WAIT).await }),
            )
        });
    let body_ended = body_ended.unwrap();
    assert!(
        waiting_since < body_ended,
        "the waiter started after the body had ended"
    );
    // When the lock becomes takeable: now + its remaining TTL (read after the body).
    let asked = Instant::now();
    let pttl: i64 = redis::cmd("PTTL")
        .arg(NAME)
        .query(&mut server.connection())
        .unwrap();
    let takeable = asked + Duration::from_millis(u64::try_from(pttl).unwrap_or(0));
    eprintln!("item 5: after the body the lock expires in {pttl} ms");
    assert!(
        (300..=600).contains(&pttl),
        "the min_hold keeps the lock until acquisition + 600 ms: PTTL {pttl} ms"
    );
    let acquired =
        acquired_within_bound("item 5: waiter, from the min_hold expiry", takeable, task).await;
    acquired.unlock().await.unwrap();
}

// ---------------------------------------------------------------------------------------
// 6. One client waiting on a key with both a same-slot multi-lock and a plain lock.
// ---------------------------------------------------------------------------------------

/// Two readers of client R hold a read-write lock: R1 without a lease (the watchdog's
/// 30 s in Redis), R2 with a 400 ms lease it keeps past its end. Writer W of another
/// client waits, told it may sleep until R1's deadline. R1 releases: the lock is now held
/// only until R2's lease ends, and W must get it within [`BOUND`] of that end. Fails when
/// the release of a reader that leaves others holding tells no waiter that the lock now
/// frees sooner: W sleeps until its recheck.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_writer_gets_the_lock_when_the_reader_left_holding_runs_out() {
    const NAME: &str = "{rwnap}x";
    let server = RedisServer::start();
    let url = server.url();
    let readers = LockClient::connect(&url).await.unwrap();
    let w = slow_recheck(&url).await;
    let rw = readers.rw_lock(NAME);
    let r1 = rw.read().lock().await.unwrap();
    let r2 = rw
        .read()
        .try_lock_with_lease(Duration::ZERO, Duration::from_millis(400))
        .await
        .unwrap();
    let lock = w.rw_lock(NAME);
    let writer = acquiring(async move { lock.write().try_lock_for(WAIT).await });
    tokio::time::sleep(SETTLE).await;
    assert!(
        !writer.is_finished(),
        "the writer got in beside two readers"
    );

    r1.unlock().await.unwrap();
    let r2_ends = Instant::from_std(r2.deadline());
    let acquired = acquired_within_bound(
        "item 12: the writer, from the end of the last reader's lease",
        r2_ends,
        writer,
    )
    .await;
    acquired.unlock().await.unwrap();
    drop(r2);
}
