//! Random sequences of nested acquire / re-enter / release / drop / cancellation / lost
//! replies over two owners, against a real Redis. At every quiet point (background
//! releases done) each owner's hold count in Redis equals the number of its live guards,
//! none of them reports lost, and the key exists exactly when some live guard claims it.
//!
//! `DLOCK_PROPTEST_CASES` sets the number of cases (default 24).

use std::time::Duration;

use dlock::{LockClient, LockGuard};
use dlock_tests::{RedisServer, TcpProxy};
use proptest::prelude::*;
use proptest::sample::Index;
use redis::Commands;

/// One step. `client` 0 talks to Redis through the fault-injecting proxy, client 1
/// directly; `lose_reply` applies to client 0 only.
#[derive(Debug, Clone)]
enum Step {
    /// `try_lock` outside any scope.
    Acquire { client: usize, lose_reply: bool },
    /// `try_lock` inside the scope of one of the client's live guards.
    Reenter {
        client: usize,
        parent: Index,
        lose_reply: bool,
    },
    /// `unlock().await` of a live guard.
    Release {
        client: usize,
        guard: Index,
        lose_reply: bool,
    },
    /// Dropping a live guard (released in the background).
    Drop { client: usize, guard: Index },
    /// An acquisition (re-entry when `parent` is set and the client has a guard) cancelled
    /// after `after` microseconds.
    CancelAcquire {
        client: usize,
        parent: Option<Index>,
        after: u64,
    },
    /// An `unlock()` cancelled after `after` microseconds.
    CancelRelease {
        client: usize,
        guard: Index,
        after: u64,
    },
}

fn step() -> impl Strategy<Value = Step> {
    let client = 0..2usize;
    prop_oneof![
        3 => (client.clone(), any::<bool>()).prop_map(|(client, lose)| Step::Acquire {
            client,
            lose_reply: lose && client == 0,
        }),
        3 => (client.clone(), any::<Index>(), any::<bool>()).prop_map(|(client, parent, lose)| {
            Step::Reenter { client, parent, lose_reply: lose && client == 0 }
        }),
        3 => (client.clone(), any::<Index>(), any::<bool>()).prop_map(|(client, guard, lose)| {
            Step::Release { client, guard, lose_reply: lose && client == 0 }
        }),
        1 => (client.clone(), any::<Index>()).prop_map(|(client, guard)| Step::Drop { client, guard }),
        2 => (client.clone(), proptest::option::of(any::<Index>()), 0..3_000u64)
            .prop_map(|(client, parent, after)| Step::CancelAcquire { client, parent, after }),
        1 => (client, any::<Index>(), 0..3_000u64)
            .prop_map(|(client, guard, after)| Step::CancelRelease { client, guard, after }),
    ]
}

struct World<'a> {
    server: &'a RedisServer,
    proxy: &'a TcpProxy,
    clients: [LockClient; 2],
    name: String,
    /// Live guards per client, in acquisition order.
    guards: [Vec<LockGuard>; 2],
}

