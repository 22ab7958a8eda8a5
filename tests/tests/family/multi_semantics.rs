//! Multi-lock semantics on real Redis: cross-slot refusal, loss of one lock, cancellation
//! at random points, one wait budget, explicit leases over a long wait, partial unlock,
//! re-entry, and exclusion with plain locks.

use std::time::{Duration, Instant};

use dlock::{LockClient, LockError, MultiLock};
use dlock_tests::{keys, RedisServer};
use redis::Commands;

async fn client(server: &RedisServer) -> LockClient {
    LockClient::builder()
        .watchdog_timeout(Duration::from_millis(300))
        .connect(&server.url())
        .await
        .unwrap()
}

fn exists(server: &RedisServer, key: &str) -> bool {
    keys::exists(&mut server.connection(), key)
}

/// Waits up to `within` for `key` to be gone; whether it went.
async fn gone_within(server: &RedisServer, key: &str, within: Duration) -> bool {
    keys::gone_within(&mut server.connection(), key, within)
        .await
        .is_some()
}

#[tokio::test]
async fn cross_slot_keys_are_refused_in_same_slot_mode_with_every_key_and_slot() {
    let server = RedisServer::start();
    let client = client(&server).await;
    let error = MultiLock::same_slot(&client, ["{}", "pre:{}", "{t}a"]).unwrap_err();
    let LockError::CrossSlot { keys } = &error else {
        panic!("{error:?}");
    };
    // Slots measured on Redis (REDIS-NOTES.md): CLUSTER KEYSLOT '{}' and 'pre:{}'.
    assert!(keys.contains(&("{}".to_owned(), 15257)), "{keys:?}");
    assert!(keys.contains(&("pre:{}".to_owned(), 243)), "{keys:?}");
    assert_eq!(keys.len(), 3, "{keys:?}");
    assert!(error.to_string().contains("slot 15257"), "{error}");
    // A common hash tag is accepted, duplicates merged, in key order.
    let multi = MultiLock::same_slot(&client, ["x:{t}:b", "x:{t}:a", "x:{t}:b"]).unwrap();
    assert_eq!(multi.names(), ["x:{t}:a", "x:{t}:b"]);
    let empty: [&str; 0] = [];
    assert!(matches!(
        MultiLock::same_slot(&client, empty),
        Err(LockError::InvalidName { .. })
    ));
    assert!(matches!(
        MultiLock::sequential([client.lock("ok"), client.lock("bad\n")]),
        Err(LockError::InvalidName { .. })
    ));
}

#[tokio::test]
async fn deleting_one_key_behind_the_holder_makes_the_guard_lost_naming_it() {
    let (first, second) = (RedisServer::start(), RedisServer::start());
    let (one, two) = (client(&first).await, client(&second).await);
    for multi in [
        MultiLock::same_slot(&one, ["l:{t}:a", "l:{t}:b", "l:{t}:c"]).unwrap(),
        // Sequential across two servers: the deleted key is on the second one.
        MultiLock::sequential([
            one.lock("l:{t}:a"),
            two.lock("l:{t}:b"),
            one.lock("l:{t}:c"),
        ])
        .unwrap(),
    ] {
        let guard = multi.lock().await.unwrap();
        let lost = guard.lost();
        let server = if exists(&second, "l:{t}:b") {
            &second
        } else {
            &first
        };
        let _: () = server.connection().del("l:{t}:b").unwrap();
        let started = Instant::now();
        let error = tokio::time::timeout(Duration::from_secs(2), lost)
            .await
            .expect("lost() within 2 s (watchdog timeout 300 ms)");
        assert!(
            matches!(&error, LockError::Lost { name, .. } if name == "l:{t}:b"),
            "{error:?}"
        );
        assert!(guard.is_lost());
        eprintln!("loss noticed after {:?}", started.elapsed());
        match guard.unlock().await {
            Err(LockError::PartialUnlock { failures }) => {
                assert_eq!(failures.len(), 1, "{failures:?}");
                assert_eq!(failures[0].0, "l:{t}:b");
            }
            other => panic!("{other:?}"),
        }
        for key in ["l:{t}:a", "l:{t}:c"] {
            assert!(!exists(&first, key), "{key} released");
        }
    }
}

