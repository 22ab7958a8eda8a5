//! Watchdog renewal, loss detection and the local deadline.

use std::time::{Duration, Instant};

use dlock::{LockClient, LockError, LossReason};
use dlock_tests::commandstats::command_calls;
use dlock_tests::{RedisServer, TcpProxy};
use redis::Commands;

async fn client_with_watchdog(server: &RedisServer, timeout: Duration) -> LockClient {
    LockClient::builder()
        .watchdog_timeout(timeout)
        .command_timeout(Duration::from_millis(400))
        .connect(&server.url())
        .await
        .unwrap()
}

#[tokio::test]
async fn a_guard_held_five_times_the_watchdog_timeout_never_lets_anyone_in() {
    let server = RedisServer::start();
    let holder = client_with_watchdog(&server, Duration::from_secs(1)).await;
    let rival = LockClient::connect(&server.url()).await.unwrap();

    let guard = holder.lock("renewed").lock().await.unwrap();
    let held_since = Instant::now();
    let mut attempts = 0;
    while held_since.elapsed() < Duration::from_secs(5) {
        let attempt = rival.lock("renewed").try_lock().await;
        assert!(
            attempt.unwrap_err().is_timeout(),
            "rival got in after {:?}",
            held_since.elapsed()
        );
        let ttl: i64 = server.connection().pttl("renewed").unwrap();
        assert!(ttl > 0, "lock key must keep an expiry, PTTL {ttl}");
        attempts += 1;
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    assert!(attempts >= 20);
    assert!(!guard.is_lost());

    guard.unlock().await.unwrap();
    let exists: bool = server.connection().exists("renewed").unwrap();
    assert!(!exists, "released lock must be gone at once");
    // And stays gone: nothing renews a released lock back into existence.
    tokio::time::sleep(Duration::from_millis(700)).await;
    let exists: bool = server.connection().exists("renewed").unwrap();
    assert!(!exists);
}

#[tokio::test]
async fn renewal_survives_the_server_killing_the_clients_connections() {
    let server = RedisServer::start();
    let holder = client_with_watchdog(&server, Duration::from_secs(1)).await;
    let guard = holder.lock("killed").lock().await.unwrap();

    let started = Instant::now();
    for _ in 0..4 {
        tokio::time::sleep(Duration::from_millis(700)).await;
        let killed: i64 = redis::cmd("CLIENT")
            .arg("KILL")
            .arg("TYPE")
            .arg("normal")
            .query(&mut server.connection())
            .unwrap();
        assert!(
            killed >= 1,
            "the holder's connection should have been killed"
        );
    }
    tokio::time::sleep(Duration::from_secs(5).saturating_sub(started.elapsed())).await;

    assert!(
        !guard.is_lost(),
        "a dropped connection is transient, not a loss"
    );
    let holders = dlock_tests::keys::holders(&mut server.connection(), "killed");
    assert_eq!(holders.len(), 1, "still held 5 s later");
    guard.unlock().await.unwrap();
}

#[tokio::test]
async fn deleting_the_key_behind_the_holders_back_completes_lost_within_a_renewal_period() {
    let server = RedisServer::start();
    let holder = client_with_watchdog(&server, Duration::from_millis(900)).await;
    let guard = holder.lock("deleted").lock().await.unwrap();
    let lost = guard.lost();

    let _: () = server.connection().del("deleted").unwrap();
    let deleted_at = Instant::now();
    let err = tokio::time::timeout(Duration::from_secs(2), lost)
        .await
        .expect("lost() must complete");
    let elapsed = deleted_at.elapsed();
    // One renewal period is 300 ms, plus slack for a loaded machine; a miss would show
    // as a second period (600 ms) or the lease running out (900 ms, `LeaseExpired`).
    assert!(elapsed <= Duration::from_millis(500), "took {elapsed:?}");
    assert!(
        matches!(
            err,
            LockError::Lost {
                reason: LossReason::NotHeldOnRenewal,
                ..
            }
        ),
        "{err}"
    );
    assert!(guard.is_lost());
    assert!(guard.unlock().await.unwrap_err().is_not_held());
}

/// How many `PEXPIRE`s the server has run (scripts' commands included): the count goes up
/// the moment a renewal sets the expiry, whether or not its reply has reached the client.
fn pexpire_calls(conn: &mut redis::Connection) -> u64 {
    command_calls(conn).get("pexpire").copied().unwrap_or(0)
}

#[tokio::test]
async fn a_holder_cut_off_from_redis_learns_of_the_loss_by_its_local_deadline() {
    let server = RedisServer::start();
    // The holder talks to Redis through a proxy that can hold its replies back; the test
    // reads Redis directly.
    let proxy = TcpProxy::start(server.addr());
    let mut direct = server.connection();
    let holder = LockClient::builder()
        .watchdog_timeout(Duration::from_secs(1))
        // Longer than the reply is held below: the delayed renewal must succeed.
        .command_timeout(Duration::from_secs(1))
        .connect(&proxy.url())
        .await
        .unwrap();
    let guard = holder.lock("stopped").lock().await.unwrap();
    // Wait for a renewal, so the next one is a full period (333 ms) away and the script
    // is loaded: holding replies from here on delays only that next renewal's reply.
    let acquired_deadline = guard.deadline();
    let waiting_since = Instant::now();
    while guard.deadline() == acquired_deadline {
        assert!(
            waiting_since.elapsed() < Duration::from_secs(1),
            "no renewal within 1 s"
        );
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    let renewed_deadline = guard.deadline();
    let applied_before = pexpire_calls(&mut direct);

    // Redis applies the next renewal when its request arrives; its reply reaches the
    // client 200 ms later. The local deadline must count from when the renewal was sent,
    // not from when it was confirmed, or it outlives the key by those 200 ms.
    proxy.hold_replies();
    let holding_since = Instant::now();
    while pexpire_calls(&mut direct) == applied_before {
        assert!(
            holding_since.elapsed() < Duration::from_secs(1),
            "no renewal reached Redis within 1 s"
        );
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    let applied_by = Instant::now();
    tokio::time::sleep(Duration::from_millis(200)).await;
    // Redis' own expiry: the key lives until `PTTL` ms (truncated, so up to 1 ms more)
    // after the command ran, which was before its reply arrived.
    let pttl: i64 = direct.pttl("stopped").unwrap();
    let read_at = Instant::now();
    assert!(pttl > 0, "PTTL {pttl}");
    let redis_expiry_at_most =
        read_at + Duration::from_millis(pttl.unsigned_abs()) + Duration::from_millis(1);
    assert_eq!(
        guard.deadline(),
        renewed_deadline,
        "the renewal's reply passed the proxy while replies were held"
    );

    // No renewal after this one reaches Redis; then let the held reply through.
    server.pause();
    proxy.release_replies();
    while guard.deadline() == renewed_deadline {
        assert!(
            applied_by.elapsed() < Duration::from_secs(1),
            "the delayed renewal was not confirmed"
        );
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    let confirmed_after = applied_by.elapsed();
    let delayed_deadline = guard.deadline();
    tokio::time::sleep(Duration::from_millis(50)).await;
    let deadline = guard.deadline();
    assert_eq!(
        deadline, delayed_deadline,
        "a renewal was confirmed after the PTTL read"
    );
    assert!(deadline > Instant::now(), "the lease has not run out yet");
    // The local deadline must never outlive the key: past Redis' expiry another client
    // can take the lock while this holder still believes it holds it.
    assert!(
        deadline <= redis_expiry_at_most,
        "local deadline {:?} after Redis' expiry (PTTL {pttl} ms)",
        deadline - redis_expiry_at_most
    );
    eprintln!(
        "renewal confirmed {confirmed_after:?} after Redis applied it; local deadline {:?} before Redis' expiry (upper estimate)",
        redis_expiry_at_most - deadline
    );
    let err = guard.lost().await;
    let now = Instant::now();
    server.resume();

    // Timer slack on a loaded machine; the renewal period is 333 ms.
    assert!(
        now <= deadline + Duration::from_millis(150),
        "lost() completed {:?} after the local deadline",
        now - deadline
    );
    assert!(
        now + Duration::from_millis(5) >= deadline,
        "lost() completed before the deadline"
    );
    assert!(
        matches!(
            err,
            LockError::Lost {
                reason: LossReason::LeaseExpired,
                ..
            }
        ),
        "{err}"
    );
    drop(guard);
}
