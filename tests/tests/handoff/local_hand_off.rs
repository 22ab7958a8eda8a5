//! A release that finds a task of its client waiting next gives the lock to that task in
//! the same script (its hold, lease and fencing token): the task holds it without a try of
//! its own. These tests hold the promises around that step: one script call per local
//! hand-off, a deadline never later than Redis' expiry, tokens that still grow, a task
//! that stopped waiting gets the lock given back (not held by nobody for its lease), a
//! lost reply neither loses the hand-off nor mints a second token, with `replica_acks` no
//! task holds a hand-off the replicas did not confirm, and a given hold is renewed and
//! outlives its dead process by its lease only; and `inspect` counts the tasks a local line
//! holds, which Redis' registry does not see.

use std::sync::Arc;
use std::time::{Duration, Instant};

use dlock::fencing::Fence;
use dlock::{Lock, LockClient, LockGuard, Topology};
use dlock_tests::commandstats::command_calls;
use dlock_tests::{patient_client, HoldProcess, RedisReplicaSet, RedisServer, TcpProxy};
use redis::Commands;
use tokio::sync::Mutex;
use tokio::task::JoinHandle;

/// Script calls Redis ran since `before` (both script commands).
fn script_calls(server: &RedisServer, before: &std::collections::HashMap<String, u64>) -> u64 {
    let after = command_calls(&mut server.connection());
    ["evalsha", "fcall"]
        .iter()
        .map(|command| {
            after.get(*command).copied().unwrap_or(0) - before.get(*command).copied().unwrap_or(0)
        })
        .sum()
}

/// When Redis lets `key` expire, read now: no earlier than the request's send + PTTL (the
/// server counted the PTTL after the send) and no later than the reply's arrival + PTTL +
/// 1 ms (Redis keeps expiries in whole milliseconds). The round trip between the two is
/// a few milliseconds on a loaded machine.
fn expiry_between(conn: &mut redis::Connection, key: &str) -> (Instant, Instant) {
    let sent_at = Instant::now();
    let pttl: i64 = redis::cmd("PTTL").arg(key).query(conn).unwrap();
    let read_at = Instant::now();
    let pttl = Duration::from_millis(u64::try_from(pttl).expect("held with a lease"));
    (sent_at + pttl, read_at + pttl + Duration::from_millis(1))
}

/// The latest moment Redis can still hold `key` (see [`expiry_between`]).
fn latest_expiry(conn: &mut redis::Connection, key: &str) -> Instant {
    expiry_between(conn, key).1
}

/// Takes `lock`, then starts a task of the same client that waits for it behind the
/// holder, in the client's local line (it is there when this returns); the task reports
/// when its wait ended.
async fn holder_and_next(
    lock: &Lock,
) -> (LockGuard, JoinHandle<(Instant, dlock::Result<LockGuard>)>) {
    let holder = lock.lock().await.unwrap();
    let next = {
        let lock = lock.clone();
        tokio::spawn(async move {
            let guard = lock.lock().await;
            (Instant::now(), guard)
        })
    };
    tokio::time::sleep(Duration::from_millis(100)).await;
    (holder, next)
}

/// Eight tasks of one client wait in line behind a holder; each, once it holds the lock,
/// gives it back. Every hand-off is the release's one script call (nine in all, none for
/// the waiters' acquisitions), the tokens grow by one per hand-off in line order, and each
/// task's deadline is no later than what Redis says. Fails when a release only frees the
/// lock and the next task must try itself (17 script calls).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_local_hand_off_is_one_script_call() {
    let server = RedisServer::start();
    let client = LockClient::connect(&server.url()).await.unwrap();
    let lock = client.lock("local:line");
    let first = lock.lock().await.unwrap();
    let order = Arc::new(Mutex::new(Vec::new()));
    let mut tasks = Vec::new();
    for i in 0..8 {
        let (lock, order) = (lock.clone(), Arc::clone(&order));
        let url = server.url();
        tasks.push(tokio::spawn(async move {
            let guard = lock.lock().await.unwrap();
            // The deadline before Redis' expiry: a renewal in between moves the expiry
            // first.
            let deadline = guard.deadline();
            let mut conn = redis::Client::open(url).unwrap().get_connection().unwrap();
            let expiry = latest_expiry(&mut conn, "local:line");
            assert!(
                deadline <= expiry,
                "task {i}'s deadline is {:?} past Redis' expiry",
                deadline - expiry
            );
            order.lock().await.push((i, guard.fencing_token().unwrap()));
            guard.unlock().await.unwrap();
        }));
        // In line in this order.
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let first_token = first.fencing_token().unwrap();
    let before = command_calls(&mut server.connection());
    first.unlock().await.unwrap();
    for task in tasks {
        task.await.unwrap();
    }
    let calls = script_calls(&server, &before);
    assert_eq!(calls, 9, "one release per hand-off and no acquisitions");
    let order = order.lock().await;
    let expected: Vec<(i32, Fence)> = (0..8)
        .map(|i| (i, Fence::new(first_token.get() + 1 + i as u64)))
        .collect();
    assert_eq!(*order, expected, "line order, one token each");
    assert!(!lock.is_locked().await.unwrap());
}

