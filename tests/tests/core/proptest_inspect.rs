//! Random sequences of acquisitions, re-entries and releases of a lock, a read-write lock
//! and a semaphore by two clients, against a real Redis. After every step, what an
//! operator reads (`Lock::inspect`, `LockClient::list_locks`: the `dlock` tool's view) must
//! match the guards the test holds: the kind, each holder and its hold count, the readers
//! and the writer, the permits taken and available, and which names are listed. Inspect
//! must never call one of dlock's own layouts a wrong type.
//!
//! `DLOCK_PROPTEST_CASES` sets the number of cases (default 24).

use std::collections::BTreeMap;

use dlock::{
    inspect::{LockInfo, LockKind, ReadWriteMode},
    LockClient,
};
use dlock_tests::liveness::Guard;
use dlock_tests::RedisServer;
use proptest::prelude::*;
use proptest::sample::Index;

/// The semaphore's permits.
const PERMITS: u32 = 3;

#[derive(Debug, Clone)]
enum Step {
    /// `try_lock` of the lock outside any scope.
    Lock { client: usize },
    /// `try_lock` of the lock inside the scope of a live lock guard (a re-entry).
    Reenter { guard: Index },
    /// A read hold of the read-write lock (`try_lock`).
    Read { client: usize },
    /// A write hold of the read-write lock (`try_lock`).
    Write { client: usize },
    /// `try_acquire(permits)` of the semaphore.
    Acquire { client: usize, permits: u32 },
    /// `unlock()` of any live guard.
    Release { guard: Index },
}

fn step() -> impl Strategy<Value = Step> {
    let client = 0..2usize;
    prop_oneof![
        3 => client.clone().prop_map(|client| Step::Lock { client }),
        2 => any::<Index>().prop_map(|guard| Step::Reenter { guard }),
        3 => client.clone().prop_map(|client| Step::Read { client }),
        2 => client.clone().prop_map(|client| Step::Write { client }),
        3 => (client, 1..=2u32).prop_map(|(client, permits)| Step::Acquire { client, permits }),
        5 => any::<Index>().prop_map(|guard| Step::Release { guard }),
    ]
}

/// Which primitive a held guard belongs to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Held {
    Lock,
    Read,
    Write,
    Permits(u32),
}

struct World {
    clients: [LockClient; 2],
    case: String,
    /// Live guards: (client, what, guard), in acquisition order.
    guards: Vec<(usize, Held, Guard)>,
}

impl World {
    fn name(&self, what: &str) -> String {
        format!("{}:{what}", self.case)
    }

    fn count(&self, wanted: impl Fn(Held) -> bool) -> usize {
        self.guards.iter().filter(|(_, h, _)| wanted(*h)).count()
    }

    /// Runs `step`; the model decides whether it must succeed, and a refusal must be a
    /// timeout (busy), nothing else.
    async fn run(&mut self, step: Step) -> Result<(), String> {
        let (client, held, must, attempt) = match step {
            Step::Lock { client } => {
                let lock = self.clients[client].lock(&self.name("lock"));
                let free = self.count(|h| h == Held::Lock) == 0;
                (
                    client,
                    Held::Lock,
                    free,
                    lock.try_lock().await.map(Guard::One),
                )
            }
            Step::Reenter { guard } => {
                let locks: Vec<usize> = (0..self.guards.len())
                    .filter(|&i| self.guards[i].1 == Held::Lock)
                    .collect();
                if locks.is_empty() {
                    return Ok(());
                }
                let (client, _, Guard::One(outer)) = &self.guards[locks[guard.index(locks.len())]]
                else {
                    unreachable!("a lock's hold is a LockGuard");
                };
                let lock = self.clients[*client].lock(&self.name("lock"));
                let attempt = outer.scope(lock.try_lock()).await.map(Guard::One);
                (*client, Held::Lock, true, attempt)
            }
            Step::Read { client } => {
                let rw = self.clients[client].rw_lock(&self.name("rw"));
                let free = self.count(|h| h == Held::Write) == 0;
                (
                    client,
                    Held::Read,
                    free,
                    rw.read().try_lock().await.map(Guard::One),
                )
            }
            Step::Write { client } => {
                let rw = self.clients[client].rw_lock(&self.name("rw"));
                let free = self.count(|h| matches!(h, Held::Read | Held::Write)) == 0;
                (
                    client,
                    Held::Write,
                    free,
                    rw.write().try_lock().await.map(Guard::One),
                )
            }
            Step::Acquire { client, permits } => {
                let semaphore = self.clients[client].semaphore(&self.name("sem"), PERMITS);
                let free = PERMITS - self.taken() >= permits;
                let attempt = semaphore.try_acquire(permits).await.map(Guard::Permit);
                (client, Held::Permits(permits), free, attempt)
            }
            Step::Release { guard } => {
                if self.guards.is_empty() {
                    return Ok(());
                }
                let (_, _, guard) = self.guards.remove(guard.index(self.guards.len()));
                return guard.unlock().await.map_err(|e| format!("unlock: {e}"));
            }
        };
        match (must, attempt) {
            (true, Ok(guard)) => self.guards.push((client, held, guard)),
            (false, Err(e)) if e.is_timeout() => {}
            (true, Err(e)) => return Err(format!("refused although free: {e}")),
            (false, Ok(guard)) => {
                return Err(format!("granted although busy: {guard:?}"));
            }
            (false, Err(e)) => return Err(format!("busy, but the error is {e}")),
        }
        Ok(())
    }

    fn taken(&self) -> u32 {
        self.guards
            .iter()
            .map(|(_, h, _)| match h {
                Held::Permits(n) => *n,
                _ => 0,
            })
            .sum()
    }

