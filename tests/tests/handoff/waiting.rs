//! Waiting by pub/sub: prompt hand-off, no busy polling, bounded waits, force unlock.

use std::time::{Duration, Instant};

use dlock::LockClient;
use dlock_tests::commandstats::{command_calls, wait_for_calls};
use dlock_tests::patient_client;
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
    // Initial try and one per second of rechecks (once its subscription is confirmed, the
    // waiter checks its registration with a ZSCORE instead of trying).
    assert!(
        (2..=4).contains(&scripts),
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
    let fields = dlock_tests::keys::holders(&mut server.connection(), "forced");
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

/// Waits until the server ran `checks` registration checks (`ZSCORE`s): a waiter runs one
/// once its first subscription to its wake channel is confirmed. (A release that passes a
/// lock on runs one too, for the runner-up: count before any.)
async fn checks_ran(server: &RedisServer, checks: u64) {
    let what = format!("{checks} registration checks");
    wait_for_calls(&mut server.connection(), &what, |calls| {
        calls.get("zscore").copied().unwrap_or(0) == checks
    })
    .await;
}

/// A waiter whose client does not listen on the lock's wake channel yet makes one busy try,
/// subscribes, and once Redis confirmed the subscription checks that it is still
/// registered (one `ZSCORE`) instead of trying again: a cold wait costs the try before the
/// release and the one it causes. Fails when the waiter tries again after the
/// confirmation (3 tries).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiter_on_a_cold_channel_tries_once_before_the_release() {
    let server = RedisServer::start();
    let holder = LockClient::connect(&server.url()).await.unwrap();
    let waiter = patient_client(&server.url()).await;
    let guard = holder.lock("cold").lock().await.unwrap();

    let lock = waiter.lock("cold");
    let waiting = tokio::spawn(async move { lock.try_lock_for(Duration::from_secs(30)).await });
    checks_ran(&server, 1).await;
    // Nothing else runs until a message or the recheck.
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert_eq!(
        waiter.stats().acquire_attempts,
        1,
        "tries before the release"
    );

    let released = Instant::now();
    guard.unlock().await.unwrap();
    let acquired = tokio::time::timeout(Duration::from_secs(3), waiting)
        .await
        .expect("the release woke the waiter")
        .unwrap()
        .unwrap();
    eprintln!("acquired {:?} after the release", released.elapsed());
    assert_eq!(waiter.stats().acquire_attempts, 2, "tries in all");
    acquired.unlock().await.unwrap();
}

/// The same for a same-slot multi-lock: its client listens on none of its locks' wake
/// channels yet; its busy try registers it with the lock that blocks it, and once its
/// subscriptions are confirmed it checks that registration (one `ZSCORE`) instead of
/// trying again. Fails when it tries again after the confirmation (3 tries).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_multi_lock_waiter_on_cold_channels_tries_once_before_the_release() {
    let server = RedisServer::start();
    let holder = LockClient::connect(&server.url()).await.unwrap();
    let waiter = patient_client(&server.url()).await;
    let guard = holder.lock("{cold-set}:b").lock().await.unwrap();

    let multi = waiter.multi_lock(["{cold-set}:a", "{cold-set}:b"]).unwrap();
    let waiting = tokio::spawn(async move { multi.try_lock_for(Duration::from_secs(30)).await });
    checks_ran(&server, 1).await;
    // Nothing else runs until a message or the recheck.
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert_eq!(
        waiter.stats().acquire_attempts,
        1,
        "tries before the release"
    );

    let released = Instant::now();
    guard.unlock().await.unwrap();
    let acquired = tokio::time::timeout(Duration::from_secs(3), waiting)
        .await
        .expect("the release woke the waiter")
        .unwrap()
        .unwrap();
    eprintln!("acquired {:?} after the release", released.elapsed());
    assert_eq!(waiter.stats().acquire_attempts, 2, "tries in all");
    acquired.unlock().await.unwrap();
}

