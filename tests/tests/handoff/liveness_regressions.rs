//! Liveness regressions of the lock's waiting and hand-off machinery.
//!
//! # The invariant
//!
//! While a live client waits for a lock, the lock is never free, or reserved for a client
//! that does not take it, for longer than the reservation lifetime (100 ms) plus one round
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
//! Each test sets up one way the hand-off can lose a live waiter: a release that reserves
//! the lock for the releasing client itself, a waiter that died (SIGKILL) or stopped
//! waiting without leaving the waiter registry, a wake-up taken by another waiter of the
//! same client that cannot use it, a release that keeps the lock for a local task that is
//! cancelled, a `min_hold` expiry nobody is told about, a force unlock the client's own
//! line does not notice. Two more tests check that kinds of lock on one name exclude each
//! other, and that `wait` bounds every primitive while Redis is down.
//!
//! The tests use the public API of `dlock-core` only, plus raw Redis commands to look at
//! the waiter registry (the sorted set `dlock:unlock:{tag}:<name>` of a lock `<name>`
//! whose hash tag is `tag`) and to stall the server (`DEBUG SLEEP`), which makes the
//! races deterministic: a command sent while Redis sleeps is queued and runs after it.
//!
//! Each client stands for a process: it has its own connections, subscriber and local
//! line, exactly as a `LockClient` in another process would.

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use dlock::{
    distributed_lock, redlock::RedLockClient, LockClient, LockError, LockGuard, MultiGuard,
    MultiLock,
};
use dlock_tests::keys::LockKeys;
use dlock_tests::liveness::slow_recheck;
use dlock_tests::RedisServer;
use tokio::sync::mpsc;
use tokio::task::JoinHandle;
use tokio::time::Instant;

/// The promise: a live waiter gets the lock within this of the moment it became
/// takeable (the 100 ms reservation of a hand-off plus a round trip).
const BOUND: Duration = Duration::from_millis(150);
/// How long a test waits for an acquisition that should take milliseconds: a waiter that
/// sleeps until its 10 s recheck fails the test after this.
const GIVE_UP: Duration = Duration::from_secs(3);
/// The wait budget of the waiters themselves: longer than [`GIVE_UP`], so that it is the
/// test, not the waiter's own timeout, that decides.
const WAIT: Duration = Duration::from_secs(5);
/// The recheck interval of every waiting client: far beyond [`GIVE_UP`].
const SLOW_RECHECK: Duration = Duration::from_secs(10);
/// Time for a waiter that registered to finish its tries and go to sleep (a round trip
/// on loopback is well under a millisecond; this leaves room for a loaded machine).
const SETTLE: Duration = Duration::from_millis(100);

/// The `dlock-waiter` binary: waits for a lock in a separate OS process.
const WAITER: &str = env!("CARGO_BIN_EXE_dlock-waiter");

/// The waiter registry of the lock `name` (no key prefix): named like the lock's unlock
/// channel, `dlock:unlock:{<hash tag>}:<name>`. Every name here has a hash tag.
fn registry(name: &str) -> String {
    LockKeys::new("", name).registry
}

/// The waiters registered for `name`, oldest first: each waiting task's owner field,
/// `<client id>:<owner id>`.
fn registered(server: &RedisServer, name: &str) -> Vec<String> {
    redis::cmd("ZRANGE")
        .arg(registry(name))
        .arg(0)
        .arg(-1)
        .query(&mut server.connection())
        .unwrap()
}

/// Whether a waiter of the client `client_id` is registered as waiting for `name`.
fn is_registered(server: &RedisServer, name: &str, client_id: &str) -> bool {
    registered(server, name).iter().any(|owner| {
        owner
            .split_once(':')
            .is_some_and(|(client, _)| client == client_id)
    })
}

