//! A task that takes a lock it already holds, outside `guard.scope`, waits for itself: the
//! second call is a new owner behind the first. It cannot be refused (the same state is
//! legitimate when another future of the task, under `join!`, holds the lock and will
//! release it), so dlock names the likely mistake in a warning after 5 s of waiting, and
//! only for a task waiting for its own hold.

use std::time::Duration;

use dlock::LockClient;
use dlock_tests::logs::{capture_logs, captured};
use dlock_tests::RedisServer;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_task_waiting_for_its_own_lock_is_told_why() {
    capture_logs(tracing::Level::DEBUG);
    let server = RedisServer::start();
    let client = LockClient::connect(&server.url()).await.unwrap();

    let own = client.lock("self:own").lock().await.unwrap();
    // Control: a lock this task holds, waited for by another task, is an ordinary wait.
    let other = client.lock("self:other").lock().await.unwrap();
    let lock = client.lock("self:other");
    let other_waiter = tokio::spawn(async move { lock.try_lock_for(Duration::from_secs(6)).await });

    // The same mistake inside a spawned task (with a task id, unlike the test's body).
    let lock = client.lock("self:spawned");
    let spawned = tokio::spawn(async move {
        let _held = lock.lock().await.unwrap();
        lock.try_lock_for(Duration::from_secs(6)).await.map(drop)
    });

    let again = client
        .lock("self:own")
        .try_lock_for(Duration::from_secs(6))
        .await;
    let spawned_again = spawned.await.unwrap();
    assert!(
        spawned_again.as_ref().is_err_and(|e| e.is_timeout()),
        "{spawned_again:?}"
    );
    assert!(again.as_ref().is_err_and(|e| e.is_timeout()), "{again:?}");
    let other_wait = other_waiter.await.unwrap();
    assert!(
        other_wait.as_ref().is_err_and(|e| e.is_timeout()),
        "{other_wait:?}"
    );

    let logs = captured();
    println!("{logs}");
    let warnings: Vec<&str> = logs
        .lines()
        .filter(|line| line.contains("acquired itself"))
        .collect();
    assert_eq!(warnings.len(), 2, "{logs}");
    for name in ["lock=self:own", "lock=self:spawned"] {
        let warning = warnings.iter().find(|line| line.contains(name));
        assert!(
            warning.is_some_and(|line| line.contains("guard.scope")),
            "{name}: {logs}"
        );
    }
    drop((own, other));
}