/// The next task is cancelled while the release that gives it the lock is on its way
/// back (replies delayed 300 ms): its client gives the lock back for it, so a client
/// waiting elsewhere gets it once the reply arrived, not when the cancelled task's 30 s
/// lease ends. Fails when the client drops the hand-off of a task that left.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_task_cancelled_while_given_the_lock_gives_it_back() {
    let server = RedisServer::start();
    let proxy = TcpProxy::start(server.addr());
    let client = patient_client(&proxy.url()).await;
    let rival = patient_client(&server.url()).await;
    let (holder, next) = holder_and_next(&client.lock("local:cancelled")).await;
    let waiting = {
        let lock = rival.lock("local:cancelled");
        tokio::spawn(async move {
            let guard = lock.try_lock_for(Duration::from_secs(10)).await;
            (Instant::now(), guard)
        })
    };
    tokio::time::sleep(Duration::from_millis(100)).await;
    proxy.delay_replies(Duration::from_millis(300));
    let unlocked_at = Instant::now();
    let unlocking = tokio::spawn(holder.unlock());
    tokio::time::sleep(Duration::from_millis(100)).await;
    // The release reached Redis: the lock is the next task's now.
    let owners: Vec<String> = server.connection().hkeys("local:cancelled").unwrap();
    assert_eq!(
        owners.len(),
        2,
        "the next task's hold and token: {owners:?}"
    );
    next.abort();
    assert!(next.await.unwrap_err().is_cancelled());
    unlocking.await.unwrap().unwrap();
    proxy.delay_replies(Duration::ZERO);
    let (acquired_at, guard) = waiting.await.unwrap();
    let guard = guard.expect("the rival gets the lock given back");
    let after = acquired_at - unlocked_at;
    println!("local hand-off to a cancelled task: the rival held it {after:?} after the release");
    assert!(after < Duration::from_secs(2), "after {after:?}");
    guard.unlock().await.unwrap();
    let keys: Vec<String> = server.connection().keys("*local:cancelled*").unwrap();
    assert!(keys.is_empty(), "left behind: {keys:?}");
}

/// The holder's `unlock` is cancelled after its release reached Redis and gave the lock to
/// the next task, before the answer came (replies delayed 300 ms): the next task, never
/// told, tries itself, and its try finds the hold the release gave it (same token) at
/// once, not when that hold's 30 s lease ends.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unlock_cancelled_after_its_release_was_applied_still_hands_the_lock_on() {
    let server = RedisServer::start();
    let proxy = TcpProxy::start(server.addr());
    let client = LockClient::connect(&proxy.url()).await.unwrap();
    let (holder, next) = holder_and_next(&client.lock("local:cancelled-unlock")).await;
    let first_token = holder.fencing_token().unwrap();
    proxy.delay_replies(Duration::from_millis(300));
    let unlocking = tokio::spawn(holder.unlock());
    tokio::time::sleep(Duration::from_millis(100)).await;
    let owners: Vec<String> = server.connection().hkeys("local:cancelled-unlock").unwrap();
    assert_eq!(owners.len(), 2, "given to the next task: {owners:?}");
    unlocking.abort();
    let cancelled_at = Instant::now();
    let (acquired_at, next) = tokio::time::timeout(Duration::from_secs(3), next)
        .await
        .expect("the next task holds the lock")
        .unwrap();
    let next = next.unwrap();
    proxy.delay_replies(Duration::ZERO);
    println!(
        "local hand-off, unlock cancelled: the next task held it {:?} after the cancel",
        acquired_at - cancelled_at
    );
    assert_eq!(
        next.fencing_token().unwrap().get(),
        first_token.get() + 1,
        "the token the release minted"
    );
    next.unlock().await.unwrap();
    let keys: Vec<String> = server.connection().keys("*cancelled-unlock*").unwrap();
    assert!(keys.is_empty(), "left behind: {keys:?}");
}

