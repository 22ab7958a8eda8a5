//! The soak: every primitive at once (locks, retry loops, same-slot multi-locks, a
//! 2-permit semaphore, a fair lock, both sides of a read-write lock) taken at random by
//! several worker processes (`dlock-liveness --all-kinds`) on a Sentinel deployment and on
//! a cluster, while the test injects a random fault from the matrix every 1–4 s: a worker
//! SIGKILLed (and replaced), every command or subscriber connection of the master(s)
//! killed, a failover (Sentinel, or of one of the keys' cluster slots), the master frozen
//! for 300 ms. At the end the merged records are checked by the timeline's oracles:
//! no two holds that exclude each other overlap (exclusion and capacity), and no lock sat
//! takeable longer than `STALL_BOUND` while someone waited for it (liveness).
//!
//! CI runs each for 8 s; `DLOCK_SOAK_SECS=600` runs them 10 minutes each (run one at a
//! time: `cargo test -p dlock-tests --test faults -- soak:: --test-threads=1 --nocapture`).
//!
//! The Sentinel workers use `replica_acks(2, 500ms)`, both replicas: with fewer, a
//! failover may hand a lock to a second holder (the documented risk; a first 10-minute
//! run with `replica_acks(1)` saw 34 overlaps), which the exclusion oracle rightly
//! reports. Asking for every replica costs availability instead: from a failover until
//! the old master is a replica again (~10 s) no acquisition is confirmed. Stalls within
//! such a window are reported apart, as are stalls of the read-write lock within its
//! 10 s entry timeout after a worker was killed (a dead waiting writer holds readers back
//! for that long, documented); every other stall must stay within `STALL_BOUND`. The
//! workers' fair locks use a 1 s entry timeout, for the same reason.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use dlock_tests::liveness::{Keys, Rng};
use dlock_tests::timeline::{self, monotonic_ns, Record, Report, Stall, Timeline, What};
use dlock_tests::{RedisCluster, RedisSentinelGroup, RedisServer};

const WORKER: &str = env!("CARGO_BIN_EXE_dlock-liveness");

/// Worker processes at any time.
const WORKERS: usize = 4;

/// The longest a lock may sit takeable while someone waits. A failover makes the
/// deployment refuse writes for about a second and the clients take up to another to
/// follow it; nothing else may come close.
const STALL_BOUND: Duration = Duration::from_secs(3);

fn soak_duration() -> Duration {
    let secs = std::env::var("DLOCK_SOAK_SECS")
        .ok()
        .and_then(|secs| secs.parse().ok())
        .unwrap_or(8);
    Duration::from_secs(secs)
}

/// The deployment under soak.
enum Deployment {
    Sentinel(RedisSentinelGroup),
    Cluster(RedisCluster),
}

impl Deployment {
    fn name(&self) -> &'static str {
        match self {
            Deployment::Sentinel(_) => "sentinel",
            Deployment::Cluster(_) => "cluster",
        }
    }

    /// The workers' connection arguments.
    fn worker_args(&self) -> Vec<String> {
        match self {
            Deployment::Sentinel(group) => vec![
                "--url".to_owned(),
                group.sentinel_urls().join(","),
                "--sentinel-master".to_owned(),
                group.master_name().to_owned(),
                "--replica-acks".to_owned(),
                "2".to_owned(),
            ],
            Deployment::Cluster(cluster) => vec![
                "--url".to_owned(),
                cluster.node_urls().join(","),
                "--cluster".to_owned(),
            ],
        }
    }

    /// The servers holding the keys now: the master, or the masters of the keys' slots.
    fn masters(&self, keys: &Keys) -> Vec<&RedisServer> {
        match self {
            Deployment::Sentinel(group) => vec![group.master_server()],
            Deployment::Cluster(cluster) => key_names(keys)
                .iter()
                .map(|key| {
                    let port = cluster.slot_owner_port(cluster.key_slot(key));
                    cluster.node_on_port(port).expect("the slot's owner")
                })
                .collect(),
        }
    }

    fn failover(&self, keys: &Keys, rng: &mut Rng) {
        match self {
            Deployment::Sentinel(group) => {
                group.failover();
                // The next failover needs the old master demoted to a replica (~10 s):
                // chained sooner, the sentinels may find no replica to promote.
                group.wait_replicated();
            }
            Deployment::Cluster(cluster) => {
                let key = rng.pick(&key_names(keys)).clone();
                cluster.failover_slot(cluster.key_slot(&key));
            }
        }
    }
}

fn key_names(keys: &Keys) -> Vec<String> {
    vec![
        keys.plain[0].clone(),
        keys.fair.clone(),
        keys.rw.clone(),
        keys.semaphore.clone(),
    ]
}

/// A worker process; killed when dropped.
struct Worker {
    name: String,
    out: PathBuf,
    child: Child,
}

impl Worker {
    fn start(deployment: &Deployment, tag: &str, name: String, dir: &Path, seed: u64) -> Worker {
        let out = dir.join(format!("{name}.txt"));
        let exit_after = soak_duration() + Duration::from_secs(120);
        let child = Command::new(WORKER)
            .args(deployment.worker_args())
            .args(["--tag", tag, "--process", &name, "--all-kinds"])
            .arg("--seed")
            .arg(seed.to_string())
            .arg("--out")
            .arg(&out)
            .arg("--exit-after")
            .arg(format!("{}s", exit_after.as_secs()))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .spawn()
            .expect("start dlock-liveness");
        Worker { name, out, child }
    }

