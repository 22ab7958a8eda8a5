//! The fair lock in one process's view: live waiters keep their place through a long
//! hold, re-entries release through the fair path (and the last one wakes the head), a
//! client's waiters share one wake channel, waiters whose queue was lost queue again, and
//! the lock keeps a non-atomic counter exact.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use dlock::{FairLock, LockClient};
use dlock_tests::commandstats::command_calls;
use dlock_tests::{patient_client, RedisServer};
use redis::AsyncCommands;

/// Spawns a task that acquires `lock`, records `id` in `grants`, and releases it.
fn spawn_waiter(
    lock: &FairLock,
    id: usize,
    grants: &Arc<Mutex<Vec<usize>>>,
) -> tokio::task::JoinHandle<()> {
    let (lock, grants) = (lock.clone(), Arc::clone(grants));
    tokio::spawn(async move {
        let guard = lock.lock().await.expect("acquire");
        grants.lock().unwrap().push(id);
        guard.unlock().await.expect("release");
    })
}

async fn wait_queue_len(lock: &FairLock, n: usize) {
    let started = Instant::now();
    while lock.queue_len().await.unwrap() < n {
        assert!(
            started.elapsed() < Duration::from_secs(10),
            "queue never reached {n}"
        );
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
}

/// A client's waiters on one fair lock share its wake channel: while one of them waits, a
/// new waiter of the client hears its wake-up from its first try on, so queueing costs
/// that one try and no subscription (with a channel per waiter, each new waiter
/// subscribed its own and tried again once Redis confirmed it: two tries and a
/// subscription per queued waiter). The wake-ups then go to each waiter by name, in
/// queue order, with no recheck to fall back on (30 s here).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_clients_waiters_share_one_wake_channel_and_queue_with_one_try_each() {
    const LATER: usize = 4;
    let server = RedisServer::start();
    let holder = LockClient::connect(&server.url()).await.unwrap();
    let waiting = patient_client(&server.url()).await;
    let guard = holder.fair_lock("shared").lock().await.unwrap();
    let lock = waiting.fair_lock("shared");
    let grants = Arc::new(Mutex::new(Vec::new()));
    let mut waiters = vec![spawn_waiter(&lock, 0, &grants)];
    wait_queue_len(&lock, 1).await;
    // The first waiter's channel is subscribed and confirmed, and its second try made.
    tokio::time::sleep(Duration::from_millis(300)).await;

    // The queue's length read with ZCARD: `queue_len` is a script call, which the count
    // below would take for a try.
    let mut admin = server.connection();
    let queues: Vec<String> = redis::cmd("KEYS")
        .arg("dlock:fair:*:queue")
        .query(&mut admin)
        .unwrap();
    let [queue] = queues.as_slice() else {
        panic!("one fair queue, found {queues:?}");
    };
    let before = command_calls(&mut admin);
    for id in 1..=LATER {
        waiters.push(spawn_waiter(&lock, id, &grants));
        let started = Instant::now();
        while redis::cmd("ZCARD")
            .arg(queue)
            .query::<usize>(&mut admin)
            .unwrap()
            < id + 1
        {
            assert!(
                started.elapsed() < Duration::from_secs(10),
                "waiter {id} never queued"
            );
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
    }
    // Room for the tries and subscriptions a waiter would make after its first try.
    tokio::time::sleep(Duration::from_millis(300)).await;
    let after = command_calls(&mut admin);
    let delta = |command: &str| {
        after.get(command).copied().unwrap_or(0) - before.get(command).copied().unwrap_or(0)
    };
    assert_eq!(
        (delta("evalsha"), delta("subscribe")),
        (LATER as u64, 0),
        "(tries, subscriptions) of {LATER} waiters queueing behind one of their client's"
    );

    guard.unlock().await.unwrap();
    for waiter in waiters {
        tokio::time::timeout(Duration::from_secs(10), waiter)
            .await
            .expect("every waiter is woken by name, without a recheck")
            .unwrap();
    }
    assert_eq!(*grants.lock().unwrap(), (0..=LATER).collect::<Vec<_>>());
}

/// A fair waiter whose client does not listen on the lock's wake channel yet makes one
/// busy try, subscribes, and once Redis confirmed the subscription checks that the lock
/// is still held (one `EXISTS`) instead of trying again: a cold wait costs the try before
/// the release and the one its wake-up causes. Fails when the waiter tries again after
/// the confirmation (3 tries).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fair_waiter_on_a_cold_channel_tries_once_before_the_release() {
    let server = RedisServer::start();
    let holder = LockClient::connect(&server.url()).await.unwrap();
    let waiting = patient_client(&server.url()).await;
    let guard = holder.fair_lock("cold").lock().await.unwrap();

    let lock = waiting.fair_lock("cold");
    let waiter = tokio::spawn({
        let lock = lock.clone();
        async move { lock.try_lock_for(Duration::from_secs(30)).await }
    });
    wait_queue_len(&lock, 1).await;
    // Subscribed and confirmed by then; nothing else runs until a message or the recheck
    // (30 s).
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(
        waiting.stats().acquire_attempts,
        1,
        "tries before the release"
    );

    let released = Instant::now();
    guard.unlock().await.unwrap();
    let acquired = tokio::time::timeout(Duration::from_secs(3), waiter)
        .await
        .expect("the release woke the waiter")
        .unwrap()
        .unwrap();
    eprintln!("acquired {:?} after the release", released.elapsed());
    assert_eq!(waiting.stats().acquire_attempts, 2, "tries in all");
    acquired.unlock().await.unwrap();
}