/// Starts a waiter for `name` on `client`, which connects through `proxy`, with the
/// subscriber connection its first wait opens held back by the proxy; returns once that
/// connection is open, so the waiter's busy try has registered it and it cannot hear a
/// release until [`TcpProxy::release_held`](dlock_tests::TcpProxy::release_held).
async fn deaf_waiter(
    proxy: &dlock_tests::TcpProxy,
    client: &LockClient,
    name: &str,
) -> tokio::task::JoinHandle<dlock::Result<dlock::LockGuard>> {
    let lock = client.lock(name);
    deaf(proxy, || {
        tokio::spawn(async move { lock.try_lock_for(Duration::from_secs(30)).await })
    })
    .await
}

/// Lets the client of a waiter started by [`deaf`] listen, and returns the guard `waiting`
/// gets within `within`; `noticed` says what it should have noticed by then.
async fn served_once_listening<G>(
    proxy: &dlock_tests::TcpProxy,
    waiting: tokio::task::JoinHandle<dlock::Result<G>>,
    within: Duration,
    noticed: &str,
) -> G {
    proxy.release_held();
    tokio::time::timeout(within, waiting)
        .await
        .expect(noticed)
        .unwrap()
        .unwrap()
}

/// Starts the waiter `start` spawns, as [`deaf_waiter`] does, and returns its task once
/// its subscriber connection is open and held back.
async fn deaf<T>(
    proxy: &dlock_tests::TcpProxy,
    start: impl FnOnce() -> tokio::task::JoinHandle<T>,
) -> tokio::task::JoinHandle<T> {
    let before = proxy.accepted();
    proxy.hold_new_connections();
    let waiting = start();
    let started = Instant::now();
    while proxy.accepted() == before {
        assert!(
            started.elapsed() < Duration::from_secs(5),
            "the waiter never opened its subscriber connection"
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    waiting
}

/// The release comes while the waiter is registered but its client cannot listen yet (its
/// subscriber connection is held back by a proxy): the release passes the lock to it, nobody
/// receives the message, and the release passes it over (the lock is left free). Once its
/// subscription is confirmed, the waiter's check finds it no longer registered, and it tries
/// at once. Fails when the check is skipped, or answers "still registered": the waiter then
/// sleeps until its 30 s recheck while the lock is free.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_release_before_the_waiter_listens_is_noticed_when_it_does() {
    let server = RedisServer::start();
    let proxy = dlock_tests::TcpProxy::start(server.addr());
    let holder = LockClient::connect(&server.url()).await.unwrap();
    let waiter = patient_client(&proxy.url()).await;
    let guard = holder.lock("{deaf}").lock().await.unwrap();

    let waiting = deaf_waiter(&proxy, &waiter, "{deaf}").await;
    assert_eq!(waiter.stats().acquire_attempts, 1);
    let registered: usize = server
        .connection()
        .zcard("dlock:unlock:{deaf}:{deaf}")
        .unwrap();
    assert_eq!(registered, 1, "the busy try registered the waiter");

    guard.unlock().await.unwrap();
    let registered: usize = server
        .connection()
        .zcard("dlock:unlock:{deaf}:{deaf}")
        .unwrap();
    assert_eq!(
        registered, 0,
        "the release passed over the waiter nobody heard"
    );
    let exists: bool = server.connection().exists("{deaf}").unwrap();
    assert!(!exists, "the lock is free");

    tokio::time::sleep(Duration::from_millis(100)).await;
    let listening = Instant::now();
    let acquired = served_once_listening(
        &proxy,
        waiting,
        Duration::from_secs(3),
        "the waiter noticed the release once it listened",
    )
    .await;
    eprintln!(
        "acquired {:?} after its client could listen",
        listening.elapsed()
    );
    acquired.unlock().await.unwrap();
}

/// As the test above, for a same-slot multi-lock whose blocking lock is released while its
/// client cannot listen yet: the release passes that lock over, and the multi-lock's check
/// of its registration with it, once its subscriptions are confirmed, finds it gone and
/// tries at once. Fails when the check answers "still registered": the waiter then sleeps
/// until its 30 s recheck while both locks are free.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_release_before_a_multi_lock_waiter_listens_is_noticed_when_it_does() {
    let server = RedisServer::start();
    let proxy = dlock_tests::TcpProxy::start(server.addr());
    let holder = LockClient::connect(&server.url()).await.unwrap();
    let waiter = patient_client(&proxy.url()).await;
    let guard = holder.lock("{deaf-set}:b").lock().await.unwrap();

    let multi = waiter.multi_lock(["{deaf-set}:a", "{deaf-set}:b"]).unwrap();
    let waiting = deaf(&proxy, || {
        tokio::spawn(async move { multi.try_lock_for(Duration::from_secs(30)).await })
    })
    .await;
    assert_eq!(waiter.stats().acquire_attempts, 1);
    let registry = "dlock:unlock:{deaf-set}:{deaf-set}:b";
    let registered: usize = server.connection().zcard(registry).unwrap();
    assert_eq!(
        registered, 1,
        "the busy try registered the waiter with the blocker"
    );

    guard.unlock().await.unwrap();
    let registered: usize = server.connection().zcard(registry).unwrap();
    assert_eq!(
        registered, 0,
        "the release passed over the waiter nobody heard"
    );

    tokio::time::sleep(Duration::from_millis(100)).await;
    let listening = Instant::now();
    let acquired = served_once_listening(
        &proxy,
        waiting,
        Duration::from_secs(3),
        "the waiter noticed the release once it listened",
    )
    .await;
    eprintln!(
        "acquired {:?} after its client could listen",
        listening.elapsed()
    );
    acquired.unlock().await.unwrap();
}

