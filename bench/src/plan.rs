//! The list of jobs (table rows) a benchmark invocation runs, and how each runs.

use crate::cli::Scenario;
use crate::contended::Primitive;
use crate::metrics::Metrics;
use crate::settings::Config;
use crate::stats::Result;
use crate::target::Target;
use crate::uncontended::Family;
use crate::{
    churn, contended, demo, limit, memory, processes, scripts, subscribe, uncontended, watchdog,
};

/// One row of the results table.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Job {
    /// The scripts' ceiling through a raw connection.
    Limit,
    /// Each script's execution per call and inner commands per call, from commandstats.
    Scripts,
    /// S1 with dlock.
    S1Dlock,
    /// S1 with dlock, from a client built with `fencing_tokens(false)`: the cost of
    /// minting, compared with S1 in the same run.
    S1Unfenced,
    /// S1 with the lean floor's scripts from a bare redis-rs client.
    S1Floor,
    /// S1 with rslock.
    S1Rslock,
    /// S3: S1 through the attribute.
    S3Macro,
    /// S2 with a dlock primitive.
    S2Dlock(Primitive),
    /// S2 with rslock.
    S2Rslock,
    /// S4: the watchdog at scale.
    S4Watchdog,
    /// S5: S2 across processes, with a dlock primitive.
    S5Processes(Primitive),
    /// S5 with one task per process (the lock): every hand-off goes to another process,
    /// where S5's usual shape keeps most of them inside one.
    S5Spread,
    /// S5 with the churn of production: cancellations, timeouts, a killed process.
    Churn,
    /// S1 with the rest of the lock family.
    S1Family(Family),
    /// Redis memory growth over S1's loop.
    Memory,
    /// Many waiters' subscriptions.
    Subscribe,
    /// The stock demo's hot item.
    Demo,
}

impl Job {
    /// Every job, in the order they run.
    pub const ALL: [Job; 28] = [
        Job::Limit,
        Job::Scripts,
        Job::S1Floor,
        Job::S1Dlock,
        Job::S1Unfenced,
        Job::S3Macro,
        Job::S1Rslock,
        Job::S2Dlock(Primitive::Lock),
        Job::S2Rslock,
        Job::S2Dlock(Primitive::Fair),
        Job::S2Dlock(Primitive::Rw),
        Job::S4Watchdog,
        Job::S5Processes(Primitive::Lock),
        Job::S5Spread,
        Job::S5Processes(Primitive::Fair),
        Job::S5Processes(Primitive::Rw),
        Job::Churn,
        Job::S1Family(Family::MultiSameSlot(2)),
        Job::S1Family(Family::MultiSequential(2)),
        Job::S1Family(Family::MultiSameSlot(5)),
        Job::S1Family(Family::MultiSequential(5)),
        Job::S1Family(Family::Semaphore),
        Job::S1Family(Family::RedLock),
        Job::S2Dlock(Primitive::Semaphore),
        Job::S2Dlock(Primitive::Multi),
        Job::Memory,
        Job::Subscribe,
        Job::Demo,
    ];

    /// The jobs the selected scenarios ask for, in running order.
    pub fn selected(scenarios: &[Scenario]) -> Vec<Job> {
        // `all` is every table scenario; the sweeps run apart (see `sweep::run`).
        let has = |s: Scenario| scenarios.contains(&s) || scenarios.contains(&Scenario::All);
        Job::ALL
            .into_iter()
            .filter(|job| match job {
                Job::Limit => has(Scenario::Limit),
                Job::Scripts => has(Scenario::Scripts),
                Job::S1Unfenced | Job::S1Floor => has(Scenario::S1),
                // The family's rows are compared with the lock's S1 and S2.
                Job::S1Dlock => has(Scenario::S1) || has(Scenario::Family),
                Job::S2Dlock(Primitive::Lock) => has(Scenario::S2) || has(Scenario::Family),
                Job::S1Rslock | Job::S2Rslock => has(Scenario::Peers),
                Job::S3Macro => has(Scenario::S3),
                Job::S2Dlock(Primitive::Semaphore | Primitive::Multi) | Job::S1Family(_) => {
                    has(Scenario::Family)
                }
                Job::S2Dlock(_) => has(Scenario::S2),
                Job::S4Watchdog => has(Scenario::S4),
                Job::S5Processes(_) | Job::S5Spread => has(Scenario::S5),
                Job::Churn => has(Scenario::Churn),
                Job::Memory => has(Scenario::Memory),
                Job::Subscribe => has(Scenario::Subscribe),
                Job::Demo => has(Scenario::Demo),
            })
            .collect()
    }