/// A release between a cold fair waiter's first try and its subscription is not heard,
/// and the check after the subscription finds the lock free: the waiter tries then, and
/// has the lock without waiting for its recheck (30 s). The release races the waiter's
/// first try and subscription, 200 times at eight delays from 0 to 1.4 ms. Fails when the
/// check takes a free lock for a held one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_release_a_cold_fair_waiter_did_not_hear_is_found_by_its_check() {
    const ROUNDS: usize = 200;
    let server = RedisServer::start();
    let holder = LockClient::connect(&server.url()).await.unwrap();
    for round in 0..ROUNDS {
        // A new client each round: its channel is cold.
        let waiting = patient_client(&server.url()).await;
        let name = format!("cold-race:{round}");
        let guard = holder.fair_lock(&name).lock().await.unwrap();
        let lock = waiting.fair_lock(&name);
        let waiter = tokio::spawn(async move { lock.try_lock_for(Duration::from_secs(30)).await });
        // Released at some point between the first try and the confirmation.
        tokio::time::sleep(Duration::from_micros(200 * (round as u64 % 8))).await;
        guard.unlock().await.unwrap();
        let acquired = tokio::time::timeout(Duration::from_secs(3), waiter)
            .await
            .unwrap_or_else(|_| panic!("round {round}: the waiter slept through the release"))
            .unwrap()
            .unwrap();
        acquired.unlock().await.unwrap();
    }
}

/// Entries of 300 ms and a holder keeping the lock for more than 3 of them: each waiter
/// renews its own entry, so none is evicted (the queue never shrinks) and none re-queues
/// behind the others (the grant order is the enqueue order).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_long_hold_neither_evicts_nor_reorders_live_waiters() {
    const ENTRY: Duration = Duration::from_millis(300);
    let server = RedisServer::start();
    let (a, b) = (
        LockClient::connect(&server.url()).await.unwrap(),
        LockClient::connect(&server.url()).await.unwrap(),
    );
    let holder = a.fair_lock("long").lock().await.unwrap();
    let grants = Arc::new(Mutex::new(Vec::new()));
    let mut waiters = Vec::new();
    for id in 0..4 {
        let client = if id % 2 == 0 { &a } else { &b };
        let lock = client.fair_lock("long").with_entry_timeout(ENTRY);
        waiters.push(spawn_waiter(&lock, id, &grants));
        wait_queue_len(&lock, id + 1).await;
    }
    let observer = a.fair_lock("long");
    let hold_until = Instant::now() + ENTRY * 3 + Duration::from_millis(200);
    while Instant::now() < hold_until {
        assert_eq!(
            observer.queue_len().await.unwrap(),
            4,
            "a live waiter's entry died while the lock was held"
        );
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    holder.unlock().await.unwrap();
    for waiter in waiters {
        tokio::time::timeout(Duration::from_secs(5), waiter)
            .await
            .expect("waiters granted within 5 s")
            .unwrap();
    }
    assert_eq!(*grants.lock().unwrap(), vec![0, 1, 2, 3]);
}

