//! A multi-lock's waits beside plain ones: a plain waiter of the same client gets a key the
//! multi-lock also waits for, and a waiting multi-lock listens on every one of its locks'
//! wake channels.

use std::time::Duration;

use dlock::{LockClient, MultiLock};
use dlock_tests::keys;
use dlock_tests::liveness::slow_recheck;
use dlock_tests::RedisServer;
use tokio::time::Instant;

use crate::bound::*;

/// Client C waits for `{s}k` in two tasks: a same-slot multi-lock over `{s}k` and `{s}j`,
/// and a plain `lock("{s}k")`. `{s}k` is held by H1 (watchdog, 30 s TTL), `{s}j` by H2 for
/// the whole test (60 s lease, so the multi-lock waits on `{s}k`, the lock that ends
/// first). The multi-lock starts waiting first, then the plain lock. H1 releases `{s}k`:
/// C's plain waiter must get it within [`BOUND`]. Fails when the release's one wake-up
/// for C goes to the multi-lock (the client's first waiter on the channel), which finds
/// `{s}j` still busy and goes back to sleep, while the plain waiter, which could take
/// `{s}k`, sleeps until its recheck and the grant to C runs out.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_plain_waiter_gets_a_key_its_client_also_waits_for_in_a_multi_lock() {
    const K: &str = "{s}k";
    const J: &str = "{s}j";
    let server = RedisServer::start();
    let url = server.url();
    let (h1, h2) = (
        LockClient::connect(&url).await.unwrap(),
        LockClient::connect(&url).await.unwrap(),
    );
    let k_guard = h1.lock(K).lock().await.unwrap();
    let j_guard = h2
        .lock(J)
        .lock_with_lease(Duration::from_secs(60))
        .await
        .unwrap();
    let c = slow_recheck(&url).await;

    // The multi-lock waits first (C registered for `{s}k`, its waiter asleep), then the
    // plain lock: the order in which C's two waiters wait for a wake-up on `{s}k`.
    let multi = MultiLock::same_slot(&c, [K, J]).unwrap();
    let multi_task = tokio::spawn(async move { multi.try_lock_for(WAIT).await.map(drop) });
    waiting(&server, K, &c).await;
    let lock = c.lock(K);
    let plain_task = acquiring(async move { lock.try_lock_for(WAIT).await });
    tokio::time::sleep(SETTLE).await;
    assert!(!multi_task.is_finished() && !plain_task.is_finished());
    eprintln!(
        "item 6: registry of {K}: {:?} (C is {})",
        registered(&server, K),
        c.id()
    );

    let released = Instant::now();
    k_guard.unlock().await.unwrap();
    let acquired = acquired_within_bound(
        "item 6: C's plain waiter for {s}k, from the release",
        released,
        plain_task,
    )
    .await;
    acquired.unlock().await.unwrap();
    multi_task.abort();
    drop(j_guard);
}

// ---------------------------------------------------------------------------------------
// 7. Waiting again right after a wait ended.
// ---------------------------------------------------------------------------------------

/// A same-slot multi-lock of client C waits for `{ml}a` and `{ml}b`, both held by client
/// D. Each of its tries registers it with the lock that blocks it, and a hand-off of that
/// lock may arrive before the try's answer does: so while it waits, C must listen as the
/// multi-lock's owner on both locks' wake channels. Then D releases both, and C must get
/// them within [`BOUND`]. Fails when the waiter listens only on the channel of the lock
/// that blocked its last try: a hand-off on the other one, arriving while C's other tasks
/// keep that channel subscribed, is given up as meant for an owner that no longer waits
/// and the multi-lock sleeps until its recheck (3 cases of 24 in the property test).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiting_multi_lock_listens_on_every_lock_s_wake_channel() {
    let names = ["{ml}a", "{ml}b"];
    let server = RedisServer::start();
    let url = server.url();
    let c = slow_recheck(&url).await;
    let d = LockClient::connect(&url).await.unwrap();
    let held_a = d.lock(names[0]).lock().await.unwrap();
    let held_b = d.lock(names[1]).lock().await.unwrap();
    let multi = MultiLock::same_slot(&c, names).unwrap();
    let task = acquiring(async move { multi.try_lock_for(WAIT).await });
    waiting(&server, names[0], &c).await;

    let wake_channel = |name: &str| registry(name).replacen("}:", &format!("}}#{}:", c.id()), 1);
    let listening: Vec<(String, u64)> = redis::cmd("PUBSUB")
        .arg("NUMSUB")
        .arg(wake_channel(names[0]))
        .arg(wake_channel(names[1]))
        .query(&mut server.connection())
        .unwrap();
    eprintln!("item 13: C's wake channels while its multi-lock waits: {listening:?}");
    assert!(
        listening.iter().all(|(_, subscribers)| *subscribers == 1),
        "C does not listen on every lock's wake channel: {listening:?}"
    );

    held_b.unlock().await.unwrap();
    let released = Instant::now();
    held_a.unlock().await.unwrap();
    let acquired =
        acquired_within_bound("item 13: the multi-lock, from the releases", released, task).await;
    acquired.unlock().await.unwrap();
}

/// A same-slot multi-lock of client C waits for `{mg}a`, held by D; `{mg}b` is free. D's
/// release gives `{mg}a` to C's owner (its hold and the `!next` mark of a grant), and C's
/// next try takes it with `{mg}b`. From then on `{mg}a` is a hold like any other, for the
/// multi-lock's lease: no `!next` beside it, which would read as a grant that lapses in
/// 100 ms (to the scripts' hand-off and to `inspect`). Fails when the multi-lock's script
/// keeps the mark, as it did until the simulator found it (docs/RELIABILITY.md).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lock_given_to_a_multi_lock_is_held_without_a_grant_s_mark() {
    let names = ["{mg}a", "{mg}b"];
    let server = RedisServer::start();
    let url = server.url();
    let c = slow_recheck(&url).await;
    let d = LockClient::connect(&url).await.unwrap();
    let held_a = d.lock(names[0]).lock().await.unwrap();
    let multi = MultiLock::same_slot(&c, names).unwrap();
    let task = acquiring(async move { multi.try_lock_for(WAIT).await });
    waiting(&server, names[0], &c).await;

    let released = Instant::now();
    held_a.unlock().await.unwrap();
    let acquired = acquired_within_bound("the multi-lock, given {mg}a", released, task).await;
    let mut conn = server.connection();
    for name in names {
        let holders = keys::holders(&mut conn, name);
        assert_eq!(
            holders.len(),
            1,
            "{name} is not held by the multi-lock: {holders:?}"
        );
        assert_eq!(
            keys::marks(&mut conn, name),
            Default::default(),
            "{name}, held by the multi-lock, still carries a grant's mark"
        );
    }
    acquired.unlock().await.unwrap();
}