    /// Holds per client of the guards matching `wanted`.
    fn per_client(&self, wanted: impl Fn(Held) -> bool) -> BTreeMap<String, u64> {
        let mut holds = BTreeMap::new();
        for (client, held, _) in &self.guards {
            if wanted(*held) {
                *holds
                    .entry(self.clients[*client].id().to_string())
                    .or_default() += 1;
            }
        }
        holds
    }

    async fn inspect(&self, what: &str) -> Result<LockInfo, String> {
        self.clients[0]
            .lock(&self.name(what))
            .inspect()
            .await
            .map_err(|e| format!("inspect {what}: {e}"))
    }

    /// What inspect and list show must be what the guards hold.
    async fn check(&self) -> Result<(), String> {
        let by_client = |info: &LockInfo| {
            let mut holds = BTreeMap::new();
            for holder in &info.holders {
                *holds.entry(holder.owner.client_id.clone()).or_default() += holder.holds;
            }
            holds
        };

        // The lock: one owner (re-entries add holds), its client's id, a lease.
        let lock = self.inspect("lock").await?;
        let expected = self.per_client(|h| h == Held::Lock);
        if lock.kind != LockKind::Lock || by_client(&lock) != expected {
            return Err(format!(
                "lock: expected {expected:?}, inspect says {lock:?}"
            ));
        }
        let held = !expected.is_empty();
        if lock.holders.len() > 1 || lock.remaining_lease.is_some() != held {
            return Err(format!("lock: one owner and a lease while held: {lock:?}"));
        }

        // The read-write lock: its mode, one reader per read guard, the writer.
        let rw = self.inspect("rw").await?;
        let (reads, writes) = (
            self.count(|h| h == Held::Read),
            self.count(|h| h == Held::Write),
        );
        match (&rw.read_write, reads + writes) {
            (None, 0) if rw.holders.is_empty() => {}
            (Some(info), held) if held > 0 => {
                let mode = if writes > 0 {
                    ReadWriteMode::Write
                } else {
                    ReadWriteMode::Read
                };
                let readers = info.readers.len();
                let writer = usize::from(info.writer.is_some());
                if rw.kind != LockKind::ReadWrite
                    || info.mode != mode
                    || (readers, writer) != (reads, writes)
                {
                    return Err(format!(
                        "rw: expected {mode:?} with {reads} readers and {writes} writers, inspect says {rw:?}"
                    ));
                }
            }
            _ => {
                return Err(format!(
                    "rw: {reads} reads and {writes} writes held, inspect says {rw:?}"
                ))
            }
        }

        // The semaphore: permits taken and available, one grant per guard.
        let sem = self.inspect("sem").await?;
        let taken = u64::from(self.taken());
        let grants = self.count(|h| matches!(h, Held::Permits(_)));
        let ever_created = self
            .guards
            .iter()
            .any(|(_, h, _)| matches!(h, Held::Permits(_)))
            || sem.semaphore.is_some();
        if ever_created {
            let Some(info) = &sem.semaphore else {
                return Err(format!("sem: {taken} taken, inspect says {sem:?}"));
            };
            if sem.kind != LockKind::Semaphore
                || (info.capacity, info.taken, info.available, info.grants.len())
                    != (
                        Some(u64::from(PERMITS)),
                        taken,
                        u64::from(PERMITS) - taken,
                        grants,
                    )
            {
                return Err(format!(
                    "sem: expected {taken} of {PERMITS} taken in {grants} grants, inspect says {sem:?}"
                ));
            }
        }

        // The listing: a held lock or read-write lock, and a semaphore once created.
        let listed = self.clients[1]
            .list_locks(&format!("{}:", self.case))
            .await
            .map_err(|e| format!("list_locks: {e}"))?;
        let mut expected: Vec<String> = Vec::new();
        if self.count(|h| h == Held::Lock) > 0 {
            expected.push(self.name("lock"));
        }
        if reads + writes > 0 {
            expected.push(self.name("rw"));
        }
        if sem.semaphore.is_some() {
            expected.push(self.name("sem"));
        }
        expected.sort();
        if listed != expected {
            return Err(format!("list_locks: expected {expected:?}, got {listed:?}"));
        }
        Ok(())
    }
}

#[test]
fn what_an_operator_reads_matches_the_guards_after_any_sequence() {
    let server = RedisServer::start();
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let clients = runtime.block_on(async {
        let url = server.url();
        let connect = |name: &'static str| LockClient::builder().client_name(name).connect(&url);
        [connect("a").await.unwrap(), connect("b").await.unwrap()]
    });
    let case = std::sync::atomic::AtomicU32::new(0);
    let config = ProptestConfig {
        cases: dlock_tests::proptest_cases(24),
        failure_persistence: None,
        ..ProptestConfig::default()
    };
    proptest!(config, |(steps in proptest::collection::vec(step(), 1..16))| {
        let case = format!("inspect{}", case.fetch_add(1, std::sync::atomic::Ordering::Relaxed));
        let outcome: Result<(), String> = runtime.block_on(async {
            let mut world = World { clients: clients.clone(), case, guards: Vec::new() };
            for (at, step) in steps.into_iter().enumerate() {
                let shown = format!("{step:?}");
                let checked = match world.run(step).await {
                    Ok(()) => world.check().await,
                    Err(e) => Err(e),
                };
                checked.map_err(|e| format!("after step {at} ({shown}): {e}"))?;
            }
            for (_, _, guard) in std::mem::take(&mut world.guards) {
                guard.unlock().await.map_err(|e| e.to_string())?;
            }
            world.check().await.map_err(|e| format!("after releasing everything: {e}"))
        });
        prop_assert!(outcome.is_ok(), "{}", outcome.unwrap_err());
    });
}