/// Re-entries add holds to the same owner without queueing; the outer guard may go first,
/// the inner one keeps the lock, and its release (the last hold) wakes the head at once,
/// long before the head's own re-try (1 s) would find the lock free.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reentry_in_scope_outer_released_first_then_the_last_hold_wakes_the_head() {
    let server = RedisServer::start();
    let (a, b) = (
        LockClient::connect(&server.url()).await.unwrap(),
        LockClient::connect(&server.url()).await.unwrap(),
    );
    let lock = a.fair_lock("reentrant");
    let outer = lock.lock().await.unwrap();
    let inner = outer
        .scope(async {
            let inner = lock.lock().await.unwrap();
            assert_eq!(inner.hold_count().await.unwrap(), 2);
            assert_eq!(
                lock.queue_len().await.unwrap(),
                0,
                "a re-entry never queues"
            );
            inner
        })
        .await;
    let grants = Arc::new(Mutex::new(Vec::new()));
    let waiter = spawn_waiter(&b.fair_lock("reentrant"), 1, &grants);
    wait_queue_len(&lock, 1).await;
    // Let the waiter's subscription settle, so that its next re-try is 1 s away.
    tokio::time::sleep(Duration::from_millis(200)).await;

    outer.unlock().await.unwrap();
    assert_eq!(
        inner.hold_count().await.unwrap(),
        1,
        "the inner hold keeps the lock"
    );
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert!(grants.lock().unwrap().is_empty(), "granted while held");

    let released = Instant::now();
    inner.unlock().await.unwrap();
    tokio::time::timeout(Duration::from_secs(5), waiter)
        .await
        .expect("granted within 5 s")
        .unwrap();
    let woken = released.elapsed();
    eprintln!("head granted {woken:?} after the last hold was released");
    assert!(
        woken < Duration::from_millis(500),
        "the head waited {woken:?}: the release did not wake it"
    );
}

