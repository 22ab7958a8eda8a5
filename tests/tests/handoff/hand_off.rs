//! Guards the promises of the lock's hand-off between clients: one release wakes one
//! client (the longest waiting, through the lock's waiter registry), a client keeps a
//! contended lock for a bounded number of local hand-offs before passing it on, and a
//! client that stops waiting leaves the registry (also when it stops while its first try
//! is at Redis) and passes on a wake-up it was sent.
//!
//! Each client here stands for a process: it has its own connections, subscriber and
//! local line, exactly as a `LockClient` in another process would.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use dlock::LockClient;
use dlock_tests::commandstats::{command_calls, wait_for_calls};
use dlock_tests::keys::LockKeys;
use dlock_tests::liveness::slow_recheck;
use dlock_tests::RedisServer;
use redis::Commands;
use tokio::time::Instant;

/// The waiter registry of the lock `{tag}` (no key prefix): named like its unlock
/// channel, `dlock:unlock:<prefix>{<slot anchor>}:<name>`, whose anchor is the key's hash
/// tag.
fn registry(tag: &str) -> String {
    LockKeys::new("", &format!("{{{tag}}}")).registry
}

/// The registry entry of `client`'s waiter for the lock `{tag}`: its owner field,
/// `<client id>:<owner id>` (each waiting task registers under its own).
fn waiter_of(server: &RedisServer, tag: &str, client: &LockClient) -> String {
    let entries: Vec<String> = server.connection().zrange(registry(tag), 0, -1).unwrap();
    let prefix = format!("{}:", client.id());
    entries
        .into_iter()
        .find(|entry| entry.starts_with(&prefix))
        .unwrap_or_else(|| panic!("no waiter of {prefix} registered for {{{tag}}}"))
}

/// `clients` clients with `tasks` tasks each take the lock `name` of `server` in a loop
/// (a `yield_now` inside each section) until `sections` sections were held; which client
/// held each section, in the hand-off order.
async fn hand_off_order(
    server: &RedisServer,
    name: &str,
    clients: usize,
    tasks: usize,
    sections: u64,
) -> Vec<usize> {
    let taken = Arc::new(AtomicU64::new(0));
    let order = Arc::new(Mutex::new(Vec::new()));
    let mut running = Vec::new();
    for client_index in 0..clients {
        let client = LockClient::connect(&server.url()).await.unwrap();
        for _ in 0..tasks {
            let lock = client.lock(name);
            let (taken, order) = (Arc::clone(&taken), Arc::clone(&order));
            running.push(tokio::spawn(async move {
                loop {
                    let guard = lock.try_lock_for(Duration::from_secs(30)).await.unwrap();
                    if taken.fetch_add(1, Ordering::SeqCst) >= sections {
                        guard.unlock().await.unwrap();
                        return;
                    }
                    order.lock().unwrap().push(client_index);
                    tokio::task::yield_now().await;
                    guard.unlock().await.unwrap();
                }
            }));
        }
    }
    for task in running {
        tokio::time::timeout(Duration::from_secs(90), task)
            .await
            .expect("the tasks finished")
            .unwrap();
    }
    let order = order.lock().unwrap().clone();
    assert_eq!(order.len() as u64, sections);
    order
}

