//! The faults of one server, each applied to every primitive at once (one name each):
//! the holder's process killed, Redis paused past the lease, Redis restarted without its
//! data, command connections killed, a half-open connection, the subscriber lost, the
//! client's CPU starved.

use std::time::{Duration, Instant};

use dlock::{LockError, LossReason};
use dlock_tests::primitive::Primitive;
use dlock_tests::{HoldProcess, RedisServer, TcpProxy};

use crate::support::{
    any_exists, assert_kept_and_handed_off, builder, burn_cpu, cells, connect, hold,
    kill_connections, longest_pttl, name, watch_loss, Rival, WAKE_LIMIT,
};

/// Slack for a waiter's own round trips after the lock became takeable.
const SLACK: Duration = Duration::from_millis(250);

/// Holder process SIGKILLed (watchdog 1.5 s): the rival, already waiting (recheck 30 s),
/// holds it after the lease the dead holder last wrote ran out (PTTL read just before the
/// kill), never before, and within `SLACK` of it. The control: while the holder lives,
/// the rival waits.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn holder_killed() {
    let _cpu = crate::support::sharing_cpu().await;
    let server = RedisServer::start();
    let url = server.url();
    let rivals = connect(builder(), &url).await;
    let mut admin = server.connection();
    let mut holders = Vec::new();
    for primitive in Primitive::ALL {
        let name = name("kill", primitive);
        let args = [
            &url,
            &name,
            "--watchdog",
            "1500ms",
            "--kind",
            primitive.label(),
        ];
        holders.push(HoldProcess::start_in_background(
            env!("CARGO_BIN_EXE_dlock-hold"),
            args.map(str::to_owned).to_vec(),
        ));
    }
    let mut processes = Vec::new();
    for holder in holders {
        processes.push(holder.await.unwrap());
    }
    let waiting: Vec<Rival> = Primitive::ALL
        .iter()
        .map(|&p| Rival::spawn(&rivals, p, &name("kill", p), Duration::from_secs(10)))
        .collect();
    tokio::time::sleep(Duration::from_millis(400)).await;
    for (primitive, rival) in Primitive::ALL.iter().zip(&waiting) {
        assert!(
            !rival.is_finished(),
            "{primitive}: the rival got it while the holder lived"
        );
    }
    let mut expiries = Vec::new();
    for (primitive, process) in Primitive::ALL.iter().zip(&mut processes) {
        let killed_at = Instant::now();
        process.kill();
        let keys = primitive.keys(&rivals, &name("kill", *primitive));
        let read_at = Instant::now();
        let pttl = longest_pttl(&mut admin, &keys).expect("the held keys have a TTL");
        expiries.push((read_at + pttl, killed_at));
    }
    for ((primitive, rival), (expiry, killed_at)) in
        Primitive::ALL.iter().zip(waiting).zip(expiries)
    {
        let acquired_at = rival
            .acquired_at()
            .await
            .unwrap_or_else(|e| panic!("{primitive}: the rival never got it: {e}"));
        println!(
            "matrix {primitive} holder_killed: rival in {:?} after the kill, {:?} after the lease's end",
            acquired_at - killed_at,
            acquired_at.saturating_duration_since(expiry)
        );
        assert!(
            acquired_at + Duration::from_millis(2) >= expiry,
            "{primitive}: the rival got it {:?} before the dead holder's lease ended",
            expiry - acquired_at
        );
        assert!(
            acquired_at <= expiry + SLACK,
            "{primitive}: the rival got it {:?} after the lease ended",
            acquired_at - expiry
        );
    }
}

