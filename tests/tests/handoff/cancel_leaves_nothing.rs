//! Guards the cancel-safety promises of `LockGuard::unlock` and `LockClient::connect`: a
//! future dropped part-way leaves nothing behind.
//!
//! - `unlock()` cancelled at any point (before it was polled, a random 0–2 ms in, with
//!   its connection reset and the reconnect held by a proxy, with its reply held back):
//!   the background release finishes the job, so the lock key is gone shortly after, and a
//!   release that did reach Redis is not applied a second time (an owner's other hold
//!   survives).
//! - `connect()` cancelled at a random point, directly and with every reply held back by
//!   a proxy: the server's client count returns to its baseline within about a second (no
//!   connection, hence no task, survives the cancelled connect).

use std::future::Future;
use std::time::Duration;

use dlock::{LockClient, LockGuard};
use dlock_tests::{RedisServer, TcpProxy};
use redis::aio::MultiplexedConnection;
use tokio::time::Instant;

/// How long the background is given to finish a cancelled operation's work.
const SETTLE: Duration = Duration::from_secs(2);

/// A small deterministic generator for the cancellation points.
struct Rng(u64);

impl Rng {
    fn below(&mut self, bound: u64) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0 % bound
    }
}

/// Polls `future` until it completes or `delay` has passed (sub-millisecond delays are
/// honoured by yielding, the timer resolution being 1 ms); then drops it. `None` when it
/// was cancelled. It is always polled at least once.
async fn cancel_after<F: Future>(future: F, delay: Duration) -> Option<F::Output> {
    let until = Instant::now() + delay;
    let deadline = async {
        while Instant::now() < until {
            tokio::task::yield_now().await;
        }
    };
    tokio::select! {
        biased;
        output = future => Some(output),
        () = deadline => None,
    }
}

async fn admin(server: &RedisServer) -> MultiplexedConnection {
    server
        .client()
        .get_multiplexed_async_connection()
        .await
        .unwrap()
}