/// A fair waiter whose client cannot listen yet (its subscriber connection held back by a
/// proxy) is second in the queue, told it may sleep as long as the holder's 30 s lease.
/// The holder releases, the head takes the lock with a 500 ms lease and dies holding it
/// (its guard is leaked: no release comes). That new hold ends before the sleep the deaf
/// waiter was told, so it was woken for it, but could not hear it. Once it listens, its
/// check must bound its sleep by the new hold's expiry: it has the lock soon after, not at
/// the end of its 30 s nap. Fails when the check only asks whether the lock is held.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fair_waiter_that_could_not_hear_a_shorter_hold_wakes_at_its_expiry() {
    let server = RedisServer::start();
    let proxy = dlock_tests::TcpProxy::start(server.addr());
    let holder = LockClient::connect(&server.url()).await.unwrap();
    let (heads, deaf_client) = (
        patient_client(&server.url()).await,
        patient_client(&proxy.url()).await,
    );
    let long_entries = |client: &LockClient| {
        client
            .fair_lock("{short}")
            .with_entry_timeout(Duration::from_secs(30))
    };
    let guard = long_entries(&holder)
        .lock_with_lease(Duration::from_secs(30))
        .await
        .unwrap();
    let until_queued = |n: usize| {
        let lock = long_entries(&holder);
        async move {
            let started = Instant::now();
            while lock.queue_len().await.unwrap() < n {
                assert!(
                    started.elapsed() < Duration::from_secs(5),
                    "never {n} queued"
                );
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
        }
    };
    let head_lock = long_entries(&heads);
    let head =
        tokio::spawn(async move { head_lock.lock_with_lease(Duration::from_millis(500)).await });
    until_queued(1).await;
    let deaf_lock = long_entries(&deaf_client);
    let waiting = deaf(&proxy, || {
        tokio::spawn(async move { deaf_lock.try_lock_for(Duration::from_secs(60)).await })
    })
    .await;
    until_queued(2).await;

    guard.unlock().await.unwrap();
    let head_guard = tokio::time::timeout(Duration::from_secs(3), head)
        .await
        .expect("the head was woken")
        .unwrap()
        .unwrap();
    let taken = Instant::now();
    // The head dies holding the lock: nothing releases it before its lease runs out.
    std::mem::forget(head_guard);

    tokio::time::sleep(Duration::from_millis(100)).await;
    let acquired = served_once_listening(
        &proxy,
        waiting,
        Duration::from_secs(3),
        "the deaf waiter woke when the short hold ran out, not at its 30 s nap",
    )
    .await;
    let served = taken.elapsed();
    eprintln!("served {served:?} after the 500 ms hold was taken");
    assert!(
        served >= Duration::from_millis(450),
        "served {served:?} after a 500 ms hold was taken: before it ran out"
    );
    acquired.unlock().await.unwrap();
}