/// Redis SIGSTOPped for 1.5 s: holds with a 600 ms watchdog are lost and their holders
/// told by their own deadline, during the pause; rivals get them after the resume. Holds
/// with a 6 s watchdog (the control) are kept and still exclude. A fenced increment sent
/// during the pause with a 500 ms command timeout fails with `CommandTimeout` and is
/// applied exactly once after the resume.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_paused_past_the_lease() {
    let _cpu = crate::support::sharing_cpu().await;
    let server = RedisServer::start();
    let url = server.url();
    let short = connect(builder().watchdog_timeout(Duration::from_millis(600)), &url).await;
    let long = connect(builder().watchdog_timeout(Duration::from_secs(6)), &url).await;
    let rivals = connect(builder(), &url).await;
    let writer = connect(builder().command_timeout(Duration::from_millis(500)), &url).await;
    let mut cells = Vec::new();
    for primitive in Primitive::ALL {
        let (lost_name, kept_name) = (name("pause", primitive), name("pause-kept", primitive));
        let lost = hold(&short, primitive, &lost_name, None).await;
        let kept = hold(&long, primitive, &kept_name, None).await;
        let watch_lost = watch_loss(&lost, Duration::from_secs(10));
        let watch_kept = watch_loss(&kept, Duration::from_secs(4));
        let rival_lost = Rival::spawn(&rivals, primitive, &lost_name, Duration::from_secs(10));
        let rival_kept = Rival::spawn(&rivals, primitive, &kept_name, Duration::from_secs(10));
        cells.push((
            primitive, lost, kept, watch_lost, watch_kept, rival_lost, rival_kept,
        ));
    }
    let token = cells[0].2.fencing_token().expect("a lock's token");
    let fence = dlock::fencing::Fence::new(token);
    tokio::time::sleep(Duration::from_millis(100)).await;

    let paused_at = Instant::now();
    server.pause();
    let write = tokio::spawn({
        let fenced = writer.fenced();
        async move { fenced.incr_by("matrix:pause:counter", 1, fence).await }
    });
    tokio::time::sleep(Duration::from_millis(1500)).await;
    server.resume();
    let resumed_at = Instant::now();

    match write.await.unwrap() {
        Err(LockError::CommandTimeout { .. }) => {}
        other => panic!("fenced write during the pause: expected CommandTimeout, got {other:?}"),
    }
    for (primitive, lost, kept, watch_lost, watch_kept, rival_lost, rival_kept) in cells {
        let (told_at, loss) = watch_lost
            .await
            .unwrap()
            .unwrap_or_else(|| panic!("{primitive}: the holder was never told"));
        assert!(
            matches!(&loss, LockError::Lost { .. }),
            "{primitive}: {loss:?}"
        );
        assert!(
            told_at <= resumed_at,
            "{primitive}: told {:?} after the resume, not by its deadline",
            told_at - resumed_at
        );
        let acquired_at = rival_lost.acquired_at().await.unwrap();
        assert!(acquired_at >= told_at, "{primitive}: rival before the loss");
        assert!(
            acquired_at <= resumed_at + Duration::from_secs(1),
            "{primitive}: rival {:?} after the resume",
            acquired_at - resumed_at
        );
        assert!(lost.is_lost());
        // The control: a 6 s watchdog rides out the pause and still excludes.
        assert!(
            watch_kept.await.unwrap().is_none(),
            "{primitive}: a 6 s watchdog hold was lost in a 1.5 s pause"
        );
        assert!(
            !rival_kept.is_finished(),
            "{primitive}: kept hold not exclusive"
        );
        let unlocked_at = Instant::now();
        kept.unlock().await.unwrap();
        let hand_off = rival_kept.acquired_at().await.unwrap() - unlocked_at;
        println!(
            "matrix {primitive} redis_paused: told {:?} into the pause, rival {:?} after the resume; kept hold handed off in {hand_off:?}",
            told_at - paused_at,
            acquired_at - resumed_at
        );
        assert!(hand_off <= WAKE_LIMIT, "{primitive}: hand-off {hand_off:?}");
    }
    let mut admin = server.connection();
    let counter: i64 = redis::cmd("GET")
        .arg("matrix:pause:counter")
        .query(&mut admin)
        .unwrap();
    println!("matrix fenced redis_paused: CommandTimeout, counter {counter} after the resume");
    assert_eq!(counter, 1, "the timed-out fenced increment applied once");
}

