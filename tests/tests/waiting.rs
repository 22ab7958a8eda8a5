//! Waiting by pub/sub: prompt hand-off, no busy polling, bounded waits, force unlock.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use dlock::LockClient;
use dlock_tests::commandstats::command_calls;
use dlock_tests::RedisServer;
use redis::Commands;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiter_acquires_within_150ms_of_the_release_not_after_the_ttl() {
    let server = RedisServer::start();
    let holder = LockClient::connect(&server.url()).await.unwrap();
    let waiter = LockClient::connect(&server.url()).await.unwrap();
    assert_eq!(holder.watchdog_timeout(), Duration::from_secs(30));

    for round in 0..5 {
        let guard = holder.lock("handoff").lock().await.unwrap();
        let lock = waiter.lock("handoff");
        let waiting = tokio::spawn(async move {
            let guard = lock.lock().await.unwrap();
            let acquired_at = Instant::now();
            guard.unlock().await.unwrap();
            acquired_at
        });
        tokio::time::sleep(Duration::from_millis(300)).await;
        let released_at = Instant::now();
        guard.unlock().await.unwrap();
        let acquired_at = waiting.await.unwrap();
        let handoff = acquired_at.saturating_duration_since(released_at);
        // Two clients, two connections each: slack for a loaded machine, still far below
        // the 1 s recheck a missed message costs.
        assert!(
            handoff <= Duration::from_millis(150),
            "round {round}: hand-off took {handoff:?}"
        );
    }
}

#[tokio::test]
async fn a_waiter_sends_only_a_handful_of_commands_while_it_waits() {
    let server = RedisServer::start();
    let holder = LockClient::connect(&server.url()).await.unwrap();
    let waiter = LockClient::connect(&server.url()).await.unwrap();
    let guard = holder.lock("quiet").lock().await.unwrap();

    let _: () = redis::cmd("CONFIG")
        .arg("RESETSTAT")
        .query(&mut server.connection())
        .unwrap();
    let started = Instant::now();
    let err = waiter
        .lock("quiet")
        .try_lock_for(Duration::from_secs(2))
        .await
        .unwrap_err();
    assert!(err.is_timeout(), "{err}");
    assert!(started.elapsed() >= Duration::from_secs(2));

    let calls = command_calls(&mut server.connection());
    let scripts =
        calls.get("evalsha").copied().unwrap_or(0) + calls.get("eval").copied().unwrap_or(0);
    // Initial try, one after the subscription is confirmed, one per second of rechecks.
    assert!(
        (2..=5).contains(&scripts),
        "{scripts} script calls in 2 s: {calls:?}"
    );
    // commandstats also counts the commands scripts run; leave those out.
    const IN_SCRIPTS: [&str; 13] = [
        "exists", "hexists", "pttl", "hset", "hincrby", "pexpire", "hget", "hmget", "incr", "time",
        "zadd", "zrem", "zpopmin",
    ];
    // Nor the set-up of the subscriber connection, which the wait opens (Redis 7.2+ and
    // Valkey count the `CLIENT SETINFO` redis-rs sends; 7.0 refuses it uncounted).
    const SET_UP: [&str; 3] = ["client|setinfo", "client|setname", "hello"];
    // The subscriber's health check: a `PING` per second without a message.
    let pings = calls.get("ping").copied().unwrap_or(0);
    assert!(pings <= 2, "{pings} PINGs in 2 s: {calls:?}");
    let sent: u64 = calls
        .iter()
        .filter(|(name, _)| {
            !IN_SCRIPTS.contains(&name.as_str())
                && !SET_UP.contains(&name.as_str())
                && name.as_str() != "ping"
        })
        .map(|(_, calls)| calls)
        .sum();
    assert!(sent <= 8, "{sent} commands sent in 2 s: {calls:?}");
    guard.unlock().await.unwrap();
}

#[tokio::test]
async fn try_lock_for_gives_up_after_about_its_wait() {
    let server = RedisServer::start();
    let client = LockClient::connect(&server.url()).await.unwrap();
    let guard = client.lock("busy").lock().await.unwrap();

    let started = Instant::now();
    let err = client
        .lock("busy")
        .try_lock_for(Duration::from_millis(300))
        .await
        .unwrap_err();
    let waited = started.elapsed();
    assert!(err.is_timeout(), "{err}");
    assert_eq!(
        err.to_string(),
        "lock \"busy\" not acquired within 300ms: another owner still holds it"
    );
    assert!(
        (Duration::from_millis(300)..=Duration::from_millis(600)).contains(&waited),
        "waited {waited:?}"
    );
    guard.unlock().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn force_unlock_wakes_a_waiter_and_the_old_holder_cannot_release_the_new_lock() {
    let server = RedisServer::start();
    let holder = LockClient::connect(&server.url()).await.unwrap();
    let waiter = LockClient::connect(&server.url()).await.unwrap();
    let admin = LockClient::connect(&server.url()).await.unwrap();

    let old = holder.lock("forced").lock().await.unwrap();
    let lock = waiter.lock("forced");
    let waiting = tokio::spawn(async move {
        let guard = lock.lock().await.unwrap();
        (guard, Instant::now())
    });
    tokio::time::sleep(Duration::from_millis(200)).await;
    let forced_at = Instant::now();
    assert!(admin.lock("forced").force_unlock().await.unwrap());
    let (new, acquired_at) = waiting.await.unwrap();
    assert!(
        acquired_at - forced_at <= Duration::from_millis(100),
        "woken after {:?}",
        acquired_at - forced_at
    );

    // The old holder is a non-owner now.
    assert!(old.unlock().await.unwrap_err().is_not_held());
    let mut fields: HashMap<String, u32> = server.connection().hgetall("forced").unwrap();
    // Hold counts only, not the holder's fencing token (`<owner>:f`).
    fields.retain(|field, _| !field.ends_with(":f"));
    assert_eq!(fields.len(), 1);
    assert!(
        fields
            .keys()
            .all(|f| f.starts_with(&waiter.id().to_string())),
        "{fields:?}"
    );
    new.unlock().await.unwrap();
    assert!(
        !admin.lock("forced").force_unlock().await.unwrap(),
        "nothing left to force"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn local_waiters_hand_the_lock_on_one_by_one_without_waiting_for_rechecks() {
    let server = RedisServer::start();
    let client = LockClient::connect(&server.url()).await.unwrap();
    let first = client.lock("queue").lock().await.unwrap();
    let mut waiters = Vec::new();
    for _ in 0..5 {
        let lock = client.lock("queue");
        waiters.push(tokio::spawn(async move {
            let guard = lock.lock().await.unwrap();
            tokio::time::sleep(Duration::from_millis(20)).await;
            guard.unlock().await.unwrap();
        }));
    }
    tokio::time::sleep(Duration::from_millis(100)).await;
    let started = Instant::now();
    first.unlock().await.unwrap();
    for waiter in waiters {
        waiter.await.unwrap();
    }
    // Five 20 ms critical sections; a missed wake-up would cost a 1 s recheck.
    let elapsed = started.elapsed();
    assert!(
        elapsed < Duration::from_millis(600),
        "hand-offs took {elapsed:?}"
    );
}
