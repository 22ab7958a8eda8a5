//! RedLock over 5 real servers: a minority down still grants, a majority down fails within
//! the wait budget, late answers are an error that leaves nothing behind, release after
//! expiry is "not held", renewal keeps the lock and a lost majority ends it, and a server
//! that restarts without its data lets a second owner in (the documented risk, measured).

use std::time::{Duration, Instant};

use dlock::{redlock::RedLockClient, LockClient, LockError, LossReason};
use dlock_tests::keys::exists;
use dlock_tests::{RedisServer, TcpProxy};

fn servers(n: usize) -> Vec<RedisServer> {
    (0..n).map(|_| RedisServer::start()).collect()
}

fn urls(servers: &[RedisServer]) -> Vec<String> {
    servers.iter().map(RedisServer::url).collect()
}

async fn redlock(urls: &[String], watchdog: Duration) -> RedLockClient {
    let builder = LockClient::builder()
        .watchdog_timeout(watchdog)
        .command_timeout(Duration::from_millis(500));
    RedLockClient::connect(builder, urls).await.unwrap()
}

/// One connection to each of `servers`, for `keys::exists`. A test that polls keeps one
/// connection per server: a new connection every few milliseconds kept a loaded server
/// busy accepting and closing them, and late for the lock's own calls.
fn connections(servers: &[RedisServer]) -> Vec<redis::Connection> {
    servers.iter().map(RedisServer::connection).collect()
}

/// Fails when the quorum is n / 2 (3 paused servers of 5 would still grant), or n (2 paused
/// would fail).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_paused_servers_still_grant_three_do_not() {
    let servers = servers(5);
    let rl = redlock(&urls(&servers), Duration::from_secs(3)).await;
    assert_eq!((rl.nodes(), rl.quorum()), (5, 3));
    let lock = rl.lock("quorum");

    servers[0].pause();
    servers[1].pause();
    let started = Instant::now();
    let guard = lock.try_lock_for(Duration::from_secs(2)).await.unwrap();
    let granted_in = started.elapsed();
    assert!(lock.is_locked().await.unwrap());
    guard.unlock().await.expect("held on the 3 live servers");

    servers[2].pause();
    let wait = Duration::from_secs(1);
    let started = Instant::now();
    let error = lock.try_lock_for(wait).await.unwrap_err();
    let failed_in = started.elapsed();
    for server in &servers[..3] {
        server.resume();
    }
    assert!(
        matches!(
            error,
            LockError::NoQuorum {
                granted: 2,
                unreachable: 3,
                nodes: 5,
                quorum: 3,
                ..
            }
        ),
        "{error:?}"
    );
    // No majority is its own kind, not a Redis failure of one deployment.
    assert_eq!(error.kind(), dlock::ErrorKind::NoQuorum);
    assert!(!error.is_redis());
    // Per-server timeout: 5 % of the 3 s lease = 150 ms; the last round starts before the
    // budget ends and lasts at most that.
    assert!(
        failed_in >= wait - Duration::from_millis(300)
            && failed_in < wait + Duration::from_millis(600),
        "failed after {failed_in:?}"
    );
    eprintln!("2 of 5 paused: granted in {granted_in:?}; 3 of 5 paused: failed after {failed_in:?} (wait {wait:?})");

    // Resumed: the servers answer again and the lock is free everywhere.
    lock.try_lock_for(Duration::from_secs(2))
        .await
        .unwrap()
        .unlock()
        .await
        .unwrap();
}

/// A majority answering 400 ms late with a 300 ms lease: an error well before the lease
/// (per-server timeout 15 ms), and every server that may have applied the acquisition
/// (all of them: requests are not delayed) is released long before the lease would have
/// expired the keys. Fails when a failed round is not released on every server (the keys
/// stay until the 300 ms lease runs out).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_majority_answering_late_is_an_error_and_leaves_nothing() {
    let servers = servers(5);
    let proxies: Vec<TcpProxy> = servers[..3]
        .iter()
        .map(|s| TcpProxy::start(s.addr()))
        .collect();
    let mut addresses: Vec<String> = proxies.iter().map(TcpProxy::url).collect();
    addresses.extend(servers[3..].iter().map(RedisServer::url));
    let rl = redlock(&addresses, Duration::from_secs(3)).await;
    let lock = rl.lock("late");
    for proxy in &proxies {
        proxy.delay_replies(Duration::from_millis(400));
    }

    let lease = Duration::from_millis(300);
    let started = Instant::now();
    let error = lock
        .try_lock_with_lease(Duration::ZERO, lease)
        .await
        .unwrap_err();
    let failed_in = started.elapsed();
    assert!(
        matches!(
            error,
            LockError::NoQuorum {
                granted: 2,
                unreachable: 3,
                ..
            }
        ),
        "{error:?}"
    );
    assert!(
        failed_in < Duration::from_millis(200),
        "failed after {failed_in:?}"
    );

    // Every key is gone within 150 ms of the error (the lease alone would keep them until
    // 300 ms after the round).
    let checked_until = Instant::now() + Duration::from_millis(150);
    let mut left: Vec<usize> = (0..5).collect();
    let mut watchers = connections(&servers);
    while !left.is_empty() && Instant::now() < checked_until {
        left.retain(|&i| exists(&mut watchers[i], "late"));
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let cleared_in = started.elapsed();
    assert!(
        left.is_empty(),
        "keys left on servers {left:?} {cleared_in:?} after the round"
    );
    eprintln!("400 ms late majority, 300 ms lease: error after {failed_in:?}, all keys gone after {cleared_in:?}");
    for proxy in &proxies {
        proxy.delay_replies(Duration::ZERO);
    }
}

