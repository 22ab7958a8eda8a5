//! Fencing tokens: every acquisition that excludes writers (the lock, the fair lock, the
//! write lock, each lock of a multi-lock) carries a token minted by `INCR` in the acquire
//! script, strictly increasing per lock across processes, shared by re-entries, kept
//! across a retried acquisition, never reset by `force_unlock` or expiry, handed out only
//! once replicas confirmed it (`replica_acks`), and working on a cluster.

use std::collections::HashSet;
use std::time::{Duration, Instant};

use dlock::{
    fencing::{current_fence, Fence},
    LockClient, LockError, MultiLock, Topology,
};
use dlock_tests::commandstats::command_calls;
use dlock_tests::{RedisCluster, RedisReplicaSet, RedisServer, TcpProxy};

/// Runs `processes` workers taking `lock` `each` times; their (time, token) pairs.
fn run_workers(
    url: &str,
    lock: &str,
    processes: usize,
    each: u64,
    extra: &[&str],
) -> Vec<(u64, u64)> {
    let worker = env!("CARGO_BIN_EXE_dlock-fence");
    let children: Vec<_> = (0..processes)
        .map(|_| {
            std::process::Command::new(worker)
                .args([url, lock, &each.to_string()])
                .args(extra)
                .stdout(std::process::Stdio::piped())
                .spawn()
                .expect("start dlock-fence")
        })
        .collect();
    let mut records = Vec::new();
    for child in children {
        let output = child.wait_with_output().unwrap();
        assert!(
            output.status.success(),
            "dlock-fence failed: {}",
            output.status
        );
        for line in String::from_utf8(output.stdout).unwrap().lines() {
            let (at, token) = line.split_once(' ').expect("<ns> <token>");
            records.push((at.parse().unwrap(), token.parse().unwrap()));
        }
    }
    records
}

/// The first place where, ordered by the time inside the critical section, a token is
/// not larger than the one before (a repeat included).
fn first_non_increase(mut records: Vec<(u64, u64)>) -> Option<((u64, u64), (u64, u64))> {
    records.sort_unstable();
    records
        .windows(2)
        .find(|pair| pair[1].1 <= pair[0].1)
        .map(|pair| (pair[0], pair[1]))
}

/// Acquisitions per process of the eight-process run: 500 in CI (4,000 in all);
/// `DLOCK_FENCE_SECTIONS=10000` runs 80,000.
fn sections_per_process() -> u64 {
    std::env::var("DLOCK_FENCE_SECTIONS")
        .ok()
        .and_then(|value| value.parse().ok())
        .unwrap_or(500)
}

