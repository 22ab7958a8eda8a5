//! `LockClientBuilder::replica_acks`: an acquisition counts only once replicas confirmed
//! it (Redis `WAIT` after the acquire script, on the same connection, one the `WAIT`
//! has to itself). With the replica cut off, `try_lock` reports `NotReplicated` and
//! leaves nothing behind; `lock()` waits until the replica is back; the client's other
//! commands are not delayed.

use std::time::{Duration, Instant};

use dlock::{LockClient, LockError, LossReason, Topology};
use dlock_tests::commandstats::command_calls;
use dlock_tests::keys::{self, LockKeys};
use dlock_tests::RedisReplicaSet;

const WITHIN: Duration = Duration::from_millis(200);

async fn acked_client(set: &RedisReplicaSet, failover_wait: Duration) -> LockClient {
    let topology = Topology::master_replicas(set.master_url(), set.replica_urls());
    LockClient::builder()
        .replica_acks(1, WITHIN)
        .failover_wait(failover_wait)
        .connect_to(&topology)
        .await
        .unwrap()
}

fn wait_calls(set: &RedisReplicaSet) -> u64 {
    command_calls(&mut set.master.connection())
        .get("wait")
        .copied()
        .unwrap_or(0)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn acquisitions_wait_for_the_replica_and_fail_cleanly_without_it() {
    let set = RedisReplicaSet::start(1);
    let client = acked_client(&set, Duration::from_secs(5)).await;

    // Healthy: locks as usual, with a WAIT per acquisition (more if one timed out on a
    // busy machine and `lock()` tried again).
    let before = wait_calls(&set);
    let mut healthy = Vec::new();
    for _ in 0..5 {
        let started = Instant::now();
        let guard = client.lock("acked:healthy").lock().await.unwrap();
        healthy.push(started.elapsed());
        guard.unlock().await.unwrap();
    }
    let waits = wait_calls(&set) - before;
    assert!(waits >= 5, "{waits} WAITs for 5 acquisitions");

    set.cut_off_replicas();
    let started = Instant::now();
    let refused = client.lock("acked:cut").try_lock().await;
    let refused_after = started.elapsed();
    match &refused {
        Err(LockError::NotReplicated {
            acked: 0,
            wanted: 1,
            ..
        }) => {}
        other => panic!("try_lock with the replica cut off: {other:?}"),
    }
    assert!(
        refused_after >= WITHIN && refused_after < WITHIN + Duration::from_millis(500),
        "refused after {refused_after:?}"
    );
    // The lock taken on the master is handed back.
    let mut master = set.master.connection();
    let cleanup = Instant::now();
    while redis::cmd("EXISTS")
        .arg("acked:cut")
        .query::<bool>(&mut master)
        .unwrap()
    {
        assert!(
            cleanup.elapsed() < Duration::from_secs(2),
            "acked:cut left behind"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let cleaned_up = cleanup.elapsed();

    // A blocking acquisition keeps trying (as through an outage) until the replica is back.
    let waiting = {
        let lock = client.lock("acked:blocking");
        tokio::spawn(async move {
            let guard = lock.lock().await;
            (Instant::now(), guard)
        })
    };
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert!(!waiting.is_finished(), "acquired without a replica");
    let resumed = Instant::now();
    set.replicas[0].resume();
    let (acquired_at, guard) = waiting.await.unwrap();
    let guard = guard.unwrap_or_else(|e| panic!("lock() after the replica came back: {e}"));
    // Its first attempt wrote the lock a second ago; the attempt that counted restarted
    // the lease, so the holder's deadline is not later than Redis' expiry. Redis keeps
    // expiries in whole milliseconds, so the expiry read back is known to within one:
    // the latest it can be is the reply's arrival + PTTL + 1 ms. (The deadline is read
    // first: a renewal landing between the two reads only moves the expiry.)
    let deadline = guard.deadline();
    let pttl: u64 = redis::cmd("PTTL")
        .arg("acked:blocking")
        .query(&mut set.master.connection())
        .unwrap();
    let expiry = std::time::Instant::now() + Duration::from_millis(pttl + 1);
    assert!(
        deadline <= expiry,
        "the holder's deadline is {:?} after Redis' expiry",
        deadline - expiry
    );
    let replica: i64 = redis::cmd("EXISTS")
        .arg("acked:blocking")
        .query(&mut set.replicas[0].connection())
        .unwrap();
    assert_eq!(replica, 1, "the replica has the lock once it is granted");
    guard.unlock().await.unwrap();
    println!(
        "replica_acks(1, 200ms): healthy acquisitions {healthy:?} ({waits} WAITs); replica cut off → NotReplicated after {refused_after:?}, key gone {cleaned_up:?} later; lock() acquired {:?} after the replica resumed",
        acquired_at - resumed
    );
}

#[tokio::test]
async fn bad_replica_ack_settings_are_refused() {
    let builder = || LockClient::builder().command_timeout(Duration::from_secs(1));
    let topology = Topology::single("redis://127.0.0.1:1");
    match builder()
        .replica_acks(0, WITHIN)
        .connect_to(&topology)
        .await
    {
        Err(LockError::Config(message)) => assert!(message.contains("at least 1 replica")),
        other => panic!("0 replicas: {other:?}"),
    }
    for within in [Duration::ZERO, Duration::from_secs(1), Duration::MAX] {
        match builder()
            .replica_acks(1, within)
            .connect_to(&topology)
            .await
        {
            Err(LockError::InvalidDuration { what, .. }) => assert_eq!(what, "replica_acks wait"),
            other => panic!("within {within:?}: {other:?}"),
        }
    }
    let cluster = Topology::cluster(vec!["redis://127.0.0.1:1".to_owned()]);
    match builder().replica_acks(1, WITHIN).connect_to(&cluster).await {
        Err(LockError::Config(message)) => assert!(message.contains("Cluster"), "{message}"),
        other => panic!("cluster: {other:?}"),
    }
}

/// `WAIT` blocks the connection it runs on. With the replica cut off, 20 acquisitions
/// keep a `WAIT` pending at every moment for 2 s; on a shared connection the client's
/// other commands queued behind them (seconds per call). Each `WAIT` must get a
/// connection of its own. A watchdog lock held meanwhile is lost at its deadline: its
/// renewals are not confirmed by the cut replica either.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pending_wait_delays_no_other_command() {
    let set = RedisReplicaSet::start(1);
    let topology = Topology::master_replicas(set.master_url(), set.replica_urls());
    let client = LockClient::builder()
        .replica_acks(1, WITHIN)
        .watchdog_timeout(Duration::from_secs(1))
        .connect_to(&topology)
        .await
        .unwrap();
    let held = client.lock("acked:watched").lock().await.unwrap();
    set.cut_off_replicas();

    let until = Instant::now() + Duration::from_secs(2);
    let acquirers: Vec<_> = (0..20)
        .map(|n| {
            let lock = client.lock(&format!("acked:crowd:{n}"));
            tokio::spawn(async move {
                let (mut refused, mut granted) = (0u32, 0u32);
                while Instant::now() < until {
                    match lock.try_lock().await {
                        Ok(_) => granted += 1,
                        Err(_) => refused += 1,
                    }
                }
                (refused, granted)
            })
        })
        .collect();

    let unrelated = client.lock("acked:unrelated");
    let mut latencies = Vec::new();
    while Instant::now() < until {
        let started = Instant::now();
        assert!(!unrelated.is_locked().await.unwrap());
        latencies.push(started.elapsed());
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let (mut refused, mut granted) = (0, 0);
    for acquirer in acquirers {
        let (r, g) = acquirer.await.unwrap();
        refused += r;
        granted += g;
    }
    latencies.sort();
    let p99 = latencies[latencies.len() * 99 / 100];
    let worst = *latencies.last().unwrap();
    println!(
        "20 acquisitions waiting for a cut replica: {refused} refused, {granted} granted; unrelated is_locked over {} calls: p99 {p99:?}, worst {worst:?}",
        latencies.len()
    );
    assert_eq!(granted, 0, "an acquisition counted without its replica");
    assert!(
        refused >= 20,
        "the WAITs did not happen: {refused} refusals"
    );
    assert!(p99 <= Duration::from_millis(50), "p99 {p99:?}");
    // The watched lock's renewals are not confirmed either while the replica is cut off:
    // its deadline does not move, and its holder is told when it passes.
    let loss = tokio::time::timeout(Duration::from_secs(2), held.lost()).await;
    assert!(
        matches!(
            loss,
            Ok(LockError::Lost {
                reason: LossReason::LeaseExpired,
                ..
            })
        ),
        "unconfirmed renewals must not keep the lock: {loss:?}"
    );
}

/// A same-slot multi-lock takes all its keys in one script, which one `WAIT` confirms
/// (it covers every write of the script): with `replica_acks` it never hands out a set
/// the replicas did not confirm.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_same_slot_multi_lock_is_confirmed_by_replicas_too() {
    let set = RedisReplicaSet::start(1);
    let client = acked_client(&set, Duration::from_secs(5)).await;
    let names = ["{acked}:a", "{acked}:b"];
    let multi = dlock::MultiLock::same_slot(&client, names).unwrap();

    let before = wait_calls(&set);
    multi.lock().await.unwrap().unlock().await.unwrap();
    let waits = wait_calls(&set) - before;
    assert!(waits >= 1, "{waits} WAITs for a set of 2 locks");

    set.cut_off_replicas();
    match multi.try_lock().await {
        Err(LockError::NotReplicated { .. }) => {}
        other => panic!("a set the replica never saw was handed out: {other:?}"),
    }
    // The refused hold is released as the lock's is: at once, possibly from the
    // background task (the lock's own test measures ~0.1 ms).
    let mut conn = set.master.connection();
    let refused_at = Instant::now();
    loop {
        let left: u32 = redis::cmd("EXISTS")
            .arg(client.lock(names[0]).key())
            .arg(client.lock(names[1]).key())
            .query(&mut conn)
            .unwrap();
        if left == 0 {
            break;
        }
        assert!(
            refused_at.elapsed() < Duration::from_secs(2),
            "a refused set left {left} key(s) behind"
        );
        std::thread::sleep(Duration::from_millis(5));
    }
    set.replicas[0].resume();
}

/// The read-write lock's holds (and a writer's fencing token) count only once the
/// replicas confirmed them, like the lock's.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn read_and_write_holds_are_confirmed_by_replicas_too() {
    let set = RedisReplicaSet::start(1);
    let client = acked_client(&set, Duration::from_secs(5)).await;
    let rw = client.rw_lock("acked:catalog");

    let before = wait_calls(&set);
    let write = rw.write().lock().await.unwrap();
    assert!(write.fencing_token().is_some());
    write.unlock().await.unwrap();
    rw.read().lock().await.unwrap().unlock().await.unwrap();
    let waits = wait_calls(&set) - before;
    assert!(
        waits >= 2,
        "{waits} WAITs for a write and a read acquisition"
    );

    set.cut_off_replicas();
    for (side, refused) in [
        ("write", rw.write().try_lock().await),
        ("read", rw.read().try_lock().await),
    ] {
        match refused {
            Err(LockError::NotReplicated { .. }) => {}
            other => panic!("a {side} hold the replica never saw was handed out: {other:?}"),
        }
    }
    assert!(
        !rw.is_locked().await.unwrap(),
        "a refused hold was left behind"
    );
    set.replicas[0].resume();
}

/// A semaphore's grant counts only once the replicas confirmed it, and one they never saw
/// gives its permits back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn semaphore_grants_are_confirmed_by_replicas_too() {
    let set = RedisReplicaSet::start(1);
    let client = acked_client(&set, Duration::from_secs(5)).await;
    let pool = client.semaphore("acked:pool", 2);

    let before = wait_calls(&set);
    pool.acquire(1).await.unwrap().unlock().await.unwrap();
    let waits = wait_calls(&set) - before;
    assert!(waits >= 1, "{waits} WAITs for a grant");

    set.cut_off_replicas();
    match pool.try_acquire(2).await {
        Err(LockError::NotReplicated { .. }) => {}
        other => panic!("a grant the replica never saw was handed out: {other:?}"),
    }
    assert_eq!(
        pool.available_permits().await.unwrap(),
        2,
        "a refused grant kept its permits"
    );
    set.replicas[0].resume();
}