/// Waits up to [`SETTLE`] for `key` to disappear; how long it took, or `None`.
async fn gone_within_settle(admin: &mut MultiplexedConnection, key: &str) -> Option<Duration> {
    let started = Instant::now();
    while started.elapsed() < SETTLE {
        let exists: bool = redis::cmd("EXISTS")
            .arg(key)
            .query_async(admin)
            .await
            .unwrap();
        if !exists {
            return Some(started.elapsed());
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    None
}

/// Number of client connections the server has open.
async fn clients(admin: &mut MultiplexedConnection) -> usize {
    let list: String = redis::cmd("CLIENT")
        .arg("LIST")
        .query_async(admin)
        .await
        .unwrap();
    list.lines().filter(|line| !line.trim().is_empty()).count()
}

/// Waits up to [`SETTLE`] for the client count to be `baseline`; the last count seen.
async fn clients_back_to(admin: &mut MultiplexedConnection, baseline: usize) -> usize {
    let started = Instant::now();
    loop {
        let now = clients(admin).await;
        if now == baseline || started.elapsed() >= SETTLE {
            return now;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// At least 40 rounds: a guard (watchdog, 30 s lease) whose `unlock()` is cancelled
/// before its first poll or 0–2 ms in; the key must be gone within the settling time each
/// time. Rounds go on (up to 400) until 10 unlocks were really cancelled: on a loaded
/// machine more of them finish within their delay.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unlock_cancelled_at_any_point_still_releases() {
    let server = RedisServer::start();
    let mut admin = admin(&server).await;
    let client = LockClient::connect(&server.url()).await.unwrap();
    let mut rng = Rng(0x2545_F491_4F6C_DD1D);
    let (mut cancelled, mut slowest, mut rounds) = (0, Duration::ZERO, 0);
    for round in 0..400 {
        if round >= 40 && cancelled >= 10 {
            break;
        }
        rounds += 1;
        let guard = client.lock("cancelled-unlock").lock().await.unwrap();
        let delay = Duration::from_micros(rng.below(2000));
        let (finished, when) = if round == 0 {
            drop(guard.unlock());
            (None, "before its first poll".to_owned())
        } else {
            let finished = cancel_after(guard.unlock(), delay).await;
            (finished, format!("{delay:?} in"))
        };
        match finished {
            Some(outcome) => outcome.unwrap(),
            None => cancelled += 1,
        }
        let took = gone_within_settle(&mut admin, "cancelled-unlock")
            .await
            .unwrap_or_else(|| {
                panic!("round {round} (cancelled {when}): the lock is still held {SETTLE:?} later")
            });
        slowest = slowest.max(took);
    }
    assert!(
        cancelled >= 10,
        "only {cancelled} of {rounds} unlocks were cancelled"
    );
    eprintln!("{cancelled} of {rounds} unlocks cancelled; key gone at most {slowest:?} after");
}

/// The release a cancelled `unlock()` already sent counts once: the owner holds the lock
/// twice (outer guard + re-entry), the re-entry's `unlock()` is cancelled at a random
/// point (its reply held back by a proxy in half the rounds), and afterwards the owner
/// must still have exactly one hold, the outer guard's.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cancelled_unlock_that_reached_redis_is_not_applied_twice() {
    let server = RedisServer::start();
    let proxy = TcpProxy::start(server.addr());
    let client = LockClient::connect(&proxy.url()).await.unwrap();
    let mut rng = Rng(0x9E37_79B9_7F4A_7C15);
    let mut cancelled = 0;
    for round in 0..30 {
        let lock = client.lock("twice");
        let outer = lock.lock().await.unwrap();
        let inner: LockGuard = outer.scope(lock.lock()).await.unwrap();
        assert_eq!(outer.hold_count().await.unwrap(), 2);
        let hold_replies = round % 2 == 1;
        let delay = if hold_replies {
            proxy.hold_replies();
            Duration::from_millis(20 + rng.below(30))
        } else {
            Duration::from_micros(rng.below(2000))
        };
        let finished = cancel_after(inner.unlock(), delay).await;
        if hold_replies {
            proxy.release_replies();
        }
        match finished {
            Some(outcome) => outcome.unwrap(),
            None => cancelled += 1,
        }
        // The background release (same operation id) runs and answers from the memo.
        let started = Instant::now();
        let count = loop {
            let count = outer.hold_count().await.unwrap();
            if count < 2 || started.elapsed() >= SETTLE {
                break count;
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        };
        tokio::time::sleep(Duration::from_millis(100)).await;
        let settled = outer.hold_count().await.unwrap();
        assert_eq!(
            (count, settled),
            (1, 1),
            "round {round} (replies held: {hold_replies}, cancelled after {delay:?}): holds left (first seen below 2, 100 ms later)"
        );
        outer.unlock().await.unwrap();
    }
    assert!(
        cancelled >= 15,
        "only {cancelled} of 30 unlocks were cancelled"
    );
    eprintln!("{cancelled} of 30 re-entry unlocks cancelled; the outer hold survived each");
}

/// `unlock()` whose connection is reset while the proxy holds every new connection: the
/// release cannot get through, the call is cancelled after 100 ms, then the proxy lets
/// connections through. The background release must free the lock.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unlock_cancelled_while_redis_is_unreachable_releases_once_it_is_back() {
    let server = RedisServer::start();
    let mut admin = admin(&server).await;
    let proxy = TcpProxy::start(server.addr());
    let client = LockClient::connect(&proxy.url()).await.unwrap();
    for round in 0..3 {
        let guard = client.lock("unreachable").lock().await.unwrap();
        proxy.hold_new_connections();
        proxy.reset_all();
        let finished = cancel_after(guard.unlock(), Duration::from_millis(100)).await;
        assert!(
            finished.is_none(),
            "round {round}: unlock finished without Redis: {finished:?}"
        );
        let exists: bool = redis::cmd("EXISTS")
            .arg("unreachable")
            .query_async(&mut admin)
            .await
            .unwrap();
        assert!(exists, "round {round}: released although unreachable?");
        proxy.release_held();
        let took = gone_within_settle(&mut admin, "unreachable").await;
        assert!(
            took.is_some(),
            "round {round}: the lock is still held {SETTLE:?} after Redis was reachable again"
        );
        eprintln!("round {round}: key gone {took:?} after the proxy let connections through");
    }
}

/// 30 rounds of `connect()` cancelled 0–4 ms in, then 5 with every reply held back by a
/// proxy (so the connect cannot finish) and cancelled 0–200 ms in: the server's client
/// count returns to its baseline each time.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cancelled_connect_leaves_no_connection_behind() {
    let server = RedisServer::start();
    let mut admin = admin(&server).await;
    let mut baseline = clients(&mut admin).await;
    let mut rng = Rng(0xD1B5_4A32_D192_ED03);
    let mut cancelled = 0;
    let mut kept = Vec::new();
    for round in 0..30 {
        let delay = Duration::from_micros(rng.below(4000));
        match cancel_after(LockClient::connect(&server.url()), delay).await {
            None => cancelled += 1,
            Some(client) => {
                // A connect that finished is not what this test is about: keep the client
                // (its connections stay open) and count them in the baseline.
                kept.push(client.unwrap());
                tokio::time::sleep(Duration::from_millis(50)).await;
                baseline = clients(&mut admin).await;
                continue;
            }
        }
        let now = clients_back_to(&mut admin, baseline).await;
        assert_eq!(
            now,
            baseline,
            "round {round}: connect cancelled after {delay:?} left {} connection(s) open",
            now as isize - baseline as isize
        );
    }
    assert!(
        cancelled >= 10,
        "only {cancelled} of 30 connects were cancelled"
    );

    let proxy = TcpProxy::start(server.addr());
    proxy.hold_replies();
    for round in 0..5 {
        let delay = Duration::from_millis(rng.below(200));
        let outcome = cancel_after(LockClient::connect(&proxy.url()), delay).await;
        assert!(
            outcome.is_none(),
            "round {round}: connected without replies?"
        );
        let now = clients_back_to(&mut admin, baseline).await;
        assert_eq!(
            now, baseline,
            "round {round} (replies held): connect cancelled after {delay:?} left {} connection(s) open",
            now as isize - baseline as isize
        );
    }
    proxy.release_replies();
    eprintln!("connect: {cancelled} of 30 cancelled directly ({} finished first), 5 cancelled with replies held; client count back to {baseline} each time", kept.len());
}