/// As above, but the waiter that cannot listen yet is the runner-up: the release passes
/// the lock to an older waiter of another client and tells the deaf one when that
/// grant lapses; nobody receives it, so the deaf waiter leaves the registry. Once it
/// listens, its check sends it to try (busy: the older waiter holds the lock now), which
/// registers it again, so the older waiter's release passes the lock to it: given to it,
/// or (when too little of the grant is left counted from its first try, long before that
/// registration) with one more try. Fails when the check answers "registered": the deaf
/// waiter is not in the registry, no release tells it anything, and it sleeps until its
/// 30 s recheck.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_runner_up_told_before_it_listens_is_served_after_the_next_holder() {
    let server = RedisServer::start();
    let proxy = dlock_tests::TcpProxy::start(server.addr());
    let holder = LockClient::connect(&server.url()).await.unwrap();
    let (older, deaf) = (
        patient_client(&server.url()).await,
        patient_client(&proxy.url()).await,
    );
    let registry = "dlock:unlock:{runner}:{runner}";
    let guard = holder.lock("{runner}").lock().await.unwrap();

    let lock = older.lock("{runner}");
    let older_waiting =
        tokio::spawn(async move { lock.try_lock_for(Duration::from_secs(30)).await });
    checks_ran(&server, 1).await;

    // The deaf waiter registers behind it.
    let deaf_waiting = deaf_waiter(&proxy, &deaf, "{runner}").await;
    let registered: usize = server.connection().zcard(registry).unwrap();
    assert_eq!(registered, 2, "both waiters registered");

    guard.unlock().await.unwrap();
    let older_guard = tokio::time::timeout(Duration::from_secs(3), older_waiting)
        .await
        .expect("the older waiter was passed the lock")
        .unwrap()
        .unwrap();
    let registered: usize = server.connection().zcard(registry).unwrap();
    assert_eq!(registered, 0, "the runner-up nobody heard was passed over");

    proxy.release_held();
    let started = Instant::now();
    while deaf.stats().acquire_attempts < 2 {
        assert!(
            started.elapsed() < Duration::from_secs(5),
            "the deaf waiter did not try again once it listened"
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let released = Instant::now();
    older_guard.unlock().await.unwrap();
    let acquired = tokio::time::timeout(Duration::from_secs(3), deaf_waiting)
        .await
        .expect("the older waiter's release passed the lock to the deaf one")
        .unwrap()
        .unwrap();
    eprintln!("acquired {:?} after the release", released.elapsed());
    let tries = deaf.stats().acquire_attempts;
    assert!(
        (2..=3).contains(&tries),
        "{tries} tries: first, after listening, and one for the lock passed to it at most"
    );
    acquired.unlock().await.unwrap();
}

/// As above, with the message a waiter cannot hear being `wake`: a release gives the lock to
/// the next task of its own client with a lease (1 s) shorter than the sleep the deaf
/// waiter was promised (the old hold's 10 s), and tells the waiters promised a longer
/// sleep to try again; nobody receives it, so the deaf waiter leaves the registry. Once it
/// listens, its check sends it to try, which promises it the new hold's remaining second,
/// and it takes the lock when that lease runs out (the new holder neither releases nor
/// renews). Fails when an unheard `wake` leaves the waiter registered, or the check
/// answers "registered": the waiter then sleeps until the 10 s it was first promised.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiter_told_to_wake_before_it_listens_tries_by_the_new_expiry() {
    let server = RedisServer::start();
    let proxy = dlock_tests::TcpProxy::start(server.addr());
    let holder = patient_client(&server.url()).await;
    let deaf = patient_client(&proxy.url()).await;
    let registry = "dlock:unlock:{woken}:{woken}";
    let lock = holder.lock("{woken}");
    let long = lock.lock_with_lease(Duration::from_secs(10)).await.unwrap();
    // The holder's next task waits in its client's line, not in Redis.
    let next = tokio::spawn({
        let lock = lock.clone();
        async move { lock.lock_with_lease(Duration::from_secs(1)).await }
    });
    tokio::time::sleep(Duration::from_millis(50)).await;

    let deaf_waiting = deaf_waiter(&proxy, &deaf, "{woken}").await;
    let registered: usize = server.connection().zcard(registry).unwrap();
    assert_eq!(registered, 1, "the deaf waiter registered");

    let released = Instant::now();
    long.unlock().await.unwrap();
    let short = tokio::time::timeout(Duration::from_secs(3), next)
        .await
        .expect("the release gave the lock to the holder's next task")
        .unwrap()
        .unwrap();
    let registered: usize = server.connection().zcard(registry).unwrap();
    assert_eq!(
        registered, 0,
        "the wake-up nobody heard took the deaf waiter out of the registry"
    );

    let acquired = served_once_listening(
        &proxy,
        deaf_waiting,
        Duration::from_secs(4),
        "the deaf waiter took the lock once the 1 s lease ran out, not after 10 s",
    )
    .await;
    let waited = released.elapsed();
    eprintln!("acquired {waited:?} after the release");
    assert!(
        waited >= Duration::from_millis(900),
        "the deaf waiter took the lock after {waited:?}, inside the new hold's lease"
    );
    acquired.unlock().await.unwrap();
    assert!(
        matches!(short.unlock().await, Err(dlock::LockError::NotHeld { .. })),
        "the short hold ran out"
    );
}