/// Fenced writes follow `replica_acks` too: healthy, each is followed by a `WAIT`; with
/// the replica cut off, a write is reported `NotReplicated` (after its retries) instead
/// of being acknowledged on the master alone.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fenced_writes_wait_for_the_replica_too() {
    let set = RedisReplicaSet::start(1);
    let client = acked_client(&set, Duration::from_secs(5)).await;
    let fenced = client.fenced();
    let fence = dlock::fencing::Fence::new(1);
    let before = wait_calls(&set);
    fenced.set("stock:acked", "5", fence).await.unwrap();
    assert_eq!(fenced.incr_by("stock:acked", -1, fence).await.unwrap(), 4);
    assert!(wait_calls(&set) - before >= 2, "a WAIT per fenced write");

    set.cut_off_replicas();
    match fenced.incr_by("stock:acked", -1, fence).await {
        Err(LockError::NotReplicated { .. }) => {}
        other => panic!("a fenced write no replica confirmed: {other:?}"),
    }
    set.replicas[0].resume();
}

/// A fenced increment not confirmed in time is sent again with its `WAIT` (its memo makes
/// it count once), so a replica that comes back within the command timeout turns it into
/// a success, applied once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fenced_increment_confirmed_late_counts_once() {
    let set = RedisReplicaSet::start(1);
    let client = acked_client(&set, Duration::from_secs(5)).await;
    let fenced = client.fenced();
    let fence = dlock::fencing::Fence::new(1);
    fenced.set("stock:late", "5", fence).await.unwrap();

    set.replicas[0].pause();
    let before = wait_calls(&set);
    let (left, ()) = tokio::join!(fenced.incr_by("stock:late", -1, fence), async {
        tokio::time::sleep(WITHIN * 3).await;
        set.replicas[0].resume();
    });
    assert_eq!(left.unwrap(), 4, "the increment counts once");
    assert!(
        wait_calls(&set) - before >= 2,
        "the write was confirmed on a later WAIT"
    );
    let stored: i64 = redis::cmd("GET")
        .arg("stock:late")
        .query(&mut set.master.connection())
        .unwrap();
    assert_eq!(stored, 4);
}