    /// SIGKILL, recorded on `timeline`.
    fn kill(mut self, timeline: &Timeline) -> PathBuf {
        let before = monotonic_ns();
        let exited = self.child.try_wait().ok().flatten();
        assert!(
            exited.is_none(),
            "worker {} exited by itself: {exited:?}",
            self.name
        );
        let _ = self.child.kill();
        let _ = self.child.wait();
        timeline.record_at(
            before,
            "killer",
            What::Killed {
                process: self.name.clone(),
                after_ns: monotonic_ns(),
            },
        );
        self.out.clone()
    }
}

impl Drop for Worker {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn kill_connections(server: &RedisServer, kind: &str) {
    let _: redis::RedisResult<u64> = redis::cmd("CLIENT")
        .arg("KILL")
        .arg("TYPE")
        .arg(kind)
        .query(&mut server.connection());
}

fn soak(deployment: &Deployment, seed: u64) {
    let duration = soak_duration();
    let dir = tempfile::tempdir().unwrap();
    let tag = format!("soak{seed}");
    let keys = Keys::new(&tag);
    let timeline = Timeline::new();
    let mut rng = Rng::new(seed);
    let origin = monotonic_ns();
    let mut spawned = 0;
    let mut start_worker = |rng: &mut Rng| {
        spawned += 1;
        Worker::start(
            deployment,
            &tag,
            format!("w{spawned}"),
            dir.path(),
            rng.next_u64(),
        )
    };
    let mut workers: Vec<Worker> = (0..WORKERS).map(|_| start_worker(&mut rng)).collect();
    let mut files = Vec::new();
    let mut faults = std::collections::BTreeMap::<&str, u32>::new();
    let mut failovers = Vec::new();
    let mut kills = Vec::new();
    let started = Instant::now();
    while started.elapsed() < duration {
        std::thread::sleep(Duration::from_millis(rng.between(1000, 4000)));
        let fault_started = monotonic_ns();
        let fault = match rng.between(0, 4) {
            0 => {
                let victim = workers.remove(rng.between(0, WORKERS as u64 - 1) as usize);
                files.push(victim.kill(&timeline));
                kills.push(fault_started);
                workers.push(start_worker(&mut rng));
                "worker SIGKILLed"
            }
            1 => {
                for master in deployment.masters(&keys) {
                    kill_connections(master, "normal");
                }
                "command connections killed"
            }
            2 => {
                for master in deployment.masters(&keys) {
                    kill_connections(master, "pubsub");
                }
                "subscribers killed"
            }
            3 => {
                deployment.failover(&keys, &mut rng);
                failovers.push((fault_started, monotonic_ns()));
                "failover"
            }
            _ => {
                let masters = deployment.masters(&keys);
                let master = rng.pick(&masters);
                master.pause();
                std::thread::sleep(Duration::from_millis(300));
                master.resume();
                "master frozen 300 ms"
            }
        };
        *faults.entry(fault).or_default() += 1;
    }
    for worker in workers {
        files.push(worker.kill(&timeline));
    }
    let mut events = timeline.events();
    for file in &files {
        events.extend(timeline::read_file(file).unwrap());
    }
    let report = Report::analyze(&events, origin, STALL_BOUND);
    let during_failover = |stall: &Stall| {
        failovers
            .iter()
            .any(|&(start, end)| stall.start_ns < end && start < stall.end_ns)
    };
    let after_a_kill = |stall: &Stall| {
        stall.wanted.starts_with(&keys.rw)
            && kills.iter().any(|&kill| {
                kill <= stall.start_ns && stall.start_ns < kill + ns(Duration::from_secs(10))
            })
    };
    let (documented, unexplained): (Vec<&Stall>, Vec<&Stall>) = report
        .stalls
        .iter()
        .partition(|stall| during_failover(stall) || after_a_kill(stall));
    let longest = |stalls: &[&Stall]| stalls.iter().map(|stall| stall.length()).max();
    println!(
        "soak {} for {:?}, {spawned} worker processes, faults {faults:?}:\n{report}\n\
         stalls over {STALL_BOUND:?}: {} within a failover's window or a dead writer's entry (longest {:?}), {} otherwise",
        deployment.name(),
        started.elapsed(),
        documented.len(),
        longest(&documented),
        unexplained.len(),
    );
    assert!(report.waits > 0, "the workers did nothing");
    assert!(
        report.overlaps.is_empty() && report.anomalies.is_empty() && unexplained.is_empty(),
        "soak {}: {report}",
        deployment.name()
    );
}

fn ns(duration: Duration) -> u64 {
    u64::try_from(duration.as_nanos()).unwrap_or(u64::MAX)
}

#[test]
fn soak_sentinel() {
    soak(&Deployment::Sentinel(RedisSentinelGroup::start()), 1);
}

#[test]
fn soak_cluster() {
    soak(&Deployment::Cluster(RedisCluster::start()), 2);
}