/// A waiter cancelled while its registration check is at Redis (the check's reply is
/// delayed by a proxy) leaves the registry like a waiter cancelled at any other point, so
/// the next release goes to a waiter that still waits. Fails when a cancelled check leaves
/// the entry behind.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiter_cancelled_during_its_registration_check_leaves_the_registry() {
    let server = RedisServer::start();
    let proxy = dlock_tests::TcpProxy::start(server.addr());
    let holder = LockClient::connect(&server.url()).await.unwrap();
    let cancelled_client = patient_client(&proxy.url()).await;
    let registry = "dlock:unlock:{checked}:{checked}";
    let guard = holder.lock("{checked}").lock().await.unwrap();

    // Every reply to the cancelled waiter's client comes 300 ms late: its busy try, its
    // subscription's confirmation, then its check.
    proxy.delay_replies(Duration::from_millis(300));
    let lock = cancelled_client.lock("{checked}");
    let cancelled = tokio::spawn(async move { lock.try_lock_for(Duration::from_secs(30)).await });
    checks_ran(&server, 1).await;
    cancelled.abort();
    assert!(cancelled.await.unwrap_err().is_cancelled());
    proxy.delay_replies(Duration::ZERO);
    let started = Instant::now();
    let mut admin = server.connection();
    while admin.zcard::<_, usize>(registry).unwrap() != 0 {
        assert!(
            started.elapsed() < Duration::from_secs(5),
            "the cancelled waiter stayed registered"
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }

    // A waiter that still waits gets the lock at the release, not after a grant's lapse.
    let waiter = patient_client(&server.url()).await;
    let lock = waiter.lock("{checked}");
    let waiting = tokio::spawn(async move { lock.try_lock_for(Duration::from_secs(30)).await });
    checks_ran(&server, 2).await;
    let released = Instant::now();
    guard.unlock().await.unwrap();
    let acquired = tokio::time::timeout(Duration::from_secs(3), waiting)
        .await
        .expect("the release woke the waiter that still waits")
        .unwrap()
        .unwrap();
    let handed = released.elapsed();
    assert!(
        handed < Duration::from_secs(1),
        "the lock reached the waiter {handed:?} after the release, not by its message"
    );
    acquired.unlock().await.unwrap();
}

