//! `LockClientBuilder::default_wait`: the verbs that name no wait (`lock`,
//! `lock_with_lease`, the semaphore's `acquire`) give up after it with
//! `LockError::Timeout`, on every primitive; a multi-lock takes its first lock's client's.

use std::future::Future;
use std::time::{Duration, Instant};

use dlock::{LockClient, MultiLock};
use dlock_tests::RedisServer;

const DEFAULT_WAIT: Duration = Duration::from_millis(300);

/// Runs `call` (an acquisition of a held name that names no wait) and checks it failed
/// with a timeout after about `DEFAULT_WAIT`, not before and not long after.
async fn gives_up_after_the_default_wait<T, F>(what: &str, call: F)
where
    F: Future<Output = dlock::Result<T>>,
{
    let started = Instant::now();
    let outcome = tokio::time::timeout(Duration::from_secs(10), call)
        .await
        .unwrap_or_else(|_| panic!("{what}: still waiting after 10 s (default_wait ignored)"));
    let took = started.elapsed();
    match outcome {
        Ok(_) => panic!("{what}: acquired a held name"),
        Err(error) => assert!(error.is_timeout(), "{what}: {error}"),
    }
    assert!(
        took >= DEFAULT_WAIT - Duration::from_millis(20) && took < Duration::from_millis(2_500),
        "{what}: gave up after {took:?}, default_wait {DEFAULT_WAIT:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_verbs_that_name_no_wait_give_up_after_the_clients_default_wait() {
    let server = RedisServer::start();
    let holder = LockClient::connect(&server.url()).await.unwrap();
    let client = LockClient::builder()
        .default_wait(Some(DEFAULT_WAIT))
        .connect(&server.url())
        .await
        .unwrap();
    let lease = Duration::from_secs(5);

    let _lock = holder.lock("{dw}lock").lock().await.unwrap();
    let lock = client.lock("{dw}lock");
    gives_up_after_the_default_wait("lock", lock.lock()).await;
    gives_up_after_the_default_wait("lock_with_lease", lock.lock_with_lease(lease)).await;

    let _fair = holder.fair_lock("{dw}fair").lock().await.unwrap();
    let fair = client.fair_lock("{dw}fair");
    gives_up_after_the_default_wait("fair lock", fair.lock()).await;

    let _write = holder.rw_lock("{dw}rw").write().lock().await.unwrap();
    let rw = client.rw_lock("{dw}rw");
    gives_up_after_the_default_wait("read lock", rw.read().lock()).await;
    gives_up_after_the_default_wait("write lock", rw.write().lock_with_lease(lease)).await;

    let _permit = holder.semaphore("{dw}sem", 1).acquire(1).await.unwrap();
    let semaphore = client.semaphore("{dw}sem", 1);
    gives_up_after_the_default_wait("semaphore", semaphore.acquire(1)).await;

    // A multi-lock waits as long as its first lock's client says, whoever holds the rest.
    let set = MultiLock::same_slot(&client, ["{dw}lock", "{dw}free"]).unwrap();
    gives_up_after_the_default_wait("multi-lock", set.lock()).await;
    assert!(
        !client.lock("{dw}free").is_locked().await.unwrap(),
        "the multi-lock that gave up left its free lock taken"
    );
}