/// Polls `condition` every 2 ms until it holds; fails after 5 s.
async fn until(what: &str, mut condition: impl FnMut() -> bool) {
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
async fn waiting(server: &RedisServer, name: &str, client: &LockClient) {
    let id = client.id().to_string();
    until(&format!("client {id} is registered for {name}"), || {
        is_registered(server, name, &id)
    })
    .await;
    tokio::time::sleep(SETTLE).await;
}

/// Stalls Redis for `seconds` (`DEBUG SLEEP` from a connection of its own): commands sent
/// meanwhile are queued and run, in order, after it. Completes with the end of the stall.
fn stall(server: &RedisServer, seconds: f64) -> JoinHandle<Instant> {
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
fn acquiring<G, F>(acquisition: F) -> JoinHandle<dlock::Result<(G, Instant)>>
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
async fn acquired_within_bound<G>(
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
// 1. A release must not reserve the lock for the releasing client itself.
// ---------------------------------------------------------------------------------------

/// Client C waits for a lock that H holds with a 200 ms lease and never releases. C gets
/// it by a fresh grant once the lease ran out (nobody released it, so C is still in the
/// waiter registry), and gives it back at once, with no `.await` in between. That release
/// must leave the lock free (C is the only registered client and it is done), so a third
/// client E that asks right after gets it at once. Fails when the release wakes the oldest
/// registered client, C itself, and reserves the lock for it: C no longer wants it, and E
/// finds it reserved, registers and sleeps until its recheck.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_release_does_not_reserve_the_lock_for_the_releasing_client() {
    const NAME: &str = "{self}";
    let server = RedisServer::start();
    let url = server.url();
    let holder = LockClient::connect(&url).await.unwrap();
    let (c, e) = (slow_recheck(&url).await, slow_recheck(&url).await);

    let expiring = holder
        .lock(NAME)
        .try_lock_with_lease(Duration::ZERO, Duration::from_millis(200))
        .await
        .unwrap();
    let lock = c.lock(NAME);
    let c_task = tokio::spawn(async move {
        let guard = lock.try_lock_for(WAIT).await?;
        // No `.await` between the acquisition and the release: the release is the next
        // thing this client sends for the lock.
        guard.unlock().await
    });
    // The trigger: C is registered while the lock is still H's, so the grant it gets when
    // the lease ends finds it in the registry.
    let c_id = c.id().to_string();
    until("C is registered", || is_registered(&server, NAME, &c_id)).await;
    tokio::time::timeout(GIVE_UP, c_task)
        .await
        .expect("C got the lock after the 200 ms lease ended")
        .unwrap()
        .expect("C took the lock and gave it back");
    let fields: Vec<String> = redis::cmd("HKEYS")
        .arg(NAME)
        .query(&mut server.connection())
        .unwrap();
    eprintln!(
        "item 1: after C's release the lock hash holds {fields:?}, the registry {:?} (C is {c_id})",
        registered(&server, NAME)
    );

    let started = Instant::now();
    let lock = e.lock(NAME);
    let e_task = acquiring(async move { lock.try_lock_for(WAIT).await });
    let guard =
        acquired_within_bound("item 1: E (asked right after C's release)", started, e_task).await;
    guard.unlock().await.unwrap();
    drop(expiring);
}

// ---------------------------------------------------------------------------------------
// 2. A waiter killed with SIGKILL while registered.
// ---------------------------------------------------------------------------------------

/// A `dlock-waiter` process; killed (SIGKILL) and reaped when dropped.
/// A `dlock-waiter` process, and the lines it printed after its first, each with when it
/// was read.
struct WaiterProcess(Child, mpsc::UnboundedReceiver<(String, Instant)>);

impl Drop for WaiterProcess {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

impl WaiterProcess {
    /// Freezes the process (SIGSTOP): its connections stay open, so Redis delivers it
    /// messages it never acts on.
    fn stop(&self) {
        let pid = rustix::process::Pid::from_raw(self.0.id() as i32).expect("a child's pid");
        rustix::process::kill_process(pid, rustix::process::Signal::STOP)
            .expect("SIGSTOP the waiter process");
    }

    /// Thaws a frozen process (SIGCONT).
    fn resume(&self) {
        let pid = rustix::process::Pid::from_raw(self.0.id() as i32).expect("a child's pid");
        rustix::process::kill_process(pid, rustix::process::Signal::CONT)
            .expect("SIGCONT the waiter process");
    }

    /// The next line the process prints within `within`, with when it was read.
    async fn next_line(&mut self, within: Duration) -> Option<(String, Instant)> {
        tokio::time::timeout(within, self.1.recv())
            .await
            .ok()
            .flatten()
    }
}

/// Starts a `dlock-waiter` process waiting for `name` and waits until it is registered
/// as waiting. Returns the process and its client id.
async fn a_registered_waiter(server: &RedisServer, name: &str) -> (WaiterProcess, String) {
    let mut child = Command::new(WAITER)
        .arg(server.url())
        .arg(name)
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("cannot start dlock-waiter");
    let stdout = child.stdout.take().expect("piped stdout");
    let (first_said, mut first) = mpsc::unbounded_channel();
    let (said_later, later) = mpsc::unbounded_channel();
    std::thread::spawn(move || {
        let mut said = BufReader::new(stdout).lines().map_while(Result::ok);
        let _ = first_said.send(said.next().unwrap_or_default());
        for line in said {
            let _ = said_later.send((line, Instant::now()));
        }
    });
    let line = tokio::time::timeout(Duration::from_secs(10), first.recv())
        .await
        .expect("dlock-waiter said nothing within 10 s")
        .unwrap_or_default();
    let process = WaiterProcess(child, later);
    let id = line
        .trim()
        .strip_prefix("waiting ")
        .unwrap_or_else(|| panic!("dlock-waiter said {line:?}"))
        .to_owned();
    until("the waiter process is registered", || {
        is_registered(server, name, &id)
    })
    .await;
    (process, id)
}

/// Starts a `dlock-waiter` process waiting for `name`, waits until it is registered as
/// waiting, and SIGKILLs it there. Returns its client id.
async fn kill_a_registered_waiter(server: &RedisServer, name: &str) -> String {
    let (process, id) = a_registered_waiter(server, name).await;
    drop(process); // SIGKILL, reaped
    id
}

/// `killed` waiter processes register for a held lock and are SIGKILLed; then a live
/// client waits behind them and the holder releases: the live waiter must get the lock
/// within [`BOUND`] of the release.
async fn killed_waiters_ahead_of_a_live_one(killed: usize, name: &str) {
    let server = RedisServer::start();
    let url = server.url();
    let holder = LockClient::connect(&url).await.unwrap();
    let guard = holder.lock(name).lock().await.unwrap();
    let mut dead = Vec::new();
    for _ in 0..killed {
        dead.push(kill_a_registered_waiter(&server, name).await);
    }
    let live = slow_recheck(&url).await;
    let lock = live.lock(name);
    let task = acquiring(async move { lock.try_lock_for(WAIT).await });
    waiting(&server, name, &live).await;
    // The trigger: the dead processes are still registered, ahead of the live client.
    let in_registry = registered(&server, name);
    eprintln!(
        "item 2 ({killed} killed): registry {in_registry:?}, live client {}",
        live.id()
    );
    for id in &dead {
        assert!(
            in_registry.iter().any(|owner| owner
                .strip_prefix(id.as_str())
                .is_some_and(|rest| rest.starts_with(':'))),
            "killed waiter {id} not registered"
        );
    }

    let released = Instant::now();
    guard.unlock().await.unwrap();
    let label = format!("item 2: live waiter behind {killed} killed waiter(s), from the release");
    let acquired = acquired_within_bound(&label, released, task).await;
    acquired.unlock().await.unwrap();
}

/// Fails when a release wakes (and reserves the lock for) a registered client that died:
/// the live waiter behind it is woken by nobody and sleeps until its recheck.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiter_killed_while_registered_does_not_hold_up_a_live_one() {
    killed_waiters_ahead_of_a_live_one(1, "{killed}").await;
}

/// As [`a_waiter_killed_while_registered_does_not_hold_up_a_live_one`] with three dead
/// clients ahead: each one a release chooses must not cost the live waiter anything.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_waiters_killed_while_registered_do_not_hold_up_a_live_one() {
    killed_waiters_ahead_of_a_live_one(3, "{killed3}").await;
}

/// A waiter process registers for a held lock and is frozen (SIGSTOP) there, its
/// connections open; a live client waits behind it. The release passes the lock to the
/// frozen waiter (its client still listens, as far as Redis can tell) and reserves it for
/// 100 ms: the live waiter must get the lock within [`BOUND`] of the release. Fails when
/// nobody but the reservee hears of the hand-off: the reservation lapses and the live
/// waiter sleeps until its recheck. (The same happens when a waiter is killed after it
/// was told and before it tried.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hand_off_to_a_frozen_waiter_moves_on_when_its_reservation_lapses() {
    let setup = BehindAFrozenWaiter::start("{frozen}").await;
    eprintln!(
        "item 2c: registry {:?} (frozen {}, live {})",
        registered(&setup.server, setup.name),
        setup.frozen_id,
        setup.live.id()
    );
    setup
        .release_within_bound("item 2c: live waiter behind a frozen one, from the release")
        .await;
}