/// Twenty clients wait for one lock (each subscribed and registered); then the lock goes
/// from one to the next, each holding it briefly once. Every release must let about one
/// acquire attempt reach Redis, not one per waiting client. Fails when releases wake
/// every client (release i then costs 21 - i tries: about 10 on average).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_release_wakes_one_of_twenty_waiting_clients() {
    const CLIENTS: usize = 20;
    let server = RedisServer::start();
    let holder = LockClient::connect(&server.url()).await.unwrap();
    let guard = holder.lock("{herd}").lock().await.unwrap();
    let mut clients = Vec::new();
    let mut tasks = Vec::new();
    for _ in 0..CLIENTS {
        let client = LockClient::connect(&server.url()).await.unwrap();
        let lock = client.lock("{herd}");
        tasks.push(tokio::spawn(async move {
            let guard = lock.try_lock_for(Duration::from_secs(30)).await.unwrap();
            tokio::time::sleep(Duration::from_millis(2)).await;
            guard.unlock().await.unwrap();
        }));
        clients.push(client);
    }
    // Every client waits: registered, and its subscription confirmed (after which it
    // tried once more, in case the lock was released meanwhile). Each client is checked
    // on its own: a subscriber that connects wakes its waiters for an extra try, so the
    // sum of tries can be reached while one client has not registered yet.
    let started = Instant::now();
    let attempts = || {
        clients
            .iter()
            .map(|c| c.stats().acquire_attempts)
            .sum::<u64>()
    };
    let mut watcher = server.connection();
    loop {
        let waiting: usize = watcher.zcard(registry("herd")).unwrap();
        let tried_twice = clients
            .iter()
            .filter(|c| c.stats().acquire_attempts >= 2)
            .count();
        if waiting == CLIENTS && tried_twice == CLIENTS {
            break;
        }
        assert!(
            started.elapsed() < Duration::from_secs(10),
            "{waiting} clients registered as waiting, {tried_twice} tried twice"
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let before = attempts();

    guard.unlock().await.unwrap();
    for task in tasks {
        tokio::time::timeout(Duration::from_secs(30), task)
            .await
            .expect("every client acquired in turn")
            .unwrap();
    }
    let releases = CLIENTS as u64;
    let per_release = (attempts() - before) as f64 / releases as f64;
    eprintln!("{CLIENTS} waiting clients: {} acquire attempts for {releases} releases ({per_release:.2} per release)", attempts() - before);
    assert!(
        per_release <= 1.5,
        "{per_release:.2} acquire attempts per release"
    );
    // Every client left the registry when it stopped waiting.
    let left: usize = server.connection().zcard(registry("herd")).unwrap();
    assert_eq!(left, 0, "clients still registered as waiting");
}

/// Four clients with four tasks each contend for one lock: each client gets about its
/// share, and no client keeps the lock for more than a bounded run of sections while
/// another waits. Fails without the bound on local hand-offs (a client's tasks hand the
/// lock to each other without a pub/sub hop and keep it for hundreds of sections).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn clients_take_turns_on_a_hot_lock() {
    const CLIENTS: usize = 4;
    const SECTIONS: u64 = 1_200;
    let server = RedisServer::start();
    let order = hand_off_order(&server, "{hot}", CLIENTS, 4, SECTIONS).await;
    let mut counts = [0u64; CLIENTS];
    for &client in &order {
        counts[client] += 1;
    }
    // The longest run of one client, over the middle of the run, where every client has
    // tasks waiting (at the start and the end some are not there yet or gone).
    let middle = &order[order.len() / 10..order.len() * 9 / 10];
    let longest = middle
        .chunk_by(|a, b| a == b)
        .map(<[usize]>::len)
        .max()
        .unwrap_or(0);
    let mean = SECTIONS as f64 / CLIENTS as f64;
    let min = *counts.iter().min().unwrap() as f64;
    eprintln!(
        "sections per client {counts:?}, min / mean {:.2}, longest run {longest}",
        min / mean
    );
    assert!(min / mean >= 0.7, "per client {counts:?}");
    assert!(
        longest <= 16,
        "a client kept the lock {longest} sections in a row"
    );
}

/// Four clients with one task each take turns on a hot lock: every release goes to
/// another client, so the waiter registry alone decides the order, oldest registration
/// first, and every client gets the same share (240 sections each, measured; at most
/// ±3 with two CPU hogs beside the test). Before the registry's scores had microseconds,
/// clients whose ids sort first overtook others at every tie and the shares were
/// 225–250 (the test below pins that cause down exactly).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn clients_with_one_task_each_get_equal_shares() {
    const CLIENTS: usize = 4;
    let server = RedisServer::start();
    let order = hand_off_order(&server, "{rotation}", CLIENTS, 1, 1_200).await;
    // The middle of the run, where every client is there (at the start and the end some
    // are not yet or no longer).
    let middle = &order[order.len() / 10..order.len() * 9 / 10];
    let mut counts = [0u64; CLIENTS];
    for &client in middle {
        counts[client] += 1;
    }
    let mean = middle.len() as f64 / CLIENTS as f64;
    let (min, max) = (
        *counts.iter().min().unwrap() as f64,
        *counts.iter().max().unwrap() as f64,
    );
    eprintln!("sections per client {counts:?}");
    assert!(
        min / mean >= 0.95 && max / mean <= 1.05,
        "the clients' shares of {} sections: {counts:?}",
        middle.len()
    );
}

