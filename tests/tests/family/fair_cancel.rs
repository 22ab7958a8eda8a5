//! Cancelled fair acquisitions (futures dropped at any await, waits that time out) leave
//! no queue entry and no hold behind, and the next waiter is not held up by them.

use std::time::{Duration, Instant};

use dlock::{FairLock, LockClient};
use dlock_tests::{patient_client, RedisServer};
use redis::Commands;

/// A small deterministic pseudo-random sequence (xorshift), so a failure can be replayed.
struct Rng(u64);

impl Rng {
    fn below(&mut self, n: u64) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0 % n
    }
}

/// Drops `lock()` / `try_lock_for()` futures of `lock` after 0..3 ms (inside a script
/// call, while subscribing, while napping), and lets some short waits time out.
async fn cancel_many(lock: &FairLock, rng: &mut Rng, rounds: usize) {
    for round in 0..rounds {
        let after = Duration::from_micros(rng.below(3000));
        match round % 3 {
            0 => {
                let _ = tokio::time::timeout(after, lock.lock()).await;
            }
            1 => {
                let _ =
                    tokio::time::timeout(after, lock.try_lock_for(Duration::from_secs(5))).await;
            }
            _ => {
                // Times out by itself: the foreground leave.
                let _ = lock.try_lock_for(after).await;
            }
        }
    }
}

/// The fair-lock keys left on the server (queue and deadlines; empty sorted sets vanish).
fn fair_keys(server: &RedisServer) -> Vec<String> {
    server.connection().keys("dlock:fair:*").unwrap()
}

fn wait_until_gone(server: &RedisServer, what: &str, mut left: impl FnMut() -> bool) {
    let started = Instant::now();
    while left() {
        assert!(
            started.elapsed() < Duration::from_secs(2),
            "{what} still there 2 s after the cancellations: {:?}",
            fair_keys(server)
        );
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// Entries live 10 s, far longer than the test: only leaving removes them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancelled_waiters_leave_no_entry_and_do_not_stall_the_next() {
    let server = RedisServer::start();
    let (a, b) = (
        LockClient::connect(&server.url()).await.unwrap(),
        LockClient::connect(&server.url()).await.unwrap(),
    );
    let holder = a.fair_lock("cancel").lock().await.unwrap();
    let lock = b.fair_lock("cancel");
    cancel_many(&lock, &mut Rng(0x9e37_79b9_7f4a_7c15), 150).await;
    wait_until_gone(&server, "queue entries", || !fair_keys(&server).is_empty());
    assert_eq!(lock.queue_len().await.unwrap(), 0);

    // The next waiter is the head at once: granted as soon as the holder releases.
    let next = tokio::spawn({
        let lock = lock.clone();
        async move {
            let guard = lock.lock().await.unwrap();
            let at = Instant::now();
            guard.unlock().await.unwrap();
            at
        }
    });
    while lock.queue_len().await.unwrap() == 0 {
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
    tokio::time::sleep(Duration::from_millis(100)).await;
    let released = Instant::now();
    holder.unlock().await.unwrap();
    let granted = tokio::time::timeout(Duration::from_secs(5), next)
        .await
        .expect("the next waiter is granted")
        .unwrap();
    assert!(
        granted - released < Duration::from_millis(300),
        "the next waiter waited {:?} after the release",
        granted - released
    );
    assert!(!lock.is_locked().await.unwrap());
}

/// On a free lock a cancelled acquisition may have been granted with its reply still on
/// the way: the hold goes too, and nothing is left.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancelled_acquisitions_of_a_free_lock_leave_no_hold() {
    let server = RedisServer::start();
    let client = LockClient::connect(&server.url()).await.unwrap();
    let lock = client.fair_lock("cancel-free");
    let mut rng = Rng(0x2545_f491_4f6c_dd1d);
    for _ in 0..100 {
        let after = Duration::from_micros(rng.below(1500));
        let _ = tokio::time::timeout(after, lock.lock()).await;
    }
    wait_until_gone(&server, "the lock or queue entries", || {
        let held: bool = server.connection().exists("cancel-free").unwrap();
        held || !fair_keys(&server).is_empty()
    });
    // And it is free for the next one.
    lock.try_lock().await.unwrap().unlock().await.unwrap();
}

/// A client's waiters share its wake channel, and a wake-up naming a waiter of the client
/// that stopped waiting is dropped there: the stopped waiter's own leave must wake the
/// next head. Its head is cancelled around the release that wakes it (before it, at once
/// after it, or after 0..3 ms, when the wake-up may be on its way or taken), and the
/// client's next waiter must get the lock long before its heartbeat (a third of the
/// 10 s entry timeout) would have found it free.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wake_up_for_a_cancelled_head_reaches_the_next_waiter_of_its_client() {
    let server = RedisServer::start();
    let (a, b) = (
        LockClient::connect(&server.url()).await.unwrap(),
        patient_client(&server.url()).await,
    );
    let mut rng = Rng(0x2545_f491_4f6c_dd1d);
    for round in 0..24 {
        let holder = a.fair_lock("handed").lock().await.unwrap();
        let lock = b.fair_lock("handed");
        // The head keeps whatever it gets until it is cancelled.
        let head = tokio::spawn({
            let lock = lock.clone();
            async move {
                let _guard = lock.lock().await;
                std::future::pending::<()>().await;
            }
        });
        while lock.queue_len().await.unwrap() < 1 {
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
        let next = tokio::spawn({
            let lock = lock.clone();
            async move { lock.lock().await.map(|guard| (guard, Instant::now())) }
        });
        while lock.queue_len().await.unwrap() < 2 {
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
        let released = Instant::now();
        match round % 3 {
            0 => {
                head.abort();
                holder.unlock().await.unwrap();
            }
            1 => {
                holder.unlock().await.unwrap();
                head.abort();
            }
            _ => {
                holder.unlock().await.unwrap();
                tokio::time::sleep(Duration::from_micros(rng.below(3_000))).await;
                head.abort();
            }
        }
        let (guard, granted) = tokio::time::timeout(Duration::from_secs(3), next)
            .await
            .unwrap_or_else(|_| panic!("round {round}: the next waiter was never woken"))
            .unwrap()
            .unwrap();
        assert!(
            granted - released < Duration::from_secs(1),
            "round {round}: the next waiter got the lock {:?} after the release",
            granted - released
        );
        guard.unlock().await.unwrap();
    }
}