/// Redis restarted without persistence (its data gone): every holder (watchdog 1.5 s) is
/// told at its next renewal; rivals (recheck 30 s) get the locks once the subscriber is
/// back. A documented risk, measured: the rival holds before the holder is told, for at
/// most a renewal period, and the fencing counter starts over. The control, on a server
/// with `appendfsync always`: every hold survives and excludes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn restart_without_persistence() {
    let _cpu = crate::support::sharing_cpu().await;
    let mut volatile = RedisServer::start();
    let mut durable = RedisServer::start_with(&["--appendonly", "yes", "--appendfsync", "always"]);
    let watchdog = builder().watchdog_timeout(Duration::from_millis(1500));
    let mut runs = Vec::new();
    for server in [&volatile, &durable] {
        let holders = connect(watchdog.clone(), &server.url()).await;
        let rivals = connect(builder(), &server.url()).await;
        let mut cells = Vec::new();
        for primitive in Primitive::ALL {
            let name = name("restart", primitive);
            let held = hold(&holders, primitive, &name, None).await;
            let watch = watch_loss(&held, Duration::from_secs(4));
            let rival = Rival::spawn(&rivals, primitive, &name, Duration::from_secs(10));
            cells.push((primitive, held, watch, rival));
        }
        let fence = dlock::fencing::Fence::new(1_000);
        holders
            .fenced()
            .set("matrix:restart:record", "before", fence)
            .await
            .unwrap();
        runs.push((holders, rivals, cells));
    }
    tokio::time::sleep(Duration::from_millis(300)).await;
    let down = volatile.restart();
    let volatile_back = Instant::now();
    durable.restart();
    let durable_back = Instant::now();
    let durable_run = runs.pop().unwrap();
    let volatile_run = runs.pop().unwrap();

    let (holders, rivals, cells) = volatile_run;
    let (mut tokens_before, mut tokens_after) = (Vec::new(), Vec::new());
    for (primitive, held, watch, rival) in cells {
        let token_before = held.fencing_token();
        let (told_at, loss) = watch
            .await
            .unwrap()
            .unwrap_or_else(|| panic!("{primitive}: the holder was never told"));
        assert!(
            matches!(
                &loss,
                LockError::Lost {
                    reason: LossReason::NotHeldOnRenewal,
                    ..
                }
            ),
            "{primitive}: {loss:?}"
        );
        let (acquired_at, rival_held) = rival.held().await.unwrap();
        let token_after = rival_held.fencing_token();
        rival_held.unlock().await.unwrap();
        let overlap = told_at.saturating_duration_since(acquired_at);
        println!(
            "matrix {primitive} restart_without_persistence: down {down:?}, holder told {:?} after, rival in {:?}, both believed they held for {overlap:?}, token {token_before:?} -> {token_after:?}",
            told_at - volatile_back,
            acquired_at.saturating_duration_since(volatile_back)
        );
        assert!(told_at <= volatile_back + Duration::from_millis(500) + SLACK);
        assert!(acquired_at <= volatile_back + Duration::from_secs(1));
        tokens_before.extend(token_before);
        tokens_after.extend(token_after);
    }
    // The documented risk: the names' fencing counter (one per hash tag) was lost with
    // the data, so tokens minted after the restart repeat earlier ones.
    println!("matrix fencing restart_without_persistence: tokens {tokens_before:?} before, {tokens_after:?} after");
    assert!(
        tokens_after.iter().min() <= tokens_before.iter().max(),
        "the counter survived a restart without persistence?"
    );
    // The fenced record went with the data: a lower token writes again.
    holders
        .fenced()
        .set(
            "matrix:restart:record",
            "after",
            dlock::fencing::Fence::new(1),
        )
        .await
        .expect("the record is gone: any token writes");
    drop((holders, rivals));

    let (holders, _rivals, cells) = durable_run;
    for (primitive, held, watch, rival) in cells {
        assert!(
            watch.await.unwrap().is_none(),
            "{primitive}: lost across a restart with appendfsync always"
        );
        assert!(!rival.is_finished(), "{primitive}: rival got a kept hold");
        let unlocked_at = Instant::now();
        held.unlock().await.unwrap();
        let hand_off = rival.acquired_at().await.unwrap() - unlocked_at;
        println!("matrix {primitive} restart_durable (control): kept, hand-off {hand_off:?} after the restart ({:?} ago)", unlocked_at - durable_back);
        assert!(hand_off <= WAKE_LIMIT, "{primitive}: hand-off {hand_off:?}");
    }
    let refused = holders
        .fenced()
        .set(
            "matrix:restart:record",
            "after",
            dlock::fencing::Fence::new(1),
        )
        .await;
    assert!(
        matches!(refused, Err(LockError::StaleToken { .. })),
        "a durable record still refuses older tokens: {refused:?}"
    );
    println!(
        "matrix fenced restart: volatile record accepted token 1 after 1000; durable refused it"
    );
}

