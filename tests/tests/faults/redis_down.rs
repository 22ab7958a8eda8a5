//! With Redis down, how fast an acquisition fails is `failover_wait`'s to decide (the
//! README's outage advice quotes these figures): it rides the outage out that long, or
//! until its own `wait` ends, and then fails with Redis' error. Fails when another setting
//! decides it (a 30 s wait, or the default ten seconds of riding out), or when a longer
//! `failover_wait` does not make the failure later. The error names the server that is
//! down, as the client names it.

use std::time::{Duration, Instant};

use dlock::{ErrorKind, LockClient};
use dlock_tests::RedisServer;

/// How long an acquisition with a 30 s wait takes to fail on a client with
/// `failover_wait` set to `ride_out`, with the server stopped after the client connected.
async fn failure_after(ride_out: Duration) -> Duration {
    let mut server = RedisServer::start();
    let client = LockClient::builder()
        .failover_wait(ride_out)
        .connect(&server.url())
        .await
        .unwrap();
    server.stop();
    let started = Instant::now();
    let error = client
        .lock("down")
        .try_lock_for(Duration::from_secs(30))
        .await
        .unwrap_err();
    let took = started.elapsed();
    eprintln!("failover_wait {ride_out:?}: failed after {took:?}: {error}");
    assert_eq!(error.kind(), ErrorKind::Unavailable, "{error}");
    let named = format!("Redis at {} ", server.url());
    assert!(error.to_string().starts_with(&named), "{error}");
    took
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_redis_down_an_acquisition_fails_once_failover_wait_is_spent() {
    let short = failure_after(Duration::from_secs(1)).await;
    let longer = failure_after(Duration::from_millis(2_500)).await;
    assert!(short >= Duration::from_secs(1), "{short:?}");
    // Far below the 30 s wait and the default 10 s: the setting decided, on any machine.
    assert!(short < Duration::from_secs(6), "{short:?}");
    assert!(longer >= Duration::from_millis(2_500), "{longer:?}");
    assert!(longer > short, "{short:?} then {longer:?}");
}