    /// Scenario id, as in the table and the JSON.
    pub fn scenario(self) -> &'static str {
        match self {
            Job::Limit => "limit",
            Job::Scripts => "scripts",
            Job::S1Dlock | Job::S1Unfenced | Job::S1Floor | Job::S1Rslock | Job::S1Family(_) => {
                "s1"
            }
            Job::S3Macro => "s3",
            Job::S2Dlock(_) | Job::S2Rslock => "s2",
            Job::S4Watchdog => "s4",
            Job::S5Processes(_) | Job::S5Spread => "s5",
            Job::Churn => "churn",
            Job::Memory => "memory",
            Job::Subscribe => "subscribe",
            Job::Demo => "demo",
        }
    }

    /// What is measured: `raw` (scripts through a plain connection), `dlock` (the
    /// reentrant lock), `dlock-fair`, `dlock-rw`, `dlock-macro` or `rslock`.
    pub fn implementation(self) -> &'static str {
        match self {
            Job::Limit | Job::Scripts => "raw",
            Job::S1Floor => "floor",
            Job::S1Rslock | Job::S2Rslock => "rslock",
            Job::S3Macro => "dlock-macro",
            Job::S1Unfenced => "dlock-unfenced",
            Job::S5Spread => "dlock-spread",
            Job::S2Dlock(Primitive::Fair) | Job::S5Processes(Primitive::Fair) => "dlock-fair",
            Job::S2Dlock(Primitive::Rw) | Job::S5Processes(Primitive::Rw) => "dlock-rw",
            Job::S2Dlock(Primitive::Semaphore) | Job::S5Processes(Primitive::Semaphore) => {
                "dlock-semaphore"
            }
            Job::S2Dlock(Primitive::Multi) | Job::S5Processes(Primitive::Multi) => "dlock-multi",
            Job::S1Family(family) => family.implementation(),
            Job::Demo => "stock-demo",
            _ => "dlock",
        }
    }

    /// A heading for the docs.
    pub fn title(self) -> &'static str {
        match self {
            Job::Limit => "limit: Redis ceiling for dlock's acquire + release scripts",
            Job::S1Dlock => "S1 uncontended: 64 tasks, own key each, lock + unlock (dlock)",
            Job::Scripts => "scripts: each script's execution and inner commands per call (INFO commandstats)",
            Job::S1Unfenced => "S1 uncontended without fencing tokens: S1 from a client built with fencing_tokens(false)",
            Job::S1Floor => "S1 lean floor: the minimal hash acquire/release pair from a bare redis-rs client",
            Job::S1Rslock => "S1 uncontended: 64 tasks, own key each, lock + unlock (rslock)",
            Job::S3Macro => "S3 macro overhead: S1 through #[distributed_lock]",
            Job::S2Dlock(Primitive::Lock) => "S2 contended hand-off: 16 tasks, one key, GET/+1/SET inside (dlock)",
            Job::S2Dlock(Primitive::Fair) => "S2 contended hand-off: 16 tasks, one key, GET/+1/SET inside (dlock fair lock)",
            Job::S2Dlock(Primitive::Rw) => "S2 contended, read-write lock: 16 tasks, one key, 3 reads (GET) per write (GET/+1/SET)",
            Job::S2Rslock => "S2 contended hand-off: 16 tasks, one key, GET/+1/SET inside (rslock)",
            Job::S4Watchdog => "S4 watchdog at scale: locks held with watchdog renewal",
            Job::S5Processes(Primitive::Lock) => "S5 cross-process: S2 with 4 processes × 4 tasks",
            Job::S5Spread => "S5 spread: 4 processes × 1 task, every hand-off to another process (dlock)",
            Job::S5Processes(Primitive::Fair) => "S5 cross-process: S2 with 4 processes × 4 tasks (dlock fair lock)",
            Job::S5Processes(Primitive::Rw) => "S5 cross-process, read-write lock: 4 processes × 4 tasks, 3 reads per write",
            Job::S2Dlock(Primitive::Semaphore) => "S2 contended hand-off: 16 tasks, a semaphore of 1 permit, GET/+1/SET inside",
            Job::S2Dlock(Primitive::Multi) => "S2 contended hand-off: 16 tasks, a multi-lock over 2 keys of one slot, GET/+1/SET inside",
            Job::S5Processes(Primitive::Semaphore) => "S5 cross-process: S2 with 4 processes × 4 tasks (semaphore of 1 permit)",
            Job::S5Processes(Primitive::Multi) => "S5 cross-process: S2 with 4 processes × 4 tasks (multi-lock over 2 keys)",
            Job::Churn => "churn: S5 (4 processes × 4 tasks, one lock) with cancellations, timeouts, dropped guards, expiring leases and a killed process",
            Job::S1Family(Family::MultiSameSlot(_)) => "S1 family: 64 tasks, a multi-lock over keys of one slot each (one script)",
            Job::S1Family(Family::MultiSequential(_)) => "S1 family: 64 tasks, a multi-lock over keys in different slots each (one after another)",
            Job::S1Family(Family::Semaphore) => "S1 family: 64 tasks, a semaphore of 4 each, one permit per cycle",
            Job::S1Family(Family::RedLock) => "S1 family: 64 tasks, a RedLock over 5 servers each",
            Job::Memory => "memory: Redis used_memory growth over S1's loop",
            Job::Subscribe => "subscribe: waiters on distinct locks, time until all are subscribed / unsubscribed",
            Job::Demo => "demo: stock-demo's hot item, 3 processes, 50 ms critical section",
        }
    }

    /// Runs the job once against `target`.
    pub async fn run(self, target: &Target, cfg: &Config) -> Result<Metrics> {
        match self {
            Job::Limit => limit::run(target, cfg).await,
            Job::Scripts => scripts::run(target, cfg).await,
            Job::S1Floor => uncontended::s1_floor(target, cfg).await,
            Job::S1Dlock => uncontended::s1_dlock(target, cfg).await,
            Job::S1Unfenced => uncontended::s1_unfenced(target, cfg).await,
            Job::S1Rslock => uncontended::s1_rslock(target, cfg).await,
            Job::S3Macro => uncontended::s3_macro(target, cfg).await,
            Job::S2Dlock(primitive) => contended::s2_dlock(target, cfg, primitive).await,
            Job::S2Rslock => contended::s2_rslock(target, cfg).await,
            Job::S4Watchdog => watchdog::s4_watchdog(target, cfg).await,
            Job::S5Processes(primitive) => processes::s5_processes(target, cfg, primitive).await,
            Job::S5Spread => {
                let spread = Config {
                    tasks_per_process: 1,
                    ..cfg.clone()
                };
                processes::s5_processes(target, &spread, Primitive::Lock).await
            }
            Job::Churn => churn::run(target, cfg).await,
            Job::S1Family(family) => uncontended::s1_family(target, cfg, family).await,
            Job::Memory => memory::run(target, cfg).await,
            Job::Subscribe => subscribe::run(target, cfg).await,
            // The demo starts its own redis-server.
            Job::Demo => demo::run(cfg).await,
        }
    }
}