/// Every command connection killed (`CLIENT KILL TYPE normal`), then 1.2 s (more than the
/// 900 ms watchdog): every hold kept by renewals on new connections, still exclusive;
/// each release wakes its rival within `WAKE_LIMIT`. A fenced write right after the
/// kill succeeds (one reconnection).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn command_connections_killed() {
    let _cpu = crate::support::sharing_cpu().await;
    let server = RedisServer::start();
    let url = server.url();
    let holders = connect(builder().watchdog_timeout(Duration::from_millis(900)), &url).await;
    let rivals = connect(builder(), &url).await;
    let cells = cells(
        &holders,
        &rivals,
        "kill-normal",
        Duration::from_millis(1500),
        Duration::from_secs(10),
    )
    .await;
    tokio::time::sleep(Duration::from_millis(200)).await;
    let mut admin = server.connection();
    assert!(kill_connections(&mut admin, "normal") > 0);
    let fence = cells[0]
        .1
        .fencing_token()
        .map(dlock::fencing::Fence::new)
        .unwrap();
    holders
        .fenced()
        .set("matrix:kill:record", "x", fence)
        .await
        .expect("a fenced write after the kill reconnects");
    tokio::time::sleep(Duration::from_millis(1200)).await;
    assert_kept_and_handed_off("command_connections_killed", cells, WAKE_LIMIT).await;
}

/// The holders' command connection goes half open (requests reach Redis, replies never
/// come back; command timeout 300 ms, watchdog 1.5 s): renewals move to a new connection
/// and every hold is kept. Then the rivals' subscriber connection goes half open while
/// they wait: each release still wakes its rival within `WAKE_LIMIT` of the subscriber's
/// health check finding it silent.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn half_open_connection() {
    let _cpu = crate::support::sharing_cpu().await;
    let server = RedisServer::start();
    let holder_proxy = TcpProxy::start(server.addr());
    let rival_proxy = TcpProxy::start(server.addr());
    let timeout = Duration::from_millis(300);
    let holders = connect(
        builder()
            .watchdog_timeout(Duration::from_millis(1500))
            .command_timeout(timeout),
        &holder_proxy.url(),
    )
    .await;
    let rivals = connect(builder().command_timeout(timeout), &rival_proxy.url()).await;
    let cells = cells(
        &holders,
        &rivals,
        "half-open",
        Duration::from_secs(3),
        Duration::from_secs(20),
    )
    .await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(holder_proxy.accepted(), 1, "the holders use one connection");
    assert!(holder_proxy.silence(1));
    // A fenced increment on the silent connection: applied by Redis, unanswered.
    let fence = cells[0]
        .1
        .fencing_token()
        .map(dlock::fencing::Fence::new)
        .unwrap();
    let counter = "matrix:half-open:counter";
    let silent = holders.fenced().incr_by(counter, 1, fence).await;
    assert!(
        matches!(silent, Err(LockError::CommandTimeout { .. })),
        "a fenced write on the silent connection: {silent:?}"
    );
    // The rivals' connections: commands first, then the subscriber of their waits.
    assert_eq!(
        rival_proxy.accepted(),
        2,
        "the rivals: commands and subscriber"
    );
    assert!(rival_proxy.silence(2));
    let silenced_at = Instant::now();
    tokio::time::sleep(Duration::from_millis(2000)).await;
    println!(
        "matrix half_open: holders' connections {}, rivals' {} after {:?}",
        holder_proxy.accepted(),
        rival_proxy.accepted(),
        silenced_at.elapsed()
    );
    let after = holders.fenced().incr_by(counter, 1, fence).await.unwrap();
    println!("matrix fenced half_open: CommandTimeout on the silent connection (applied), the next call {after} on a new one");
    assert_eq!(
        after, 2,
        "the unanswered increment applied once, the next one on top"
    );
    assert_kept_and_handed_off("half_open_connection", cells, WAKE_LIMIT).await;
}

