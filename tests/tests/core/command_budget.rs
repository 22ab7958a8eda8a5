//! The work Redis does on the common paths, counted rather than timed: a script that
//! grows a command, or a client that sends one more call, fails here on any machine.
//!
//! Each budget is what the path needs with fencing tokens on (the default):
//! - a fresh acquisition of a free lock: one script call running `EXISTS`, `INCR` (the
//!   token), `HSET` and `PEXPIRE`;
//! - the last release with nobody waiting: one script call running `HGET`, `DEL` and
//!   `EXISTS` (the waiter registry), and no memo lookup on its first send;
//! - a watchdog renewal: `HEXISTS` and `PEXPIRE … GT` per lock, 512 locks per call.
//!
//! The same counts for the rest of the family are pinned at what they are, so that a
//! change in them is a decision, not an accident.

use std::collections::HashMap;
use std::time::Duration;

use dlock::{LockClient, LockClientBuilder, LockGuard};
use dlock_tests::commandstats::command_calls;
use dlock_tests::RedisServer;

/// What `rounds` repetitions of a path cost, per repetition: the commands sent by the
/// client (script calls included) and the commands the scripts ran, by name.
#[derive(Debug)]
struct Cost {
    sent: f64,
    inner: HashMap<String, f64>,
}

impl Cost {
    fn inner_total(&self) -> f64 {
        self.inner.values().sum()
    }
}

/// Commands a client sends itself: script calls, and the rare housekeeping a short test
/// may meet (connection set-up is done before the count starts).
const SENT: &[&str] = &["evalsha", "fcall", "eval", "evalsha_ro", "fcall_ro"];

/// Commands that are neither a script's nor the path's: the counting itself.
const IGNORED: &[&str] = &["info", "ping"];

/// What `rounds` runs of `path` cost, with what they returned.
async fn cost_of<F, Fut, T>(server: &RedisServer, rounds: u32, mut path: F) -> (Cost, Vec<T>)
where
    F: FnMut(u32) -> Fut,
    Fut: std::future::Future<Output = T>,
{
    let mut admin = server.connection();
    let before = command_calls(&mut admin);
    let mut outputs = Vec::new();
    for round in 0..rounds {
        outputs.push(path(round).await);
    }
    let after = command_calls(&mut admin);
    let per_round = |command: &str| {
        (after.get(command).copied().unwrap_or(0) - before.get(command).copied().unwrap_or(0))
            as f64
            / f64::from(rounds)
    };
    let sent = SENT.iter().map(|command| per_round(command)).sum();
    let inner = after
        .keys()
        .filter(|command| !SENT.contains(&command.as_str()) && !IGNORED.contains(&command.as_str()))
        .map(|command| (command.clone(), per_round(command)))
        // The client's own upkeep (its registration's heartbeat, a connection named
        // anew) lands in a round now and then; a path's commands come in every round.
        .filter(|(_, calls)| *calls >= 0.5)
        .collect();
    (Cost { sent, inner }, outputs)
}

/// What unlocking each of `guards` costs, per guard.
async fn unlock_cost(server: &RedisServer, guards: Vec<LockGuard>) -> Cost {
    let rounds = u32::try_from(guards.len()).unwrap();
    let mut guards = guards.into_iter();
    let (cost, _) = cost_of(server, rounds, |_| {
        let guard = guards.next().unwrap();
        async move { guard.unlock().await.unwrap() }
    })
    .await;
    cost
}

/// A client past its first call: the one-time set-up (its connection's name, its
/// registration) is not counted against any path.
async fn client(server: &RedisServer) -> LockClient {
    warmed_up(server, LockClient::builder()).await
}