/// A waiter gets its lock within moments of the release even while thousands of tasks of
/// its client wait, which spaces their rechecks out to seconds: each waiter keeps its
/// place in its lock's registry for as long as it waits (its tries make the registry live
/// three planned rechecks and a second, 1.3 s with this client's 100 ms recheck and no
/// spacing). Releases some of 3,000 held locks, and the locks five multi-lock waiters
/// wait for, after the waiters slept for four seconds, and expects each of their waiters
/// within 500 ms. Fails when waiters recheck less often than their registration lives
/// (spaced rechecks with registrations that lived 1.3 s): the release then finds nobody
/// registered, and the waiter learns of it seconds later at its next recheck.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_release_wakes_its_waiter_at_once_among_thousands_of_waiting_tasks() {
    const WAITERS: usize = 3_000;
    const RELEASED: usize = 10;
    const MULTI: usize = 5;
    let server = RedisServer::start();
    let (holder, mut held) =
        dlock_tests::hold_distinct_locks(&server.url(), "crowd", WAITERS).await;
    let mut multi_held = Vec::with_capacity(MULTI);
    for i in 0..MULTI {
        let name = format!("{{crowd-multi:{i}}}:b");
        multi_held.push(holder.lock(&name).lock().await.unwrap());
    }
    let client = LockClient::builder()
        .max_wait_recheck(Duration::from_millis(100))
        .connect(&server.url())
        .await
        .unwrap();
    let mut waiters: Vec<_> = (0..WAITERS)
        .map(|i| {
            let lock = client.lock(&format!("crowd:{i}"));
            tokio::spawn(async move {
                let guard = lock.try_lock_for(Duration::from_secs(60)).await?;
                guard.unlock().await
            })
        })
        .collect();
    let multi_waiters: Vec<_> = (0..MULTI)
        .map(|i| {
            let names = [
                format!("{{crowd-multi:{i}}}:a"),
                format!("{{crowd-multi:{i}}}:b"),
            ];
            let multi = client.multi_lock(names).unwrap();
            tokio::spawn(async move {
                let guard = multi.try_lock_for(Duration::from_secs(60)).await?;
                guard.unlock().await
            })
        })
        .collect();
    until_every_waiter_settled(&server, &client, (WAITERS + MULTI) as u64, WAITERS).await;
    tokio::time::sleep(Duration::from_secs(4)).await;

    let released: Vec<_> = held.drain(..RELEASED).chain(multi_held).collect();
    let waiting: Vec<_> = waiters.drain(..RELEASED).chain(multi_waiters).collect();
    let start = Instant::now();
    for guard in released {
        guard.unlock().await.unwrap();
    }
    for waiter in waiting {
        tokio::time::timeout(Duration::from_millis(500), waiter)
            .await
            .expect("the waiter had its lock within 500 ms of the release")
            .unwrap()
            .unwrap();
    }
    eprintln!(
        "{} waiters served {:?} after the releases",
        RELEASED + MULTI,
        start.elapsed()
    );
    for waiter in waiters {
        waiter.abort();
    }
    drop(held);
}

/// A recheck is a fallback for a lost message, and a client with many waiting tasks
/// spaces its waiters' rechecks out, to about a thousand a second between them: 2,000
/// waiters with a 100 ms recheck interval would otherwise try 20,000 times a second
/// while nothing changes (with 100,000 waiters and the default 1 s, every try a server
/// can run). Fails when each waiter rechecks at its own interval.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn many_waiting_tasks_space_their_rechecks_out() {
    const WAITERS: usize = 2_000;
    let server = RedisServer::start();
    let (_holder, held) = dlock_tests::hold_distinct_locks(&server.url(), "spaced", WAITERS).await;
    let client = LockClient::builder()
        .max_wait_recheck(Duration::from_millis(100))
        .connect(&server.url())
        .await
        .unwrap();
    let waiters: Vec<_> = (0..WAITERS)
        .map(|i| {
            let lock = client.lock(&format!("spaced:{i}"));
            tokio::spawn(async move { lock.try_lock_for(Duration::from_secs(60)).await })
        })
        .collect();
    until_every_waiter_settled(&server, &client, WAITERS as u64, WAITERS).await;
    // The first waiters to sleep counted few others: their first rechecks come early.
    tokio::time::sleep(Duration::from_secs(1)).await;

    let before = client.stats().acquire_attempts;
    tokio::time::sleep(Duration::from_secs(2)).await;
    let tries = client.stats().acquire_attempts - before;
    eprintln!("{tries} rechecks in 2 s by {WAITERS} waiters");
    assert!(
        tries <= 8_000,
        "{WAITERS} waiters tried {tries} times in 2 s while nothing changed (each at its own \
         100 ms: 40,000; spaced: about 2,000)"
    );
    assert!(tries > 0, "the rechecks still come");
    stop_waiting(waiters);
    drop(held);
}