/// Drops acquisitions of `multi` (whose later keys `holder_keys` someone else holds, if
/// any) at random points `rounds` times; after each, every key we may have taken is gone
/// within 100 ms and the other holder's keys are still there.
async fn cancel_at_random_points(
    server: &RedisServer,
    multi: &MultiLock,
    ours: &[&str],
    rounds: u64,
) -> Duration {
    // Cuts fall in twice the time an acquisition takes when nothing is in its way, so
    // that many land while a script is in flight (sent, no reply yet).
    let mut span = Duration::from_micros(200);
    for _ in 0..5 {
        let started = Instant::now();
        if let Ok(guard) = multi.try_lock().await {
            span = span.max(started.elapsed());
            guard.unlock().await.unwrap();
        }
    }
    let span = u64::try_from(span.as_micros() * 2).unwrap_or(u64::MAX);
    let mut state: u64 = 0x2545_F491_4F6C_DD1D;
    let mut slowest = Duration::ZERO;
    for round in 0..rounds {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        let cut = Duration::from_micros(state % span);
        let acquisition = multi.try_lock_for(Duration::from_secs(5));
        if let Ok(Ok(guard)) = tokio::time::timeout(cut, acquisition).await {
            // Acquired before the cut: the guard is dropped, which must release too.
            drop(guard);
        }
        let dropped = Instant::now();
        for key in ours {
            assert!(
                gone_within(server, key, Duration::from_millis(100)).await,
                "round {round}: {key} left behind 100 ms after a drop at {cut:?}"
            );
        }
        slowest = slowest.max(dropped.elapsed());
    }
    slowest
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dropped_acquisitions_leave_no_key_within_100ms() {
    let server = RedisServer::start();
    let (ours, theirs) = (client(&server).await, client(&server).await);
    let keys = ["c:{t}:1", "c:{t}:2", "c:{t}:3"];
    let sequential = MultiLock::sequential(keys.iter().map(|k| ours.lock(k))).unwrap();
    let same_slot = MultiLock::same_slot(&ours, keys).unwrap();

    // The 2nd and 3rd keys are held by someone else: only the 1st can be ours.
    let mut held = Vec::new();
    for key in &keys[1..] {
        held.push(theirs.lock(key).lock().await.unwrap());
    }
    let slowest = cancel_at_random_points(&server, &sequential, &keys[..1], 200).await;
    eprintln!("sequential, keys 2-3 busy: slowest cleanup {slowest:?}");
    let slowest = cancel_at_random_points(&server, &same_slot, &keys[..1], 100).await;
    eprintln!("same-slot, keys 2-3 busy: slowest cleanup {slowest:?}");
    for (guard, key) in held.iter().zip(&keys[1..]) {
        assert!(!guard.is_lost(), "{key}");
        assert_eq!(
            guard.hold_count().await.unwrap(),
            1,
            "the other holder's {key}"
        );
    }
    drop(held);
    for key in &keys[1..] {
        assert!(gone_within(&server, key, Duration::from_secs(1)).await);
    }

    // Every key free: drops land before, during and after the acquisition.
    let slowest = cancel_at_random_points(&server, &sequential, &keys, 100).await;
    eprintln!("sequential, free: slowest cleanup {slowest:?}");
    let slowest = cancel_at_random_points(&server, &same_slot, &keys, 100).await;
    eprintln!("same-slot, free: slowest cleanup {slowest:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_timeout_spends_one_budget_and_gives_back_what_it_took() {
    let server = RedisServer::start();
    let (ours, theirs) = (client(&server).await, client(&server).await);
    let blocker = theirs.lock("t:{t}:c").lock().await.unwrap();
    for multi in [
        MultiLock::sequential(["t:{t}:a", "t:{t}:b", "t:{t}:c"].map(|k| ours.lock(k))).unwrap(),
        MultiLock::same_slot(&ours, ["t:{t}:a", "t:{t}:b", "t:{t}:c"]).unwrap(),
    ] {
        let started = Instant::now();
        let error = multi
            .try_lock_for(Duration::from_millis(300))
            .await
            .unwrap_err();
        let took = started.elapsed();
        assert!(
            matches!(&error, LockError::Timeout { name, waited, .. } if name == "t:{t}:c" && *waited == Duration::from_millis(300)),
            "{error:?}"
        );
        assert!(
            took >= Duration::from_millis(300) && took < Duration::from_millis(900),
            "{took:?}"
        );
        // Given back in the foreground: gone as soon as the error is returned.
        assert!(!exists(&server, "t:{t}:a") && !exists(&server, "t:{t}:b"));
        let error = multi.try_lock().await.unwrap_err();
        assert!(error.is_timeout(), "{error:?}");
    }
    blocker.unlock().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_explicit_lease_counts_from_the_whole_set_not_from_the_first_lock() {
    let server = RedisServer::start();
    let (ours, theirs) = (client(&server).await, client(&server).await);
    let lease = Duration::from_millis(600);
    // The last key is busy for longer than the lease: without keeping the first one
    // alive, it would expire while the last is awaited.
    let blocker = theirs
        .lock("e:b")
        .lock_with_lease(Duration::from_millis(1_000))
        .await
        .unwrap();
    let multi = MultiLock::sequential([ours.lock("e:b"), ours.lock("e:a")]).unwrap();
    let waiting = tokio::spawn(async move {
        multi
            .try_lock_with_lease(Duration::from_secs(5), lease)
            .await
            .unwrap()
    });
    // The first key stays held the whole time.
    while !exists(&server, "e:a") {
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
    let until = Instant::now() + Duration::from_millis(900);
    while Instant::now() < until {
        assert!(exists(&server, "e:a"), "e:a expired while e:b was awaited");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    drop(blocker);
    let guard = waiting.await.unwrap();
    let held_at = Instant::now();
    for key in ["e:a", "e:b"] {
        let ttl: i64 = server.connection().pttl(key).unwrap();
        assert!(
            ttl > 500 && ttl <= 600,
            "{key}: PTTL {ttl} ms right after the set was held"
        );
    }
    let left = guard.deadline().saturating_duration_since(held_at);
    assert!(
        left > Duration::from_millis(450),
        "deadline only {left:?} ahead"
    );
    assert!(!guard.is_lost());
    // Not renewed: the explicit lease runs out.
    tokio::time::sleep(Duration::from_millis(800)).await;
    assert!(!exists(&server, "e:a") && !exists(&server, "e:b"));
    assert!(guard.is_lost());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn plain_locks_and_multi_locks_exclude_each_other_and_scopes_re_enter() {
    let server = RedisServer::start();
    let client = client(&server).await;
    let plain = client.lock("p:{t}:b").lock().await.unwrap();
    let same_slot = MultiLock::same_slot(&client, ["p:{t}:a", "p:{t}:b"]).unwrap();
    let error = same_slot.try_lock().await.unwrap_err();
    assert!(
        matches!(&error, LockError::Timeout { name, .. } if name == "p:{t}:b"),
        "{error:?}"
    );
    assert!(!exists(&server, "p:{t}:a"));
    // Inside the plain lock's scope the set re-enters it instead of waiting for itself.
    let guard = plain
        .scope(async { same_slot.try_lock().await })
        .await
        .unwrap();
    assert_eq!(plain.hold_count().await.unwrap(), 2);
    guard.unlock().await.unwrap();
    plain.unlock().await.unwrap();

    let guard = same_slot.lock().await.unwrap();
    assert!(client
        .lock("p:{t}:a")
        .try_lock()
        .await
        .unwrap_err()
        .is_timeout());
    // The multi-guard's scope re-enters every lock of the set.
    guard
        .scope(async {
            for name in ["p:{t}:a", "p:{t}:b"] {
                let lock = client.lock(name);
                let inner = lock.try_lock().await.unwrap();
                assert_eq!(lock.hold_count().await.unwrap(), 2, "{name}");
                inner.unlock().await.unwrap();
            }
        })
        .await;
    // One watchdog tick renews them all: still held after several watchdog timeouts.
    tokio::time::sleep(Duration::from_millis(1_000)).await;
    assert!(!guard.is_lost());
    guard.unlock().await.unwrap();
    assert!(!exists(&server, "p:{t}:a") && !exists(&server, "p:{t}:b"));
}