/// A lock held by one client, a `dlock-waiter` process registered as waiting for it and
/// then frozen (SIGSTOP), and a live client's task waiting behind it.
struct BehindAFrozenWaiter {
    name: &'static str,
    server: RedisServer,
    guard: LockGuard,
    frozen: WaiterProcess,
    frozen_id: String,
    live: LockClient,
    task: JoinHandle<dlock::Result<(LockGuard, Instant)>>,
}

impl BehindAFrozenWaiter {
    async fn start(name: &'static str) -> Self {
        let server = RedisServer::start();
        let url = server.url();
        let holder = LockClient::connect(&url).await.unwrap();
        let guard = holder.lock(name).lock().await.unwrap();
        let (frozen, frozen_id) = a_registered_waiter(&server, name).await;
        tokio::time::sleep(SETTLE).await;
        frozen.stop();
        let live = slow_recheck(&url).await;
        let lock = live.lock(name);
        let task = acquiring(async move { lock.try_lock_for(WAIT).await });
        waiting(&server, name, &live).await;
        BehindAFrozenWaiter {
            name,
            server,
            guard,
            frozen,
            frozen_id,
            live,
            task,
        }
    }

    /// Releases the held lock: the live task must get it within [`BOUND`]. Returns the
    /// server, for a look at what is left.
    async fn release_within_bound(self, label: &str) -> RedisServer {
        let released = Instant::now();
        self.guard.unlock().await.unwrap();
        let acquired = acquired_within_bound(label, released, self.task).await;
        acquired.unlock().await.unwrap();
        drop(self.frozen);
        self.server
    }
}

/// The frozen waiter is given the lock (its client still listens, as far as Redis can
/// tell), and thawed only once that grant lapsed and the live waiter took the lock. The
/// thawed waiter then reads a grant whose deadline, counted from its own first try, has
/// passed: it must try for the lock rather than hold it, and get it only after the live
/// holder gave it back. Fails when a grant's deadline is counted from when its message
/// is read: the thawed process holds the lock beside the live holder.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiter_thawed_after_its_grant_lapsed_does_not_hold_the_lock() {
    let mut setup = BehindAFrozenWaiter::start("{thawed}").await;
    let released = Instant::now();
    setup.guard.unlock().await.unwrap();
    let live = acquired_within_bound("thawed: the live waiter", released, setup.task).await;
    setup.frozen.resume();
    let early = setup.frozen.next_line(Duration::from_millis(700)).await;
    assert_eq!(
        early, None,
        "the thawed waiter acted while the live waiter held the lock"
    );
    let given_back = Instant::now();
    live.unlock().await.unwrap();
    let (line, at) = setup
        .frozen
        .next_line(GIVE_UP)
        .await
        .expect("the thawed waiter did not get the lock once it was given back");
    assert_eq!(line, "acquired");
    assert!(
        at > given_back,
        "acquired before the live holder gave it back"
    );
}

/// As above, but the waiter told to try when the frozen one's reservation lapses (the
/// runner-up) waits no more: its entry is still in the registry (its leave has not
/// reached Redis), while its client listens for another of its tasks, which waits too.
/// That client hands the message back (`leave`); the leave must have the next waiter told
/// in its place, which here is the same client's live task. Fails when nobody is told:
/// the live task sleeps until its recheck.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_runner_up_that_waits_no_more_has_the_next_waiter_told() {
    let setup = BehindAFrozenWaiter::start("{runner-up}").await;
    let (server, name) = (&setup.server, setup.name);
    // A task of the live client that stopped waiting, its leave not yet applied: an
    // entry between the frozen waiter's and the live task's.
    let mut redis = server.connection();
    let scores: Vec<(String, u64)> = redis::cmd("ZRANGE")
        .arg(registry(name))
        .arg(0)
        .arg(-1)
        .arg("WITHSCORES")
        .query(&mut redis)
        .unwrap();
    let [(_, frozen_since), (_, live_since)] = scores[..] else {
        panic!("expected the frozen and the live waiter registered: {scores:?}");
    };
    assert!(live_since > frozen_since + 1, "registered {scores:?}");
    let gone = format!("{}:gone", setup.live.id());
    let _: () = redis::cmd("ZADD")
        .arg(registry(name))
        .arg(frozen_since + 1)
        .arg(&gone)
        .query(&mut redis)
        .unwrap();
    eprintln!(
        "runner-up: registry {:?} (frozen {}, gone {gone})",
        registered(server, name),
        setup.frozen_id
    );
    let server = setup
        .release_within_bound("runner-up gone: the live waiter after it, from the release")
        .await;
    let left = registered(&server, name);
    assert!(
        !left.contains(&gone),
        "the entry whose owner waits no more is left in the registry: {left:?}"
    );
}

// ---------------------------------------------------------------------------------------
// 3. try_lock_for whose wait ends during its first busy try.
// ---------------------------------------------------------------------------------------