/// The first wait is spaced out like every later one once the client has many waiting
/// tasks: 2,000 waiters that join 2,000 others at once must not all try again one
/// interval (1 s) after their first try. In the second after they have all checked in,
/// the client's rechecks stay at its spaced rate (about a thousand a second); with the
/// first wait unspaced, the newcomers' rechecks (one each, 2,000) come on top.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn waiters_that_join_a_crowd_space_their_first_recheck_too() {
    const CROWD: usize = 2_000;
    const NEWCOMERS: usize = 2_000;
    let server = RedisServer::start();
    let (_holder, held) =
        dlock_tests::hold_distinct_locks(&server.url(), "joining", CROWD + NEWCOMERS).await;
    let client = LockClient::connect(&server.url()).await.unwrap();
    let wait_for = |range: std::ops::Range<usize>| -> Vec<_> {
        range
            .map(|i| {
                let lock = client.lock(&format!("joining:{i}"));
                tokio::spawn(async move { lock.try_lock_for(Duration::from_secs(60)).await })
            })
            .collect()
    };
    let mut waiters = wait_for(0..CROWD);
    until_every_waiter_checked_in(&server, CROWD).await;
    // Past the crowd's first rechecks, the earliest of which are not spaced (few tasks
    // waited when they started).
    tokio::time::sleep(Duration::from_millis(1500)).await;

    waiters.extend(wait_for(CROWD..CROWD + NEWCOMERS));
    until_every_waiter_checked_in(&server, CROWD + NEWCOMERS).await;
    let before = client.stats().acquire_attempts;
    tokio::time::sleep(Duration::from_secs(1)).await;
    let tries = client.stats().acquire_attempts - before;
    eprintln!("{tries} rechecks in the second after {NEWCOMERS} waiters joined {CROWD}");
    assert!(
        tries <= 2_000,
        "{tries} rechecks in 1 s: the newcomers' first rechecks were not spaced out (spaced: \
         about 1,000; unspaced, their 2,000 come on top)"
    );
    assert!(tries > 0, "the rechecks still come");
    stop_waiting(waiters);
    drop(held);
}

/// Two clients with different recheck intervals wait for one lock: the one that rechecks
/// every 100 ms registers for 1.3 s at each try, the one that rechecks every 20 s for
/// 61 s. The registry must live as long as the longer of them needs: when the first
/// client's tries set it to their own 1.3 s, the registry was gone a moment after that
/// client stopped waiting, and the release found nobody to tell while the other client's
/// waiter slept through it to its next recheck. Many waiting tasks make a client space
/// its rechecks out the same way, so this is also what keeps them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_that_rechecks_often_leaves_the_registration_of_one_that_rechecks_rarely() {
    let server = RedisServer::start();
    let holder = LockClient::connect(&server.url()).await.unwrap();
    let held = holder
        .lock("mixed")
        .lock_with_lease(Duration::from_secs(60))
        .await
        .unwrap();
    let rare = LockClient::builder()
        .max_wait_recheck(Duration::from_secs(20))
        .connect(&server.url())
        .await
        .unwrap();
    let frequent = LockClient::builder()
        .max_wait_recheck(Duration::from_millis(100))
        .connect(&server.url())
        .await
        .unwrap();
    let lock = rare.lock("mixed");
    let waiting = tokio::spawn(async move { lock.lock().await });
    tokio::time::sleep(Duration::from_millis(300)).await;
    let stopped = frequent
        .lock("mixed")
        .try_lock_for(Duration::from_millis(600))
        .await
        .unwrap_err();
    assert!(stopped.is_timeout(), "{stopped}");
    // Well past the 1.3 s the frequent client's last registration asked for.
    tokio::time::sleep(Duration::from_secs(2)).await;

    let released = Instant::now();
    held.unlock().await.unwrap();
    let guard = tokio::time::timeout(Duration::from_millis(500), waiting)
        .await
        .expect("the rarely rechecking waiter had the lock within 500 ms of the release")
        .unwrap()
        .unwrap();
    eprintln!("served {:?} after the release", released.elapsed());
    guard.unlock().await.unwrap();
}

/// Checks that none of `waiters` took its (held) lock, and stops them.
fn stop_waiting(waiters: Vec<tokio::task::JoinHandle<dlock::Result<dlock::LockGuard>>>) {
    for waiter in &waiters {
        assert!(!waiter.is_finished(), "no waiter took a held lock");
    }
    for waiter in waiters {
        waiter.abort();
    }
}

