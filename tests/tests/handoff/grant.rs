//! A release gives the lock to the longest-waiting waiter of another client (`held:`
//! messages): that waiter holds it without a try of its own and extends the short grant to
//! its lease. These tests hold the promises around that step: the grantee's guard has the
//! next fencing token and a deadline no later than Redis's expiry, its hold is extended
//! past the grant, a grantee that wants a token the release could not mint gets one from
//! its own try, a grantee cancelled as the lock is given to it passes it on at once, and a
//! multi-lock given one of its locks while another is busy gives it back at once.
//! (A grantee that is frozen or killed is in `dead_waiters.rs`.)

use std::time::{Duration, Instant};

use dlock::LockClient;
use dlock_tests::command_log::{log_every_command, reset_log, script_runs};
use dlock_tests::keys::LockKeys;
use dlock_tests::liveness::slow_recheck;
use dlock_tests::RedisServer;
use redis::Commands;

/// How soon a lock left by a grantee that stopped waiting must reach the next waiter:
/// below the 100 ms a grant nobody takes up lasts, which is the least a grant left behind
/// costs (it takes a few round trips here; the margin is for a loaded machine).
const PASSED_ON_WITHIN: Duration = Duration::from_millis(90);

/// The waiter registry of the lock `name`, which starts with its hash tag.
fn registry(name: &str) -> String {
    LockKeys::new("", name).registry
}

/// Waits until `count` waiters are registered for the lock `name`, then a little more
/// for their tries and subscriptions to settle.
async fn registered(server: &RedisServer, name: &str, count: usize) {
    let started = Instant::now();
    let mut watcher = server.connection();
    loop {
        let entries: Vec<String> = watcher.zrange(registry(name), 0, -1).unwrap();
        if entries.len() >= count {
            break;
        }
        assert!(
            started.elapsed() < Duration::from_secs(5),
            "{count} waiters not registered for {name}: {entries:?}"
        );
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
    tokio::time::sleep(Duration::from_millis(150)).await;
}

/// A waiter of another client is given the lock by the release of a holder that had
/// waited for it itself: it holds it without an acquire call of its own, with the next
/// fencing token, a deadline no later than Redis's expiry, and its hold is extended to its
/// 5 s lease (one renewal) so that it outlives the 100 ms grant. Fails without the
/// extension: the hold lapses after 100 ms and the guard is lost.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_granted_hold_has_the_next_token_and_is_extended_to_its_lease() {
    let server = RedisServer::start();
    let mut admin = server
        .client()
        .get_multiplexed_async_connection()
        .await
        .unwrap();
    log_every_command(&mut admin).await;
    let holder = LockClient::connect(&server.url()).await.unwrap();
    let waiter = slow_recheck(&server.url()).await;
    // The holder waits for the lock first: a contended hold's release passes the token
    // counter, so that the lock it gives away carries a token.
    let first = LockClient::connect(&server.url()).await.unwrap();
    let first = first.lock("{given}").lock().await.unwrap();
    let lock = holder.lock("{given}");
    let holding = tokio::spawn(async move { lock.lock().await.unwrap() });
    registered(&server, "{given}", 1).await;
    first.unlock().await.unwrap();
    let guard = holding.await.unwrap();
    let token = guard.fencing_token().expect("fencing is on by default");
    let lock = waiter.lock("{given}");
    let task =
        tokio::spawn(async move { lock.lock_with_lease(Duration::from_secs(5)).await.unwrap() });
    registered(&server, "{given}", 1).await;

    reset_log(&mut admin).await;
    guard.unlock().await.unwrap();
    let granted = tokio::time::timeout(Duration::from_secs(2), task)
        .await
        .expect("the waiter did not get the lock within 2 s of the release")
        .unwrap();
    // The deadline first: the extension, in a task of its own, may land between the two
    // reads, and moves Redis's expiry before the guard's deadline, never after (read the
    // other way round, an extension in between failed the check beside a busy build).
    let deadline = granted.deadline();
    let pttl: i64 = server.connection().pttl("{given}").unwrap();
    let latest = Instant::now() + Duration::from_millis(u64::try_from(pttl).unwrap() + 1);
    assert!(
        deadline <= latest,
        "deadline {:?} past Redis's expiry (PTTL {pttl} ms)",
        deadline - latest
    );
    assert_eq!(
        granted.fencing_token().map(|fence| fence.get()),
        Some(token.get() + 1)
    );
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(!granted.is_lost(), "the granted hold was lost");
    let pttl: i64 = server.connection().pttl("{given}").unwrap();
    assert!(
        pttl > 3_000,
        "the granted hold was not extended: PTTL {pttl} ms"
    );
    assert_eq!(
        (
            script_runs(&mut admin, "lock_acquire").await,
            script_runs(&mut admin, "lock_extend").await
        ),
        (0, 1),
        "acquire calls and renewals after the release"
    );
    granted.unlock().await.unwrap();
}

