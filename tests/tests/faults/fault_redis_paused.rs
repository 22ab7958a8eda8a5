//! Fault scenario 3: Redis stops answering for a while — `CLIENT PAUSE 1500 ALL`, and
//! SIGSTOP / SIGCONT of redis-server for 2 s — during acquire, renew and release.
//!
//! Every call either fails with a timeout error within its command timeout or succeeds
//! late; nothing hangs, no two owners hold a lock at once, a watchdog lock survives a pause
//! shorter than its renewal margin, and nothing is left behind once Redis answers again.

use std::time::{Duration, Instant};

use dlock::{LockClient, LockError};
use dlock_tests::{keys, RedisServer};

/// The two ways Redis goes silent.
#[derive(Debug, Clone, Copy)]
enum Pause {
    /// `CLIENT PAUSE 1500 ALL`: the server runs but holds every client command.
    ClientPause,
    /// SIGSTOP for 2 s, then SIGCONT: the process is frozen, keys expire by wall clock
    /// once it resumes.
    Sigstop,
}

impl Pause {
    const ALL: [Pause; 2] = [Pause::ClientPause, Pause::Sigstop];

    fn length(self) -> Duration {
        match self {
            Pause::ClientPause => Duration::from_millis(1_500),
            Pause::Sigstop => Duration::from_secs(2),
        }
    }

    /// Starts the pause; it ends by itself after [`Pause::length`]. Returns when Redis
    /// has stopped answering.
    fn start(self, server: &RedisServer) -> std::thread::JoinHandle<()> {
        match self {
            Pause::ClientPause => {
                let mut admin = server.connection();
                let () = redis::cmd("CLIENT")
                    .arg("PAUSE")
                    .arg(self.length().as_millis() as u64)
                    .arg("ALL")
                    .query(&mut admin)
                    .unwrap();
                std::thread::spawn(|| {})
            }
            Pause::Sigstop => {
                server.pause();
                let pid = server.pid();
                let length = self.length();
                std::thread::spawn(move || {
                    std::thread::sleep(length);
                    let status = std::process::Command::new("kill")
                        .args(["-CONT", &pid.to_string()])
                        .status()
                        .expect("run kill -CONT");
                    assert!(status.success(), "kill -CONT {pid} failed");
                })
            }
        }
    }
}

/// A client whose calls give up after `command_timeout`.
async fn client(server: &RedisServer, command_timeout: Duration, watchdog: Duration) -> LockClient {
    LockClient::builder()
        .command_timeout(command_timeout)
        .watchdog_timeout(watchdog)
        .connect(&server.url())
        .await
        .unwrap()
}

const FAST: Duration = Duration::from_millis(500);
const SLOW: Duration = Duration::from_secs(3);
/// Scheduling and round-trip slack on a busy 2-core machine.
const SLACK: Duration = Duration::from_millis(300);

/// Acquisitions sent while Redis is silent: a short command timeout fails within it and
/// leaves no key behind once Redis answers; a command timeout longer than the pause, or a
/// blocking `lock()` (which waits out an outage), succeeds late.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn acquire_during_a_pause_fails_within_the_timeout_or_succeeds_late() {
    let server = RedisServer::start();
    let fast = client(&server, FAST, Duration::from_secs(30)).await;
    let slow = client(&server, SLOW, Duration::from_secs(30)).await;
    for pause in Pause::ALL {
        let names = [
            format!("pause:acquire:fast:{pause:?}"),
            format!("pause:acquire:slow:{pause:?}"),
            format!("pause:acquire:blocking:{pause:?}"),
        ];
        let locks = [
            fast.lock(&names[0]),
            slow.lock(&names[1]),
            fast.lock(&names[2]),
        ];
        let resumer = pause.start(&server);
        let started = Instant::now();
        let ((fast_result, fast_time), (slow_result, slow_time), (blocking_result, blocking_time)) = tokio::join!(
            timed(started, locks[0].try_lock()),
            timed(started, locks[1].try_lock()),
            timed(started, locks[2].lock()),
        );
        resumer.join().unwrap();
        println!(
            "scenario 3, acquire during {pause:?} ({:?}): 500 ms timeout → {} after {fast_time:?}; 3 s timeout → {} after {slow_time:?}; lock() → {} after {blocking_time:?}",
            pause.length(),
            outcome(&fast_result),
            outcome(&slow_result),
            outcome(&blocking_result),
        );
        match fast_result {
            Err(LockError::CommandTimeout { .. }) => {}
            other => panic!("try_lock with a 500 ms timeout during {pause:?}: {other:?}"),
        }
        assert!(fast_time <= FAST + SLACK, "took {fast_time:?}");
        let slow_guard = slow_result.unwrap_or_else(|e| panic!("3 s timeout, {pause:?}: {e}"));
        assert!(
            slow_time + SLACK >= pause.length(),
            "answered during the pause?"
        );
        assert!(
            slow_time <= pause.length() + SLACK * 2,
            "took {slow_time:?}"
        );
        let blocking_guard = blocking_result.unwrap_or_else(|e| panic!("lock(), {pause:?}: {e}"));
        assert!(blocking_time <= pause.length() + Duration::from_secs(1));

        // The abandoned attempt ran once Redis resumed; its lock was handed back.
        let limit = Duration::from_secs(2);
        let cleanup = keys::gone_within(&mut server.connection(), &names[0], limit)
            .await
            .unwrap_or_else(|| panic!("{} still exists {limit:?} after Redis came back", names[0]));
        println!(
            "scenario 3, the abandoned acquisition's key was gone {cleanup:?} after the pause"
        );
        // The late acquisitions are real locks: nobody else gets them.
        for name in &names[1..] {
            match fast.lock(name).try_lock().await {
                Err(LockError::Timeout { .. }) => {}
                other => panic!("{name} granted twice after {pause:?}: {other:?}"),
            }
        }
        slow_guard.unlock().await.unwrap();
        blocking_guard.unlock().await.unwrap();
    }
}