/// [`client`] with the settings of `builder`.
async fn warmed_up(server: &RedisServer, builder: LockClientBuilder) -> LockClient {
    let client = builder.connect(&server.url()).await.unwrap();
    client
        .lock("budget:warm-up")
        .lock()
        .await
        .unwrap()
        .unlock()
        .await
        .unwrap();
    client
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fresh_lock_and_its_last_release_stay_within_their_budget() {
    let server = RedisServer::start();
    let client = client(&server).await;
    let (acquire, guards) = cost_of(&server, 20, |round| {
        let lock = client.lock(&format!("budget:{round}"));
        async move { lock.lock().await.unwrap() }
    })
    .await;
    assert_eq!(
        acquire.sent, 1.0,
        "one round trip per acquisition: {acquire:?}"
    );
    assert_eq!(
        acquire.inner_total(),
        4.0,
        "EXISTS, INCR, HSET, PEXPIRE: {acquire:?}"
    );
    for command in ["exists", "incr", "hset", "pexpire"] {
        assert_eq!(
            acquire.inner.get(command),
            Some(&1.0),
            "{command}: {acquire:?}"
        );
    }

    let release = unlock_cost(&server, guards).await;
    assert_eq!(release.sent, 1.0, "one round trip per release: {release:?}");
    assert_eq!(release.inner_total(), 3.0, "HGET, DEL, EXISTS: {release:?}");
    assert_eq!(
        release.inner.get("get"),
        None,
        "a first send looks up no memo: {release:?}"
    );
}

/// A first send skips the memo lookup, but a decrement (a re-entered lock) still writes
/// its memo, which a retry answers from (`release.rs` shows the retry).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_re_entered_release_still_writes_its_memo() {
    let server = RedisServer::start();
    let client = client(&server).await;
    let lock = client.lock("budget:reentered");
    let outer = lock.lock().await.unwrap();
    let release = outer
        .scope(async {
            let inner = lock.lock().await.unwrap();
            let before = command_calls(&mut server.connection());
            inner.unlock().await.unwrap();
            let after = command_calls(&mut server.connection());
            after.get("set").copied().unwrap_or(0) - before.get("set").copied().unwrap_or(0)
        })
        .await;
    assert_eq!(release, 1, "the decrement's memo is written");
    outer.unlock().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_watchdog_renewal_costs_two_commands_per_lock() {
    let server = RedisServer::start();
    let watchdog = Duration::from_millis(900);
    let client = LockClient::builder()
        .watchdog_timeout(watchdog)
        .connect(&server.url())
        .await
        .unwrap();
    let mut guards = Vec::new();
    for i in 0..600 {
        guards.push(client.lock(&format!("renewed:{i}")).lock().await.unwrap());
    }
    // A few rounds, every 300 ms; whole rounds are counted per renewed lock.
    let mut admin = server.connection();
    let before = command_calls(&mut admin);
    tokio::time::sleep(watchdog * 2).await;
    let after = command_calls(&mut admin);
    let delta = |command: &str| {
        after.get(command).copied().unwrap_or(0) - before.get(command).copied().unwrap_or(0)
    };
    let renewed = delta("hexists");
    assert!(
        renewed >= 600,
        "at least one round: {renewed} locks renewed"
    );
    assert_eq!(delta("pexpire"), renewed, "one PEXPIRE per renewed lock");
    assert_eq!(delta("pttl"), 0, "no PTTL: PEXPIRE GT compares");
    // Each round is two calls, of 512 and 88 locks. The counts are read while rounds go
    // on, so the first and last rounds counted may be halves: each call counted is still
    // one of 512 or 88, alternating (a loaded machine straddled a round: 3,512 locks in
    // 11 calls, six of 512 and five of 88).
    let calls = delta("evalsha") + delta("fcall");
    let beyond_88_each = renewed.checked_sub(88 * calls);
    let big = beyond_88_each.map(|beyond| beyond / 424);
    assert!(
        beyond_88_each.is_some_and(|beyond| beyond % 424 == 0)
            && big.is_some_and(|big| big <= calls && big.abs_diff(calls - big) <= 1),
        "{renewed} locks renewed in {calls} calls: not calls of 512 and 88 locks, alternating"
    );
    for guard in guards {
        guard.unlock().await.unwrap();
    }
}

/// A try that finds the lock held registers its owner and the nap it was told, and makes
/// each of those two sets live on with one `PEXPIRE … GT`: the only `PTTL` is the lock's.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_busy_try_lengthens_each_waiter_set_with_one_command() {
    let server = RedisServer::start();
    let holder = client(&server).await;
    // Long rechecks: the waiter below sleeps through the count, and every try asks for
    // the same life of the sets, so that each later try lengthens it.
    let rechecking_rarely = || {
        warmed_up(
            &server,
            LockClient::builder().max_wait_recheck(Duration::from_secs(30)),
        )
    };
    let waiting = rechecking_rarely().await;
    let name = "budget:busy";
    let _held = holder.lock(name).lock().await.unwrap();
    // A waiter that stays: the sets exist before the count, as they do under contention.
    let lock = waiting.lock(name);
    let stays = tokio::spawn(async move { lock.lock().await });
    tokio::time::sleep(Duration::from_millis(200)).await;
    // Another client's tries: the waiting client's would queue behind its waiter, in the
    // process.
    let trying = rechecking_rarely().await;
    let (cost, outcomes) = cost_of(&server, 20, |_| {
        let lock = trying.lock(name);
        async move {
            // Every try apart from the last by more than the expiries' millisecond, so
            // that each asks for a life that ends later: the rounds by this pause, the
            // (at most two) tries of a round by its wait.
            tokio::time::sleep(Duration::from_millis(3)).await;
            lock.try_lock_for(Duration::from_millis(5)).await.is_err()
        }
    })
    .await;
    assert!(outcomes.iter().all(|&busy| busy), "every try found it held");
    println!("busy tries and their give-up: {cost:?}");
    // Each busy try reads the server's clock once, to register; the give-up runs no PTTL
    // and no PEXPIRE.
    let tries = cost.inner.get("time").copied().unwrap_or(0.0);
    assert!(tries >= 1.0, "every round tried: {cost:?}");
    let per_try = |command: &str| cost.inner.get(command).copied().unwrap_or(0.0) / tries;
    assert_eq!(per_try("pttl"), 1.0, "the lock's PTTL only: {cost:?}");
    assert_eq!(
        per_try("pexpire"),
        2.0,
        "one PEXPIRE for the registry, one for the naps: {cost:?}"
    );
    stays.abort();
}

