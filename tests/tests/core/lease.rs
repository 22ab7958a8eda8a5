//! Explicit leases: expiry, safe release after expiry, and validation before Redis.

use std::time::{Duration, Instant};

use dlock::{limits::MAX_LEASE, LockClient, LockError};
use dlock_tests::liveness::Guard;
use dlock_tests::RedisServer;
use redis::Commands;

#[tokio::test]
async fn an_expired_lease_lets_another_client_in_and_the_late_unlock_is_not_held() {
    let server = RedisServer::start();
    let first = LockClient::connect(&server.url()).await.unwrap();
    let second = LockClient::connect(&server.url()).await.unwrap();

    let stale = first
        .lock("lease")
        .lock_with_lease(Duration::from_millis(500))
        .await
        .unwrap();
    let ttl: i64 = server.connection().pttl("lease").unwrap();
    assert!((1..=500).contains(&ttl), "PTTL {ttl}");
    assert!(second
        .lock("lease")
        .try_lock()
        .await
        .unwrap_err()
        .is_timeout());

    // Waits for the expiry (no unlock message comes: the key just expires).
    let fresh = second
        .lock("lease")
        .try_lock_for(Duration::from_secs(3))
        .await
        .unwrap();
    assert!(
        stale.is_lost(),
        "the first guard's local deadline has passed"
    );

    let err = stale.unlock().await.unwrap_err();
    assert!(
        matches!(err, LockError::NotHeld { ref name } if name == "lease"),
        "{err}"
    );
    let fields = dlock_tests::keys::holders(&mut server.connection(), "lease");
    assert_eq!(fields.len(), 1);
    let (field, count) = fields.into_iter().next().unwrap();
    assert!(field.starts_with(&second.id().to_string()), "{field}");
    assert_eq!(count, 1, "the new holder's lock is untouched");
    fresh.unlock().await.unwrap();
}

#[tokio::test]
async fn leases_redis_would_misread_are_rejected_before_anything_is_written() {
    let server = RedisServer::start();
    let client = LockClient::connect(&server.url()).await.unwrap();
    let lock = client.lock("validated");
    for lease in [
        Duration::ZERO,
        Duration::from_micros(500),
        Duration::MAX,
        MAX_LEASE + Duration::from_secs(1),
        Duration::from_millis(u64::MAX),
    ] {
        for result in [
            lock.lock_with_lease(lease).await,
            lock.try_lock_with_lease(Duration::ZERO, lease).await,
        ] {
            let err = result.unwrap_err();
            assert!(
                matches!(err, LockError::InvalidDuration { what: "lease", .. }),
                "{lease:?}: {err}"
            );
        }
    }
    // Besides the client's own description, written when it connected.
    let keys: Vec<String> = redis::cmd("KEYS")
        .arg("*")
        .query(&mut server.connection())
        .unwrap();
    let keys = keys
        .iter()
        .filter(|key| !dlock_tests::written_by_connecting(key))
        .count();
    assert_eq!(keys, 0, "nothing may reach Redis for an invalid lease");
}

#[tokio::test]
async fn the_acquire_script_itself_refuses_a_bad_lease_without_writing() {
    // Defence in depth: even a caller bypassing the client checks cannot create a lock
    // without expiry. Load the shipped script and call it directly.
    let server = RedisServer::start();
    let mut conn = server.connection();
    let script = redis::Script::new(
        dlock::admin::FunctionLibrary::current()
            .script("lock_acquire")
            .expect("dlock has the lock's acquire script"),
    );
    for lease in ["0", "-1", "9223372036854775807", "abc"] {
        let result: redis::RedisResult<Option<i64>> = script
            .key("raw")
            .arg(lease)
            .arg("owner:1")
            .invoke(&mut conn);
        assert!(result.is_err(), "lease {lease} was accepted");
    }
    let exists: bool = conn.exists("raw").unwrap();
    assert!(!exists);
}

#[tokio::test]
async fn settings_are_validated_when_the_client_is_built() {
    let server = RedisServer::start();
    for (builder, what) in [
        (
            LockClient::builder().watchdog_timeout(Duration::from_millis(50)),
            "watchdog_timeout",
        ),
        (
            LockClient::builder().watchdog_timeout(Duration::MAX),
            "watchdog_timeout",
        ),
        (
            LockClient::builder().command_timeout(Duration::ZERO),
            "command_timeout",
        ),
        (
            LockClient::builder().max_wait_recheck(Duration::from_micros(10)),
            "max_wait_recheck",
        ),
    ] {
        let err = builder.connect(&server.url()).await.unwrap_err();
        assert!(
            matches!(err, LockError::InvalidDuration { what: w, .. } if w == what),
            "{what}: {err}"
        );
    }
}