/// A watchdog lock (timeout 4 s: renewed every 1.33 s, so it survives up to ~2.6 s
/// without an answer) held across each pause: never lost, never granted to a rival, its
/// lease renewed again afterwards.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn renewal_during_a_pause_keeps_the_lock() {
    let server = RedisServer::start();
    let holder = client(&server, SLOW, Duration::from_secs(4)).await;
    let rival = client(&server, FAST, Duration::from_secs(30)).await;
    let guard = holder.lock("pause:renew").lock().await.unwrap();
    let mut lost = Box::pin(guard.lost());
    for pause in Pause::ALL {
        // Let a renewal fall inside the pause whatever the phase: the pause is longer than
        // the renewal period.
        let renewals_before = holder.stats().renewals;
        let resumer = pause.start(&server);
        let attempt = rival.lock("pause:renew").try_lock().await;
        assert!(
            matches!(attempt, Err(LockError::CommandTimeout { .. })),
            "rival during {pause:?}: {attempt:?}"
        );
        resumer.join().unwrap();
        // Two more renewal periods after the pause.
        tokio::select! {
            () = tokio::time::sleep(Duration::from_millis(2_700)) => {}
            error = &mut lost => panic!("lock lost across {pause:?}: {error}"),
        }
        assert!(!guard.is_lost());
        let renewals = holder.stats().renewals - renewals_before;
        let remaining = holder.lock("pause:renew").remaining_lease().await.unwrap();
        println!(
            "scenario 3, renew across {pause:?} ({:?}): still held, {renewals} renewals since, lease left {remaining:?}",
            pause.length()
        );
        assert!(renewals >= 2, "only {renewals} renewals across {pause:?}");
        assert!(
            remaining.is_some_and(|left| left > Duration::from_millis(2_000)),
            "lease not renewed after {pause:?}: {remaining:?}"
        );
        match rival.lock("pause:renew").try_lock().await {
            Err(LockError::Timeout { .. }) => {}
            other => panic!("rival after {pause:?}: {other:?}"),
        }
    }
    guard.unlock().await.unwrap();
}

/// Releases sent while Redis is silent: with a timeout longer than the pause `unlock`
/// succeeds late; with a short one it reports the timeout within it, and the release
/// still happens once Redis answers. A waiter gets the lock only after that.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn release_during_a_pause_succeeds_late_or_reports_and_still_releases() {
    let server = RedisServer::start();
    let fast = client(&server, FAST, Duration::from_secs(30)).await;
    let slow = client(&server, SLOW, Duration::from_secs(30)).await;
    let waiter = client(&server, SLOW, Duration::from_secs(30)).await;
    for pause in Pause::ALL {
        let fast_name = format!("pause:release:fast:{pause:?}");
        let slow_name = format!("pause:release:slow:{pause:?}");
        let fast_guard = fast.lock(&fast_name).lock().await.unwrap();
        let slow_guard = slow.lock(&slow_name).lock().await.unwrap();
        let waiting = {
            let lock = waiter.lock(&fast_name);
            tokio::spawn(async move {
                let guard = lock.try_lock_for(Duration::from_secs(10)).await;
                (Instant::now(), guard)
            })
        };
        tokio::time::sleep(Duration::from_millis(100)).await;

        let resumer = pause.start(&server);
        let started = Instant::now();
        let (fast_result, slow_result) = tokio::join!(
            async {
                let result = fast_guard.unlock().await;
                (result, Instant::now())
            },
            async {
                let result = slow_guard.unlock().await;
                (result, started.elapsed())
            },
        );
        resumer.join().unwrap();
        let (fast_result, fast_returned) = fast_result;
        let (slow_result, slow_time) = slow_result;
        let fast_time = fast_returned - started;
        match &fast_result {
            Err(LockError::CommandTimeout { .. }) => {}
            other => panic!("unlock with a 500 ms timeout during {pause:?}: {other:?}"),
        }
        assert!(fast_time <= FAST + SLACK, "unlock took {fast_time:?}");
        slow_result.unwrap_or_else(|e| panic!("unlock with a 3 s timeout during {pause:?}: {e}"));
        assert!(slow_time + SLACK >= pause.length());
        assert!(
            slow_time <= pause.length() + SLACK * 2,
            "took {slow_time:?}"
        );
        assert!(!keys::exists(&mut server.connection(), &slow_name));

        let (acquired_at, guard) = waiting.await.unwrap();
        let guard = guard.unwrap_or_else(|e| panic!("waiter after {pause:?}: {e}"));
        let resumed_at = started + pause.length();
        println!(
            "scenario 3, release during {pause:?}: 500 ms timeout → {} after {fast_time:?}, waiter acquired {:?} after the pause; 3 s timeout → ok after {slow_time:?}",
            outcome(&fast_result),
            acquired_at.saturating_duration_since(resumed_at),
        );
        assert!(
            acquired_at >= fast_returned,
            "the waiter got the lock before the holder's unlock returned"
        );
        assert!(
            acquired_at <= resumed_at + Duration::from_secs(1),
            "the waiter acquired {:?} after the pause",
            acquired_at - resumed_at
        );
        guard.unlock().await.unwrap();
    }
}

/// The future's output and when it came, measured from `started`.
async fn timed<T>(started: Instant, future: impl std::future::Future<Output = T>) -> (T, Duration) {
    let output = future.await;
    (output, started.elapsed())
}

fn outcome<T>(result: &Result<T, LockError>) -> String {
    match result {
        Ok(_) => "ok".to_owned(),
        Err(error) => format!("error ({error})"),
    }
}
