//! Fault scenario 4: Redis (with an append-only file, fsync always) is restarted while a
//! lock is held and waiters wait. The held lock survives on disk; the holder's client
//! reconnects and keeps renewing; the waiters' subscriber reconnects and they acquire once
//! the holder unlocks. A lease lock that expires while Redis is down goes to its waiter.

use std::time::{Duration, Instant};

use dlock::LockClient;
use dlock_tests::RedisServer;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn clients_reconnect_and_waiters_acquire_after_a_restart() {
    let mut server = RedisServer::start_with(&["--appendonly", "yes", "--appendfsync", "always"]);
    let url = server.url();
    let connect = |watchdog: Duration| {
        let url = url.clone();
        async move {
            LockClient::builder()
                .watchdog_timeout(watchdog)
                .command_timeout(Duration::from_secs(1))
                .connect(&url)
                .await
                .unwrap()
        }
    };
    let holder = connect(Duration::from_secs(3)).await;
    let waiters = connect(Duration::from_secs(30)).await;

    let held = holder.lock("restart:held").lock().await.unwrap();
    let mut lost = Box::pin(held.lost());
    // A lease lock that runs out while Redis is down or just after.
    let leased = holder
        .lock("restart:leased")
        .lock_with_lease(Duration::from_millis(700))
        .await
        .unwrap();
    let wait_for = |name: &'static str| {
        let lock = waiters.lock(name);
        tokio::spawn(async move {
            let guard = lock.try_lock_for(Duration::from_secs(20)).await;
            (Instant::now(), guard)
        })
    };
    let held_waiter = wait_for("restart:held");
    let leased_waiter = wait_for("restart:leased");
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert!(!held_waiter.is_finished() && !leased_waiter.is_finished());

    let restarted = Instant::now();
    let down = tokio::task::block_in_place(|| server.restart());
    let up_at = Instant::now();
    let mut admin = server.connection();
    let pttl: i64 = redis::cmd("PTTL")
        .arg("restart:held")
        .query(&mut admin)
        .unwrap();
    assert!(
        pttl > 0,
        "the held lock did not survive the restart (PTTL {pttl})"
    );

    // The holder keeps it: renewals go through the new connection.
    let renewals_before = holder.stats().renewals;
    tokio::select! {
        () = tokio::time::sleep(Duration::from_millis(2_200)) => {}
        error = &mut lost => panic!("held lock lost across the restart: {error}"),
    }
    assert!(
        holder.stats().renewals > renewals_before,
        "no renewal after the restart"
    );
    assert!(
        !held_waiter.is_finished(),
        "a waiter got the held lock while its holder was alive"
    );
    // The leased lock expired meanwhile: its waiter got it.
    let (leased_at, leased_guard) = leased_waiter.await.unwrap();
    let leased_guard = leased_guard.expect("waiter on the expired lease lock");
    drop(leased);

    let unlock_started = Instant::now();
    held.unlock().await.unwrap();
    let unlocked_at = Instant::now();
    let (acquired_at, guard) = held_waiter.await.unwrap();
    let guard = guard.expect("waiter on the held lock");
    let hand_off = acquired_at.saturating_duration_since(unlocked_at);
    println!(
        "scenario 4, restart with AOF: down {down:?}; lease lock (700 ms) went to its waiter {:?} after the restart; held lock kept ({} renewals since), unlock took {:?}, waiter acquired {hand_off:?} after it; {:?} from the restart to the hand-off",
        leased_at.saturating_duration_since(up_at),
        holder.stats().renewals - renewals_before,
        unlocked_at - unlock_started,
        acquired_at - restarted,
    );
    assert!(
        hand_off <= Duration::from_millis(100),
        "the waiter acquired {hand_off:?} after the unlock"
    );
    assert!(
        leased_at <= up_at + Duration::from_millis(1_200),
        "the expired lease lock reached its waiter {:?} after the restart",
        leased_at - up_at
    );
    guard.unlock().await.unwrap();
    leased_guard.unlock().await.unwrap();
}
