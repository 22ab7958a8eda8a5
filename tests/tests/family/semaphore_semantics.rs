//! The semaphore's accounting and waking on one server: releases count once per grant,
//! a 2-permit waiter wakes after two single releases, a dead holder's grant wakes a waiter
//! at its deadline, capacity rules, deadlines written in server time, and a waiter that
//! joins others tries once before it waits. Waiting clients are `patient_client`s: every
//! wake-up must come from a message or a grant deadline.

use std::time::Duration;

use dlock::{LockClient, LockError, Semaphore};
use dlock_tests::command_log::{log_every_command, logged_commands};
use dlock_tests::{patient_client, RedisServer};
use redis::AsyncCommands;
use tokio::time::Instant;

async fn redis(server: &RedisServer) -> redis::aio::MultiplexedConnection {
    server
        .client()
        .get_multiplexed_async_connection()
        .await
        .unwrap()
}

/// The grant ids in the semaphore's grants hash.
async fn grants(redis: &mut redis::aio::MultiplexedConnection, sem: &Semaphore) -> Vec<String> {
    let fields: Vec<String> = redis.hkeys(sem.key()).await.unwrap();
    fields.into_iter().filter(|f| !f.ends_with(":t")).collect()
}

/// Server time in ms.
async fn server_ms(redis: &mut redis::aio::MultiplexedConnection) -> i64 {
    let (secs, micros): (i64, i64) = redis::cmd("TIME").query_async(redis).await.unwrap();
    secs * 1000 + micros / 1000
}

