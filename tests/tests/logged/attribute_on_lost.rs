//! Guards `#[distributed_lock(on_lost = ...)]` against a real Redis: what a lock lost while
//! the body runs does to the call.
//!
//! - `cancel` (the default): the body's future is dropped at the loss, so the function
//!   returns `Err(Lost)` within 50 ms of the lease's end and the body's writes stop there
//!   (a lease running out; a watchdog lock whose key is deleted behind it; a multi-lock; a
//!   semaphore permit).
//! - `error`: the body runs to its end, then `Err(Lost)`; a body that failed keeps its error.
//! - `ignore`: the body's value is returned and the loss logged.
//! - A body that finishes before any loss returns normally in every mode.
//!
//! The body writes with `INCR` on its own connection and notes when, so a write after the
//! loss is seen both in Redis and in time. Log lines are captured per binary; each test
//! looks only at lines naming its own lock.

use std::sync::Mutex;
use std::time::Duration;

use dlock::{distributed_lock, LockClient, LockError};
use dlock_tests::logs::{capture_logs, captured};
use dlock_tests::RedisServer;
use tokio::time::Instant;

#[derive(Debug)]
enum ShopError {
    Lock(LockError),
    Failed,
}

impl From<LockError> for ShopError {
    fn from(error: LockError) -> Self {
        ShopError::Lock(error)
    }
}

fn is_lost(result: &Result<u32, ShopError>) -> bool {
    matches!(result, Err(ShopError::Lock(LockError::Lost { .. })))
}

/// What the body saw: when the lock's key expires by its PTTL at entry, when it wrote.
struct Probe {
    server: RedisServer,
    expiry: Mutex<Option<Instant>>,
    writes: Mutex<Vec<Instant>>,
}

impl Probe {
    fn new() -> Probe {
        Probe {
            server: RedisServer::start(),
            expiry: Mutex::new(None),
            writes: Mutex::new(Vec::new()),
        }
    }

    /// Notes when `key` (or the one key matching a `*` pattern) expires according to
    /// Redis (PTTL read now).
    fn note_expiry(&self, key: &str) {
        let mut admin = self.server.connection();
        let key = if key.contains('*') {
            let found: Vec<String> = redis::cmd("KEYS").arg(key).query(&mut admin).unwrap();
            assert_eq!(found.len(), 1, "{key}: {found:?}");
            found[0].clone()
        } else {
            key.to_owned()
        };
        let pttl: i64 = redis::cmd("PTTL").arg(&key).query(&mut admin).unwrap();
        assert!(pttl > 0, "{key}: PTTL {pttl} at the body's start");
        let expiry = Instant::now() + Duration::from_millis(pttl.unsigned_abs());
        *self.expiry.lock().unwrap() = Some(expiry);
    }

    /// The body's write: `INCR counter`, timed.
    fn write(&self, counter: &str) {
        redis::cmd("INCR")
            .arg(counter)
            .exec(&mut self.server.connection())
            .unwrap();
        self.writes.lock().unwrap().push(Instant::now());
    }

    fn count(&self, counter: &str) -> u64 {
        redis::cmd("GET")
            .arg(counter)
            .query::<Option<u64>>(&mut self.server.connection())
            .unwrap()
            .unwrap_or(0)
    }

    fn expiry(&self) -> Instant {
        self.expiry
            .lock()
            .unwrap()
            .expect("the body noted the expiry")
    }

    fn last_write(&self) -> Instant {
        *self.writes.lock().unwrap().last().expect("the body wrote")
    }

    /// Asserts the writes to `counter` stopped by `returned`: none after it, none in
    /// Redis in the 200 ms that follow.
    async fn assert_writes_stopped(&self, counter: &str, returned: Instant) {
        let at_return = self.count(counter);
        tokio::time::sleep(Duration::from_millis(200)).await;
        assert_eq!(
            self.count(counter),
            at_return,
            "{counter}: the body kept writing after the function returned"
        );
        assert!(self.last_write() <= returned);
    }
}

const STEP: Duration = Duration::from_millis(20);

/// Writes every 20 ms for 2 s, far past its 500 ms lease.
#[distributed_lock(key = "cancel:<id>", lease = "500ms", client = locks)]
async fn write_past_lease(locks: &LockClient, id: u32, probe: &Probe) -> Result<u32, ShopError> {
    probe.note_expiry(&format!("cancel:{id}"));
    for _ in 0..100 {
        probe.write(&format!("count:cancel:{id}"));
        tokio::time::sleep(STEP).await;
    }
    Ok(100)
}