#[tokio::test]
async fn an_empty_lock_name_is_an_error_not_a_key() {
    let server = RedisServer::start();
    let client = LockClient::connect(&server.url()).await.unwrap();
    let err = client.lock("").lock().await.unwrap_err();
    assert!(matches!(err, LockError::InvalidName { .. }), "{err}");
    assert_eq!(
        err.to_string(),
        "invalid lock name \"\": a lock name must not be empty"
    );
    // Besides the client's own description, written when it connected.
    let keys: Vec<String> = redis::cmd("KEYS")
        .arg("*")
        .query(&mut server.connection())
        .unwrap();
    let keys = keys
        .iter()
        .filter(|key| !dlock_tests::written_by_connecting(key))
        .count();
    assert_eq!(keys, 0);
}

#[tokio::test]
async fn a_bad_address_is_a_config_error_that_hides_the_password() {
    let err = LockClient::connect("redis://user:hunter2@127.0.0.1:notaport")
        .await
        .unwrap_err();
    let message = err.to_string();
    assert!(matches!(err, LockError::Config(_)), "{message}");
    assert!(!message.contains("hunter2"), "{message}");
}

/// How a kind is taken in [`no_kind_lets_another_client_in_before_the_holders_deadline`]:
/// by `holder` with an explicit lease, or by `taker` at once (no wait).
#[derive(Debug, Clone, Copy)]
enum Kind {
    Plain,
    Fair,
    ReadThenWrite,
    WriteThenRead,
    Semaphore,
}

impl Kind {
    async fn hold(self, client: &LockClient, lease: Duration) -> Guard {
        let wait = Duration::from_secs(1);
        match self {
            Kind::Plain => client
                .lock("edge")
                .try_lock_with_lease(wait, lease)
                .await
                .map(Guard::One),
            Kind::Fair => client
                .fair_lock("edge:fair")
                .try_lock_with_lease(wait, lease)
                .await
                .map(Guard::One),
            Kind::ReadThenWrite => client
                .rw_lock("edge:rw")
                .read()
                .try_lock_with_lease(wait, lease)
                .await
                .map(Guard::One),
            Kind::WriteThenRead => client
                .rw_lock("edge:rw")
                .write()
                .try_lock_with_lease(wait, lease)
                .await
                .map(Guard::One),
            Kind::Semaphore => client
                .semaphore("edge:sem", 1)
                .try_acquire_with_lease(1, wait, lease)
                .await
                .map(Guard::Permit),
        }
        .unwrap_or_else(|e| panic!("{self:?}: the holder: {e}"))
    }

    async fn try_take(self, client: &LockClient) -> Result<Guard, LockError> {
        match self {
            Kind::Plain => client.lock("edge").try_lock().await.map(Guard::One),
            Kind::Fair => client
                .fair_lock("edge:fair")
                .try_lock()
                .await
                .map(Guard::One),
            Kind::ReadThenWrite => client
                .rw_lock("edge:rw")
                .write()
                .try_lock()
                .await
                .map(Guard::One),
            Kind::WriteThenRead => client
                .rw_lock("edge:rw")
                .read()
                .try_lock()
                .await
                .map(Guard::One),
            Kind::Semaphore => client
                .semaphore("edge:sem", 1)
                .try_acquire(1)
                .await
                .map(Guard::Permit),
        }
    }
}

/// A guard's `deadline()` promises that Redis cannot have let anyone else in before it.
/// Redis counts leases in whole milliseconds: a hold taken 0.9 ms into a millisecond and
/// judged by deadlines in whole ms (read-write locks and semaphores keep per-holder
/// deadlines in their hash) could end up to a millisecond before the holder's deadline,
/// which is counted from when its request was sent. Another client spinning on tries
/// around the lease's end finds any such gap: it must never get in while the holder's
/// deadline is still ahead.
#[tokio::test]
async fn no_kind_lets_another_client_in_before_the_holders_deadline() {
    const ROUNDS: usize = 25;
    let server = RedisServer::start();
    let holder = LockClient::connect(&server.url()).await.unwrap();
    let taker = LockClient::connect(&server.url()).await.unwrap();
    let lease = Duration::from_millis(20);
    let mut early = Vec::new();
    for kind in [
        Kind::Plain,
        Kind::Fair,
        Kind::ReadThenWrite,
        Kind::WriteThenRead,
        Kind::Semaphore,
    ] {
        for round in 0..ROUNDS {
            let held = kind.hold(&holder, lease).await;
            let deadline = held.deadline();
            tokio::time::sleep_until((deadline - Duration::from_millis(3)).into()).await;
            let give_up = deadline + Duration::from_secs(1);
            let taken = loop {
                match kind.try_take(&taker).await {
                    Ok(guard) => break guard,
                    Err(e) if e.is_timeout() => {}
                    Err(e) => panic!("{kind:?}: the taker: {e}"),
                }
                assert!(
                    Instant::now() < give_up,
                    "{kind:?}: never free after the lease"
                );
            };
            let now = Instant::now();
            if now < deadline {
                early.push(format!(
                    "{kind:?} round {round}: {:?} early",
                    deadline - now
                ));
            }
            taken.unlock().await.unwrap();
            drop(held);
        }
    }
    assert!(
        early.is_empty(),
        "another client got in before the holder's deadline:\n{}",
        early.join("\n")
    );
}
