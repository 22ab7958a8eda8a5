//! An outage that only acquisitions saw leaves nothing owed: their cleanups, which give up
//! while Redis does not answer, are neither reported as a lost release in the log nor by
//! `shutdown` once Redis is back. A dropped guard's release that gives up is both (the
//! control: its lock stays until its lease expires).

use std::time::{Duration, Instant};

use dlock::{LockClient, LockError};
use dlock_tests::logs::{capture_logs, captured};
use dlock_tests::{RedisServer, TcpProxy};

/// Waits until a captured line names `lock` and says one of `what`.
async fn logged(lock: &str, what: &[&str]) {
    let deadline = Instant::now() + Duration::from_secs(20);
    while !lines_about(lock)
        .iter()
        .any(|line| what.iter().any(|what| line.contains(what)))
    {
        assert!(
            Instant::now() < deadline,
            "no line about {lock} saying any of {what:?} in 20 s"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

fn lines_about(lock: &str) -> Vec<String> {
    let name = format!("lock={lock}");
    captured()
        .lines()
        .filter(|line| line.contains(&name))
        .map(str::to_owned)
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tries_during_an_outage_leave_nothing_owed_once_it_heals() {
    capture_logs(tracing::Level::DEBUG);
    let server = RedisServer::start();
    let proxy = TcpProxy::start(server.addr());
    let client = LockClient::builder()
        .command_timeout(Duration::from_millis(200))
        .retry_attempts(1)
        .failover_wait(Duration::from_millis(300))
        .connect(&proxy.url())
        .await
        .unwrap();

    proxy.hold_replies();
    let tried = client
        .lock("outage:tried")
        .try_lock_for(Duration::from_millis(300))
        .await;
    assert!(tried.is_err(), "{tried:?}");
    // Its cleanup (the try's reply never came: it may have taken the lock) gives up.
    logged(
        "outage:tried",
        &["cleanup of an acquisition", "background release failed"],
    )
    .await;
    proxy.release_replies();
    let warned: Vec<_> = lines_about("outage:tried")
        .into_iter()
        .filter(|line| line.contains("WARN"))
        .collect();
    assert!(warned.is_empty(), "{warned:#?}");
    client.shutdown().await.unwrap();

    // Control: a guard's release that gives up is owed, and said so.
    let guard = client.lock("outage:held").lock().await.unwrap();
    proxy.hold_replies();
    drop(guard);
    logged("outage:held", &["background release failed"]).await;
    proxy.release_replies();
    match client.shutdown().await {
        Err(LockError::ShutdownIncomplete { failed: 1, .. }) => {}
        other => panic!("{other:?}"),
    }
}