/// `try_lock_for(1 ms)` on a held lock: its first try registers the client as waiting,
/// and the wait is over by the time the busy answer comes (Redis is stalled 50 ms by
/// `DEBUG SLEEP` right before, so the try is queued there well past the 1 ms). The
/// client stops waiting; a real waiter (another client) then waits, and the holder
/// releases: the real waiter must get the lock within [`BOUND`], and nothing of the
/// 1 ms client may be left in the registry. Fails when a waiter that gives up without
/// ever subscribing does not leave the registry: the release chooses that client, and
/// the real waiter sleeps until its recheck.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_try_whose_wait_ends_during_its_first_try_leaves_the_registry() {
    const NAME: &str = "{brief}";
    let server = RedisServer::start();
    let url = server.url();
    let holder = LockClient::connect(&url).await.unwrap();
    let guard = holder.lock(NAME).lock().await.unwrap();
    let (brief, real) = (slow_recheck(&url).await, slow_recheck(&url).await);
    let brief_id = brief.id().to_string();

    let stalled = stall(&server, 0.05);
    tokio::time::sleep(Duration::from_millis(10)).await;
    let tried = Instant::now();
    let error = brief
        .lock(NAME)
        .try_lock_for(Duration::from_millis(1))
        .await
        .unwrap_err();
    let answered_after = tried.elapsed();
    assert!(error.is_timeout(), "{error:?}");
    stalled.await.unwrap();
    // The trigger: the busy answer came long after the 1 ms wait had ended.
    assert!(
        answered_after >= Duration::from_millis(20),
        "the 1 ms try was answered after {answered_after:?}, not held up by the stall"
    );
    eprintln!(
        "item 3: the 1 ms try ended after {answered_after:?}; registry {:?} (the 1 ms client is {brief_id})",
        registered(&server, NAME)
    );

    let lock = real.lock(NAME);
    let task = acquiring(async move { lock.try_lock_for(WAIT).await });
    waiting(&server, NAME, &real).await;
    let released = Instant::now();
    guard.unlock().await.unwrap();
    let acquired =
        acquired_within_bound("item 3: real waiter, from the release", released, task).await;
    acquired.unlock().await.unwrap();
    tokio::time::sleep(SETTLE).await;
    assert!(
        !is_registered(&server, NAME, &brief_id),
        "the 1 ms client is still registered: {:?}",
        registered(&server, NAME)
    );
}

// ---------------------------------------------------------------------------------------
// 4. A same-slot MultiLock dropped during its first try.
// ---------------------------------------------------------------------------------------

/// A same-slot multi-lock over `{m}a` (held by H) and `{m}b` is cancelled while its first
/// try is queued at Redis (stalled 300 ms by `DEBUG SLEEP`; the task is aborted 100 ms
/// into it). That try runs after the stall and registers the multi-lock's client as
/// waiting for `{m}a`. A real waiter of a third client then waits for `{m}a` and H
/// releases: the real waiter must get it within [`BOUND`]. Fails when a multi-lock
/// cancelled before it had a waiter (a subscription) does not leave the registry: the
/// release chooses its client, which nobody waits in.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_same_slot_multi_lock_cancelled_during_its_first_try_leaves_the_registry() {
    const HELD: &str = "{m}a";
    let server = RedisServer::start();
    let url = server.url();
    let holder = LockClient::connect(&url).await.unwrap();
    let guard = holder.lock(HELD).lock().await.unwrap();
    let (multi_client, real) = (slow_recheck(&url).await, slow_recheck(&url).await);
    let multi = MultiLock::same_slot(&multi_client, [HELD, "{m}b"]).unwrap();

    let stalled = stall(&server, 0.3);
    tokio::time::sleep(Duration::from_millis(50)).await;
    let cancelled = tokio::spawn(async move { multi.try_lock_for(WAIT).await.map(drop) });
    until("the multi-lock sent its first try", || {
        multi_client.stats().acquire_attempts >= 1
    })
    .await;
    tokio::time::sleep(Duration::from_millis(50)).await;
    cancelled.abort();
    stalled.await.unwrap();
    assert!(
        cancelled.await.unwrap_err().is_cancelled(),
        "the multi-lock's try was answered before it was cancelled"
    );
    eprintln!(
        "item 4: after the stall the registry of {HELD} is {:?} (the multi-lock's client is {})",
        registered(&server, HELD),
        multi_client.id()
    );

    let lock = real.lock(HELD);
    let task = acquiring(async move { lock.try_lock_for(WAIT).await });
    waiting(&server, HELD, &real).await;
    let released = Instant::now();
    guard.unlock().await.unwrap();
    let acquired =
        acquired_within_bound("item 4: real waiter, from the release", released, task).await;
    acquired.unlock().await.unwrap();
}

// ---------------------------------------------------------------------------------------
// 5. min_hold.
// ---------------------------------------------------------------------------------------

/// Holds `{min-hold}` for about 100 ms; the lock stays taken until acquisition + 600 ms.
#[distributed_lock(key = "{min-hold}", min_hold = "600ms", lease = "5s", client = locks)]
async fn short_job_held_at_least_600ms(locks: &LockClient) -> Result<Instant, LockError> {
    tokio::time::sleep(Duration::from_millis(100)).await;
    Ok(Instant::now())
}

/// A `min_hold` of 600 ms with a 5 s lease: the body ends after ~100 ms and the lock stays
/// taken until acquisition + 600 ms. Another client that started waiting while the body
/// ran must get the lock within [`BOUND`] of that expiry. Fails when nothing wakes the
/// waiter at the end of the minimum hold: it naps until the TTL it saw when it tried,
/// the 5 s lease (or its recheck).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiter_gets_the_lock_when_min_hold_ends() {
    const NAME: &str = "{min-hold}";
    let server = RedisServer::start();
    let url = server.url();
    let locks = LockClient::connect(&url).await.unwrap();
    let other = slow_recheck(&url).await;
    let probe = other.lock(NAME);

    let (body_ended, (waiting_since, task)) =
        tokio::join!(short_job_held_at_least_600ms(&locks), async {
            // Start waiting while the body runs (the lock is taken).
            let started = Instant::now();
            while !probe.is_locked().await.unwrap() {
                assert!(started.elapsed() < Duration::from_secs(2), "never locked");
                tokio::time::sleep(Duration::from_millis(1)).await;
            }
            let lock = other.lock(NAME);
            (
                Instant::now(),
                acquiring(async move { lock.try_lock_for(WAIT).await }),
            )
        });
    let body_ended = body_ended.unwrap();
    assert!(
        waiting_since < body_ended,
        "the waiter started after the body had ended"
    );
    // When the lock becomes takeable: now + its remaining TTL (read after the body).
    let asked = Instant::now();
    let pttl: i64 = redis::cmd("PTTL")
        .arg(NAME)
        .query(&mut server.connection())
        .unwrap();
    let takeable = asked + Duration::from_millis(u64::try_from(pttl).unwrap_or(0));
    eprintln!("item 5: after the body the lock expires in {pttl} ms");
    assert!(
        (300..=600).contains(&pttl),
        "the min_hold keeps the lock until acquisition + 600 ms: PTTL {pttl} ms"
    );
    let acquired =
        acquired_within_bound("item 5: waiter, from the min_hold expiry", takeable, task).await;
    acquired.unlock().await.unwrap();
}