/// A sequential multi-lock keeps the locks it took first alive while it waits for a later
/// one (a renewal every third of its explicit lease). With `replica_acks`, those renewals
/// count only once the replicas confirmed them, as the watchdog's do: with the replica cut
/// off while it waits, the first lock's deadline stays where its confirmed acquisition put
/// it, so the set is not handed out on a hold that only the cut-off master extended (a
/// promoted replica would have let it expire). Before the fix the renewals went without
/// `WAIT`, moved the deadline, and the set was acquired. A renewal once the deadline has
/// passed is not sent at all: the flake hunt saw one, confirmed after the replica came
/// back, revive the first lock before anything had read its loss.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sequential_multi_locks_early_holds_are_renewed_with_replica_acks() {
    const LEASE: Duration = Duration::from_millis(900);
    let set = RedisReplicaSet::start(1);
    let client = acked_client(&set, Duration::from_secs(5)).await;
    let rival = acked_client(&set, Duration::from_secs(5)).await;
    let busy = rival.lock("acked:{seq}:b").lock().await.unwrap();
    let multi =
        dlock::MultiLock::sequential([client.lock("acked:{seq}:a"), client.lock("acked:{seq}:b")])
            .unwrap();
    let acquisition = tokio::spawn(async move { multi.lock_with_lease(LEASE).await });

    // The first lock is taken and confirmed, and the set waits for the second: its owner
    // is registered among the second lock's waiters (which it is only once the first
    // acquisition's `WAIT` answered and the second's try came back busy).
    let mut conn = set.master.connection();
    let second = LockKeys::new("", "acked:{seq}:b");
    let started = Instant::now();
    while keys::registered(&mut conn, &second.registry).is_empty() {
        assert!(
            started.elapsed() < Duration::from_secs(5),
            "the set never waited for its second lock"
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    assert!(
        keys::exists(&mut conn, "acked:{seq}:a"),
        "the first lock is held"
    );
    let taken = Instant::now();
    set.cut_off_replicas();
    // Two renewals go out unconfirmed; then the first lock's own deadline passes.
    tokio::time::sleep(LEASE + Duration::from_millis(300)).await;
    set.replicas[0].resume();
    set.wait_replicated();
    busy.unlock().await.unwrap();
    let outcome = tokio::time::timeout(Duration::from_secs(10), acquisition)
        .await
        .expect("the multi-lock never finished")
        .unwrap();
    match outcome {
        Err(LockError::Lost { name, .. }) => assert_eq!(name, "acked:{seq}:a"),
        other => panic!(
            "renewals the replica never confirmed kept the first lock {:?} past its lease: {other:?}",
            taken.elapsed()
        ),
    }
}

/// A release that gives the lock to the next task in its client's local line waits for the
/// replica too; unconfirmed, the task does not count on it and tries itself. A task that
/// stopped waiting while that release was on its way must get the hold given back, as for
/// any release whose outcome it cannot know, or the lock stays held by an owner nobody
/// has for the task's whole lease.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unconfirmed_local_grant_to_a_task_that_left_is_given_back() {
    let set = RedisReplicaSet::start(1);
    // A WAIT long enough that the waiting task surely left while it was pending.
    let topology = Topology::master_replicas(set.master_url(), set.replica_urls());
    let client = LockClient::builder()
        .replica_acks(1, Duration::from_secs(1))
        .connect_to(&topology)
        .await
        .unwrap();
    let name = "acked:{line}";
    let lease = Duration::from_secs(30);
    let holder = client.lock(name).lock_with_lease(lease).await.unwrap();
    let lock = client.lock(name);
    let next = tokio::spawn(async move { lock.lock_with_lease(lease).await });
    // The next task waits in the client's local line (the line reports it to `inspect`).
    let lined = Instant::now();
    loop {
        let info = client.lock(name).inspect().await.unwrap();
        if info.local_lines.iter().map(|line| line.tasks).sum::<u64>() == 1 {
            break;
        }
        assert!(
            lined.elapsed() < Duration::from_secs(5),
            "the second task never showed in its line: {info:?}"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }

    set.cut_off_replicas();
    let unlocking = tokio::spawn(holder.unlock());
    // The release, naming the next task, is on its way and waits for the replica.
    tokio::time::sleep(Duration::from_millis(300)).await;
    next.abort();
    assert!(next.await.unwrap_err().is_cancelled());
    unlocking.await.unwrap().unwrap();

    // The release gave the lock to the task that left (its hold is given back in the
    // background once the release answered): the lock is free within a round trip or two.
    let mut conn = set.master.connection();
    let keys = LockKeys::new("", name);
    let freed = keys::gone_within(&mut conn, &keys.key, Duration::from_secs(3)).await;
    assert!(
        freed.is_some(),
        "the lock is still held by the task that left ({:?} of its {lease:?} lease left)",
        Duration::from_millis(
            redis::cmd("PTTL")
                .arg(&keys.key)
                .query::<u64>(&mut conn)
                .unwrap_or(0)
        )
    );
    println!(
        "unconfirmed local grant: given back {:?} after the release",
        freed.unwrap()
    );
}