/// Fails when a server answering "already gone" counts as a failure or an error.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn release_after_expiry_is_not_held_and_no_error() {
    let servers = servers(3);
    let rl = redlock(&urls(&servers), Duration::from_secs(3)).await;
    let guard = rl
        .lock("expiring")
        .lock_with_lease(Duration::from_millis(100))
        .await
        .unwrap();
    assert!(!guard.is_lost());
    tokio::time::sleep(Duration::from_millis(250)).await;
    assert!(guard.is_lost());
    assert!(matches!(
        guard.unlock().await,
        Err(LockError::NotHeld { .. })
    ));
    // The expiry is reported through lost() too.
    let guard = rl
        .lock("expiring")
        .lock_with_lease(Duration::from_millis(100))
        .await
        .unwrap();
    let lost = tokio::time::timeout(Duration::from_secs(1), guard.lost())
        .await
        .unwrap();
    assert!(
        matches!(
            lost,
            LockError::Lost {
                reason: LossReason::LeaseExpired,
                ..
            }
        ),
        "{lost:?}"
    );
    // The guard's deadline (lease − drift) comes before the servers' expiry (lease).
    tokio::time::sleep(Duration::from_millis(50)).await;
    assert!(matches!(
        guard.unlock().await,
        Err(LockError::NotHeld { .. })
    ));
}

/// Fails when the guard does not renew (lost after one 300 ms lease), or when a majority
/// answering "not held" is not noticed at the next renewal (it would wait for the deadline
/// and report LeaseExpired).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn renewal_keeps_the_lock_and_a_lost_majority_ends_it() {
    let servers = servers(5);
    let lease = Duration::from_millis(300);
    let rl = redlock(&urls(&servers), lease).await;
    let other = redlock(&urls(&servers), lease).await;
    let guard = rl.lock("renewed").lock().await.unwrap();
    let first_deadline = guard.deadline();
    tokio::time::sleep(lease * 4).await;
    assert!(!guard.is_lost());
    assert!(
        guard.deadline() > first_deadline + lease * 2,
        "deadline not moved"
    );
    assert!(other
        .lock("renewed")
        .try_lock()
        .await
        .unwrap_err()
        .is_timeout());

    // Another owner holds the key on 3 servers: the next renewal (every 100 ms) sees a
    // majority gone. Each server's change is one transaction, so that a renewal between
    // two of them (the test does not control when renewals run) finds the key taken,
    // not missing: it cannot take the hold again there while it still has a majority,
    // as it would where the key were only deleted.
    let mut connections: Vec<_> = servers[..3].iter().map(RedisServer::connection).collect();
    for connection in &mut connections {
        let () = redis::pipe()
            .atomic()
            .cmd("DEL")
            .arg("renewed")
            .cmd("HSET")
            .arg("renewed")
            .arg("another-owner")
            .arg(1)
            .cmd("PEXPIRE")
            .arg("renewed")
            .arg(10_000)
            .query(connection)
            .unwrap();
    }
    let started = Instant::now();
    let lost = tokio::time::timeout(Duration::from_secs(2), guard.lost())
        .await
        .unwrap();
    let noticed_in = started.elapsed();
    assert!(
        matches!(
            lost,
            LockError::Lost {
                reason: LossReason::NotHeldOnRenewal,
                ..
            }
        ),
        "{lost:?}"
    );
    assert!(
        noticed_in < Duration::from_millis(250),
        "noticed after {noticed_in:?}"
    );
    drop(guard);

    // 3 servers paused under a renewed guard: lost by its deadline (≤ one lease after the
    // last confirmed renewal).
    let guard = rl.lock("paused").lock().await.unwrap();
    tokio::time::sleep(lease).await;
    for server in &servers[..3] {
        server.pause();
    }
    let started = Instant::now();
    let lost = tokio::time::timeout(Duration::from_secs(2), guard.lost()).await;
    let lost_in = started.elapsed();
    for server in &servers[..3] {
        server.resume();
    }
    let lost = lost.unwrap();
    assert!(
        matches!(
            lost,
            LockError::Lost {
                reason: LossReason::LeaseExpired,
                ..
            }
        ),
        "{lost:?}"
    );
    assert!(
        lost_in <= lease + Duration::from_millis(150),
        "lost after {lost_in:?}"
    );
    eprintln!("majority deleted: lost after {noticed_in:?}; majority paused: lost after {lost_in:?} (lease {lease:?})");
}