impl World<'_> {
    fn lock(&self, client: usize) -> dlock::Lock {
        self.clients[client].lock(&self.name)
    }

    /// Arms a lost reply for client 0's next request (a no-op for client 1).
    fn lose_reply(&self, lose: bool) {
        if lose {
            self.proxy.lose_next_reply();
        }
    }

    async fn run(&mut self, step: Step) {
        match step {
            Step::Acquire { client, lose_reply } => {
                self.lose_reply(lose_reply);
                if let Ok(guard) = self.lock(client).try_lock().await {
                    self.guards[client].push(guard);
                }
            }
            Step::Reenter {
                client,
                parent,
                lose_reply,
            } => {
                if self.guards[client].is_empty() {
                    return;
                }
                let parent = &self.guards[client][parent.index(self.guards[client].len())];
                self.lose_reply(lose_reply);
                let guard = parent
                    .scope(self.lock(client).try_lock())
                    .await
                    .expect("a re-entry of a live guard succeeds");
                self.guards[client].push(guard);
            }
            Step::Release {
                client,
                guard,
                lose_reply,
            } => {
                if self.guards[client].is_empty() {
                    return;
                }
                let guard = self.guards[client].remove(guard.index(self.guards[client].len()));
                self.lose_reply(lose_reply);
                guard
                    .unlock()
                    .await
                    .expect("a live guard's release succeeds, retried or not");
            }
            Step::Drop { client, guard } => {
                if !self.guards[client].is_empty() {
                    let at = guard.index(self.guards[client].len());
                    drop(self.guards[client].remove(at));
                }
            }
            Step::CancelAcquire {
                client,
                parent,
                after,
            } => {
                let lock = self.lock(client);
                let parent = parent
                    .filter(|_| !self.guards[client].is_empty())
                    .map(|i| &self.guards[client][i.index(self.guards[client].len())]);
                let attempt = async {
                    match parent {
                        Some(parent) => parent.scope(lock.try_lock()).await,
                        None => lock.try_lock().await,
                    }
                };
                if let Ok(Ok(guard)) =
                    tokio::time::timeout(Duration::from_micros(after), attempt).await
                {
                    self.guards[client].push(guard);
                }
            }
            Step::CancelRelease {
                client,
                guard,
                after,
            } => {
                if self.guards[client].is_empty() {
                    return;
                }
                let guard = self.guards[client].remove(guard.index(self.guards[client].len()));
                let _ = tokio::time::timeout(Duration::from_micros(after), guard.unlock()).await;
            }
        }
    }

    /// Each client's total hold count in Redis, by client id prefix of the fields.
    fn counts(&self) -> [u32; 2] {
        let fields = dlock_tests::keys::holders(&mut self.server.connection(), &self.name);
        let mut counts = [0; 2];
        for (field, count) in fields {
            let owner = self
                .clients
                .iter()
                .position(|c| field.starts_with(&c.id().to_string()))
                .unwrap_or_else(|| panic!("a field of no client: {field}"));
            counts[owner] += count;
        }
        counts
    }

    /// Waits (at most 3 s) until Redis matches the live guards; the last mismatch if not.
    async fn quiet_point(&self) -> Result<(), String> {
        let expected = [self.guards[0].len() as u32, self.guards[1].len() as u32];
        for guards in &self.guards {
            for guard in guards {
                if guard.is_lost() {
                    return Err(format!("a live guard reports lost: {guard:?}"));
                }
            }
        }
        let deadline = tokio::time::Instant::now() + Duration::from_secs(3);
        loop {
            let counts = self.counts();
            let exists: bool = self.server.connection().exists(&self.name).unwrap();
            let live = expected.iter().sum::<u32>() > 0;
            if counts == expected && exists == live {
                return Ok(());
            }
            if tokio::time::Instant::now() > deadline {
                return Err(format!(
                    "Redis holds {counts:?} (key exists: {exists}), live guards {expected:?}"
                ));
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }
}

#[test]
fn redis_holds_match_the_live_guards_after_any_sequence() {
    let server = RedisServer::start();
    let proxy = TcpProxy::start(server.addr());
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let case = std::sync::atomic::AtomicU32::new(0);
    let config = ProptestConfig {
        cases: dlock_tests::proptest_cases(24),
        failure_persistence: None,
        ..ProptestConfig::default()
    };
    proptest!(config, |(steps in proptest::collection::vec(step(), 1..14))| {
        let name = format!("prop:{}", case.fetch_add(1, std::sync::atomic::Ordering::Relaxed));
        let outcome: Result<(), String> = runtime.block_on(async {
            let through_proxy = LockClient::builder()
                .command_timeout(Duration::from_secs(2))
                .connect(&proxy.url())
                .await
                .unwrap();
            let direct = LockClient::connect(&server.url()).await.unwrap();
            let mut world = World {
                server: &server,
                proxy: &proxy,
                clients: [through_proxy, direct],
                name,
                guards: [Vec::new(), Vec::new()],
            };
            for (at, step) in steps.into_iter().enumerate() {
                let shown = format!("{step:?}");
                world.run(step).await;
                world
                    .quiet_point()
                    .await
                    .map_err(|e| format!("after step {at} ({shown}): {e}"))?;
            }
            for client in 0..2 {
                for guard in std::mem::take(&mut world.guards[client]) {
                    guard.unlock().await.map_err(|e| e.to_string())?;
                }
            }
            world.quiet_point().await.map_err(|e| format!("after releasing everything: {e}"))
        });
        prop_assert!(outcome.is_ok(), "{}", outcome.unwrap_err());
    });
}