/// Asserts a cancelled call: `Err(Lost)` within 50 ms of the lease's end, writes stopped
/// by then and no later than one step after the expiry.
async fn assert_cancelled_at_expiry(
    lock: &str,
    counter: &str,
    probe: &Probe,
    result: &Result<u32, ShopError>,
    returned: Instant,
) {
    assert!(
        is_lost(result),
        "{lock}: expected Err(Lost), got {result:?}"
    );
    let expiry = probe.expiry();
    let late = returned.saturating_duration_since(expiry);
    let early = expiry.saturating_duration_since(returned);
    eprintln!("{lock}: returned {late:?} after / {early:?} before the key's expiry");
    assert!(
        late <= Duration::from_millis(50),
        "{lock}: returned {late:?} after the lease ended"
    );
    assert!(
        early <= Duration::from_millis(50),
        "{lock}: returned {early:?} before the lease ended"
    );
    assert!(
        probe.last_write() <= expiry + STEP,
        "{lock}: a write {:?} after the expiry",
        probe.last_write() - expiry
    );
    probe.assert_writes_stopped(counter, returned).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancel_stops_the_body_when_the_lease_runs_out() {
    let probe = Probe::new();
    let locks = LockClient::connect(&probe.server.url()).await.unwrap();
    let result = write_past_lease(&locks, 1, &probe).await;
    let returned = Instant::now();
    assert_cancelled_at_expiry("cancel:1", "count:cancel:1", &probe, &result, returned).await;
}

/// A watchdog lock (renewed every 100 ms) whose key the test deletes while the body runs.
#[distributed_lock(key = "watched:<id>", client = locks)]
async fn write_while_watched(locks: &LockClient, id: u32, probe: &Probe) -> Result<u32, ShopError> {
    for _ in 0..100 {
        probe.write(&format!("count:watched:{id}"));
        tokio::time::sleep(STEP).await;
    }
    Ok(100)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancel_stops_the_body_when_the_watchdog_finds_the_key_gone() {
    let probe = Probe::new();
    let watchdog = Duration::from_millis(300);
    let locks = LockClient::builder()
        .watchdog_timeout(watchdog)
        .connect(&probe.server.url())
        .await
        .unwrap();
    let mut admin = probe.server.connection();
    let call = write_while_watched(&locks, 1, &probe);
    let delete = async {
        tokio::time::sleep(Duration::from_millis(400)).await;
        redis::cmd("DEL").arg("watched:1").exec(&mut admin).unwrap();
        Instant::now()
    };
    let (result, deleted) = tokio::join!(
        async {
            let result = call.await;
            (result, Instant::now())
        },
        delete
    );
    let (result, returned) = result;
    assert!(is_lost(&result), "expected Err(Lost), got {result:?}");
    let after = returned.saturating_duration_since(deleted);
    eprintln!("watched:1: returned {after:?} after the DEL (renewal every 100 ms)");
    // Found at the next renewal (≤ 100 ms), reported at once.
    assert!(
        after <= watchdog / 3 + Duration::from_millis(50),
        "returned {after:?} after the DEL"
    );
    probe
        .assert_writes_stopped("count:watched:1", returned)
        .await;
}

/// Sleeps past its 300 ms lease, then writes and returns `outcome`.
#[distributed_lock(key = "finish:<id>", lease = "300ms", client = locks, on_lost = "error")]
async fn finish_past_lease(
    locks: &LockClient,
    id: u32,
    probe: &Probe,
    outcome: Result<u32, ShopError>,
) -> Result<u32, ShopError> {
    tokio::time::sleep(Duration::from_millis(600)).await;
    probe.write(&format!("count:finish:{id}"));
    outcome
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn error_runs_the_body_to_its_end_then_reports_the_loss() {
    let probe = Probe::new();
    let locks = LockClient::connect(&probe.server.url()).await.unwrap();
    let result = finish_past_lease(&locks, 1, &probe, Ok(7)).await;
    assert!(is_lost(&result), "expected Err(Lost), got {result:?}");
    assert_eq!(probe.count("count:finish:1"), 1, "the body ran to its end");

    let result = finish_past_lease(&locks, 2, &probe, Err(ShopError::Failed)).await;
    assert!(
        matches!(result, Err(ShopError::Failed)),
        "the body's own error is kept: {result:?}"
    );
    assert_eq!(probe.count("count:finish:2"), 1);
}

#[distributed_lock(key = "ignored:<id>", lease = "300ms", client = locks, on_lost = "ignore")]
async fn ignore_the_loss(locks: &LockClient, id: u32, probe: &Probe) -> Result<u32, ShopError> {
    tokio::time::sleep(Duration::from_millis(600)).await;
    probe.write(&format!("count:ignored:{id}"));
    Ok(7)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ignore_returns_the_body_value_and_logs_the_loss() {
    capture_logs(tracing::Level::DEBUG);
    let probe = Probe::new();
    let locks = LockClient::connect(&probe.server.url()).await.unwrap();
    let result = ignore_the_loss(&locks, 1, &probe).await;
    assert!(matches!(result, Ok(7)), "{result:?}");
    assert_eq!(probe.count("count:ignored:1"), 1);
    let warnings: Vec<String> = captured()
        .lines()
        .filter(|line| line.contains("WARN") && line.contains("lock=ignored:1"))
        .filter(|line| line.contains("on_lost = \"ignore\""))
        .map(str::to_owned)
        .collect();
    assert_eq!(warnings.len(), 1, "one warning about the ignored loss");
}

/// Quick bodies under a 300 ms lease, one per mode.
#[distributed_lock(key = "quick:cancel:<id>", lease = "300ms", client = locks)]
async fn quick_cancel(locks: &LockClient, id: u32) -> Result<u32, ShopError> {
    Ok(id)
}

#[distributed_lock(key = "quick:error:<id>", lease = "300ms", client = locks, on_lost = "error")]
async fn quick_error(locks: &LockClient, id: u32) -> Result<u32, ShopError> {
    Ok(id)
}

#[distributed_lock(key = "quick:ignore:<id>", lease = "300ms", client = locks, on_lost = "ignore")]
async fn quick_ignore(locks: &LockClient, id: u32) -> Result<u32, ShopError> {
    Ok(id)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_body_done_before_any_loss_returns_normally_in_every_mode() {
    capture_logs(tracing::Level::DEBUG);
    let server = RedisServer::start();
    let locks = LockClient::connect(&server.url()).await.unwrap();
    for id in 1..=3 {
        assert!(matches!(quick_cancel(&locks, id).await, Ok(n) if n == id));
        assert!(matches!(quick_error(&locks, id).await, Ok(n) if n == id));
        assert!(matches!(quick_ignore(&locks, id).await, Ok(n) if n == id));
    }
    // Past every lease: a released lock is never reported lost.
    tokio::time::sleep(Duration::from_millis(400)).await;
    let spurious: Vec<String> = captured()
        .lines()
        .filter(|line| line.contains("lock=quick:"))
        .filter(|line| line.contains("WARN"))
        .map(str::to_owned)
        .collect();
    assert!(spurious.is_empty(), "{spurious:?}");
}

#[distributed_lock(keys = ["multi:a:<id>", "multi:b:<id>"], lease = "500ms", client = locks)]
async fn multi_past_lease(locks: &LockClient, id: u32, probe: &Probe) -> Result<u32, ShopError> {
    probe.note_expiry(&format!("multi:a:{id}"));
    for _ in 0..100 {
        probe.write(&format!("count:multi:{id}"));
        tokio::time::sleep(STEP).await;
    }
    Ok(100)
}

#[distributed_lock(key = "pool:<id>", permits = 2, lease = "500ms", client = locks)]
async fn permit_past_lease(locks: &LockClient, id: u32, probe: &Probe) -> Result<u32, ShopError> {
    // The semaphore's grants hash expires with its latest grant's deadline.
    probe.note_expiry(&format!("dlock:sem:*pool:{id}"));
    for _ in 0..100 {
        probe.write(&format!("count:pool:{id}"));
        tokio::time::sleep(STEP).await;
    }
    Ok(100)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancel_covers_multi_locks_and_semaphore_permits() {
    let probe = Probe::new();
    let locks = LockClient::connect(&probe.server.url()).await.unwrap();
    let result = multi_past_lease(&locks, 1, &probe).await;
    let returned = Instant::now();
    assert_cancelled_at_expiry("multi:1", "count:multi:1", &probe, &result, returned).await;

    probe.writes.lock().unwrap().clear();
    let result = permit_past_lease(&locks, 1, &probe).await;
    let returned = Instant::now();
    assert_cancelled_at_expiry("pool:1", "count:pool:1", &probe, &result, returned).await;
}