/// The documented risk: servers that restart without persistence forget the lock. With 5
/// servers, a holder survives 2 such restarts (the other 3 still hold it), but after 3 a
/// second owner acquires while the first still believes it holds the lock, until its next
/// renewal finds a majority gone. Measures that overlap window. Fails if the restart of a
/// minority already lets the second owner in (quorum too small).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn restarted_servers_without_data_let_a_second_owner_in() {
    let mut servers = servers(5);
    let lease = Duration::from_millis(900);
    let a = redlock(&urls(&servers), lease).await;
    let b = redlock(&urls(&servers), lease).await;
    let guard = a.lock("amnesia").lock().await.unwrap();

    for server in &mut servers[..2] {
        server.restart();
    }
    assert!(
        b.lock("amnesia").try_lock().await.unwrap_err().is_timeout(),
        "2 of 5 restarted"
    );

    servers[2].restart();
    let second = b
        .lock("amnesia")
        .try_lock_for(Duration::from_secs(1))
        .await
        .unwrap();
    let both_since = Instant::now();
    let lost = tokio::time::timeout(Duration::from_secs(2), guard.lost())
        .await
        .unwrap();
    let overlap = both_since.elapsed();
    assert!(
        matches!(
            lost,
            LockError::Lost {
                reason: LossReason::NotHeldOnRenewal,
                ..
            }
        ),
        "{lost:?}"
    );
    // Renewal every lease / 3 = 300 ms.
    assert!(
        overlap <= lease / 3 + Duration::from_millis(150),
        "overlap {overlap:?}"
    );
    eprintln!("3 of 5 restarted without data: a second owner acquired; the first learnt it after {overlap:?} (renewal every {:?})", lease / 3);
    second.unlock().await.unwrap();
}

/// Fails when the checks in RedLockClient::new / the lease floor are removed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_setups_are_refused() {
    let servers = servers(3);
    let all = urls(&servers);
    let builder = LockClient::builder();
    let two = RedLockClient::connect(builder.clone(), &all[..2])
        .await
        .unwrap_err();
    assert!(
        matches!(&two, LockError::Config(m) if m.contains("at least 3")),
        "{two}"
    );
    let same = vec![all[0].clone(), all[1].clone(), all[0].clone()];
    let dup = RedLockClient::connect(builder.clone(), &same)
        .await
        .unwrap_err();
    assert!(
        matches!(&dup, LockError::Config(m) if m.contains("nodes 0 and 2")),
        "{dup}"
    );

    let rl = RedLockClient::connect(builder, &all).await.unwrap();
    let short = rl
        .lock("x")
        .try_lock_with_lease(Duration::ZERO, Duration::from_millis(5))
        .await
        .unwrap_err();
    assert!(
        matches!(short, LockError::InvalidDuration { .. }),
        "{short}"
    );
    let empty = rl.lock("").try_lock().await.unwrap_err();
    assert!(matches!(empty, LockError::InvalidName { .. }), "{empty}");
}

/// A cluster's master moves (and its keys spread over several masters): it is no
/// independent server, so it cannot be one vote of a RedLock.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cluster_client_is_no_redlock_node() {
    let servers = servers(2);
    let cluster = dlock_tests::RedisCluster::start();
    let topology = dlock::Topology::cluster(cluster.node_urls());
    let mut nodes = vec![LockClient::builder().connect_to(&topology).await.unwrap()];
    for url in urls(&servers) {
        nodes.push(LockClient::connect(&url).await.unwrap());
    }
    let refused = RedLockClient::new(nodes).unwrap_err();
    assert!(
        matches!(&refused, LockError::Config(m) if m.contains("node 0") && m.contains("cluster")),
        "{refused}"
    );
}

