//! Semaphore acquisitions cancelled at every point (before, during and after the acquire
//! script ran) leave no permit taken: the background release gives back exactly the
//! cancelled grant.

use std::time::Duration;

use dlock::LockClient;
use dlock_tests::RedisServer;
use redis::AsyncCommands;
use tokio::time::Instant;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancelled_acquisitions_leave_no_permit_taken() {
    let server = RedisServer::start();
    let client = LockClient::connect(&server.url()).await.unwrap();
    let mut redis = server
        .client()
        .get_multiplexed_async_connection()
        .await
        .unwrap();
    let sem = client.semaphore("cancel", 3);
    let mut seed: u64 = 0x9e37_79b9_7f4a_7c15;
    let (mut cancelled, mut finished) = (0, 0);
    for round in 0..150u32 {
        // Sometimes another grant holds a permit, so that some attempts wait.
        let blocker = if round % 3 == 0 {
            Some(sem.acquire(2).await.unwrap())
        } else {
            None
        };
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        let cut = Duration::from_micros(seed % 3_000);
        match tokio::time::timeout(cut, sem.acquire(2)).await {
            Ok(guard) => {
                finished += 1;
                drop(guard.unwrap());
            }
            Err(_) => cancelled += 1,
        }
        drop(blocker);
    }
    // The background releases drain; then every permit is back and no grant is left.
    let until = Instant::now() + Duration::from_secs(5);
    while Instant::now() < until && sem.available_permits().await.unwrap() != 3 {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    println!("{cancelled} cancelled, {finished} finished");
    assert!(
        cancelled > 20 && finished > 5,
        "{cancelled} cancelled, {finished} finished"
    );
    assert_eq!(sem.available_permits().await.unwrap(), 3);
    assert!(
        !redis.exists::<_, bool>(sem.key()).await.unwrap(),
        "a grant was left"
    );
    let guard = sem.try_acquire(3).await.expect("all 3 permits are free");
    guard.unlock().await.unwrap();
}