/// Waiters that register within one millisecond keep their arrival order in the waiter
/// registry, whatever their owner fields. Each round sends two busy tries in one pipeline
/// (so nearly always within one millisecond), the first for an owner that sorts last.
/// Fails when the registry scores registrations in whole milliseconds: equal scores are
/// ordered by owner field, so the owner that arrived second went first, and a client
/// whose id sorts early overtook the others at every such tie.
#[test]
fn registrations_within_one_millisecond_keep_their_arrival_order() {
    let server = RedisServer::start();
    let mut conn = server.connection();
    let library = dlock::admin::FunctionLibrary::current();
    redis::cmd("FUNCTION")
        .arg("LOAD")
        .arg("REPLACE")
        .arg(library.code())
        .query::<String>(&mut conn)
        .unwrap();
    let (key, fence, registry, naps) = (
        "{order}",
        "dlock:fence:{order}",
        registry("order"),
        "dlock:unlock:{order}!{order}",
    );
    // Held by another owner, so that both tries are busy and register.
    redis::pipe()
        .cmd("HSET")
        .arg(key)
        .arg("holder:1")
        .arg(1)
        .cmd("PEXPIRE")
        .arg(key)
        .arg(60_000)
        .query::<()>(&mut conn)
        .unwrap();
    let try_as = |pipe: &mut redis::Pipeline, owner: &str| {
        pipe.cmd("FCALL")
            .arg(format!("{}_lock_acquire", library.name()))
            .arg(4)
            .arg(&[key, fence, registry.as_str(), naps][..])
            .arg(&["30000", owner, "0", "60000", "0", "publish"][..]);
    };
    for round in 0..20 {
        let (first, second) = (format!("z{round}:1"), format!("a{round}:1"));
        let mut pipe = redis::pipe();
        try_as(&mut pipe, &first);
        try_as(&mut pipe, &second);
        let busy: Vec<i64> = pipe.query(&mut conn).unwrap();
        assert!(
            busy.iter().all(|ttl| *ttl > 0),
            "both tries were busy: {busy:?}"
        );
        let registered: Vec<String> = redis::cmd("ZRANGE")
            .arg(&registry)
            .arg(0)
            .arg(-1)
            .query(&mut conn)
            .unwrap();
        assert_eq!(registered, [first, second], "round {round}");
        redis::cmd("DEL")
            .arg(&registry)
            .arg(naps)
            .query::<()>(&mut conn)
            .unwrap();
    }
}

/// Waits until `tries` busy tries ran and `checks` waiters, their subscription confirmed,
/// found themselves still registered (so nothing passed them over before they
/// listened), counted at the server: each busy try sends two ZADDs, its registration (NX,
/// so a waiter keeps its place) and the promise of its busy answer (see
/// `scripts/naps.lua`), and the check is one ZSCORE. Such a waiter sleeps until a message
/// or its recheck. Counting them at the server, rather than watching the registry's
/// size, keeps a waiter's check from landing after a hand-off a test makes next.
async fn settled(server: &RedisServer, tries: u64, checks: u64) {
    let what = format!("{tries} busy tries and {checks} registration checks");
    wait_for_calls(&mut server.connection(), &what, |calls| {
        let count = |name: &str| calls.get(name).copied().unwrap_or(0);
        (count("zadd") / 2, count("zscore")) == (tries, checks)
    })
    .await;
}

