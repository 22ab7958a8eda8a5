//! Fault scenario 5: the server kills the clients' connections (`CLIENT KILL TYPE pubsub`,
//! `TYPE normal`, both) while waiters wait. No waiter may sleep until the holder's TTL
//! (30 s here) or its own recheck interval (also 30 s): each is woken within 100 ms of the
//! unlock — by the unlock message, or by the subscriber's reconnection when the message
//! was published while it was down.

use std::time::{Duration, Instant};

use dlock::LockClient;
use dlock_tests::RedisServer;

/// The wake-up bound of the issue.
const WAKE_LIMIT: Duration = Duration::from_millis(100);

/// Which connections the server drops, and when.
#[derive(Debug, Clone, Copy)]
enum Kill {
    /// Subscriber connections, then 300 ms to reconnect before the unlock.
    PubSub,
    /// Subscriber connections right before the unlock: the message is published while the
    /// subscriber is reconnecting.
    PubSubRacingTheUnlock,
    /// Command connections (holder's and waiters'), right before the unlock.
    Normal,
    /// Both kinds, right before the unlock.
    Both,
}

impl Kill {
    fn run(self, server: &RedisServer) {
        let mut admin = server.connection();
        let types: &[&str] = match self {
            Kill::PubSub | Kill::PubSubRacingTheUnlock => &["pubsub"],
            Kill::Normal => &["normal"],
            Kill::Both => &["pubsub", "normal"],
        };
        for kind in types {
            let killed: u64 = redis::cmd("CLIENT")
                .arg("KILL")
                .arg("TYPE")
                .arg(kind)
                .arg("SKIPME")
                .arg("yes")
                .query(&mut admin)
                .unwrap();
            assert!(killed > 0, "CLIENT KILL TYPE {kind} found no connection");
        }
    }

    fn settle_before_unlock(self) -> Duration {
        match self {
            Kill::PubSub => Duration::from_millis(300),
            _ => Duration::ZERO,
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn waiters_are_woken_within_100ms_after_connections_are_killed() {
    let server = RedisServer::start();
    let connect = || async {
        LockClient::builder()
            .max_wait_recheck(Duration::from_secs(30))
            .connect(&server.url())
            .await
            .unwrap()
    };
    let holder = connect().await;
    let waiters = connect().await;
    for kill in [
        Kill::PubSub,
        Kill::PubSubRacingTheUnlock,
        Kill::Normal,
        Kill::Both,
    ] {
        let name = format!("kill:{kill:?}");
        let guard = holder.lock(&name).lock().await.unwrap();
        // Two waiters on the lock: the first woken by the unlock, the second by the
        // first's unlock.
        let spawn_waiter = || {
            let lock = waiters.lock(&name);
            tokio::spawn(async move {
                let guard = lock.try_lock_for(Duration::from_secs(20)).await;
                let acquired_at = Instant::now();
                let guard = guard.unwrap();
                tokio::time::sleep(Duration::from_millis(20)).await;
                let released_at = Instant::now();
                guard.unlock().await.unwrap();
                (acquired_at, released_at)
            })
        };
        let first = spawn_waiter();
        let second = spawn_waiter();
        tokio::time::sleep(Duration::from_millis(300)).await;
        assert!(!first.is_finished() && !second.is_finished());

        kill.run(&server);
        tokio::time::sleep(kill.settle_before_unlock()).await;
        guard.unlock().await.unwrap();
        let unlocked_at = Instant::now();

        let mut hand_offs = Vec::new();
        let (first, second) = (first.await.unwrap(), second.await.unwrap());
        let (earlier, later) = if first.0 <= second.0 {
            (first, second)
        } else {
            (second, first)
        };
        hand_offs.push(earlier.0.saturating_duration_since(unlocked_at));
        hand_offs.push(later.0.saturating_duration_since(earlier.1));
        println!("scenario 5, CLIENT KILL {kill:?}: hand-offs after the unlock {hand_offs:?}");
        for wake in &hand_offs {
            assert!(
                *wake <= WAKE_LIMIT,
                "a waiter was woken {wake:?} after the unlock ({kill:?})"
            );
        }
        assert!(
            later.0 >= earlier.1,
            "both waiters held {name} at once ({kill:?})"
        );
    }
}

/// A call sent just as the server closes its connection must fail over to a new
/// connection at once, not wait out the command timeout: the client library can queue
/// such a call behind a connection whose reader has already stopped, where nothing ever
/// writes or fails it. Each round kills the client's command connection and releases
/// right after; the rounds keep the timing tight enough to hit that window in a few
/// hundred tries.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_release_sent_as_its_connection_is_killed_is_not_left_waiting() {
    const ROUNDS: usize = 3000;
    /// Far below the command timeout: a call that waited for it fails this.
    const RELEASE_LIMIT: Duration = Duration::from_millis(1500);
    let server = RedisServer::start();
    let client = LockClient::builder()
        .command_timeout(Duration::from_secs(5))
        .connect(&server.url())
        .await
        .unwrap();
    let mut admin = server.connection();
    let mut slowest = Duration::ZERO;
    for round in 0..ROUNDS {
        let name = format!("killed-release:{round}");
        let guard = client.lock(&name).lock().await.unwrap();
        let killed: u64 = redis::cmd("CLIENT")
            .arg("KILL")
            .arg("TYPE")
            .arg("normal")
            .arg("SKIPME")
            .arg("yes")
            .query(&mut admin)
            .unwrap();
        assert!(killed > 0, "round {round}: no connection to kill");
        let started = Instant::now();
        guard
            .unlock()
            .await
            .unwrap_or_else(|e| panic!("round {round}: the release failed: {e}"));
        let took = started.elapsed();
        slowest = slowest.max(took);
        assert!(
            took <= RELEASE_LIMIT,
            "round {round}: the release took {took:?} after its connection was killed"
        );
        assert!(
            !client.lock(&name).is_locked().await.unwrap(),
            "round {round}: the lock is still held after its release"
        );
    }
    println!("{ROUNDS} releases right after CLIENT KILL: slowest {slowest:?}");
}