// ---------------------------------------------------------------------------------------
// 6. One client waiting on a key with both a same-slot multi-lock and a plain lock.
// ---------------------------------------------------------------------------------------

/// Client C waits for `{s}k` in two tasks: a same-slot multi-lock over `{s}k` and `{s}j`,
/// and a plain `lock("{s}k")`. `{s}k` is held by H1 (watchdog, 30 s TTL), `{s}j` by H2 for
/// the whole test (60 s lease, so the multi-lock waits on `{s}k`, the lock that ends
/// first). The multi-lock starts waiting first, then the plain lock. H1 releases `{s}k`:
/// C's plain waiter must get it within [`BOUND`]. Fails when the release's one wake-up
/// for C goes to the multi-lock (the client's first waiter on the channel), which finds
/// `{s}j` still busy and goes back to sleep, while the plain waiter, which could take
/// `{s}k`, sleeps until its recheck and the reservation for C runs out.
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

/// A retry loop: C's `try_lock_for(50 ms)` on a held lock times out, and C at once calls
/// `try_lock_for` again; H releases 50 ms after the second wait started: C must get the
/// lock within [`BOUND`] of the release. Nobody else waits. Repeated five times, so that
/// the race below happens. Fails when the first wait's leaving the registry (sent when it
/// ends) reaches Redis after the second wait's registration and undoes it: the release
/// then finds nobody registered, wakes nobody, and C sleeps until its recheck.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn waiting_again_right_after_a_wait_ended_is_woken_by_the_release() {
    const NAME: &str = "{retry}";
    const ROUNDS: usize = 5;
    let server = RedisServer::start();
    let url = server.url();
    let holder = LockClient::connect(&url).await.unwrap();
    let c = slow_recheck(&url).await;
    for round in 1..=ROUNDS {
        let guard = holder.lock(NAME).lock().await.unwrap();
        let lock = c.lock(NAME);
        let (second_wait, started) = tokio::sync::oneshot::channel();
        let task = acquiring(async move {
            let first = lock.try_lock_for(Duration::from_millis(50)).await;
            assert!(
                first.as_ref().is_err_and(LockError::is_timeout),
                "{first:?}"
            );
            // Straight into the next wait, as a retry loop does.
            let _ = second_wait.send(Instant::now());
            lock.try_lock_for(WAIT).await
        });
        started.await.unwrap();
        tokio::time::sleep(Duration::from_millis(50)).await;
        let released = Instant::now();
        guard.unlock().await.unwrap();
        let label = format!("item 7 round {round}/{ROUNDS}: C's second wait, from the release");
        let acquired = acquired_within_bound(&label, released, task).await;
        acquired.unlock().await.unwrap();
    }
}

// ---------------------------------------------------------------------------------------
// 8. Force unlock by another client while this client's guard is alive.
// ---------------------------------------------------------------------------------------

/// Client A holds `{x}` and keeps the guard; client B force-unlocks it. Another task of A
/// then asks for `{x}`: the lock is free in Redis, so it must get it within [`BOUND`].
/// Fails when A's local line still counts the old guard as the holder: the task waits in
/// A's line until a recheck finds the hold gone (its 10 s recheck, or the watchdog's next
/// renewal, 10 s with the default 30 s watchdog).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_force_unlock_frees_the_lock_for_the_former_holder_s_client() {
    const NAME: &str = "{forced}";
    let server = RedisServer::start();
    let url = server.url();
    let a = slow_recheck(&url).await;
    let b = LockClient::connect(&url).await.unwrap();
    let kept = a.lock(NAME).lock().await.unwrap();
    assert!(b.lock(NAME).force_unlock().await.unwrap());

    let started = Instant::now();
    let lock = a.lock(NAME);
    let task = acquiring(async move { lock.try_lock_for(WAIT).await });
    let acquired = acquired_within_bound(
        "item 8: A's other task after the force unlock, from its call",
        started,
        task,
    )
    .await;
    acquired.unlock().await.unwrap();
    drop(kept);
}

/// As [`a_force_unlock_frees_the_lock_for_the_former_holder_s_client`], with A's other
/// task already waiting in A's local line when B force-unlocks: it must get the lock
/// within [`BOUND`] of the force unlock.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_force_unlock_frees_the_lock_for_a_task_waiting_behind_the_former_holder() {
    const NAME: &str = "{forced2}";
    let server = RedisServer::start();
    let url = server.url();
    let a = slow_recheck(&url).await;
    let b = LockClient::connect(&url).await.unwrap();
    let kept = a.lock(NAME).lock().await.unwrap();
    let lock = a.lock(NAME);
    let task = acquiring(async move { lock.try_lock_for(WAIT).await });
    // The task waits in A's line behind `kept`, and has watched it longer than any grace.
    tokio::time::sleep(SETTLE).await;
    assert!(!task.is_finished(), "A's second task did not wait");
    let subscribers: Vec<(String, u64)> = redis::cmd("PUBSUB")
        .arg("NUMSUB")
        .arg(registry(NAME))
        .query(&mut server.connection())
        .unwrap();
    eprintln!(
        "item 8b: subscribers of the lock's channel before the force unlock: {subscribers:?}"
    );

    let forced = Instant::now();
    assert!(b.lock(NAME).force_unlock().await.unwrap());
    let acquired = acquired_within_bound(
        "item 8b: A's waiting task, from the force unlock",
        forced,
        task,
    )
    .await;
    acquired.unlock().await.unwrap();
    drop(kept);
}

// ---------------------------------------------------------------------------------------
// 9. A release that gives the lock to a local task that is cancelled meanwhile.
// ---------------------------------------------------------------------------------------