/// A client that stops waiting leaves the registry; and if a release chose it before it
/// left (the wake-up went to a client with nobody left to use it), it passes the wake-up
/// on, so the next waiting client acquires at once instead of at its next recheck. Fails
/// when leaving does not pass the wake-up on (the other client waits its 10 s recheck).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_that_stops_waiting_passes_its_wake_up_on() {
    let server = RedisServer::start();
    let url = server.url();
    let (first, second) = (slow_recheck(&url).await, slow_recheck(&url).await);
    // Held by an owner of another process for a minute.
    let _: () = redis::pipe()
        .hset("{passed-on}", "elsewhere:1", 1)
        .pexpire("{passed-on}", 60_000)
        .query(&mut server.connection())
        .unwrap();

    let waiting = |client: &LockClient| {
        let lock = client.lock("{passed-on}");
        tokio::spawn(async move { lock.try_lock_for(Duration::from_secs(30)).await })
    };
    let first_waiter = waiting(&first);
    settled(&server, 1, 1).await;
    let second_waiter = waiting(&second);
    settled(&server, 2, 2).await;
    let waiting_clients: usize = server.connection().zcard(registry("passed-on")).unwrap();
    assert_eq!(waiting_clients, 2);

    // A release chose `first` (taking it out of the registry), and `first` stops waiting
    // before it used the wake-up: the lock is free, `second` still registered and asleep
    // for its 10 s recheck.
    let first_entry = waiter_of(&server, "passed-on", &first);
    let _: () = redis::pipe()
        .atomic()
        .zrem(registry("passed-on"), first_entry)
        .del("{passed-on}")
        .query(&mut server.connection())
        .unwrap();

    // `first` stops waiting: it passes the wake-up on.
    let stopped = Instant::now();
    first_waiter.abort();
    let acquired = tokio::time::timeout(Duration::from_secs(3), second_waiter)
        .await
        .expect("the second client was woken by the first one's leaving")
        .unwrap()
        .unwrap();
    eprintln!("woken {:?} after the first client left", stopped.elapsed());
    acquired.unlock().await.unwrap();
    let left: usize = server.connection().zcard(registry("passed-on")).unwrap();
    assert_eq!(left, 0);
}

/// A waiter cancelled while its first try is at Redis (the try registers its client as
/// waiting, and its answer is never read) still takes its client out of the registry, so
/// the next release wakes a client that waits rather than one that gave up. Fails when
/// only a waiter's subscription leaves the registry: the cancelled waiter had none yet,
/// the release chooses its client, and the client still waiting sleeps until its 10 s
/// recheck.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiter_cancelled_during_its_first_try_leaves_the_registry() {
    let server = RedisServer::start();
    let url = server.url();
    let holder = LockClient::connect(&url).await.unwrap();
    let guard = holder.lock("{ghost}").lock().await.unwrap();
    let (gave_up, still_waiting) = (slow_recheck(&url).await, slow_recheck(&url).await);

    // Redis stalls for 300 ms, so the first try of `gave_up` is sent and queued there; its
    // caller stops waiting while the try is still unanswered.
    let mut stalled = server.connection();
    let stall = std::thread::spawn(move || {
        redis::cmd("DEBUG")
            .arg("SLEEP")
            .arg("0.3")
            .query::<()>(&mut stalled)
    });
    tokio::time::sleep(Duration::from_millis(50)).await;
    let lock = gave_up.lock("{ghost}");
    let cancelled = tokio::spawn(async move { lock.try_lock_for(Duration::from_secs(30)).await });
    let started = Instant::now();
    while gave_up.stats().acquire_attempts == 0 {
        assert!(
            started.elapsed() < Duration::from_millis(200),
            "no try sent"
        );
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    tokio::time::sleep(Duration::from_millis(50)).await;
    cancelled.abort();
    stall.join().unwrap().unwrap();
    assert!(
        cancelled.await.unwrap_err().is_cancelled(),
        "the try was answered before its caller stopped waiting"
    );
    // The try ran after the stall and registered `gave_up` (and kept the promise of its
    // busy answer: two ZADDs).
    let started = Instant::now();
    let mut admin = server.connection();
    while command_calls(&mut admin).get("zadd") != Some(&2) {
        assert!(
            started.elapsed() < Duration::from_secs(2),
            "the cancelled try never registered"
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }

    // `still_waiting` waits behind it (registered later), then the holder releases.
    let lock = still_waiting.lock("{ghost}");
    let waiter = tokio::spawn(async move { lock.try_lock_for(Duration::from_secs(30)).await });
    // Two busy tries (the cancelled one's and its own) and its own registration check.
    settled(&server, 2, 1).await;
    let released = Instant::now();
    guard.unlock().await.unwrap();
    let acquired = tokio::time::timeout(Duration::from_secs(3), waiter)
        .await
        .expect("the release woke the client that still waited")
        .unwrap()
        .unwrap();
    eprintln!("woken {:?} after the release", released.elapsed());
    acquired.unlock().await.unwrap();
    let left: usize = server.connection().zcard(registry("ghost")).unwrap();
    assert_eq!(left, 0, "clients still registered as waiting");
}

/// Twenty clients, one task each, take a contended lock again right after giving it
/// back, as a busy endpoint does: each acquisition costs its first try (busy) and the try
/// its hand-off causes; a first try that finds the lock granted to another waiter naps
/// only until the grant lapses and tries once more then (so that a grant nobody takes
/// up never idles the lock), which some of them do. The channel stays
/// subscribed a moment after a client's wait, so the next call's busy try waits for its
/// wake-up at once. Fails when every call subscribes afresh (a further try per
/// acquisition, after the subscription's confirmation: 3 or more per acquisition).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_that_takes_the_lock_again_needs_two_tries_per_acquisition() {
    const CLIENTS: usize = 20;
    const ROUNDS: usize = 10;
    let server = RedisServer::start();
    let mut clients = Vec::new();
    for _ in 0..CLIENTS {
        clients.push(LockClient::connect(&server.url()).await.unwrap());
    }
    let mut tasks = Vec::new();
    for client in &clients {
        let lock = client.lock("{again}");
        tasks.push(tokio::spawn(async move {
            for _ in 0..ROUNDS {
                let guard = lock.try_lock_for(Duration::from_secs(30)).await.unwrap();
                tokio::time::sleep(Duration::from_millis(1)).await;
                guard.unlock().await.unwrap();
            }
        }));
    }
    for task in tasks {
        tokio::time::timeout(Duration::from_secs(60), task)
            .await
            .expect("the clients finished")
            .unwrap();
    }
    let (attempts, acquired) = clients.iter().fold((0, 0), |(attempts, acquired), c| {
        let stats = c.stats();
        (attempts + stats.acquire_attempts, acquired + stats.acquired)
    });
    let per_acquisition = attempts as f64 / acquired as f64;
    eprintln!("{CLIENTS} clients looping: {attempts} acquire attempts for {acquired} acquisitions ({per_acquisition:.2} each)");
    assert_eq!(acquired, (CLIENTS * ROUNDS) as u64);
    assert!(
        per_acquisition <= 2.7,
        "{per_acquisition:.2} acquire attempts per acquisition"
    );
}