/// Tasks of two clients increment a counter with GET / pause / SET: `lock` = false is the
/// control (no lock).
async fn count(server: &RedisServer, lock: bool) -> i64 {
    const TASKS: usize = 4;
    const INCREMENTS: usize = 40;
    let redis = redis::Client::open(server.url()).unwrap();
    let conn = redis.get_multiplexed_async_connection().await.unwrap();
    let mut tasks = Vec::new();
    for _ in 0..2 {
        let client = LockClient::connect(&server.url()).await.unwrap();
        for _ in 0..TASKS {
            let (lock_handle, mut conn) = (client.fair_lock("counter-lock"), conn.clone());
            tasks.push(tokio::spawn(async move {
                for _ in 0..INCREMENTS {
                    let guard = if lock {
                        Some(lock_handle.lock().await.expect("acquire"))
                    } else {
                        None
                    };
                    let value: Option<i64> = conn.get("counter").await.unwrap();
                    tokio::time::sleep(Duration::from_micros(200)).await;
                    let () = conn.set("counter", value.unwrap_or(0) + 1).await.unwrap();
                    if let Some(guard) = guard {
                        guard.unlock().await.expect("release");
                    }
                }
            }));
        }
    }
    for task in tasks {
        task.await.unwrap();
    }
    let mut conn = conn;
    let total: i64 = conn.get("counter").await.unwrap();
    if lock {
        assert_eq!(
            total,
            (2 * TASKS * INCREMENTS) as i64,
            "lost updates under the fair lock"
        );
    }
    total
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_fair_lock_keeps_a_non_atomic_counter_exact() {
    let server = RedisServer::start();
    count(&server, true).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn control_without_the_lock_the_counter_loses_updates() {
    let server = RedisServer::start();
    let total = count(&server, false).await;
    assert!(
        total < 2 * 4 * 40,
        "the control must lose updates, got an exact {total}"
    );
}

/// Bad names and durations are refused before anything reaches Redis.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_names_and_durations_are_refused_before_redis() {
    use dlock::LockError;
    let server = RedisServer::start();
    let client = LockClient::connect(&server.url()).await.unwrap();
    let lock = client.fair_lock("bad");
    for timeout in [
        Duration::ZERO,
        Duration::from_millis(29),
        dlock::limits::MAX_LEASE + Duration::from_millis(1),
    ] {
        let err = lock
            .clone()
            .with_entry_timeout(timeout)
            .try_lock()
            .await
            .unwrap_err();
        assert!(
            matches!(
                err,
                LockError::InvalidDuration {
                    what: "entry_timeout",
                    ..
                }
            ),
            "{timeout:?}: {err}"
        );
    }
    let err = lock
        .try_lock_with_lease(Duration::ZERO, Duration::from_micros(500))
        .await
        .unwrap_err();
    assert!(
        matches!(err, LockError::InvalidDuration { what: "lease", .. }),
        "{err}"
    );
    for name in ["", "a\nb"] {
        let err = client.fair_lock(name).lock().await.unwrap_err();
        assert!(
            matches!(err, LockError::InvalidName { .. }),
            "{name:?}: {err}"
        );
        let err = client.fair_lock(name).queue_len().await.unwrap_err();
        assert!(
            matches!(err, LockError::InvalidName { .. }),
            "{name:?}: {err}"
        );
    }
    // What the client wrote when it connected (its description, the layout version) is
    // no lock data.
    let keys: Vec<String> = redis::cmd("KEYS")
        .arg("*")
        .query(&mut server.connection())
        .unwrap();
    let keys: Vec<&String> = keys
        .iter()
        .filter(|key| !dlock_tests::written_by_connecting(key))
        .collect();
    assert!(keys.is_empty(), "written: {keys:?}");
    // The shortest accepted entry timeout works.
    lock.with_entry_timeout(Duration::from_millis(30))
        .try_lock()
        .await
        .unwrap()
        .unlock()
        .await
        .unwrap();
}

/// The README's promise for a failover that loses a fair lock's queue: its waiters'
/// entries are re-made by their next try. The queue and its deadlines are deleted while
/// three waiters of another client wait (as a promotion of a replica that never got them
/// would leave them); the holder's release then wakes nobody, and each waiter, trying at
/// its recheck, queues again and gets the lock in turn. Fails if a waiter counts on an
/// entry it no longer has (it would wait out its 20 s).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn waiters_whose_queue_was_lost_queue_again_and_get_the_lock() {
    let server = RedisServer::start();
    let holder = LockClient::connect(&server.url()).await.unwrap();
    let waiting = LockClient::builder()
        .max_wait_recheck(Duration::from_millis(300))
        .connect(&server.url())
        .await
        .unwrap();
    let lock = waiting.fair_lock("lost-queue");
    let guard = holder.fair_lock("lost-queue").lock().await.unwrap();
    let (served, mut serving) = tokio::sync::mpsc::unbounded_channel();
    for id in 0..3 {
        let (lock, served) = (lock.clone(), served.clone());
        tokio::spawn(async move {
            let outcome = lock.try_lock_for(Duration::from_secs(20)).await;
            let _ = served.send((
                id,
                outcome.as_ref().map(|_| ()).map_err(ToString::to_string),
            ));
            if let Ok(guard) = outcome {
                guard.unlock().await.unwrap();
            }
        });
    }
    wait_queue_len(&lock, 3).await;

    let mut conn = server
        .client()
        .get_multiplexed_async_connection()
        .await
        .unwrap();
    let queue_keys: Vec<String> = conn.keys("dlock:fair:*").await.unwrap();
    assert!(
        queue_keys.len() >= 2,
        "the queue and its deadlines: {queue_keys:?}"
    );
    let _: () = conn.del(&queue_keys).await.unwrap();
    assert_eq!(lock.queue_len().await.unwrap(), 0);
    let released = Instant::now();
    guard.unlock().await.unwrap();

    for _ in 0..3 {
        let (id, outcome) = tokio::time::timeout(Duration::from_secs(10), serving.recv())
            .await
            .expect("a waiter of the lost queue was not served within 10 s")
            .unwrap();
        outcome.unwrap_or_else(|e| panic!("waiter {id}: {e}"));
    }
    let took = released.elapsed();
    eprintln!("three waiters of a lost queue served within {took:?} of the release");
    // Each waiter finds the free lock at its next recheck (300 ms) at the latest.
    assert!(took < Duration::from_secs(5), "served after {took:?}");
}