/// Sends `t1`'s release while Redis sleeps 300 ms (so the release, built while A's task
/// `t2` waited behind `t1`, is queued at Redis), cancels `t2` before Redis runs it, and
/// returns the guard of the other client's waiting `d_task`, which must get the lock
/// within [`BOUND`] of the end of the stall.
async fn release_kept_for_a_task_cancelled_meanwhile(
    server: &RedisServer,
    label: &str,
    t1: LockGuard,
    t2: JoinHandle<dlock::Result<()>>,
    d_task: JoinHandle<dlock::Result<(LockGuard, Instant)>>,
) -> LockGuard {
    let stalled = stall(server, 0.3);
    tokio::time::sleep(Duration::from_millis(50)).await;
    let releasing = tokio::spawn(t1.unlock());
    tokio::time::sleep(Duration::from_millis(50)).await;
    t2.abort();
    assert!(
        !releasing.is_finished(),
        "the release was answered before T2 was cancelled"
    );
    let stall_ended = stalled.await.unwrap();
    assert!(
        t2.await.unwrap_err().is_cancelled(),
        "T2 ended before it was cancelled"
    );
    releasing.await.unwrap().unwrap();
    acquired_within_bound(
        &format!("{label}: D, from the release (end of the stall)"),
        stall_ended,
        d_task,
    )
    .await
}

/// Client A: task T1 holds `{kept}`, task T2 waits behind it in A's line; client D waits
/// too (registered). Redis is stalled 300 ms; T1's `unlock` is sent during the stall
/// (so it says "a task of mine is next" and is queued at Redis), and T2 is aborted
/// meanwhile. When the stall ends the release runs and gives the lock to T2, which is gone:
/// D must get the lock within [`BOUND`] of that moment. Fails when nobody gives the lock
/// back for the cancelled task (A's line does, once the release's answer names T2): D
/// sleeps until T2's lease or its own recheck. See
/// [`a_release_kept_for_a_cancelled_local_task_of_a_registered_client_reaches_the_other_client`]
/// for the case where A is still registered.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_release_kept_for_a_cancelled_local_task_reaches_the_other_client() {
    const NAME: &str = "{kept}";
    let server = RedisServer::start();
    let url = server.url();
    let (a, d) = (slow_recheck(&url).await, slow_recheck(&url).await);
    let t1 = a.lock(NAME).lock().await.unwrap();
    let lock = a.lock(NAME);
    let t2 = tokio::spawn(async move { lock.try_lock_for(WAIT).await.map(drop) });
    tokio::time::sleep(SETTLE).await;
    let lock = d.lock(NAME);
    let d_task = acquiring(async move { lock.try_lock_for(WAIT).await });
    waiting(&server, NAME, &d).await;
    assert!(!t2.is_finished());

    let acquired =
        release_kept_for_a_task_cancelled_meanwhile(&server, "item 9", t1, t2, d_task).await;
    acquired.unlock().await.unwrap();
}

/// As [`a_release_kept_for_a_cancelled_local_task_reaches_the_other_client`], with client
/// A still registered as waiting when T1 releases: T1 got the lock by a fresh grant when
/// the previous holder's 400 ms lease ran out (no release chose A, so A stayed in the
/// registry), while T2 waited behind T1 in A's line; then D registered, behind A. T1's release is sent
/// during a 300 ms stall with T2 still in line, T2 is cancelled meanwhile: D must get the
/// lock within [`BOUND`] of the end of the stall. Fails when the release gives the lock to
/// A's cancelled task and nothing gives it back: D sleeps until that task's lease or its
/// own recheck.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_release_kept_for_a_cancelled_local_task_of_a_registered_client_reaches_the_other_client()
{
    const NAME: &str = "{kept2}";
    let server = RedisServer::start();
    let url = server.url();
    let holder = LockClient::connect(&url).await.unwrap();
    let (a, d) = (slow_recheck(&url).await, slow_recheck(&url).await);
    let expiring = holder
        .lock(NAME)
        .try_lock_with_lease(Duration::ZERO, Duration::from_millis(400))
        .await
        .unwrap();
    let lock = a.lock(NAME);
    let t1 = acquiring(async move { lock.try_lock_for(WAIT).await });
    let a_id = a.id().to_string();
    until("A is registered", || is_registered(&server, NAME, &a_id)).await;
    let lock = a.lock(NAME);
    let t2 = tokio::spawn(async move { lock.try_lock_for(WAIT).await.map(drop) });
    // The lease ends: T1 gets the lock by a fresh grant, A stays registered. (D starts
    // waiting only now: waiting through the expiry too, it could take the lock first.)
    let (t1, _) = tokio::time::timeout(GIVE_UP, t1)
        .await
        .expect("T1 got the lock when the lease ran out")
        .unwrap()
        .unwrap();
    let lock = d.lock(NAME);
    let d_task = acquiring(async move { lock.try_lock_for(WAIT).await });
    let d_id = d.id().to_string();
    waiting(&server, NAME, &d).await;
    assert!(!t2.is_finished() && !d_task.is_finished());
    eprintln!(
        "item 9b: T1 holds; registry {:?} (A is {a_id}, D is {d_id})",
        registered(&server, NAME)
    );

    let acquired =
        release_kept_for_a_task_cancelled_meanwhile(&server, "item 9b", t1, t2, d_task).await;
    acquired.unlock().await.unwrap();
    drop(expiring);
}

// ---------------------------------------------------------------------------------------
// 10. Two kinds on one name.
// ---------------------------------------------------------------------------------------

/// Client A holds `lock("x")`; client B's read lock and write lock of `x` (200 ms waits)
/// must not succeed while A holds it, and A's `unlock` must still succeed. Fails when the
/// read-write lock's script takes a hash in the plain lock's layout for a free
/// read-write lock (the read succeeds, and A's release then finds its hold gone).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_read_write_lock_does_not_take_a_name_held_as_a_plain_lock() {
    let server = RedisServer::start();
    let url = server.url();
    let (a, b) = (
        LockClient::connect(&url).await.unwrap(),
        LockClient::connect(&url).await.unwrap(),
    );
    let held = a.lock("x").lock().await.unwrap();
    let short = Duration::from_millis(200);
    let read = b.rw_lock("x").read().try_lock_for(short).await;
    let write = b.rw_lock("x").write().try_lock_for(short).await;
    let describe = |outcome: &dlock::Result<LockGuard>| match outcome {
        Ok(_) => "acquired".to_owned(),
        Err(e) => format!("refused: {e}"),
    };
    let (read_text, write_text) = (describe(&read), describe(&write));
    let unlocked = held.unlock().await;
    eprintln!(
        "item 10: while A holds lock(\"x\"): B's read {read_text}; B's write {write_text}; A's unlock {unlocked:?}"
    );
    assert!(read.is_err(), "B's read lock succeeded while A holds x");
    assert!(write.is_err(), "B's write lock succeeded while A holds x");
    unlocked.expect("A's unlock of x");
}

