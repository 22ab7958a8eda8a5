//! Waiters that died or froze while registered (`dlock-waiter` processes, SIGKILL or
//! SIGSTOP) never hold up a live one: the release or the lapse of their grant reaches the
//! next waiter, and a thawed waiter whose grant lapsed does not hold the lock.

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use dlock::{LockClient, LockGuard};
use dlock_tests::liveness::slow_recheck;
use dlock_tests::RedisServer;
use tokio::sync::mpsc;
use tokio::task::JoinHandle;
use tokio::time::Instant;

use crate::bound::*;

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

/// Fails when a release wakes (and grants the lock to) a registered client that died:
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
/// frozen waiter (its client still listens, as far as Redis can tell): a grant of 100 ms
/// nobody extends. The live waiter must get the lock within [`BOUND`] of the release.
/// Fails when nobody but the grantee hears of the hand-off: the grant lapses and the live
/// waiter sleeps until its recheck. (The same happens when a waiter is killed after it
/// was told and before it tried.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hand_off_to_a_frozen_waiter_moves_on_when_its_grant_lapses() {
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

/// As above, but the waiter told to try when the frozen one's grant lapses (the
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
