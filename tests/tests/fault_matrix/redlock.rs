//! The RedLock cells that its own tests (`redlock_quorum`, `redlock_overlap`,
//! `redlock_startup`) do not cover: the holder's process killed, every server's command
//! connections killed, the holder's CPU starved.

use std::time::{Duration, Instant};

use dlock::redlock::RedLockClient;
use dlock::{LockClient, LockError};
use dlock_tests::{HoldProcess, RedisServer};

use crate::support::{burn_cpu, kill_connections};

/// The servers of one RedLock.
fn servers() -> Vec<RedisServer> {
    (0..5).map(|_| RedisServer::start()).collect()
}

async fn redlock(servers: &[RedisServer], watchdog: Duration) -> RedLockClient {
    let urls: Vec<String> = servers.iter().map(RedisServer::url).collect();
    let builder = LockClient::builder().watchdog_timeout(watchdog);
    RedLockClient::connect(builder, &urls).await.unwrap()
}

/// The holder's process SIGKILLed (watchdog 1.5 s): a rival already waiting gets the lock
/// once a majority of the servers let the dead holder's key expire (the third of the five
/// expiries read just before the kill), never before, and soon after. The control: while
/// the holder lives, the rival waits.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redlock_holder_killed() {
    let _cpu = crate::support::sharing_cpu().await;
    let servers = servers();
    let urls: Vec<String> = servers.iter().map(RedisServer::url).collect();
    let joined = urls.join(",");
    let args = [
        &joined,
        "{matrix-kill}:redlock",
        "--watchdog",
        "1500ms",
        "--kind",
        "redlock",
    ];
    let mut holder = HoldProcess::start_in_background(
        env!("CARGO_BIN_EXE_dlock-hold"),
        args.map(str::to_owned).to_vec(),
    )
    .await
    .unwrap();
    let rivals = redlock(&servers, Duration::from_secs(30)).await;
    let waiting = {
        let lock = rivals.lock("{matrix-kill}:redlock");
        tokio::spawn(async move {
            let guard = lock.try_lock_for(Duration::from_secs(10)).await;
            (Instant::now(), guard)
        })
    };
    tokio::time::sleep(Duration::from_millis(400)).await;
    assert!(
        !waiting.is_finished(),
        "the rival got it while the holder lived"
    );
    // Killed before the leases are read (see `HoldProcess::kill`). A RedLock holds a
    // majority, not necessarily every server: a server whose acquire was late (the CPU is
    // shared here) has no key, and is free from the start (PTTL -2). A key without an
    // expiry (-1) would be a bug.
    let killed_at = Instant::now();
    holder.kill();
    // When each server was read, and what was left there of the dead holder's lease
    // (`None`: it held none).
    let leases: Vec<(Instant, Option<Duration>)> = servers
        .iter()
        .map(|server| {
            let read_at = Instant::now();
            let pttl: i64 = redis::cmd("PTTL")
                .arg("{matrix-kill}:redlock")
                .query(&mut server.connection())
                .unwrap();
            let left =
                (pttl != -2).then(|| Duration::from_millis(u64::try_from(pttl).expect("a lease")));
            (read_at, left)
        })
        .collect();
    assert!(
        leases.iter().filter(|(_, left)| left.is_some()).count() >= 3,
        "the dead holder held a majority: {leases:?}"
    );
    let mut expiries: Vec<Instant> = leases
        .iter()
        .map(|(read_at, left)| *read_at + left.unwrap_or_default())
        .collect();
    expiries.sort();
    let majority_free = expiries[2];
    let (acquired_at, guard) = waiting.await.unwrap();
    guard
        .expect("the rival gets the lock")
        .unlock()
        .await
        .unwrap();
    println!(
        "matrix redlock holder_killed: rival in {:?} after the kill, {:?} after a majority's lease ended",
        acquired_at - killed_at,
        acquired_at.saturating_duration_since(majority_free)
    );
    assert!(
        acquired_at + Duration::from_millis(2) >= majority_free,
        "the rival got it before a majority's lease ended"
    );
    assert!(
        acquired_at <= *expiries.last().unwrap() + Duration::from_millis(500),
        "the rival got it {:?} after the last lease ended",
        acquired_at - *expiries.last().unwrap()
    );
}

/// Every command connection of all five servers killed, then 1.2 s (more than the 900 ms
/// watchdog): the lock kept by renewals on new connections and still exclusive; after the
/// release a waiting rival holds it within its next round.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redlock_connections_killed() {
    let _cpu = crate::support::sharing_cpu().await;
    let servers = servers();
    let holders = redlock(&servers, Duration::from_millis(900)).await;
    let rivals = redlock(&servers, Duration::from_secs(30)).await;
    let guard = holders.lock("matrix:redlock:kill").lock().await.unwrap();
    let waiting = {
        let lock = rivals.lock("matrix:redlock:kill");
        tokio::spawn(async move {
            let guard = lock.try_lock_for(Duration::from_secs(10)).await;
            (Instant::now(), guard)
        })
    };
    tokio::time::sleep(Duration::from_millis(200)).await;
    for server in &servers {
        assert!(kill_connections(&mut server.connection(), "normal") > 0);
    }
    tokio::time::sleep(Duration::from_millis(1200)).await;
    assert!(!guard.is_lost(), "lost after its connections were killed");
    assert!(!waiting.is_finished(), "not exclusive");
    let unlocked_at = Instant::now();
    guard.unlock().await.unwrap();
    let (acquired_at, rival) = waiting.await.unwrap();
    rival.unwrap().unlock().await.unwrap();
    let hand_off = acquired_at - unlocked_at;
    println!("matrix redlock connection_killed: kept, rival in {hand_off:?} after the release");
    assert!(
        hand_off <= Duration::from_millis(500),
        "hand-off {hand_off:?}"
    );
}

/// Both cores saturated for 3 s with a RedLock held (watchdog 1 s): kept, and a rival's
/// `try_lock` refused each time; the control, a 1 s explicit lease, is lost at its
/// deadline in the same run.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redlock_cpu_starvation() {
    let _cpu = crate::support::owning_cpu().await;
    let servers = servers();
    let holders = redlock(&servers, Duration::from_secs(1)).await;
    let rivals = redlock(&servers, Duration::from_secs(30)).await;
    let guard = holders.lock("matrix:redlock:starved").lock().await.unwrap();
    let control = holders
        .lock("matrix:redlock:starved-control")
        .lock_with_lease(Duration::from_secs(1))
        .await
        .unwrap();
    let (stop, burners) = burn_cpu();
    let started = Instant::now();
    let mut refusals = 0;
    while started.elapsed() < Duration::from_secs(3) {
        match rivals.lock("matrix:redlock:starved").try_lock().await {
            Err(LockError::Timeout { .. }) => refusals += 1,
            other => panic!("rival under starvation: {:?}", other.map(drop)),
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    for burner in burners {
        burner.join().unwrap();
    }
    assert!(!guard.is_lost(), "lost under CPU starvation");
    assert!(control.is_lost(), "the 1 s lease control was not lost");
    guard.unlock().await.unwrap();
    println!("matrix redlock cpu_starvation: held 3 s, {refusals} rival attempts refused");
}