/// The kinds of lock that can be taken on one name.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kind {
    Lock,
    Fair,
    Read,
    Write,
    /// `semaphore(name, 1)`, one permit.
    Semaphore,
    /// A same-slot multi-lock over the name and another name of its slot.
    Multi,
}

const KINDS: [Kind; 6] = [
    Kind::Lock,
    Kind::Fair,
    Kind::Read,
    Kind::Write,
    Kind::Semaphore,
    Kind::Multi,
];

/// Whether the second kind (column) may be taken on a name while the first kind (row)
/// holds it, by another client; in the order of [`KINDS`]. Everything on one name
/// excludes everything else, except: a semaphore has its own namespace (its keys are not
/// the lock's), so it neither excludes nor is excluded by a lock of the same name (but
/// a second permit of a one-permit semaphore is refused); readers share; a lock and a
/// multi-lock over its name are the same kind of hold and exclude each other.
const MAY_SHARE: [[bool; 6]; 6] = [
    //             lock   fair   read   write  sem    multi
    /* lock  */
    [false, false, false, false, true, false],
    /* fair  */ [false, false, false, false, true, false],
    /* read  */ [false, false, true, false, true, false],
    /* write */ [false, false, false, false, true, false],
    /* sem   */ [true, true, true, true, false, true],
    /* multi */ [false, false, false, false, true, false],
];

/// A hold of one of the [`Kind`]s.
enum Holding {
    One(LockGuard),
    Permit(dlock::SemaphorePermit),
    Set(MultiGuard),
}

impl Holding {
    async fn unlock(self) -> dlock::Result<()> {
        match self {
            Holding::One(guard) => guard.unlock().await,
            Holding::Permit(permit) => permit.unlock().await,
            Holding::Set(guard) => guard.unlock().await,
        }
    }
}

/// Takes `name` as `kind` on `client`, waiting up to `wait`; a multi-lock takes `other`
/// (same slot) too.
async fn take(
    kind: Kind,
    client: &LockClient,
    name: &str,
    other: &str,
    wait: Duration,
) -> dlock::Result<Holding> {
    Ok(match kind {
        Kind::Lock => Holding::One(client.lock(name).try_lock_for(wait).await?),
        Kind::Fair => Holding::One(client.fair_lock(name).try_lock_for(wait).await?),
        Kind::Read => Holding::One(client.rw_lock(name).read().try_lock_for(wait).await?),
        Kind::Write => Holding::One(client.rw_lock(name).write().try_lock_for(wait).await?),
        Kind::Semaphore => {
            Holding::Permit(client.semaphore(name, 1).try_acquire_for(1, wait).await?)
        }
        Kind::Multi => Holding::Set(
            MultiLock::same_slot(client, [name, other])?
                .try_lock_for(wait)
                .await?,
        ),
    })
}

/// What happened to one ordered pair of kinds.
struct PairOutcome {
    first: Kind,
    second: Kind,
    /// The second kind's attempt while the first held the name.
    second_took: Result<(), String>,
    /// The first holder's unlock.
    first_unlock: Result<(), String>,
    /// The second holder's unlock, when it took the name.
    second_unlock: Option<Result<(), String>>,
}

/// Every ordered pair of kinds on one name: the first (client A) holds it, the second
/// (client B) tries for 200 ms. The second must succeed exactly where [`MAY_SHARE`] says
/// so, and the first holder's unlock must succeed in every pair. Fails where one kind's
/// script takes a hash of another kind's layout for its own (a read-write lock over a
/// plain lock, say).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_pair_of_kinds_on_one_name_excludes_as_the_table_says() {
    let server = RedisServer::start();
    let url = server.url();
    let (a, b) = (
        LockClient::connect(&url).await.unwrap(),
        LockClient::connect(&url).await.unwrap(),
    );
    let text =
        |outcome: &dlock::Result<()>| outcome.as_ref().map(|_| ()).map_err(ToString::to_string);
    // The pairs run concurrently, each on names of its own.
    let mut pairs = Vec::new();
    for (i, &first) in KINDS.iter().enumerate() {
        for (j, &second) in KINDS.iter().enumerate() {
            let (a, b) = (a.clone(), b.clone());
            pairs.push(tokio::spawn(async move {
                let name = format!("{{pair-{i}-{j}}}n");
                let other = format!("{{pair-{i}-{j}}}o");
                let held = take(first, &a, &name, &other, Duration::from_secs(1))
                    .await
                    .unwrap_or_else(|e| panic!("{first:?} on a free name: {e}"));
                let second_hold = take(second, &b, &name, &other, Duration::from_millis(200)).await;
                let second_took = second_hold
                    .as_ref()
                    .map(|_| ())
                    .map_err(ToString::to_string);
                let first_unlock = text(&held.unlock().await);
                let second_unlock = match second_hold {
                    Ok(hold) => Some(text(&hold.unlock().await)),
                    Err(_) => None,
                };
                PairOutcome {
                    first,
                    second,
                    second_took,
                    first_unlock,
                    second_unlock,
                }
            }));
        }
    }
    let mut wrong = Vec::new();
    for (index, pair) in pairs.into_iter().enumerate() {
        let outcome = tokio::time::timeout(Duration::from_secs(10), pair)
            .await
            .expect("a pair finished")
            .unwrap();
        let (i, j) = (index / KINDS.len(), index % KINDS.len());
        let expected = MAY_SHARE[i][j];
        let took = outcome.second_took.is_ok();
        let verdict = if took == expected && outcome.first_unlock.is_ok() {
            "ok"
        } else {
            "WRONG"
        };
        eprintln!(
            "item 10: {verdict:5} {:?} then {:?}: second {} (expected {}); first unlock {:?}; second unlock {:?}",
            outcome.first,
            outcome.second,
            match &outcome.second_took {
                Ok(()) => "took it".to_owned(),
                Err(e) => format!("refused ({e})"),
            },
            if expected { "to take it" } else { "a refusal" },
            outcome.first_unlock,
            outcome.second_unlock,
        );
        if verdict != "ok" {
            wrong.push(format!("{:?} then {:?}", outcome.first, outcome.second));
        }
    }
    assert!(wrong.is_empty(), "pairs not as the table says: {wrong:?}");
}