/// A renewal a majority confirmed takes the hold again on a server where it vanished (a
/// restart without data): the key is back there after the next renewal, a third of the
/// lease on a quiet machine. The control: the key is gone on that server right after the
/// delete, and nothing but this owner's renewal writes it again.
///
/// The key is deleted once every server has it. An acquisition round ends as soon as a
/// majority granted, and a server whose call was not sent by then has no hold until the
/// first renewal writes it there; deleting the key on one of only three servers that hold
/// it leaves a minority, and the renewal then rightly reports the hold lost. That was
/// this test's flake (three fresh CI runs: "not taken again" after ten seconds, then, with
/// the check below, "lost after 2.0 s", the first renewal), not the renewal's timeouts.
/// Each renewal gives a server a twentieth of the lease to answer, and only a server that
/// answered "gone" is written again: the bound is five leases, so that a loaded machine,
/// where a renewal or two may find that server late, passes too.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn renewal_takes_the_hold_again_where_it_vanished() {
    let servers = servers(5);
    let lease = Duration::from_secs(6);
    let rl = redlock(&urls(&servers), lease).await;
    let guard = rl.lock("kept").lock().await.unwrap();
    let mut watchers = connections(&servers);
    let acquired = Instant::now();
    while !watchers.iter_mut().all(|watcher| exists(watcher, "kept")) {
        assert!(
            acquired.elapsed() < 5 * lease,
            "the hold never reached every server"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let () = redis::cmd("DEL")
        .arg("kept")
        .query(&mut watchers[0])
        .unwrap();
    assert!(!exists(&mut watchers[0], "kept"));
    let started = Instant::now();
    while !exists(&mut watchers[0], "kept") {
        assert!(
            !guard.is_lost(),
            "the hold was lost after {:?}: its renewals found no majority in time",
            started.elapsed()
        );
        assert!(
            started.elapsed() < 5 * lease,
            "the hold was not taken again on the server that lost it"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    eprintln!("hold taken again {:?} after it vanished", started.elapsed());
    assert!(!guard.is_lost());
    guard.unlock().await.unwrap();
    for watcher in &mut watchers {
        assert!(!exists(watcher, "kept"), "released everywhere");
    }
}

/// A majority that granted a round after its lease was spent (here: a process stalled
/// between the answers and the validity check) is `ValidityExpired`, never a guard, and
/// nothing is left on any server. The control: the same round without the stall is
/// granted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_round_won_after_its_lease_is_validity_expired_and_released() {
    let servers = servers(3);
    let rl = redlock(&urls(&servers), Duration::from_secs(1)).await;
    let lock = rl.lock("late");
    lock.try_lock_with_lease(Duration::ZERO, Duration::from_millis(100))
        .await
        .expect("without a stall the round is granted")
        .unlock()
        .await
        .unwrap();

    rl.__stall_after_round(Duration::from_millis(150));
    match lock
        .try_lock_with_lease(Duration::ZERO, Duration::from_millis(100))
        .await
    {
        Err(LockError::ValidityExpired { elapsed, lease, .. }) => {
            assert!(elapsed >= Duration::from_millis(150), "{elapsed:?}");
            assert_eq!(lease, Duration::from_millis(100));
        }
        other => panic!("a round won 150 ms into a 100 ms lease: {other:?}"),
    }
    let started = Instant::now();
    let mut watchers = connections(&servers);
    while watchers.iter_mut().any(|watcher| exists(watcher, "late")) {
        assert!(
            started.elapsed() < Duration::from_secs(2),
            "the expired round left its key"
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

/// An unlock is done once this owner's hold is gone from a majority: released on two
/// servers and never written on two others (an acquisition round ends once a majority
/// granted, so a server may never get the hold), the fifth dead. That is a released lock,
/// not an unknown outcome: nobody can be kept from a majority by it. (`redlock_overlap`
/// once failed on such an unlock, which reported the dead server's error.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unlock_gone_from_a_majority_is_done_though_a_holder_is_dead() {
    let mut servers = servers(5);
    let rl = redlock(&urls(&servers), Duration::from_secs(6)).await;
    let guard = rl.lock("partial").lock().await.unwrap();
    let mut watchers = connections(&servers);
    let acquired = Instant::now();
    while !watchers
        .iter_mut()
        .all(|watcher| exists(watcher, "partial"))
    {
        assert!(
            acquired.elapsed() < Duration::from_secs(30),
            "the hold never reached every server"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    // The hold on three servers only, as a round that ended at its majority leaves it,
    // and one of those three dead.
    for watcher in &mut watchers[3..] {
        let () = redis::cmd("DEL").arg("partial").query(watcher).unwrap();
    }
    servers[2].stop();
    let unlocked = guard.unlock().await;
    assert!(
        unlocked.is_ok(),
        "released on two servers and absent on two: {unlocked:?}"
    );
    for watcher in &mut watchers[..2] {
        assert!(!exists(watcher, "partial"), "released where it was held");
    }
    // And the lock is free for another owner: four live servers, a majority.
    let again = rl.lock("partial").try_lock().await.unwrap();
    again.unlock().await.unwrap();
}
