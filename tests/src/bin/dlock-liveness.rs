//! The liveness test's worker process: a client in an OS process of its own that waits
//! for and holds the case's locks at random until the test kills it with `SIGKILL`.
//!
//! ```text
//! dlock-liveness --url redis://127.0.0.1:6379 --tag lv0 --process w3 --seed 42 --out w3.txt
//! ```
//!
//! Every acquisition has an explicit lease (100-500 ms) and every release is awaited, so
//! that a kill leaves nothing that lasts longer than a lease: a killed holder's locks
//! expire by themselves, and no release is left queued in a background task that died
//! with the process. What it asked for and got goes to `--out` on the monotonic clock
//! (see `dlock_tests::timeline`), one `write(2)` per record, so a kill loses nothing it
//! recorded. Its waits are the ones the test kills it in: they leave its client
//! registered as a waiter of a lock it will never take.
//!
//! It exits by itself after `--exit-after` (default 2 min) in case the test could not
//! kill it.
//!
//! The soak runs it with `--all-kinds` (fair locks and both sides of a read-write lock
//! too) against a Sentinel deployment (`--sentinel-master <name>`, `--url` then lists the
//! sentinels separated by commas) or a cluster (`--cluster`, `--url` lists nodes), with
//! `--replica-acks <n>` where the deployment has replicas to confirm.

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use clap::Parser;
use dlock::{LockClient, LockError, MultiLock, Topology};
use dlock_tests::liveness::{Guard, Keys, Rng, SEMAPHORE_PERMITS};
use dlock_tests::timeline::{instant_ns, Need, Record, RecordFile, What};

#[derive(Parser)]
#[command(
    name = "dlock-liveness",
    about = "Waits for and holds locks until killed"
)]
struct Args {
    /// The Redis server.
    #[arg(long)]
    url: String,
    /// The case's tag: which keys (see `dlock_tests::liveness::Keys`).
    #[arg(long)]
    tag: String,
    /// This process's name in the records (`<process>#<op>`).
    #[arg(long)]
    process: String,
    /// Draws the schedule.
    #[arg(long)]
    seed: u64,
    /// The record file, appended to.
    #[arg(long)]
    out: PathBuf,
    /// Exit after this long even if nobody killed the process.
    #[arg(long, value_parser = humantime::parse_duration, default_value = "2min")]
    exit_after: Duration,
    /// Also takes the fair lock and both sides of the read-write lock.
    #[arg(long)]
    all_kinds: bool,
    /// `--url` lists the sentinels (comma-separated) watching this master.
    #[arg(long, conflicts_with = "cluster")]
    sentinel_master: Option<String>,
    /// `--url` lists cluster nodes (comma-separated).
    #[arg(long)]
    cluster: bool,
    /// `replica_acks(n, 500ms)`.
    #[arg(long)]
    replica_acks: Option<u32>,
}

/// What one operation does.
enum Op {
    Lease,
    Retry,
    Multi,
    Semaphore,
    Fair,
    Read,
    Write,
    Idle,
}

impl Op {
    /// The liveness test's mix (its seeds replay the same schedule), or with every kind.
    fn pick(draw: u64, all_kinds: bool) -> Op {
        match (all_kinds, draw) {
            (false, 0..=39) | (true, 0..=24) => Op::Lease,
            (false, 40..=54) | (true, 25..=34) => Op::Retry,
            (false, 55..=74) | (true, 35..=49) => Op::Multi,
            (false, 75..=92) | (true, 50..=64) => Op::Semaphore,
            (true, 65..=74) => Op::Fair,
            (true, 75..=84) => Op::Read,
            (true, 85..=94) => Op::Write,
            _ => Op::Idle,
        }
    }
}

struct Worker {
    client: LockClient,
    keys: Keys,
    process: String,
    out: RecordFile,
    rng: Rng,
    all_kinds: bool,
}

impl Worker {
    /// A wait: short (a try of a few ms, often repeated) or long (up to 1.5 s).
    fn wait(&mut self) -> Duration {
        if self.rng.chance(50) {
            Duration::from_millis(self.rng.between(0, 50))
        } else {
            Duration::from_millis(self.rng.between(100, 1500))
        }
    }