/// The release script run by hand on `grant` with a memo of its own: what a second
/// release of the same grant by another operation (an abandoned acquisition's clean-up
/// racing the guard's release) does.
async fn release_again(
    redis: &mut redis::aio::MultiplexedConnection,
    sem: &Semaphore,
    grant: &str,
    memo: &str,
) -> i64 {
    let script = redis::Script::new(
        dlock::admin::FunctionLibrary::current()
            .script("sem_release")
            .expect("dlock has the semaphore's release script"),
    );
    let capacity = sem.key().replacen("dlock:sem:", "dlock:semcap:", 1);
    script
        .key(sem.key())
        .key(capacity)
        .key(memo)
        .arg(grant)
        .arg(5000)
        .arg("publish")
        .invoke_async(redis)
        .await
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_second_release_of_a_grant_and_a_release_after_expiry_change_nothing() {
    let server = RedisServer::start();
    let client = LockClient::connect(&server.url()).await.unwrap();
    let mut redis = redis(&server).await;
    let sem = client.semaphore("double", 3);

    let one = sem.acquire(1).await.unwrap();
    let two = sem.acquire(2).await.unwrap();
    assert_eq!(
        (
            one.held_permits().await.unwrap(),
            two.held_permits().await.unwrap()
        ),
        (1, 2)
    );
    assert_eq!(sem.available_permits().await.unwrap(), 0);
    let before: Vec<String> = grants(&mut redis, &sem).await;
    one.unlock().await.unwrap();
    let after = grants(&mut redis, &sem).await;
    let released: Vec<&String> = before.iter().filter(|g| !after.contains(g)).collect();
    assert_eq!(released.len(), 1);
    assert_eq!(sem.available_permits().await.unwrap(), 1);
    // Released again, twice, under memos of their own (named as release memos are: the
    // script refuses any other name): "not held", nothing changes.
    for memo in ["dlock:release:memo:a", "dlock:release:memo:b"] {
        assert_eq!(release_again(&mut redis, &sem, released[0], memo).await, -1);
        assert_eq!(sem.available_permits().await.unwrap(), 1);
    }
    assert_eq!(two.held_permits().await.unwrap(), 2);
    two.unlock().await.unwrap();
    assert_eq!(sem.available_permits().await.unwrap(), 3);

    // A grant that expired is reclaimed; its late release is refused and changes nothing.
    let short = sem
        .acquire_with_lease(2, Duration::from_millis(300))
        .await
        .unwrap();
    assert_eq!(sem.available_permits().await.unwrap(), 1);
    tokio::time::sleep(Duration::from_millis(450)).await;
    assert_eq!(
        sem.available_permits().await.unwrap(),
        3,
        "the expired grant came back"
    );
    assert_eq!(short.held_permits().await.unwrap(), 0);
    let other = sem.acquire(2).await.unwrap();
    assert_eq!(sem.available_permits().await.unwrap(), 1);
    assert!(matches!(
        short.unlock().await,
        Err(LockError::NotHeld { .. })
    ));
    assert_eq!(sem.available_permits().await.unwrap(), 1);
    assert_eq!(other.held_permits().await.unwrap(), 2);
    other.unlock().await.unwrap();
    assert_eq!(sem.available_permits().await.unwrap(), 3);
    assert!(
        !redis.exists::<_, bool>(sem.key()).await.unwrap(),
        "idle: no grants hash left"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_two_permit_waiter_wakes_after_two_single_releases() {
    let server = RedisServer::start();
    let holders = LockClient::connect(&server.url()).await.unwrap();
    let waiting = patient_client(&server.url()).await;
    let sem = holders.semaphore("pair", 2);
    let first = sem.acquire(1).await.unwrap();
    let second = sem.acquire(1).await.unwrap();

    let pair = waiting.semaphore("pair", 2);
    let waiter = tokio::spawn(async move {
        let guard = pair.try_acquire_for(2, Duration::from_secs(20)).await;
        (Instant::now(), guard)
    });
    tokio::time::sleep(Duration::from_millis(300)).await;
    first.unlock().await.unwrap();
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(!waiter.is_finished(), "one permit free is not two");
    let released_at = Instant::now();
    second.unlock().await.unwrap();
    let (acquired_at, guard) = waiter.await.unwrap();
    let guard = guard.expect("the 2-permit waiter got in");
    let latency = acquired_at - released_at;
    println!("2-permit waiter woke {latency:?} after the second release");
    assert!(
        latency < Duration::from_millis(200),
        "woke after {latency:?}"
    );
    assert_eq!(guard.held_permits().await.unwrap(), 2);
    guard.unlock().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiter_wakes_at_the_earliest_grant_deadline_when_the_holder_dies() {
    let server = RedisServer::start();
    let mut redis = redis(&server).await;
    let dying = LockClient::connect(&server.url()).await.unwrap();
    let waiting = patient_client(&server.url()).await;
    let lease = Duration::from_millis(800);
    let sem = dying.semaphore("dead-holder", 1);
    let holder = sem.acquire_with_lease(1, lease).await.unwrap();
    let granted_ms = server_ms(&mut redis).await;
    // The holder "dies": no release is ever sent.
    std::mem::forget(holder);

    let guard = waiting
        .semaphore("dead-holder", 1)
        .try_acquire_for(1, Duration::from_secs(20))
        .await
        .expect("the waiter got the dead holder's permit");
    let waited = server_ms(&mut redis).await - granted_ms;
    println!("the dead holder's permit was taken {waited} ms after its grant (lease {lease:?})");
    assert!(
        waited >= 800 - 20,
        "taken before the lease ran out: {waited} ms"
    );
    assert!(
        waited < 800 + 200,
        "woke {waited} ms after the grant, lease 800 ms"
    );
    guard.unlock().await.unwrap();
}

/// A busy semaphore's error says how many permits were asked of how many, and what that
/// tells of the other owners, not that "another owner still holds it".
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_busy_semaphore_names_the_permits_asked_and_taken() {
    let server = RedisServer::start();
    let client = LockClient::connect(&server.url()).await.unwrap();
    let sem = client.semaphore("pool:db", 3);
    let _two = sem.acquire(2).await.unwrap();
    for (error, waited) in [
        (sem.try_acquire(2).await.unwrap_err(), "0s"),
        (
            sem.try_acquire_for(2, Duration::from_millis(200))
                .await
                .unwrap_err(),
            "200ms",
        ),
    ] {
        match &error {
            LockError::Timeout { name, permits, .. } => {
                assert_eq!(name, "pool:db");
                assert_eq!(
                    *permits,
                    Some(dlock::PermitsAsked {
                        asked: 2,
                        capacity: 3
                    })
                );
            }
            other => panic!("expected a timeout, got {other:?}"),
        }
        assert_eq!(
            error.to_string(),
            format!(
                "semaphore \"pool:db\": 2 of its 3 permits not acquired within {waited}: \
                 other owners held at least 2 of them"
            )
        );
    }
    // The plain lock's message is unchanged.
    let _held = client.lock("plain").lock().await.unwrap();
    let other = LockClient::connect(&server.url()).await.unwrap();
    let busy = other.lock("plain").try_lock().await.unwrap_err();
    assert_eq!(
        busy.to_string(),
        "lock \"plain\" not acquired within 0s: another owner still holds it"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_permit_counts_fail_at_once() {
    let server = RedisServer::start();
    let client = LockClient::connect(&server.url()).await.unwrap();
    let sem = client.semaphore("counts", 3);
    for n in [0, 4, u32::MAX] {
        let started = Instant::now();
        let error = sem.acquire(n).await.unwrap_err();
        assert!(started.elapsed() < Duration::from_secs(1));
        match error {
            LockError::InvalidPermits {
                asked, capacity, ..
            } => {
                assert_eq!((asked, capacity), (n, 3))
            }
            other => panic!("{other}"),
        }
    }
    assert!(sem
        .acquire(4)
        .await
        .unwrap_err()
        .to_string()
        .contains("capacity is 3"));
    let empty = client.semaphore("empty", 0);
    assert!(matches!(
        empty.acquire(1).await,
        Err(LockError::InvalidPermits { .. })
    ));
    assert!(matches!(
        empty.available_permits().await,
        Err(LockError::InvalidPermits { .. })
    ));
    assert!(matches!(
        sem.set_permits(0).await,
        Err(LockError::InvalidPermits { .. })
    ));
    assert!(matches!(
        client.semaphore("", 1).acquire(1).await,
        Err(LockError::InvalidName { .. })
    ));
    assert!(matches!(
        sem.acquire_with_lease(1, Duration::ZERO).await,
        Err(LockError::InvalidDuration { .. })
    ));
    assert_eq!(
        sem.available_permits().await.unwrap(),
        3,
        "nothing was taken"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_stored_capacity_is_checked_and_changes_only_through_set_permits() {
    let server = RedisServer::start();
    let client = patient_client(&server.url()).await;
    let four = client.semaphore("capacity", 4);
    assert_eq!(
        four.total_permits().await.unwrap(),
        4,
        "nothing stored: the handle's"
    );
    four.acquire(1).await.unwrap().unlock().await.unwrap();
    let five = client.semaphore("capacity", 5);
    let error = five.acquire(1).await.unwrap_err();
    assert!(
        matches!(
            error,
            LockError::CapacityMismatch {
                handle: 5,
                stored: 4,
                ..
            }
        ),
        "{error}"
    );
    let message = error.to_string();
    assert!(message.contains('5') && message.contains('4'), "{message}");
    assert_eq!(five.total_permits().await.unwrap(), 4);

    // Grow: a waiter short of permits is woken by the change, not by a timer.
    let held: Vec<_> = futures_join(&four, 4).await;
    let waiter = {
        let four = four.clone();
        tokio::spawn(async move { four.try_acquire_for(1, Duration::from_secs(20)).await })
    };
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(!waiter.is_finished());
    let grown_at = Instant::now();
    four.set_permits(5).await.unwrap();
    let extra = waiter.await.unwrap().expect("the grow let the waiter in");
    assert!(
        grown_at.elapsed() < Duration::from_millis(500),
        "{:?}",
        grown_at.elapsed()
    );
    assert_eq!(four.total_permits().await.unwrap(), 5);
    // The 5-permit handle agrees with Redis now: all 5 are held, so it is refused as busy.
    assert!(five.try_acquire(1).await.unwrap_err().is_timeout());
    assert!(matches!(
        client.semaphore("capacity", 4).acquire(1).await,
        Err(LockError::CapacityMismatch {
            handle: 4,
            stored: 5,
            ..
        })
    ));

    // Shrink below what is held: no grant is revoked, nothing new until held < capacity.
    four.set_permits(2).await.unwrap();
    assert_eq!(four.available_permits().await.unwrap(), 0);
    assert_eq!(extra.held_permits().await.unwrap(), 1);
    let mut held = held;
    held.push(extra);
    assert_eq!(held.len(), 5);
    // Held 5, 4, 3, 2 of 2: refused each time; then 1 of 2.
    for (guard, free) in held.into_iter().zip([0, 0, 0, 1, 2]) {
        assert_eq!(
            guard.held_permits().await.unwrap(),
            1,
            "a live grant was revoked"
        );
        if free < 2 {
            assert!(
                four.try_acquire(1).await.unwrap_err().is_timeout(),
                "granted while held >= capacity"
            );
        }
        guard.unlock().await.unwrap();
        assert_eq!(four.available_permits().await.unwrap(), free);
    }
    let last = four.try_acquire(2).await.unwrap();
    assert_eq!(four.available_permits().await.unwrap(), 0);
    last.unlock().await.unwrap();
}

/// `count` grants of one permit each.
async fn futures_join(sem: &Semaphore, count: usize) -> Vec<dlock::SemaphorePermit> {
    let mut guards = vec![];
    for _ in 0..count {
        guards.push(sem.acquire(1).await.unwrap());
    }
    guards
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_grant_deadline_is_server_time_plus_the_lease_to_the_end_of_its_millisecond() {
    let server = RedisServer::start();
    let client = LockClient::connect(&server.url()).await.unwrap();
    let mut redis = redis(&server).await;
    let sem = client.semaphore("server-time", 2);
    let before = server_ms(&mut redis).await;
    let guard = sem
        .acquire_with_lease(1, Duration::from_secs(10))
        .await
        .unwrap();
    let after = server_ms(&mut redis).await;
    let grant = grants(&mut redis, &sem).await.remove(0);
    let deadline: i64 = redis.hget(sem.key(), format!("{grant}:t")).await.unwrap();
    // The first millisecond at which the grant is void: the one after the lease's last.
    assert!(
        (before + 10_001..=after + 10_001).contains(&deadline),
        "deadline {deadline}, server time {before}..{after}"
    );
    let pttl: i64 = redis.pttl(sem.key()).await.unwrap();
    assert!(
        (9_000..=10_001).contains(&pttl),
        "the hash expires with the grant: {pttl}"
    );
    guard.unlock().await.unwrap();
}

/// A waiter that starts beside waiters of its client finds the semaphore's channel
/// subscribed and confirmed: it takes that subscription before its first try, so it
/// tries once and waits for the release (before, every waiter tried twice).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiter_joining_waiting_ones_tries_once_before_the_release() {
    const LATER: usize = 3;
    let server = RedisServer::start();
    let mut admin = redis(&server).await;
    let holder = LockClient::connect(&server.url()).await.unwrap();
    let waiting = patient_client(&server.url()).await;
    let held = holder.semaphore("joiners", 1).acquire(1).await.unwrap();
    let wait = |client: &LockClient| {
        let sem = client.semaphore("joiners", 1);
        tokio::spawn(async move {
            sem.acquire(1).await.unwrap().unlock().await.unwrap();
        })
    };
    let mut tasks = vec![wait(&waiting)];
    tokio::time::sleep(Duration::from_millis(300)).await;
    log_every_command(&mut admin).await;
    for _ in 0..LATER {
        tasks.push(wait(&waiting));
    }
    tokio::time::sleep(Duration::from_millis(300)).await;
    // Acquire calls: the grants hash and the capacity as keys, no release memo.
    let tries = logged_commands(&mut admin)
        .await
        .iter()
        .filter(|args| args[0].eq_ignore_ascii_case("evalsha"))
        .filter(|args| args.iter().any(|a| a.starts_with("dlock:semcap:")))
        .filter(|args| !args.iter().any(|a| a.starts_with("dlock:release:")))
        .count();
    assert_eq!(
        tries, LATER,
        "tries of the waiters that joined, before the release"
    );
    held.unlock().await.unwrap();
    for task in tasks {
        tokio::time::timeout(Duration::from_secs(3), task)
            .await
            .expect("every waiter got its permit without a recheck")
            .unwrap();
    }
}