/// Waits until `count` waiters checked that they are registered (one `ZSCORE` each once
/// subscribed, see `Lock::still_registered`): they all sleep then. For waiters whose
/// first nap outlasts their subscriptions' confirmation (a recheck of a second or more);
/// with a short one, see [`until_every_waiter_settled`].
async fn until_every_waiter_checked_in(server: &RedisServer, count: usize) {
    wait_for_calls(
        &mut server.connection(),
        "every waiter's registration check",
        |calls| calls.get("zscore").copied().unwrap_or(0) >= count as u64,
    )
    .await;
}

/// Waits until each of `count` waiters of `client`, whose first tries were
/// `first_tries`, checked that it is registered or tried again: a waiter whose
/// subscriptions are not confirmed within its first nap (a short recheck, a loaded
/// machine confirming thousands of them) tries again instead of checking, which finds
/// out as much. They all sleep then.
async fn until_every_waiter_settled(
    server: &RedisServer,
    client: &LockClient,
    first_tries: u64,
    count: usize,
) {
    wait_for_calls(
        &mut server.connection(),
        "every waiter's registration check or second try",
        |calls| {
            let checks = calls.get("zscore").copied().unwrap_or(0);
            let tries_again = client.stats().acquire_attempts.saturating_sub(first_tries);
            checks + tries_again >= count as u64
        },
    )
    .await;
}

/// A client with thousands of waiting tasks spaces their rechecks out to seconds, but a
/// fair lock's waiter keeps its place in the queue: its tries are what renews its entry,
/// so its rechecks stay within a third of the entry timeout. A fair waiter of that client
/// (entry timeout 600 ms) queues before a waiter of another client; after 2 s the lock
/// is released and must go to the first. Fails when the fair waiter's rechecks are
/// spaced like the others': its entry lapses and the second waiter is served first.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fair_waiter_among_thousands_of_waiting_tasks_keeps_its_place() {
    const WAITERS: usize = 3_000;
    let server = RedisServer::start();
    let (holder, held) = dlock_tests::hold_distinct_locks(&server.url(), "crowd", WAITERS).await;
    let fair_hold = holder
        .fair_lock("queue")
        .lock_with_lease(Duration::from_secs(60))
        .await
        .unwrap();
    let crowded = LockClient::builder()
        .max_wait_recheck(Duration::from_millis(100))
        .connect(&server.url())
        .await
        .unwrap();
    let waiters: Vec<_> = (0..WAITERS)
        .map(|i| {
            let lock = crowded.lock(&format!("crowd:{i}"));
            tokio::spawn(async move { lock.try_lock_for(Duration::from_secs(60)).await })
        })
        .collect();
    until_every_waiter_settled(&server, &crowded, WAITERS as u64, WAITERS).await;

    let entry = Duration::from_millis(600);
    let first = crowded.fair_lock("queue").with_entry_timeout(entry);
    let first = tokio::spawn(async move { first.try_lock_for(Duration::from_secs(30)).await });
    tokio::time::sleep(Duration::from_millis(200)).await;
    let other = patient_client(&server.url()).await;
    let second = other.fair_lock("queue").with_entry_timeout(entry);
    let mut second =
        tokio::spawn(async move { second.try_lock_for(Duration::from_secs(30)).await });
    // Several entry timeouts, and the crowd's spaced rechecks (1.5-4.5 s) under way.
    tokio::time::sleep(Duration::from_secs(2)).await;

    fair_hold.unlock().await.unwrap();
    let guard = tokio::time::timeout(Duration::from_secs(1), first)
        .await
        .expect("the first fair waiter kept its place and was served first")
        .unwrap()
        .unwrap();
    assert!(
        tokio::time::timeout(Duration::from_millis(100), &mut second)
            .await
            .is_err(),
        "the second waiter was not served while the first holds the lock"
    );
    guard.unlock().await.unwrap();
    tokio::time::timeout(Duration::from_secs(1), second)
        .await
        .expect("the second fair waiter was served next")
        .unwrap()
        .unwrap()
        .unlock()
        .await
        .unwrap();
    for waiter in waiters {
        waiter.abort();
    }
    drop(held);
}