    async fn run(mut self) {
        for op in 0u64.. {
            let who = format!("{}#{op}", self.process);
            let lease = Duration::from_millis(self.rng.between(100, 500));
            let lease_ms = Some(lease.as_millis() as u64);
            let wait = self.wait();
            let pick = self.rng.between(0, 99);
            let plain = self.rng.pick(&self.keys.plain).clone();
            let guard = match Op::pick(pick, self.all_kinds) {
                Op::Lease => {
                    let lock = self.client.lock(&plain);
                    self.out.record(
                        &who,
                        wait_record("lease", &[&plain], Need::Exclusive, lease_ms),
                    );
                    lock.try_lock_with_lease(wait, lease).await.map(Guard::One)
                }
                Op::Retry => {
                    // Tries back to back, as an application's retry loop does: one wait.
                    let lock = self.client.lock(&plain);
                    self.out.record(
                        &who,
                        wait_record("retry", &[&plain], Need::Exclusive, lease_ms),
                    );
                    let mut outcome = Err(LockError::Timeout {
                        name: plain.clone(),
                        waited: Duration::ZERO,
                        permits: None,
                    });
                    for _ in 0..self.rng.between(1, 6) {
                        let wait = Duration::from_millis(self.rng.between(0, 50));
                        outcome = lock.try_lock_with_lease(wait, lease).await;
                        if !matches!(&outcome, Err(e) if e.is_timeout()) {
                            break;
                        }
                    }
                    outcome.map(Guard::One)
                }
                Op::Multi => {
                    let mut names = self.keys.plain.to_vec();
                    if self.rng.chance(50) {
                        names.remove(self.rng.between(0, 2) as usize);
                    }
                    let refs: Vec<&str> = names.iter().map(String::as_str).collect();
                    self.out
                        .record(&who, wait_record("multi", &refs, Need::Exclusive, lease_ms));
                    match MultiLock::same_slot(&self.client, &names) {
                        Ok(multi) => multi
                            .try_lock_with_lease(wait, lease)
                            .await
                            .map(Guard::Multi),
                        Err(e) => Err(e),
                    }
                }
                Op::Semaphore => {
                    let n = self.rng.between(1, 2) as u32;
                    let need = Need::Permits {
                        n,
                        of: SEMAPHORE_PERMITS,
                    };
                    let name = self.keys.semaphore.clone();
                    self.out
                        .record(&who, wait_record("sem", &[&name], need, lease_ms));
                    let semaphore = self.client.semaphore(&name, SEMAPHORE_PERMITS);
                    semaphore
                        .try_acquire_with_lease(n, wait, lease)
                        .await
                        .map(Guard::Permit)
                }
                Op::Fair => {
                    let name = self.keys.fair.clone();
                    self.out.record(
                        &who,
                        wait_record("fair", &[&name], Need::Exclusive, lease_ms),
                    );
                    // A waiter killed in the queue holds it up for its entry timeout
                    // (documented): short here, so that the soak's kills stay within its
                    // stall bound.
                    let lock = self
                        .client
                        .fair_lock(&name)
                        .with_entry_timeout(Duration::from_secs(1));
                    lock.try_lock_with_lease(wait, lease).await.map(Guard::One)
                }
                Op::Read => {
                    let name = self.keys.rw.clone();
                    self.out
                        .record(&who, wait_record("read", &[&name], Need::Shared, lease_ms));
                    let lock = self.client.rw_lock(&name).read();
                    lock.try_lock_with_lease(wait, lease).await.map(Guard::One)
                }
                Op::Write => {
                    let name = self.keys.rw.clone();
                    self.out.record(
                        &who,
                        wait_record("write", &[&name], Need::Exclusive, lease_ms),
                    );
                    let lock = self.client.rw_lock(&name).write();
                    lock.try_lock_with_lease(wait, lease).await.map(Guard::One)
                }
                Op::Idle => {
                    tokio::time::sleep(Duration::from_millis(self.rng.between(0, 100))).await;
                    continue;
                }
            };
            let guard = match guard {
                Ok(guard) => {
                    let deadline = instant_ns(guard.deadline());
                    self.out.record(
                        &who,
                        What::Acquired {
                            deadline_ns: Some(deadline),
                        },
                    );
                    guard
                }
                Err(e) => {
                    self.out.record(&who, What::GaveUp);
                    if !e.is_timeout() {
                        eprintln!("dlock-liveness {who}: {e}");
                    }
                    continue;
                }
            };
            // Hold: not at all, a little, or past the lease (it expires under us).
            let hold = match self.rng.between(0, 9) {
                0..=1 => Duration::ZERO,
                2..=7 => Duration::from_millis(self.rng.between(1, 60)),
                _ => lease + Duration::from_millis(self.rng.between(0, 100)),
            };
            if !hold.is_zero() {
                tokio::time::sleep(hold).await;
            }
            self.out.record(&who, What::ReleaseStart);
            let _ = guard.unlock().await;
            self.out.record(&who, What::Released);
        }
    }
}

fn wait_record(op: &str, keys: &[&str], need: Need, lease_ms: Option<u64>) -> What {
    What::Wait {
        op: op.to_owned(),
        keys: keys.iter().map(|k| (*k).to_owned()).collect(),
        need,
        lease_ms,
    }
}

fn main() -> ExitCode {
    let args = Args::parse();
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(e) => {
            eprintln!("dlock-liveness: cannot start the async runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    runtime.block_on(async {
        let out = match RecordFile::create(&args.out) {
            Ok(out) => out,
            Err(e) => {
                eprintln!("dlock-liveness: {}: {e}", args.out.display());
                return ExitCode::FAILURE;
            }
        };
        // Rechecks as rarely as the test's own clients, so that a waiter relying on its
        // recheck shows as a stall.
        let mut builder = LockClient::builder().max_wait_recheck(Duration::from_secs(10));
        if let Some(replicas) = args.replica_acks {
            builder = builder.replica_acks(replicas, Duration::from_millis(500));
        }
        let urls = || args.url.split(',').map(str::to_owned).collect();
        let connected = match (&args.sentinel_master, args.cluster) {
            (Some(master), _) => {
                builder
                    .connect_to(&Topology::sentinel(master, urls()))
                    .await
            }
            (None, true) => builder.connect_to(&Topology::cluster(urls())).await,
            (None, false) => builder.connect(&args.url).await,
        };
        let client = match connected {
            Ok(client) => client,
            Err(e) => {
                eprintln!("dlock-liveness: {e}");
                return ExitCode::FAILURE;
            }
        };
        let worker = Worker {
            client,
            keys: Keys::new(&args.tag),
            process: args.process,
            out,
            rng: Rng::new(args.seed),
            all_kinds: args.all_kinds,
        };
        tokio::select! {
            () = worker.run() => {}
            () = tokio::time::sleep(args.exit_after) => {}
        }
        ExitCode::SUCCESS
    })
}