/// The holder's client mints no tokens, so the lock has no token counter (nor does an
/// uncontended holder's release pass it), and the release cannot mint a token for the
/// waiter, whose client wants tokens: the waiter takes the lock with a try of its own,
/// which finds the hold the release gave it and mints its token there. Fails when the
/// waiter holds the grant as it is (no token), or when that try does not mint one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_grant_without_the_token_its_waiter_wants_is_taken_with_a_try() {
    let server = RedisServer::start();
    let holder = LockClient::builder()
        .fencing_tokens(false)
        .connect(&server.url())
        .await
        .unwrap();
    let waiter = slow_recheck(&server.url()).await;
    let guard = holder.lock("{tokenless}").lock().await.unwrap();
    assert_eq!(guard.fencing_token(), None);
    let lock = waiter.lock("{tokenless}");
    let task = tokio::spawn(async move { lock.lock().await.unwrap() });
    registered(&server, "{tokenless}", 1).await;
    guard.unlock().await.unwrap();
    let granted = tokio::time::timeout(Duration::from_secs(2), task)
        .await
        .expect("the waiter did not get the lock within 2 s of the release")
        .unwrap();
    assert_eq!(granted.fencing_token().map(|fence| fence.get()), Some(1));
    let pttl: i64 = server.connection().pttl("{tokenless}").unwrap();
    assert!(
        pttl > 20_000,
        "not held for its watchdog lease: PTTL {pttl} ms"
    );
    granted.unlock().await.unwrap();
}

/// A waiter's acquisition is cancelled just as the holder releases, 40 times with the two
/// racing differently each time (the cancel from right with the release to 1.6 ms after
/// it): the lock goes either straight to the waiter behind it, or to the cancelled one,
/// whose cleanup gives it back. Either way the waiter behind gets it at once. (A round in
/// which the cancel came after the first waiter took the lock, so that it holds a guard,
/// is not timed.) Fails when a grant to an owner that stopped waiting is left to lapse
/// (100 ms).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiter_cancelled_as_the_lock_is_given_to_it_passes_it_on_at_once() {
    let server = RedisServer::start();
    let url = server.url();
    let holder = LockClient::connect(&url).await.unwrap();
    let (cancelled, behind) = (slow_recheck(&url).await, slow_recheck(&url).await);
    let (mut slow, mut timed) = (Vec::new(), 0);
    for round in 0..40u64 {
        let guard = holder.lock("{cancel}").lock().await.unwrap();
        let lock = cancelled.lock("{cancel}");
        let first = tokio::spawn(async move { lock.lock().await.unwrap() });
        registered(&server, "{cancel}", 1).await;
        let lock = behind.lock("{cancel}");
        let second = tokio::spawn(async move {
            let guard = lock.lock().await.unwrap();
            (guard, Instant::now())
        });
        registered(&server, "{cancel}", 2).await;
        let released = Instant::now();
        let unlock = tokio::spawn(guard.unlock());
        // Finer than a timer: spin until the cancel is due.
        let cancel_at = released + Duration::from_micros(round * 40);
        while Instant::now() < cancel_at {
            std::hint::spin_loop();
        }
        first.abort();
        let cancelled_in_time = match first.await {
            Ok(took_it) => {
                unlock.await.unwrap().unwrap();
                took_it.unlock().await.unwrap();
                false
            }
            Err(_) => {
                unlock.await.unwrap().unwrap();
                true
            }
        };
        let (next, at) = tokio::time::timeout(Duration::from_secs(2), second)
            .await
            .unwrap_or_else(|_| panic!("round {round}: the waiter behind waited 2 s"))
            .unwrap();
        if cancelled_in_time {
            timed += 1;
            let waited = at.saturating_duration_since(released);
            if waited > PASSED_ON_WITHIN {
                slow.push((round, waited));
            }
        }
        next.unlock().await.unwrap();
    }
    eprintln!("{timed} rounds cancelled in time; slower than {PASSED_ON_WITHIN:?}: {slow:?}");
    assert!(
        timed >= 10,
        "only {timed} of 40 rounds cancelled the waiter in time"
    );
    assert!(
        slow.len() <= 2,
        "the waiter behind a cancelled grantee waited over {PASSED_ON_WITHIN:?} in {} of {timed} rounds: {slow:?}",
        slow.len()
    );
}

