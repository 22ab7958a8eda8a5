//! The client's local line: tasks of one client that want the same lock are served first
//! come, first served, the releasing task cannot barge, and the line never outlives the
//! Redis hold: a same-process waiter gets the lock as soon as a waiter in another process
//! would (lease expired, force-unlocked, watchdog guard lost).

use std::sync::{Arc, Mutex};
use std::time::Duration;

use dlock::{Lock, LockClient, LockError, LockGuard};
use dlock_tests::RedisServer;
use tokio::task::JoinHandle;
use tokio::time::Instant;

/// A task of the client that waits up to `wait` for `lock`; it answers the guard and when
/// it got it.
fn waiter(lock: Lock, wait: Duration) -> JoinHandle<Result<(LockGuard, Instant), LockError>> {
    tokio::spawn(async move {
        let guard = lock.try_lock_for(wait).await?;
        Ok((guard, Instant::now()))
    })
}

/// A waiter of the holder's own client and one of another client race for the lock after
/// the holder's 300 ms lease ran out; both must get it within 50 ms of the expiry.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn after_an_explicit_lease_expires_a_local_waiter_gets_the_lock_within_50ms() {
    let server = RedisServer::start();
    let client = LockClient::connect(&server.url()).await.unwrap();
    let holder = client
        .lock("expiring")
        .lock_with_lease(Duration::from_millis(300))
        .await
        .unwrap();
    let expires_at = Instant::from_std(holder.deadline());
    let waiter = waiter(client.lock("expiring"), Duration::from_secs(2));
    let (guard, acquired_at) = waiter
        .await
        .unwrap()
        .expect("the local waiter got the lock");
    let late = acquired_at.saturating_duration_since(expires_at);
    println!("300 ms lease ran out: the local waiter got the lock {late:?} later");
    assert!(
        late <= Duration::from_millis(50),
        "acquired {late:?} after the lease ran out"
    );
    assert!(holder.is_lost());
    guard.unlock().await.unwrap();
    assert!(holder.unlock().await.unwrap_err().is_not_held());
}

/// `lock()` (no wait bound) behind an expired lease must not wait forever.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lock_behind_an_expired_local_lease_does_not_wait_forever() {
    let server = RedisServer::start();
    let client = LockClient::connect(&server.url()).await.unwrap();
    let _holder = client
        .lock("hung")
        .lock_with_lease(Duration::from_millis(200))
        .await
        .unwrap();
    let started = Instant::now();
    let guard = tokio::time::timeout(Duration::from_secs(3), client.lock("hung").lock())
        .await
        .expect("lock() waited past the holder's lease")
        .unwrap();
    // About the 200 ms lease on a quiet machine (the promptness itself is the test
    // above's): within 1.5 s, so that a loaded machine passes; a line that did not watch
    // its holder's lease would wait into the 3 s timeout.
    assert!(
        started.elapsed() < Duration::from_millis(1_500),
        "took {:?}",
        started.elapsed()
    );
    guard.unlock().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn after_force_unlock_a_local_waiter_gets_the_lock_within_100ms() {
    let server = RedisServer::start();
    let client = LockClient::connect(&server.url()).await.unwrap();
    let admin = LockClient::connect(&server.url()).await.unwrap();
    let holder = client.lock("forced").lock().await.unwrap();
    let waiter = waiter(client.lock("forced"), Duration::from_secs(3));
    tokio::time::sleep(Duration::from_millis(200)).await;
    let forced_at = Instant::now();
    assert!(admin.lock("forced").force_unlock().await.unwrap());
    let (guard, acquired_at) = waiter
        .await
        .unwrap()
        .expect("the local waiter got the lock");
    let late = acquired_at - forced_at;
    println!("force unlock: the local waiter got the lock {late:?} later");
    assert!(
        late <= Duration::from_millis(100),
        "acquired {late:?} after the force unlock"
    );
    assert!(holder.is_lost(), "the force-unlocked guard knows it");
    guard.unlock().await.unwrap();
}

/// A watchdog guard whose key was deleted is found lost at the next renewal; a local
/// waiter must get the lock then, while the lost guard is still alive.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lost_watchdog_guard_gives_up_its_turn_within_a_renewal_period() {
    let server = RedisServer::start();
    let client = LockClient::builder()
        .watchdog_timeout(Duration::from_millis(600))
        .max_wait_recheck(Duration::from_secs(10))
        .connect(&server.url())
        .await
        .unwrap();
    let holder = client.lock("vanished").lock().await.unwrap();
    let waiter = waiter(client.lock("vanished"), Duration::from_secs(3));
    tokio::time::sleep(Duration::from_millis(50)).await;
    // Deleted without a message: only the renewal can find out.
    let deleted_at = Instant::now();
    redis::cmd("DEL")
        .arg("vanished")
        .exec(&mut server.connection())
        .unwrap();
    let (guard, acquired_at) = waiter
        .await
        .unwrap()
        .expect("the local waiter got the lock");
    let period = Duration::from_millis(200);
    println!(
        "watchdog key deleted: the local waiter got the lock {:?} later (renewal period {period:?})",
        acquired_at - deleted_at
    );
    assert!(
        acquired_at - deleted_at <= period + Duration::from_millis(150),
        "acquired {:?} after the key vanished (renewal period {period:?})",
        acquired_at - deleted_at
    );
    assert!(holder.is_lost());
    guard.unlock().await.unwrap();
}

/// Five tasks line up behind a holder, one at a time; each re-acquires right after its
/// release. With the local line they are served in arrival order and a releasing task
/// never gets the lock back while others wait.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn local_waiters_are_served_in_arrival_order_and_the_releasing_task_cannot_barge() {
    let server = RedisServer::start();
    let client = LockClient::connect(&server.url()).await.unwrap();
    let order = Arc::new(Mutex::new(Vec::new()));
    let first = client.lock("fifo").lock().await.unwrap();
    let mut tasks = Vec::new();
    for task in 0..5 {
        let (lock, order) = (client.lock("fifo"), Arc::clone(&order));
        tasks.push(tokio::spawn(async move {
            for _ in 0..3 {
                let guard = lock.try_lock_for(Duration::from_secs(10)).await.unwrap();
                order.lock().unwrap().push(task);
                // Some work, then release and immediately ask again.
                tokio::time::sleep(Duration::from_millis(2)).await;
                guard.unlock().await.unwrap();
            }
        }));
        // Arrive in a known order.
        tokio::time::sleep(Duration::from_millis(30)).await;
    }
    first.unlock().await.unwrap();
    for task in tasks {
        task.await.unwrap();
    }
    let order = order.lock().unwrap().clone();
    assert_eq!(
        order,
        [0, 1, 2, 3, 4, 0, 1, 2, 3, 4, 0, 1, 2, 3, 4],
        "served out of order (a releasing task barged, or arrival order was ignored)"
    );
}
