//! One `unlock` contract for every guard: `Ok(())` when this call gave the hold back,
//! `Err(LockError::NotHeld)` when the hold was already gone (here: its explicit lease ran
//! out). Checked on each guard type the crate hands out, and `client.multi_lock` choosing
//! one script for a set in one slot and one lock after another otherwise.

use std::future::Future;
use std::time::Duration;

use dlock::redlock::RedLockClient;
use dlock::{LockClient, LockError};
use dlock_tests::commandstats::command_calls;
use dlock_tests::RedisServer;

const LEASE: Duration = Duration::from_millis(60);
const PAST_LEASE: Duration = Duration::from_millis(200);

/// Takes a hold through `take` twice: the first is given back in time and must unlock
/// with `Ok(())`, the second outlives its lease and must unlock with `NotHeld`.
async fn check<G, T, F, U, V>(what: &str, take: T, unlock: U)
where
    T: Fn() -> F,
    F: Future<Output = dlock::Result<G>>,
    U: Fn(G) -> V,
    V: Future<Output = dlock::Result<()>>,
{
    let held = take().await.unwrap_or_else(|e| panic!("{what}: {e}"));
    unlock(held)
        .await
        .unwrap_or_else(|e| panic!("{what}: unlock in time failed: {e}"));

    let expiring = take().await.unwrap_or_else(|e| panic!("{what}: {e}"));
    tokio::time::sleep(PAST_LEASE).await;
    match unlock(expiring).await {
        Err(LockError::NotHeld { .. }) => {}
        other => panic!("{what}: unlock after the lease ran out gave {other:?}, not NotHeld"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_guard_reports_a_hold_already_gone_as_not_held() {
    let server = RedisServer::start();
    let client = LockClient::connect(&server.url()).await.unwrap();

    let lock = client.lock("contract:lock");
    check("lock", || lock.lock_with_lease(LEASE), |g| g.unlock()).await;

    let fair = client.fair_lock("contract:fair");
    check("fair lock", || fair.lock_with_lease(LEASE), |g| g.unlock()).await;

    let rw = client.rw_lock("contract:rw");
    let (read, write) = (rw.read(), rw.write());
    check("read lock", || read.lock_with_lease(LEASE), |g| g.unlock()).await;
    check(
        "write lock",
        || write.lock_with_lease(LEASE),
        |g| g.unlock(),
    )
    .await;

    let pool = client.semaphore("contract:sem", 3);
    check(
        "semaphore permit",
        || pool.acquire_with_lease(2, LEASE),
        |p| p.unlock(),
    )
    .await;

    let same_slot = client
        .multi_lock(["contract:{m}:a", "contract:{m}:b"])
        .unwrap();
    check(
        "same-slot multi-lock",
        || same_slot.lock_with_lease(LEASE),
        |g| g.unlock(),
    )
    .await;
    let sequential = client.multi_lock(["contract:x", "contract:y"]).unwrap();
    check(
        "sequential multi-lock",
        || sequential.lock_with_lease(LEASE),
        |g| g.unlock(),
    )
    .await;
    client.shutdown().await.unwrap();

    let servers: Vec<RedisServer> = (0..3).map(|_| RedisServer::start()).collect();
    let urls: Vec<String> = servers.iter().map(RedisServer::url).collect();
    let redlock = RedLockClient::connect(LockClient::builder(), &urls)
        .await
        .unwrap();
    let invoice = redlock.lock("contract:redlock");
    check("RedLock", || invoice.lock_with_lease(LEASE), |g| g.unlock()).await;
}

/// `client.multi_lock` runs one acquire script for a set in one cluster slot, and one per
/// lock for a set across slots (the sequential mode, which cannot deadlock either).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn multi_lock_takes_a_set_in_one_slot_in_one_script() {
    let server = RedisServer::start();
    let client = LockClient::connect(&server.url()).await.unwrap();
    let mut conn = server.connection();
    let mut scripts_run = move || {
        let calls = command_calls(&mut conn);
        ["evalsha", "fcall"]
            .iter()
            .map(|name| calls.get(*name).copied().unwrap_or(0))
            .sum::<u64>()
    };
    let mut scripts_for = async |names: [&str; 3]| {
        let multi = client.multi_lock(names).unwrap();
        let before = scripts_run();
        let guard = multi.lock_with_lease(Duration::from_secs(5)).await.unwrap();
        let calls = scripts_run() - before;
        guard.unlock().await.unwrap();
        calls
    };
    assert_eq!(
        scripts_for(["order:{7}:items", "order:{7}:payment", "order:{7}:ship"]).await,
        1,
        "a set in one slot is one script"
    );
    assert_eq!(
        scripts_for(["order:7:items", "order:7:payment", "order:7:ship"]).await,
        3,
        "a set across slots is one lock after another"
    );
    client.shutdown().await.unwrap();
}