/// A multi-lock waits for `{m}a` (its lease ends first) while `{m}b` is held too; a plain
/// waiter waits for `{m}a` behind it. The release of `{m}a` gives it to the multi-lock,
/// which cannot take `{m}b`: it must give `{m}a` to the plain waiter at once, not keep it
/// until the grant lapses, and must not end up holding anything. Fails when a multi-lock's
/// try keeps a lock given to it while another is busy.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_multi_lock_given_one_of_its_locks_while_another_is_busy_passes_it_on() {
    let server = RedisServer::start();
    let url = server.url();
    let holder = LockClient::connect(&url).await.unwrap();
    let (multi, plain) = (slow_recheck(&url).await, slow_recheck(&url).await);
    let a = holder
        .lock("{m}a")
        .lock_with_lease(Duration::from_secs(5))
        .await
        .unwrap();
    let b = holder.lock("{m}b").lock().await.unwrap();
    let both = multi.multi_lock(["{m}a", "{m}b"]).unwrap();
    let multi_task = tokio::spawn(async move { both.lock().await.unwrap() });
    registered(&server, "{m}a", 1).await;
    let lock = plain.lock("{m}a");
    let plain_task = tokio::spawn(async move {
        let guard = lock.lock().await.unwrap();
        (guard, Instant::now())
    });
    registered(&server, "{m}a", 2).await;

    let released = Instant::now();
    a.unlock().await.unwrap();
    let (guard, at) = tokio::time::timeout(Duration::from_secs(2), plain_task)
        .await
        .expect("the plain waiter did not get {m}a within 2 s")
        .unwrap();
    let waited = at.saturating_duration_since(released);
    assert!(
        waited <= PASSED_ON_WITHIN,
        "the plain waiter got {{m}}a {waited:?} after its release"
    );
    assert!(!multi_task.is_finished(), "the multi-lock took a held lock");
    guard.unlock().await.unwrap();
    b.unlock().await.unwrap();
    let both = tokio::time::timeout(Duration::from_secs(2), multi_task)
        .await
        .expect("the multi-lock did not get both locks once they were free")
        .unwrap();
    both.unlock().await.unwrap();
}