#[test]
fn tokens_strictly_increase_across_eight_processes() {
    let server = RedisServer::start();
    let started = Instant::now();
    let sections = sections_per_process();
    let records = run_workers(&server.url(), "fence:procs", 8, sections, &[]);
    let took = started.elapsed();
    let total = usize::try_from(8 * sections).unwrap();
    assert_eq!(records.len(), total);
    let distinct: HashSet<u64> = records.iter().map(|(_, token)| *token).collect();
    assert_eq!(distinct.len(), total, "a token was handed out twice");
    assert_eq!(
        first_non_increase(records),
        None,
        "tokens out of lock order"
    );

    // Control: per-process counts instead of Redis' tokens repeat and go backwards
    // across processes, and the oracle sees it.
    let control = run_workers(&server.url(), "fence:procs", 8, 50, &["--local-tokens"]);
    assert!(
        first_non_increase(control).is_some(),
        "the oracle cannot fire"
    );
    println!(
        "8 processes x {sections} acquisitions: {total} distinct, increasing tokens in {took:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nested_guards_share_the_token_and_scopes_see_it() {
    let server = RedisServer::start();
    let client = LockClient::connect(&server.url()).await.unwrap();
    let lock = client.lock("fence:nested");
    assert_eq!(current_fence(), None, "no scope, no token");

    let outer = lock.lock().await.unwrap();
    let token = outer.fencing_token().expect("a lock guard has a token");
    let escaped = outer
        .scope(async {
            assert_eq!(current_fence(), Some(token));
            let inner = lock.lock().await.unwrap();
            assert_eq!(
                inner.fencing_token(),
                Some(token),
                "a re-entry shares the token"
            );
            let innermost = inner
                .scope(async {
                    let third = lock.lock_with_lease(Duration::from_secs(5)).await.unwrap();
                    assert_eq!(current_fence(), Some(token));
                    third
                })
                .await;
            assert_eq!(innermost.fencing_token(), Some(token));
            innermost.unlock().await.unwrap();
            // An inner guard that leaves the scope keeps its token.
            inner
        })
        .await;
    assert_eq!(current_fence(), None, "the scope ended");
    outer.unlock().await.unwrap();
    assert_eq!(escaped.fencing_token(), Some(token));
    escaped.unlock().await.unwrap();

    // The innermost hold with a token wins; a read hold's scope has none of its own.
    let other = client.lock("fence:nested-other");
    let rw = client.rw_lock("fence:nested-rw");
    let first = lock.lock().await.unwrap();
    let next = first.fencing_token().unwrap();
    assert!(next > token, "{next} after {token}");
    first
        .scope(async {
            let second = other.lock().await.unwrap();
            let theirs = second.fencing_token().unwrap();
            second
                .scope(async {
                    assert_eq!(current_fence(), Some(theirs));
                    let read = rw.read().lock().await.unwrap();
                    assert_eq!(read.fencing_token(), None);
                    read.scope(async { assert_eq!(current_fence(), Some(theirs)) })
                        .await;
                    read.unlock().await.unwrap();
                })
                .await;
            second.unlock().await.unwrap();
        })
        .await;
    first.unlock().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_retried_acquisition_keeps_the_token_it_minted() {
    let server = RedisServer::start();
    let proxy = TcpProxy::start(server.addr());
    let client = LockClient::builder()
        .command_timeout(Duration::from_secs(2))
        .connect(&proxy.url())
        .await
        .unwrap();
    // The command connection up (the subscriber opens only with a wait) before the reply
    // is lost.
    let deadline = Instant::now() + Duration::from_secs(2);
    while proxy.accepted() < 1 {
        assert!(Instant::now() < deadline, "the client did not connect");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    tokio::time::sleep(Duration::from_millis(50)).await;
    let connections = proxy.accepted();

    proxy.lose_next_reply();
    let guard = client.lock("fence:retried").lock().await.unwrap();
    assert!(proxy.accepted() > connections, "the reply was lost");
    let mut conn = server.connection();
    let fields: Vec<(String, String)> = redis::cmd("HGETALL")
        .arg("fence:retried")
        .query(&mut conn)
        .unwrap();
    let stored = fields
        .iter()
        .find(|(field, _)| field.ends_with(":f"))
        .map(|(_, token)| token.parse::<u64>().unwrap())
        .expect("the token is stored with the hold");
    assert_eq!(guard.fencing_token(), Some(Fence::new(stored)));
    guard.unlock().await.unwrap();
    let left: bool = redis::cmd("EXISTS")
        .arg("fence:retried")
        .query(&mut conn)
        .unwrap();
    assert!(!left, "the token field goes with the last hold");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn force_unlock_and_expiry_do_not_reset_the_counter() {
    let server = RedisServer::start();
    let client = LockClient::connect(&server.url()).await.unwrap();
    let lock = client.lock("fence:reset");
    let first = lock.lock().await.unwrap();
    let t1 = first.fencing_token().unwrap();
    assert!(lock.force_unlock().await.unwrap());
    let second = lock
        .lock_with_lease(Duration::from_millis(100))
        .await
        .unwrap();
    let t2 = second.fencing_token().unwrap();
    assert!(t2 > t1, "after force_unlock: {t2} after {t1}");
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(!lock.is_locked().await.unwrap(), "the lease ran out");
    let third = lock.lock().await.unwrap();
    let t3 = third.fencing_token().unwrap();
    assert!(t3 > t2, "after expiry: {t3} after {t2}");
    third.unlock().await.unwrap();
    drop(first);
    drop(second);
    // The counter itself never expires.
    let mut conn = server.connection();
    let counters: Vec<String> = redis::cmd("KEYS")
        .arg("dlock:fence:*")
        .query(&mut conn)
        .unwrap();
    assert_eq!(counters.len(), 1, "{counters:?}");
    let ttl: i64 = redis::cmd("TTL")
        .arg(&counters[0])
        .query(&mut conn)
        .unwrap();
    assert_eq!(ttl, -1, "the counter has no expiry");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_exclusive_kind_is_fenced_and_only_those() {
    let server = RedisServer::start();
    let client = LockClient::connect(&server.url()).await.unwrap();

    let fair = client.fair_lock("fence:fair");
    let f1 = fair.lock().await.unwrap();
    let ft = f1.fencing_token().expect("a fair lock has a token");
    let f2 = f1.scope(fair.lock()).await.unwrap();
    assert_eq!(f2.fencing_token(), Some(ft), "a fair re-entry shares it");
    f2.unlock().await.unwrap();
    f1.unlock().await.unwrap();
    let f3 = fair.lock().await.unwrap();
    assert!(f3.fencing_token() > Some(ft));
    f3.unlock().await.unwrap();

    let rw = client.rw_lock("fence:rw");
    let w1 = rw.write().lock().await.unwrap();
    let wt = w1.fencing_token().expect("a write lock has a token");
    let (w2, r1) = w1
        .scope(async {
            (
                rw.write().lock().await.unwrap(),
                rw.read().lock().await.unwrap(),
            )
        })
        .await;
    assert_eq!(w2.fencing_token(), Some(wt), "a write re-entry shares it");
    assert_eq!(
        r1.fencing_token(),
        None,
        "a read hold (a downgrade) has none"
    );
    w2.unlock().await.unwrap();
    w1.unlock().await.unwrap();
    r1.unlock().await.unwrap();
    let r2 = rw.read().lock().await.unwrap();
    assert_eq!(r2.fencing_token(), None, "a read lock has none");
    r2.unlock().await.unwrap();
    let w3 = rw.write().lock().await.unwrap();
    assert!(w3.fencing_token() > Some(wt));
    w3.unlock().await.unwrap();

    // A semaphore permit has no token: `SemaphorePermit` has no `fencing_token` (a
    // compile_fail doc test on the type checks it), and no hold of the permit's call chain
    // offers one to `current_fence`.
    let permit = client.semaphore("fence:sem", 2).acquire(1).await.unwrap();
    let seen = permit
        .scope(async { dlock::fencing::current_fence() })
        .await;
    assert_eq!(seen, None, "a semaphore permit has none");
    permit.unlock().await.unwrap();

    // The multi-lock, both modes: one token per lock, each from that lock's counter.
    let before = client.lock("{fence}:b").lock().await.unwrap();
    let tb = before.fencing_token().unwrap();
    before.unlock().await.unwrap();
    for multi in [
        MultiLock::same_slot(&client, ["{fence}:a", "{fence}:b"]).unwrap(),
        MultiLock::sequential([client.lock("{fence}:a"), client.lock("{fence}:b")]).unwrap(),
    ] {
        let guard = multi.lock().await.unwrap();
        let tokens = guard.fencing_tokens();
        assert_eq!(
            tokens.iter().map(|(name, _)| *name).collect::<Vec<_>>(),
            ["{fence}:a", "{fence}:b"]
        );
        assert!(tokens[1].1 > tb, "{tokens:?} after {tb}");
        assert_ne!(tokens[0].1, tokens[1].1, "one counter, distinct tokens");
        guard.unlock().await.unwrap();
    }
    let after = client.lock("{fence}:b").lock().await.unwrap();
    assert!(after.fencing_token().unwrap() > tb);
    after.unlock().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_tokens_no_incr_is_sent() {
    let server = RedisServer::start();
    let client = LockClient::builder()
        .fencing_tokens(false)
        .connect(&server.url())
        .await
        .unwrap();
    let before = command_calls(&mut server.connection());
    let guard = client.lock("fence:off").lock().await.unwrap();
    assert_eq!(guard.fencing_token(), None);
    let inner = guard.scope(client.lock("fence:off").lock()).await.unwrap();
    assert_eq!(guard.scope(async { current_fence() }).await, None);
    inner.unlock().await.unwrap();
    guard.unlock().await.unwrap();
    let fair = client.fair_lock("fence:off-fair").lock().await.unwrap();
    assert_eq!(fair.fencing_token(), None);
    fair.unlock().await.unwrap();
    let write = client.rw_lock("fence:off-rw").write().lock().await.unwrap();
    assert_eq!(write.fencing_token(), None);
    write.unlock().await.unwrap();
    let multi = MultiLock::same_slot(&client, ["{off}:a", "{off}:b"])
        .unwrap()
        .lock()
        .await
        .unwrap();
    assert!(multi.fencing_tokens().is_empty());
    multi.unlock().await.unwrap();
    let after = command_calls(&mut server.connection());
    let incrs = after.get("incr").copied().unwrap_or(0) - before.get("incr").copied().unwrap_or(0);
    assert_eq!(incrs, 0, "fencing_tokens(false) sent INCR");
    assert!(after.get("evalsha").copied().unwrap_or(0) > 0);

    // The same calls with tokens on send one INCR per fresh grant (5: the lock, the fair
    // lock, the write lock, the two locks of the multi-lock), none for the re-entry.
    let fenced = LockClient::connect(&server.url()).await.unwrap();
    let before = command_calls(&mut server.connection());
    let guard = fenced.lock("fence:off").lock().await.unwrap();
    let inner = guard.scope(fenced.lock("fence:off").lock()).await.unwrap();
    inner.unlock().await.unwrap();
    guard.unlock().await.unwrap();
    fenced
        .fair_lock("fence:off-fair")
        .lock()
        .await
        .unwrap()
        .unlock()
        .await
        .unwrap();
    fenced
        .rw_lock("fence:off-rw")
        .write()
        .lock()
        .await
        .unwrap()
        .unlock()
        .await
        .unwrap();
    MultiLock::same_slot(&fenced, ["{off}:a", "{off}:b"])
        .unwrap()
        .lock()
        .await
        .unwrap()
        .unlock()
        .await
        .unwrap();
    let after = command_calls(&mut server.connection());
    let incrs = after.get("incr").copied().unwrap_or(0) - before.get("incr").copied().unwrap_or(0);
    assert_eq!(incrs, 5);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unreplicated_acquisition_hands_out_no_token() {
    let set = RedisReplicaSet::start(1);
    let topology = Topology::master_replicas(set.master_url(), set.replica_urls());
    let client = LockClient::builder()
        .replica_acks(1, Duration::from_millis(200))
        .failover_wait(Duration::from_secs(5))
        .connect_to(&topology)
        .await
        .unwrap();
    let lock = client.lock("fence:acked");
    let confirmed = lock.lock().await.unwrap();
    let t1 = confirmed
        .fencing_token()
        .expect("a confirmed acquisition has a token");
    confirmed.unlock().await.unwrap();

    // The replica cut off: the acquisition (and its INCR) is not confirmed.
    set.cut_off_replicas();
    match lock.try_lock().await {
        Err(LockError::NotReplicated { .. }) => {}
        other => panic!("with the replica cut off: {other:?}"),
    }
    let mut master = set.master.connection();
    let cleanup = Instant::now();
    while redis::cmd("EXISTS")
        .arg("fence:acked")
        .query::<bool>(&mut master)
        .unwrap()
    {
        assert!(
            cleanup.elapsed() < Duration::from_secs(2),
            "the refused hold stayed"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    set.replicas[0].resume();
    let next = lock.lock().await.unwrap();
    let t3 = next.fencing_token().unwrap();
    // The refused attempt's token was minted and never handed out: a gap, not a repeat.
    assert!(
        t3.get() >= t1.get() + 2,
        "{t3} after {t1} and a refused grant"
    );
    next.unlock().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tokens_work_on_a_cluster_for_tagged_and_untagged_names() {
    let cluster = RedisCluster::start();
    let client = LockClient::builder()
        .connect_to(&Topology::cluster(cluster.node_urls()))
        .await
        .unwrap();
    for name in ["orders", "orders:{7}", "{}odd", "a{b}}c"] {
        let lock = client.lock(name);
        let first = lock.lock().await.unwrap();
        let t1 = first.fencing_token().expect(name);
        first.unlock().await.unwrap();
        let fair = client.fair_lock(name).lock().await.unwrap();
        let t2 = fair.fencing_token().expect(name);
        fair.unlock().await.unwrap();
        let write = client.rw_lock(name).write().lock().await.unwrap();
        let t3 = write.fencing_token().expect(name);
        write.unlock().await.unwrap();
        assert!(t1 < t2 && t2 < t3, "{name}: {t1}, {t2}, {t3}");
    }
    let multi = MultiLock::same_slot(&client, ["{c}:a", "{c}:b"]).unwrap();
    let guard = multi.lock().await.unwrap();
    assert_eq!(guard.fencing_tokens().len(), 2);
    guard.unlock().await.unwrap();
}