/// The rest of the family, pinned at their counts: one round trip each way, and the
/// commands their scripts run on the common path.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_family_s_common_paths_are_pinned() {
    let server = RedisServer::start();
    let client = client(&server).await;

    let (acquire, permits) = cost_of(&server, 10, |round| {
        let semaphore = client.semaphore(&format!("budget:sem:{round}"), 4);
        async move { semaphore.acquire(1).await.unwrap() }
    })
    .await;
    let mut permits = permits.into_iter();
    let (release, _) = cost_of(&server, 10, |_| {
        let permit = permits.next().unwrap();
        async move { permit.unlock().await.unwrap() }
    })
    .await;
    report_and_check("semaphore", &acquire, &release, SEMAPHORE_BUDGET);

    let (acquire, guards) = cost_of(&server, 10, |round| {
        let lock = client.fair_lock(&format!("budget:fair:{round}"));
        async move { lock.lock().await.unwrap() }
    })
    .await;
    let release = unlock_cost(&server, guards).await;
    report_and_check("fair lock", &acquire, &release, FAIR_BUDGET);

    let (acquire, guards) = cost_of(&server, 10, |round| {
        let lock = client.rw_lock(&format!("budget:rw:{round}"));
        async move { lock.write().lock().await.unwrap() }
    })
    .await;
    let release = unlock_cost(&server, guards).await;
    report_and_check("write lock", &acquire, &release, WRITE_BUDGET);
}

/// Commands run by the scripts of one acquisition and one release, at most.
type Budget = (f64, f64);
const SEMAPHORE_BUDGET: Budget = (13.0, 10.0);
const FAIR_BUDGET: Budget = (5.0, 4.0);
const WRITE_BUDGET: Budget = (8.0, 15.0);

fn report_and_check(what: &str, acquire: &Cost, release: &Cost, (most_in, most_out): Budget) {
    println!("{what}: acquire {acquire:?}; release {release:?}");
    assert_eq!(acquire.sent, 1.0, "{what}: one round trip per acquisition");
    assert_eq!(release.sent, 1.0, "{what}: one round trip per release");
    assert!(
        acquire.inner_total() <= most_in,
        "{what}: acquisition over its budget of {most_in}: {acquire:?}"
    );
    assert!(
        release.inner_total() <= most_out,
        "{what}: release over its budget of {most_out}: {release:?}"
    );
}