/// A grant's deadline counts from the waiter's first send by what the release says the
/// grant lasts past the waiter's registration: both read off one server's clock only if
/// one server wrote both. When the client's route moved since its first send (here its
/// connections were reset and made again; a failover or a moved slot does the same), the
/// registration may come from another server's clock, so the waiter takes the lock with a
/// try of its own rather than trust the grant's deadline. Before the fix it held the grant
/// as it was (no try after the release).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_grant_across_a_moved_route_is_taken_with_a_try() {
    let server = RedisServer::start();
    let proxy = dlock_tests::TcpProxy::start(server.addr());
    let mut admin = server
        .client()
        .get_multiplexed_async_connection()
        .await
        .unwrap();
    log_every_command(&mut admin).await;
    let holder = LockClient::connect(&server.url()).await.unwrap();
    let guard = holder.lock("{moved}").lock().await.unwrap();
    // Without tokens: the grant carries none (an uncontended holder's release passes no
    // token counter), and a waiter that wants one would take it with a try anyway.
    let waiter = LockClient::builder()
        .max_wait_recheck(Duration::from_secs(10))
        .fencing_tokens(false)
        .connect(&proxy.url())
        .await
        .unwrap();
    let lock = waiter.lock("{moved}");
    let task =
        tokio::spawn(async move { lock.lock_with_lease(Duration::from_secs(5)).await.unwrap() });
    registered(&server, "{moved}", 1).await;

    // The waiter's client loses its connections and makes them again: it listens anew,
    // and its waiter, woken by the reconnection, registers again (keeping its place).
    proxy.reset_all();
    let channel =
        dlock_tests::keys::LockKeys::new("", "{moved}").wake_channel(&waiter.id().to_string());
    let started = Instant::now();
    let mut watcher = server.connection();
    loop {
        let (_, listeners): (String, u64) = redis::cmd("PUBSUB")
            .arg("NUMSUB")
            .arg(&channel)
            .query::<Vec<(String, u64)>>(&mut watcher)
            .unwrap()
            .remove(0);
        if listeners > 0 {
            break;
        }
        assert!(
            started.elapsed() < Duration::from_secs(5),
            "the waiter's client never listened again"
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    registered(&server, "{moved}", 1).await;

    reset_log(&mut admin).await;
    guard.unlock().await.unwrap();
    let granted = tokio::time::timeout(Duration::from_secs(2), task)
        .await
        .expect("the waiter did not get the lock within 2 s of the release")
        .unwrap();
    assert!(
        script_runs(&mut admin, "lock_acquire").await >= 1,
        "a grant across a moved route was held without a try"
    );
    assert!(!granted.is_lost());
    granted.unlock().await.unwrap();
}

/// How long after a release a live waiter with a 10 s recheck must be served: a waiter
/// left to its recheck fails.
const SERVED_WITHIN: Duration = Duration::from_secs(2);

/// Registers `owners` as waiting for the lock `name` ahead of everyone (scores older than
/// any real registration), as clients that were there before: gone ones, or one that
/// froze (a listener that never acts).
fn register_ahead(server: &RedisServer, name: &str, owners: &[String]) {
    let mut conn = server.connection();
    for (i, owner) in owners.iter().enumerate() {
        redis::cmd("ZADD")
            .arg(registry(name))
            .arg(1_000_000_000_000_000u64 + i as u64)
            .arg(owner)
            .exec(&mut conn)
            .unwrap();
    }
    redis::cmd("PEXPIRE")
        .arg(registry(name))
        .arg(60_000)
        .exec(&mut conn)
        .unwrap();
}

/// Registers `ahead` as waiting for the lock `name` before a live waiter of `waiter` (a
/// client with a 10 s recheck unless given), releases the lock, and returns how long after
/// the release the live waiter was served (failing past `within`: it was left to its
/// recheck). `listening` are client ids whose wake channels a bare connection listens on
/// meanwhile (frozen clients: counted as listening, they never act).
async fn served_behind(
    server: &RedisServer,
    name: &str,
    ahead: &[String],
    listening: &[&str],
    waiter: Option<LockClient>,
    within: Duration,
) -> Duration {
    let holder = LockClient::connect(&server.url()).await.unwrap();
    let guard = holder.lock(name).lock().await.unwrap();
    let mut listener = server.connection();
    for client in listening {
        redis::cmd("SUBSCRIBE")
            .arg(dlock_tests::keys::LockKeys::new("", name).wake_channel(client))
            .exec(&mut listener)
            .unwrap();
    }
    register_ahead(server, name, ahead);
    let waiter = match waiter {
        Some(waiter) => waiter,
        None => slow_recheck(&server.url()).await,
    };
    let lock = waiter.lock(name);
    let task = tokio::spawn(async move { lock.lock().await.unwrap() });
    registered(server, name, ahead.len() + 1).await;

    let released = Instant::now();
    guard.unlock().await.unwrap();
    let granted = tokio::time::timeout(within, task)
        .await
        .expect("the live waiter was not served in time")
        .unwrap();
    let took = released.elapsed();
    granted.unlock().await.unwrap();
    took
}

/// A hundred waiters of clients that are gone (a rolling restart) sit ahead of a live
/// one. One release looks at 64 registry entries at most; the release then goes on with
/// the lock's `leave` until the live waiter is told, so it gets the lock at once rather
/// than at its recheck (10 s here). Before the fix it waited for the recheck.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn waiters_behind_a_hundred_gone_clients_are_told() {
    let server = RedisServer::start();
    let gone: Vec<String> = (0..100).map(|i| format!("gone{i}:1")).collect();
    let took = served_behind(&server, "{crowd}", &gone, &[], None, SERVED_WITHIN).await;
    eprintln!("behind 100 gone clients: served {took:?} after the release");
    assert!(
        took < Duration::from_secs(1),
        "served {took:?} after the release"
    );
    let left: Vec<String> = server
        .connection()
        .zrange(registry("{crowd}"), 0, -1)
        .unwrap();
    assert!(
        left.is_empty(),
        "gone waiters left registered: {}",
        left.len()
    );
}