/// The release's reply is lost (the proxy drops it and closes the connection after
/// Redis applied it): the retried release finds the next task holding and says so, with
/// the token the first send minted. The task holds the lock with that one token (the
/// next acquisition's is one more), and nothing is held twice.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lost_release_reply_still_hands_the_lock_on_once() {
    let server = RedisServer::start();
    let proxy = TcpProxy::start(server.addr());
    let client = LockClient::builder()
        .command_timeout(Duration::from_secs(1))
        .connect(&proxy.url())
        .await
        .unwrap();
    let (holder, next) = holder_and_next(&client.lock("local:lost-reply")).await;
    let first_token = holder.fencing_token().unwrap();
    proxy.lose_next_reply();
    holder.unlock().await.unwrap();
    let (_, next) = tokio::time::timeout(Duration::from_secs(5), next)
        .await
        .expect("the next task holds the lock")
        .unwrap();
    let next = next.unwrap();
    let token = next.fencing_token().unwrap();
    assert_eq!(
        token.get(),
        first_token.get() + 1,
        "one token for the hand-off"
    );
    assert_eq!(next.hold_count().await.unwrap(), 1, "held once");
    next.unlock().await.unwrap();
    let after = client.lock("local:lost-reply").lock().await.unwrap();
    assert_eq!(after.fencing_token().unwrap().get(), token.get() + 1);
    after.unlock().await.unwrap();
}

/// With `replica_acks`, a lock given to the next task counts only once the replica
/// confirmed it, as that task's own acquisition would: with the replica cut off, the task
/// holds nothing until it is back. Fails when the release's hand-off skips the `WAIT`
/// (the task would hold a hold a failover can lose, while the replica is away).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_replica_acks_a_hand_off_counts_once_the_replica_confirmed_it() {
    let set = RedisReplicaSet::start(1);
    let topology = Topology::master_replicas(set.master_url(), set.replica_urls());
    let client = LockClient::builder()
        .replica_acks(1, Duration::from_millis(200))
        .failover_wait(Duration::from_secs(30))
        .connect_to(&topology)
        .await
        .unwrap();
    let (holder, next) = holder_and_next(&client.lock("local:acked")).await;
    set.cut_off_replicas();
    holder.unlock().await.unwrap();
    tokio::time::sleep(Duration::from_millis(800)).await;
    assert!(
        !next.is_finished(),
        "the next task holds a hand-off no replica confirmed"
    );
    let resumed_at = Instant::now();
    set.replicas[0].resume();
    let (acquired_at, guard) = tokio::time::timeout(Duration::from_secs(20), next)
        .await
        .expect("the next task holds the lock once the replica is back")
        .unwrap();
    assert!(acquired_at >= resumed_at);
    guard.unwrap().unlock().await.unwrap();
}

/// A process whose release gave the lock to its next task (`dlock-hold --kind
/// lock-given`, watchdog 1.5 s) holds it for 2 s and is killed: a rival waiting in another
/// process does not get it while the process lives (the given hold is renewed), and gets
/// it once the lease last renewed ran out, never before. Fails when a given hold is not
/// renewed: the rival takes it 1.5 s after the hand-off, while its holder lives.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_given_hold_is_renewed_and_outlives_its_killed_process_by_its_lease() {
    let server = RedisServer::start();
    let args = [
        &server.url(),
        "local:killed",
        "--watchdog",
        "1500ms",
        "--kind",
        "lock-given",
    ];
    let mut holder = HoldProcess::start_in_background(
        env!("CARGO_BIN_EXE_dlock-hold"),
        args.map(str::to_owned).to_vec(),
    )
    .await
    .unwrap();
    let rival = patient_client(&server.url()).await;
    let waiting = {
        let lock = rival.lock("local:killed");
        tokio::spawn(async move {
            let guard = lock.try_lock_for(Duration::from_secs(10)).await;
            (Instant::now(), guard)
        })
    };
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert!(
        !waiting.is_finished(),
        "the rival got the lock while the task it was given to lived"
    );
    // Killed before the lease is read (see `HoldProcess::kill`).
    holder.kill();
    // "Never before" is checked against the earliest the lease can end, "promptly" against
    // the latest: the reply's arrival alone made the rival look 2.9 ms early once, beside a
    // build, by the PTTL's own round trip.
    let (earliest, latest) = expiry_between(&mut server.connection(), "local:killed");
    let (acquired_at, guard) = waiting.await.unwrap();
    guard
        .expect("the rival gets the lock")
        .unlock()
        .await
        .unwrap();
    println!(
        "local hand-off, process killed: the rival held it {:?} after the given lease's end",
        acquired_at.saturating_duration_since(latest)
    );
    assert!(
        acquired_at >= earliest,
        "the rival got it {:?} before the given lease ended",
        earliest - acquired_at
    );
    assert!(
        acquired_at <= latest + Duration::from_millis(250),
        "the rival got it {:?} after the given lease ended",
        acquired_at - latest
    );
}

