//! What every cell of the matrix shares: clients with the timings a cell needs, one name
//! per primitive and fault, rivals waiting in tasks, and the bounds the cells assert.

use std::time::{Duration, Instant};

use dlock::{LockClient, LockClientBuilder, LockError};
use dlock_tests::primitive::{Held, Primitive};
use tokio::task::JoinHandle;

/// How long after a release (or the moment a lock became takeable) a waiter must hold it:
/// a wake-up by message, not by a recheck timer (the waiters' recheck is 30 s).
pub const WAKE_LIMIT: Duration = Duration::from_millis(150);

/// The waiters' recheck interval: long enough that a waiter woken in time was woken by a
/// message or by the lease's end, never by its timer.
pub const RECHECK: Duration = Duration::from_secs(30);

/// A client builder with the waiters' long recheck.
pub fn builder() -> LockClientBuilder {
    LockClient::builder().max_wait_recheck(RECHECK)
}

/// Connects `builder` to `url`.
pub async fn connect(builder: LockClientBuilder, url: &str) -> LockClient {
    builder
        .connect(url)
        .await
        .unwrap_or_else(|e| panic!("cannot connect to {url}: {e}"))
}

/// The name a cell uses for `primitive`: one hash tag, so that every key of every
/// primitive of one fault sits in one cluster slot.
pub fn name(fault: &str, primitive: Primitive) -> String {
    format!("{{matrix-{fault}}}:{primitive}")
}

/// Takes `primitive` on `name` now (waiting at most 5 s).
pub async fn hold(
    client: &LockClient,
    primitive: Primitive,
    name: &str,
    lease: Option<Duration>,
) -> Held {
    primitive
        .acquire(client, name, Duration::from_secs(5), lease)
        .await
        .unwrap_or_else(|e| panic!("{primitive}: cannot take {name}: {e}"))
}

/// A rival waiting for what `primitive` holds on `name`, for up to `wait`: when it got it
/// (and the hold), or why not.
pub struct Rival {
    task: JoinHandle<Result<(Instant, Held), LockError>>,
}

impl Rival {
    pub fn spawn(client: &LockClient, primitive: Primitive, name: &str, wait: Duration) -> Rival {
        let (client, name) = (client.clone(), name.to_owned());
        let task = tokio::spawn(async move {
            let held = primitive
                .rival()
                .acquire(&client, &name, wait, None)
                .await?;
            Ok((Instant::now(), held))
        });
        Rival { task }
    }

    pub fn is_finished(&self) -> bool {
        self.task.is_finished()
    }

    /// When the rival got the hold, releasing it right away.
    pub async fn acquired_at(self) -> Result<Instant, LockError> {
        let (at, held) = self.task.await.expect("the rival's task panicked")?;
        let _ = held.unlock().await;
        Ok(at)
    }

    /// The rival's hold, for a caller that checks it further.
    pub async fn held(self) -> Result<(Instant, Held), LockError> {
        self.task.await.expect("the rival's task panicked")
    }
}

/// When a hold was lost and why; `None` when it was not within the watch.
pub type LossWatch = JoinHandle<Option<(Instant, LockError)>>;

/// A hold of one primitive, its loss watch and the rival waiting for it.
pub type Cell = (Primitive, Held, LossWatch, Rival);

/// Takes every primitive under `fault` with `holders`, each with a loss watch (for
/// `watch_for`) and a rival of `rivals` waiting up to `wait`.
pub async fn cells(
    holders: &LockClient,
    rivals: &LockClient,
    fault: &str,
    watch_for: Duration,
    wait: Duration,
) -> Vec<Cell> {
    let mut cells = Vec::new();
    for primitive in Primitive::ALL {
        let name = name(fault, primitive);
        let held = hold(holders, primitive, &name, None).await;
        let watch = watch_loss(&held, watch_for);
        let rival = Rival::spawn(rivals, primitive, &name, wait);
        cells.push((primitive, held, watch, rival));
    }
    cells
}

/// Checks each cell's hold was not lost and still excludes, then releases it and checks
/// its rival gets it within `limit`; `label` names the cell in the report.
pub async fn assert_kept_and_handed_off(label: &str, cells: Vec<Cell>, limit: Duration) {
    for (primitive, held, watch, rival) in cells {
        assert!(
            !held.is_lost(),
            "{primitive} {label}: the hold was lost: {:?}",
            watch.await.unwrap()
        );
        watch.abort();
        assert!(!rival.is_finished(), "{primitive} {label}: not exclusive");
        let unlocked_at = Instant::now();
        held.unlock().await.unwrap();
        let hand_off = rival.acquired_at().await.unwrap() - unlocked_at;
        println!("matrix {primitive} {label}: kept, hand-off {hand_off:?}");
        assert!(
            hand_off <= limit,
            "{primitive} {label}: hand-off {hand_off:?}"
        );
    }
}

/// Resolves when `held` is lost, returning when; `None` when it is not within `within`.
pub fn watch_loss(held: &Held, within: Duration) -> LossWatch {
    let lost = held.lost();
    tokio::spawn(async move {
        tokio::time::timeout(within, lost)
            .await
            .ok()
            .map(|loss| (Instant::now(), loss))
    })
}

/// The longest PTTL among `keys` (`None` when none has one): when the last of them
/// expires, on the server's clock.
pub fn longest_pttl(connection: &mut redis::Connection, keys: &[String]) -> Option<Duration> {
    keys.iter()
        .map(|key| {
            let pttl: i64 = redis::cmd("PTTL").arg(key).query(connection).unwrap();
            pttl
        })
        .max()
        .and_then(|pttl| u64::try_from(pttl).ok())
        .map(Duration::from_millis)
}

/// Whether any of `keys` exists on the server behind `connection`.
pub fn any_exists(connection: &mut redis::Connection, keys: &[String]) -> bool {
    let found: u64 = redis::cmd("EXISTS").arg(keys).query(connection).unwrap();
    found > 0
}

/// `CLIENT KILL TYPE <kind> SKIPME yes`: how many connections the server closed.
pub fn kill_connections(connection: &mut redis::Connection, kind: &str) -> u64 {
    redis::cmd("CLIENT")
        .arg("KILL")
        .arg("TYPE")
        .arg(kind)
        .arg("SKIPME")
        .arg("yes")
        .query(connection)
        .unwrap()
}

/// The machine's CPU, shared by the cells that measure time and taken whole by the cells
/// that starve it: a cell's timing bound must not meet another cell's busy threads.
static CPU: tokio::sync::RwLock<()> = tokio::sync::RwLock::const_new(());

/// Held by a cell that measures time, for its whole run.
pub async fn sharing_cpu() -> tokio::sync::RwLockReadGuard<'static, ()> {
    CPU.read().await
}

/// Held by a cell that saturates the cores, for its whole run.
pub async fn owning_cpu() -> tokio::sync::RwLockWriteGuard<'static, ()> {
    CPU.write().await
}

/// Two threads spinning until the returned flag is set: both cores busy.
pub fn burn_cpu() -> (
    std::sync::Arc<std::sync::atomic::AtomicBool>,
    Vec<std::thread::JoinHandle<()>>,
) {
    use std::sync::atomic::{AtomicBool, Ordering};
    let stop = std::sync::Arc::new(AtomicBool::new(false));
    let burners = (0..2)
        .map(|_| {
            let stop = stop.clone();
            std::thread::spawn(move || {
                let mut x = 0u64;
                while !stop.load(Ordering::Relaxed) {
                    x = std::hint::black_box(x.wrapping_mul(6364136223846793005).wrapping_add(1));
                }
            })
        })
        .collect();
    (stop, burners)
}