/// The release gives the lock to the oldest waiter, of a client that froze after it
/// registered two waiters (its connection open: it counts as listening, and never acts).
/// The waiter told to try when that grant lapses must be one that can act: not the frozen
/// client's other waiter but the live one behind it, which then gets the lock when the
/// 100 ms grant lapses. Before the fix the frozen client's second waiter was told, and the
/// live one slept until its recheck (10 s here).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_runner_up_of_a_frozen_grantee_is_of_another_client() {
    let server = RedisServer::start();
    let frozen = ["frozen:1".to_owned(), "frozen:2".to_owned()];
    let took = served_behind(&server, "{thaw}", &frozen, &["frozen"], None, SERVED_WITHIN).await;
    eprintln!("behind a frozen client's two waiters: served {took:?} after the release");
    // The grant to the frozen waiter lasts 100 ms; then the live one is served.
    assert!(
        took >= Duration::from_millis(90) && took < Duration::from_secs(1),
        "served {took:?} after the release"
    );
}

/// Two clients that froze with their connections open (both count as listening, neither
/// acts) registered ahead of a live waiter: the release grants the lock to the first and
/// tells the second, of another client, to try when the grant lapses, and nobody acts on
/// the lapse. The live waiter, told nothing, tries when its nap ends: at its recheck
/// (`max_wait_recheck`, 1 s by default), not at the end of the 30 s lease it found. This is
/// the bound docs/PROTOCOL.md gives for two frozen processes at the head of the waiters.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn behind_two_frozen_clients_a_waiter_is_served_at_its_recheck() {
    let server = RedisServer::start();
    let frozen = ["frozen-a:1".to_owned(), "frozen-b:1".to_owned()];
    let recheck = Duration::from_secs(1);
    let waiter = LockClient::builder()
        .max_wait_recheck(recheck)
        .connect(&server.url())
        .await
        .unwrap();
    let took = served_behind(
        &server,
        "{thaw2}",
        &frozen,
        &["frozen-a", "frozen-b"],
        Some(waiter),
        recheck + SERVED_WITHIN,
    )
    .await;
    eprintln!("behind two frozen clients: served {took:?} after the release");
    // Not before the grant to the first frozen client lapsed.
    assert!(
        took >= Duration::from_millis(90),
        "served {took:?} after the release"
    );
}