/// What `inspect` says of `name`: (tasks in local lines per client id, registered waiters).
async fn lined_and_registered(client: &LockClient, name: &str) -> (Vec<(String, u64)>, usize) {
    let info = client.lock(name).inspect().await.unwrap();
    let lines = info
        .local_lines
        .iter()
        .map(|line| (line.client.client_id.clone(), line.tasks))
        .collect();
    (lines, info.waiting_clients.len())
}

/// Waits until `inspect` shows `expected` (see [`lined_and_registered`]) for `name`,
/// failing with `what` after `within`.
async fn until_inspect_shows(
    client: &LockClient,
    name: &str,
    expected: (Vec<(String, u64)>, usize),
    within: Duration,
    what: &str,
) {
    let deadline = Instant::now() + within;
    loop {
        let seen = lined_and_registered(client, name).await;
        if seen == expected {
            return;
        }
        assert!(Instant::now() < deadline, "{what}: inspect shows {seen:?}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// The report's own lifetime with the default 1 s recheck is three rechecks and a second:
/// a report gone well within it was taken back, not expired.
const TAKEN_BACK_WITHIN: Duration = Duration::from_secs(2);

/// `inspect` counts the tasks that wait in their client's local line, which Redis'
/// registry does not see (a client goes to Redis with one task at a time): three tasks of
/// the holder's own client and a waiter of another client show as three lined tasks of
/// that client and one registered waiter; once every task had its turn, the report is
/// gone. Fails when a local line is reported nowhere (`waiters: 0` for three waiting
/// tasks, as a newcomer found) or when its report outlives the line.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn inspect_counts_the_tasks_waiting_in_a_local_line() {
    let server = RedisServer::start();
    let client = LockClient::connect(&server.url()).await.unwrap();
    let other = LockClient::connect(&server.url()).await.unwrap();
    let lock = client.lock("lined");
    let guard = lock.lock().await.unwrap();
    let mut tasks: Vec<JoinHandle<()>> = Vec::new();
    for _ in 0..3 {
        let lock = lock.clone();
        tasks.push(tokio::spawn(async move {
            lock.lock().await.unwrap().unlock().await.unwrap();
        }));
    }
    let elsewhere = other.lock("lined");
    tasks.push(tokio::spawn(async move {
        elsewhere.lock().await.unwrap().unlock().await.unwrap();
    }));

    let lined = vec![(client.id().to_string(), 3)];
    until_inspect_shows(
        &client,
        "lined",
        (lined, 1),
        Duration::from_secs(10),
        "not three lined tasks and one registered waiter",
    )
    .await;

    guard.unlock().await.unwrap();
    for task in tasks {
        tokio::time::timeout(Duration::from_secs(10), task)
            .await
            .expect("every task got its turn")
            .unwrap();
    }
    until_inspect_shows(
        &client,
        "lined",
        (Vec::new(), 0),
        TAKEN_BACK_WITHIN,
        "the line's report outlived the line",
    )
    .await;
}

/// A line's only waiting task gives up (its wait runs out) after the line was reported:
/// it takes the report back as it leaves, so `inspect` shows no lined task at once, not
/// when the report expires. Fails when only a task that gets its turn takes it back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lined_task_that_gives_up_takes_the_report_back() {
    let server = RedisServer::start();
    let client = LockClient::connect(&server.url()).await.unwrap();
    let lock = client.lock("lined:gives-up");
    let guard = lock.lock().await.unwrap();
    let waiting = {
        let lock = lock.clone();
        tokio::spawn(async move { lock.try_lock_for(Duration::from_millis(1_500)).await })
    };
    let lined = vec![(client.id().to_string(), 1)];
    until_inspect_shows(
        &client,
        "lined:gives-up",
        (lined, 0),
        Duration::from_secs(5),
        "the line was never reported",
    )
    .await;
    assert!(waiting.await.unwrap().is_err(), "the lined task gave up");
    until_inspect_shows(
        &client,
        "lined:gives-up",
        (Vec::new(), 0),
        TAKEN_BACK_WITHIN,
        "the report outlived the task that gave up",
    )
    .await;
    guard.unlock().await.unwrap();
}
