//! What the liveness regressions share: the bound they check, and the means to stage
//! and measure a hand-off (stalls, registrations, timed acquisitions).
//!
//! # The invariant
//!
//! While a live client waits for a lock, the lock is never free, or granted to a client
//! that does not take it up, for longer than a grant's lifetime (100 ms) plus one round
//! trip: the waiter gets the lock within [`BOUND`] (150 ms) of the moment the lock became
//! takeable. A waiter never depends on its periodic recheck (`max_wait_recheck`, 1 s by
//! default) to make progress: the recheck is a safety net for lost messages, not the
//! mechanism that moves a lock from one owner to the next.
//!
//! So every client that waits here is built with a 10 s `max_wait_recheck`: a waiter
//! that relies on its recheck shows up as a multi-second stall. Every wait the test
//! measures is bounded by [`GIVE_UP`] (3 s), so a failing test fails in seconds, and each
//! measured delay is printed and checked against [`BOUND`].
//!
//! The files that use it each set up one subject's ways the hand-off can lose a live
//! waiter: `registry_leftovers` (a release handing the lock to the releasing client, a
//! waiter that stopped waiting without leaving the registry), `dead_waiters` (a waiter
//! killed or frozen while registered), `expiries` (a `min_hold` or a reader's lease ending
//! with nobody told), `multi_waits` (a wake-up taken by a multi-lock of the same client
//! that cannot use it), `local_line_gives_way` (a release that keeps the lock for a local
//! task that is cancelled, a force unlock the client's own line does not notice) and
//! `outage_bounds` (`wait` bounds every primitive while Redis is down).
//!
//! The tests use the public API of `dlock-core` only, plus raw Redis commands to look at
//! the waiter registry (the sorted set `dlock:unlock:{tag}:<name>` of a lock `<name>`
//! whose hash tag is `tag`) and to stall the server (`DEBUG SLEEP`), which makes the
//! races deterministic: a command sent while Redis sleeps is queued and runs after it.
//!
//! Each client stands for a process: it has its own connections, subscriber and local
//! line, exactly as a `LockClient` in another process would.

use std::time::Duration;

use dlock::LockClient;
use dlock_tests::keys::LockKeys;
use dlock_tests::RedisServer;
use tokio::task::JoinHandle;
use tokio::time::Instant;

/// The promise: a live waiter gets the lock within this of the moment it became
/// takeable (the 100 ms grant of a hand-off plus a round trip).
pub(crate) const BOUND: Duration = Duration::from_millis(150);
/// How long a test waits for an acquisition that should take milliseconds: a waiter that
/// sleeps until its 10 s recheck fails the test after this.
pub(crate) const GIVE_UP: Duration = Duration::from_secs(3);
/// The wait budget of the waiters themselves: longer than [`GIVE_UP`], so that it is the
/// test, not the waiter's own timeout, that decides.
pub(crate) const WAIT: Duration = Duration::from_secs(5);
/// The recheck interval of every waiting client: far beyond [`GIVE_UP`].
pub(crate) const SLOW_RECHECK: Duration = Duration::from_secs(10);
/// Time for a waiter that registered to finish its tries and go to sleep (a round trip
/// on loopback is well under a millisecond; this leaves room for a loaded machine).
pub(crate) const SETTLE: Duration = Duration::from_millis(100);

/// The `dlock-waiter` binary: waits for a lock in a separate OS process.
pub(crate) const WAITER: &str = env!("CARGO_BIN_EXE_dlock-waiter");

/// The waiter registry of the lock `name` (no key prefix): named like the lock's unlock
/// channel, `dlock:unlock:{<hash tag>}:<name>`. Every name here has a hash tag.
pub(crate) fn registry(name: &str) -> String {
    LockKeys::new("", name).registry
}

/// The waiters registered for `name`, oldest first: each waiting task's owner field,
/// `<client id>:<owner id>`.
pub(crate) fn registered(server: &RedisServer, name: &str) -> Vec<String> {
    redis::cmd("ZRANGE")
        .arg(registry(name))
        .arg(0)
        .arg(-1)
        .query(&mut server.connection())
        .unwrap()
}

/// Whether a waiter of the client `client_id` is registered as waiting for `name`.
pub(crate) fn is_registered(server: &RedisServer, name: &str, client_id: &str) -> bool {
    registered(server, name).iter().any(|owner| {
        owner
            .split_once(':')
            .is_some_and(|(client, _)| client == client_id)
    })
}

/// Polls `condition` every 2 ms until it holds; fails after 5 s.
pub(crate) async fn until(what: &str, mut condition: impl FnMut() -> bool) {
    let started = Instant::now();
    while !condition() {
        assert!(
            started.elapsed() < Duration::from_secs(5),
            "timed out waiting until {what}"
        );
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
}

/// Waits until `client` is registered as waiting for `name`, then lets its waiter finish
/// its tries and go to sleep.
pub(crate) async fn waiting(server: &RedisServer, name: &str, client: &LockClient) {
    let id = client.id().to_string();
    until(&format!("client {id} is registered for {name}"), || {
        is_registered(server, name, &id)
    })
    .await;
    tokio::time::sleep(SETTLE).await;
}

/// Stalls Redis for `seconds` (`DEBUG SLEEP` from a connection of its own): commands sent
/// meanwhile are queued and run, in order, after it. Completes with the end of the stall.
pub(crate) fn stall(server: &RedisServer, seconds: f64) -> JoinHandle<Instant> {
    let mut connection = server.connection();
    tokio::task::spawn_blocking(move || {
        redis::cmd("DEBUG")
            .arg("SLEEP")
            .arg(seconds)
            .query::<()>(&mut connection)
            .unwrap();
        Instant::now()
    })
}

/// Runs `acquisition` in a task of its own; the task gives the guard with the moment it
/// was acquired.
pub(crate) fn acquiring<G, F>(acquisition: F) -> JoinHandle<dlock::Result<(G, Instant)>>
where
    G: Send + 'static,
    F: std::future::Future<Output = dlock::Result<G>> + Send + 'static,
{
    tokio::spawn(async move {
        let guard = acquisition.await?;
        Ok((guard, Instant::now()))
    })
}

/// Awaits the acquisition `task` (for at most [`GIVE_UP`]), prints how long after `from`
/// it got the lock and checks that against [`BOUND`]. Returns the guard.
pub(crate) async fn acquired_within_bound<G>(
    label: &str,
    from: Instant,
    task: JoinHandle<dlock::Result<(G, Instant)>>,
) -> G {
    let Ok(joined) = tokio::time::timeout(GIVE_UP, task).await else {
        eprintln!("{label}: still waiting {GIVE_UP:?} later (bound {BOUND:?})");
        panic!("{label}: the live waiter did not get the lock within {GIVE_UP:?} (bound {BOUND:?}): it waits for its recheck");
    };
    let (guard, at) = joined
        .expect("the waiting task panicked")
        .unwrap_or_else(|e| panic!("{label}: the waiter failed: {e}"));
    let delay = at.saturating_duration_since(from);
    eprintln!("{label}: got the lock {delay:?} after (bound {BOUND:?})");
    assert!(
        delay <= BOUND,
        "{label}: got the lock {delay:?} after it became takeable, over the {BOUND:?} bound"
    );
    guard
}

// ---------------------------------------------------------------------------------------
// 1. A release must not hand the lock to the releasing client itself.
// ---------------------------------------------------------------------------------------