// ---------------------------------------------------------------------------------------
// 11. `wait` bounds every primitive while Redis is down.
// ---------------------------------------------------------------------------------------

/// Clients connect, then the server is stopped (SIGKILL). For each of lock, fair lock,
/// read lock, write lock and semaphore, `try_lock_for(2 s)` (each on a client of its own,
/// all at once) must return an error within 2 s + 300 ms. Fails when some primitive's
/// wait is not bounded by `wait` while Redis is unreachable (it rides the outage out for
/// `failover_wait`, or a connection attempt is not bounded by the deadline).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_primitive_s_wait_is_bounded_while_redis_is_down() {
    const KINDS_DOWN: [&str; 5] = ["lock", "fair_lock", "read", "write", "semaphore"];
    let wait = Duration::from_secs(2);
    let limit = wait + Duration::from_millis(300);
    let mut server = RedisServer::start();
    let url = server.url();
    let mut clients = Vec::new();
    for _ in KINDS_DOWN {
        clients.push(slow_recheck(&url).await);
    }
    server.stop();

    let mut tasks = Vec::new();
    for (kind, client) in KINDS_DOWN.into_iter().zip(clients) {
        tasks.push(tokio::spawn(async move {
            let name = format!("{{down}}{kind}");
            let started = Instant::now();
            let outcome = match kind {
                "lock" => client.lock(&name).try_lock_for(wait).await.map(drop),
                "fair_lock" => client.fair_lock(&name).try_lock_for(wait).await.map(drop),
                "read" => client
                    .rw_lock(&name)
                    .read()
                    .try_lock_for(wait)
                    .await
                    .map(drop),
                "write" => client
                    .rw_lock(&name)
                    .write()
                    .try_lock_for(wait)
                    .await
                    .map(drop),
                _ => client
                    .semaphore(&name, 1)
                    .try_acquire_for(1, wait)
                    .await
                    .map(drop),
            };
            (kind, started.elapsed(), outcome)
        }));
    }
    let mut late = Vec::new();
    for task in tasks {
        let (kind, took, outcome) = tokio::time::timeout(Duration::from_secs(20), task)
            .await
            .expect("every wait ended within 20 s")
            .unwrap();
        eprintln!("item 11: {kind}: try_lock_for({wait:?}) returned after {took:?} (limit {limit:?}): {outcome:?}");
        assert!(outcome.is_err(), "{kind} acquired with Redis down");
        if took > limit {
            late.push(format!("{kind} after {took:?}"));
        }
    }
    assert!(late.is_empty(), "waits over {limit:?}: {late:?}");
}

/// A RedLock over 5 servers, 3 of them stopped after the client connected:
/// `try_lock_for(1 s)` must return (no quorum) within 1 s + 200 ms.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_redlock_wait_is_bounded_with_a_majority_down() {
    let wait = Duration::from_secs(1);
    let limit = wait + Duration::from_millis(200);
    let mut servers: Vec<RedisServer> = (0..5).map(|_| RedisServer::start()).collect();
    let urls: Vec<String> = servers.iter().map(RedisServer::url).collect();
    let redlock =
        RedLockClient::connect(LockClient::builder().max_wait_recheck(SLOW_RECHECK), &urls)
            .await
            .unwrap();
    for server in &mut servers[..3] {
        server.stop();
    }
    let started = Instant::now();
    let outcome = tokio::time::timeout(
        Duration::from_secs(20),
        redlock.lock("{down}redlock").try_lock_for(wait),
    )
    .await
    .expect("the RedLock wait ended within 20 s");
    let took = started.elapsed();
    eprintln!(
        "item 11: RedLock with 3 of 5 servers down: try_lock_for({wait:?}) returned after {took:?} (limit {limit:?}): {:?}",
        outcome.as_ref().map(|_| ())
    );
    assert!(outcome.is_err(), "the RedLock was granted with 3 of 5 down");
    assert!(took <= limit, "returned after {took:?}, over {limit:?}");
}

// ---------------------------------------------------------------------------------------
// 12-13. Found by the liveness property test (`proptest_liveness`).
// ---------------------------------------------------------------------------------------

/// Two readers of client R hold a read-write lock: R1 without a lease (the watchdog's
/// 30 s in Redis), R2 with a 400 ms lease it keeps past its end. Writer W of another
/// client waits, told it may sleep until R1's deadline. R1 releases: the lock is now held
/// only until R2's lease ends, and W must get it within [`BOUND`] of that end. Fails when
/// the release of a reader that leaves others holding tells no waiter that the lock now
/// frees sooner: W sleeps until its recheck.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_writer_gets_the_lock_when_the_reader_left_holding_runs_out() {
    const NAME: &str = "{rwnap}x";
    let server = RedisServer::start();
    let url = server.url();
    let readers = LockClient::connect(&url).await.unwrap();
    let w = slow_recheck(&url).await;
    let rw = readers.rw_lock(NAME);
    let r1 = rw.read().lock().await.unwrap();
    let r2 = rw
        .read()
        .try_lock_with_lease(Duration::ZERO, Duration::from_millis(400))
        .await
        .unwrap();
    let lock = w.rw_lock(NAME);
    let writer = acquiring(async move { lock.write().try_lock_for(WAIT).await });
    tokio::time::sleep(SETTLE).await;
    assert!(
        !writer.is_finished(),
        "the writer got in beside two readers"
    );

    r1.unlock().await.unwrap();
    let r2_ends = Instant::from_std(r2.deadline());
    let acquired = acquired_within_bound(
        "item 12: the writer, from the end of the last reader's lease",
        r2_ends,
        writer,
    )
    .await;
    acquired.unlock().await.unwrap();
    drop(r2);
}

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