/// A hand-off reaches its owner's client after the owner took the lock by a try of its
/// own (its nap ended just before the message came), so no waiter of the owner is there
/// to take the message: the client hands it back, and that must leave the owner's hold
/// alone. Forced here by publishing the hand-off for the holder on its client's wake
/// channel while another task of the client waits behind it (which keeps the channel
/// subscribed). Fails when a message nobody waits for releases its owner's holds: the
/// holder's hold is gone, and its guard's unlock finds it not held.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_late_hand_off_never_releases_the_hold_its_owner_took() {
    let server = RedisServer::start();
    let client = LockClient::connect(&server.url()).await.unwrap();
    let lock = client.lock("{late}");
    let guard = lock.lock().await.unwrap();
    let behind = {
        let lock = lock.clone();
        tokio::spawn(async move { lock.try_lock_for(Duration::from_secs(10)).await })
    };
    let wake_channel = format!("dlock:unlock:{{late}}#{}:{{late}}", client.id());
    let started = Instant::now();
    loop {
        let subscribed: Vec<(String, u64)> = redis::cmd("PUBSUB")
            .arg("NUMSUB")
            .arg(&wake_channel)
            .query(&mut server.connection())
            .unwrap();
        if subscribed.first().is_some_and(|(_, n)| *n == 1) {
            break;
        }
        assert!(
            started.elapsed() < Duration::from_secs(5),
            "the waiting task never subscribed to {wake_channel}"
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let info = lock.inspect().await.unwrap();
    let owner = info.holders[0].owner.id.clone();

    let heard: u64 = redis::cmd("PUBLISH")
        .arg(&wake_channel)
        .arg(format!("pass:{owner}"))
        .query(&mut server.connection())
        .unwrap();
    assert_eq!(heard, 1, "the holder's client listens");
    tokio::time::sleep(Duration::from_millis(200)).await;

    assert_eq!(
        guard.hold_count().await.unwrap(),
        1,
        "the hold is still there"
    );
    guard.unlock().await.unwrap();
    let next = tokio::time::timeout(Duration::from_secs(3), behind)
        .await
        .expect("the task behind got the lock")
        .unwrap()
        .unwrap();
    next.unlock().await.unwrap();
}