/// The rivals' subscriber connection killed (`CLIENT KILL TYPE pubsub`) right before the
/// releases, so their messages are published while it reconnects: every rival still gets
/// its lock within `WAKE_LIMIT` (the reconnection wakes every waiter to re-check).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn subscriber_lost() {
    let _cpu = crate::support::sharing_cpu().await;
    let server = RedisServer::start();
    let url = server.url();
    let holders = connect(builder(), &url).await;
    let rivals = connect(builder(), &url).await;
    let cells = cells(
        &holders,
        &rivals,
        "pubsub",
        Duration::from_secs(5),
        Duration::from_secs(20),
    )
    .await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    let mut admin = server.connection();
    assert_eq!(kill_connections(&mut admin, "pubsub"), 1);
    assert_kept_and_handed_off("subscriber_lost", cells, WAKE_LIMIT).await;
}

/// Both cores saturated by busy threads for 5 watchdog timeouts (1 s): every hold kept
/// and exclusive (a rival's `try_lock` refused every 250 ms); the control, a hold with an
/// explicit 1 s lease (no renewal), is lost at its deadline in the same run.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cpu_starvation() {
    let _cpu = crate::support::owning_cpu().await;
    let server = RedisServer::start();
    let url = server.url();
    let holders = connect(builder().watchdog_timeout(Duration::from_secs(1)), &url).await;
    let rivals = connect(builder(), &url).await;
    let mut cells = Vec::new();
    for primitive in Primitive::ALL {
        let name = name("starved", primitive);
        let held = hold(&holders, primitive, &name, None).await;
        let control = hold(
            &holders,
            primitive,
            &name_control(primitive),
            Some(Duration::from_secs(1)),
        )
        .await;
        cells.push((primitive, name, held, control));
    }
    let (stop, burners) = burn_cpu();
    let started = Instant::now();
    let mut refusals = 0;
    while started.elapsed() < Duration::from_secs(5) {
        for (primitive, name, _, _) in &cells {
            match primitive
                .rival()
                .acquire(&rivals, name, Duration::ZERO, None)
                .await
            {
                Err(LockError::Timeout { .. }) => refusals += 1,
                other => panic!(
                    "{primitive}: rival under starvation: {:?}",
                    other.map(|_| ())
                ),
            }
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    for burner in burners {
        burner.join().unwrap();
    }
    let mut admin = server.connection();
    for (primitive, name, held, control) in cells {
        assert!(!held.is_lost(), "{primitive}: lost under CPU starvation");
        assert!(
            any_exists(&mut admin, &primitive.keys(&holders, &name)),
            "{primitive}: the hold is gone from Redis"
        );
        assert!(
            control.is_lost(),
            "{primitive}: the 1 s lease control not lost"
        );
        held.unlock().await.unwrap();
    }
    println!("matrix cpu_starvation: 5 s held by all 7, {refusals} rival attempts refused");
}

fn name_control(primitive: Primitive) -> String {
    name("starved-control", primitive)
}
