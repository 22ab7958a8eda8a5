//! Real-Redis test harness for dlock.
//!
//! This crate is synchronous std code: it starts throw-away `redis-server` processes and
//! puts a fault-injecting TCP proxy between a client and a server. It is used by the
//! integration tests in `tests/tests/`, whatever async runtime those use.
//!
//! - [`RedisServer`] runs `redis-server` (the `DLOCK_REDIS_SERVER` environment variable,
//!   else `redis-server` from `PATH`) on a free `127.0.0.1` port in its own temporary
//!   directory, and kills it when dropped, also when a test panics. It can be paused
//!   (`SIGSTOP`) and resumed to simulate a hung server.
//! - [`TcpProxy`] forwards connections to a server and can lose the reply to the next
//!   request (applied by Redis, failed for the client), hold new connections, hold back
//!   everything the server sends for a while, silence one connection for good (half
//!   open), or reset all open connections.
//! - [`RedisReplicaSet`] is a master with replicas (`--replicaof`), ready once every
//!   replica's link is up.
//! - [`RedisSentinelGroup`] is a master, two replicas and three sentinels monitoring them
//!   as `mymaster`, with a bounded, fully observed [`RedisSentinelGroup::failover`].
//! - [`RedisCluster`] is a six-node Redis Cluster (three masters with one replica each,
//!   created with `redis-cli --cluster create`; the `DLOCK_REDIS_CLI` environment
//!   variable, else `redis-cli` from `PATH`), with a bounded, fully observed
//!   [`RedisCluster::failover_slot`].
//! - [`TestCertificates`] is a throw-away certificate authority and a server certificate
//!   for `127.0.0.1`; [`TlsSentinelGroup`] is a master, a replica and a sentinel that
//!   answer clients only over TLS with it, with a bounded [`TlsSentinelGroup::failover`];
//!   [`TlsCluster`] is a three-master cluster whose clients and bus speak only TLS.
//! - [`HoldProcess`] runs the `dlock-hold` binary (a process holding one primitive) until
//!   it is killed.
//! - [`commandstats`] counts the commands a server ran (`INFO commandstats`).
//! - [`keys`] names a lock's keys and reads what they hold (holders, marks, registry,
//!   naps) as dlock's scripts read them; [`scripts`] calls dlock's scripts directly.
//! - [`logs`] captures what dlock logs, for tests that check it; [`spans`] captures the
//!   spans it opens, with their fields and how long they were open.
//! - [`secret_urls`] generates Redis URLs with a known password, for the property tests
//!   that no display of an address shows it.
//! - [`primitive`] puts every lock primitive behind one interface (acquire, watch for
//!   loss, release, free behind dlock's back) for the fault matrix and the soak.
//! - [`overlap`] merges the critical sections that separate processes recorded on the
//!   monotonic clock (the `dlock-overlap` binary) and counts overlaps and lost sections.
//! - [`timeline`] merges what clients of several processes asked for and got, on the
//!   monotonic clock, and finds every interval a lock sat takeable while someone waited
//!   for it, and every overlap of exclusive holds; [`liveness`] holds what the liveness
//!   test and its worker process (the `dlock-liveness` binary) share.
//!
//! ```
//! use dlock_tests::{RedisServer, TcpProxy};
//!
//! let server = RedisServer::start();
//! let proxy = TcpProxy::start(server.addr());
//! let mut connection = redis::Client::open(proxy.url())
//!     .unwrap()
//!     .get_connection()
//!     .unwrap();
//! let pong: String = redis::cmd("PING").query(&mut connection).unwrap();
//! assert_eq!(pong, "PONG");
//! ```
//!
//! Redis must be installed: `apt-get install -y redis-server redis-sentinel redis-tools`.

mod cluster;
pub mod command_log;
pub mod commandstats;
pub mod failover;
mod hold_process;
pub mod keys;
pub mod liveness;
pub mod logs;
pub mod overlap;
pub mod primitive;
mod proxy;
mod replicas;
pub mod scripts;
pub mod secret_urls;
mod sentinel;
mod server;
pub mod spans;
pub mod timeline;
mod tls;
pub mod topology;
pub mod workload;

pub use cluster::{RedisCluster, REDIS_CLI_ENV};
pub use hold_process::HoldProcess;
pub use proxy::TcpProxy;
pub use replicas::RedisReplicaSet;
pub use sentinel::RedisSentinelGroup;
pub use server::{RedisServer, REDIS_SERVER_ENV};
pub use tls::{TestCertificates, TlsCluster, TlsSentinelGroup};

/// `count` locks named `<stem>:<n>`, held for a minute by a client of `url` of their own:
/// busy locks for as many waiters, one each. Returns the holder and its guards.
///
/// # Panics
///
/// If the client cannot connect or a lock cannot be taken.
pub async fn hold_distinct_locks(
    url: &str,
    stem: &str,
    count: usize,
) -> (dlock::LockClient, Vec<dlock::LockGuard>) {
    let holder = dlock::LockClient::connect(url).await.unwrap();
    let mut held = Vec::with_capacity(count);
    for n in 0..count {
        let lock = holder.lock(&format!("{stem}:{n}"));
        held.push(
            lock.lock_with_lease(std::time::Duration::from_secs(60))
                .await
                .unwrap(),
        );
    }
    (holder, held)
}

/// A client of `url` that rechecks a lock only every 30 s: a wake-up it should get and
/// does not shows as a wait of that long, so a test can tell a hand-off from a recheck.
///
/// # Panics
///
/// If the client cannot connect.
pub async fn patient_client(url: &str) -> dlock::LockClient {
    dlock::LockClient::builder()
        .max_wait_recheck(std::time::Duration::from_secs(30))
        .connect(url)
        .await
        .unwrap()
}

/// How many cases a property test against real Redis runs: the `DLOCK_PROPTEST_CASES`
/// environment variable, else `default` (CI keeps the default small; a soak run raises
/// it).
pub fn proptest_cases(default: u32) -> u32 {
    std::env::var("DLOCK_PROPTEST_CASES")
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or(default)
}

/// Whether `key` is one a client writes by connecting and keeps while it (or its key
/// prefix) is in use, rather than lock data: its description (`dlock:client:…`) and the
/// key prefix's layout version (`dlock:layout:…`). Tests that check what an operation
/// left behind leave these out.
pub fn written_by_connecting(key: &str) -> bool {
    key.starts_with("dlock:client:") || key.starts_with("dlock:layout:")
}
