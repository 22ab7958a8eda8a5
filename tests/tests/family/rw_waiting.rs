//! Waiting for the read-write lock: a writer is not starved by a flood of readers, one
//! write release wakes every waiting reader of a process, a release only a waiting
//! writer can use wakes no reader (and still tells readers when a dead writer's entry
//! lapses), a reader joining waiting readers tries once before the release, and
//! acquisitions cancelled at any point leave no hold and no waiting writer's entry
//! behind.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use dlock::LockClient;
use dlock_tests::command_log::{log_every_command, logged_commands};
use dlock_tests::{patient_client, RedisServer};
use redis::aio::MultiplexedConnection;
use tokio::time::Instant;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_writer_gets_in_within_twice_the_readers_hold_under_a_reader_flood() {
    let server = RedisServer::start();
    let hold = Duration::from_millis(250);
    let readers = [
        LockClient::connect(&server.url()).await.unwrap(),
        LockClient::connect(&server.url()).await.unwrap(),
    ];
    let stop = Arc::new(AtomicBool::new(false));
    let mut flood = vec![];
    // Eight readers, staggered so that one always holds: without writer preference the
    // lock is never free.
    for i in 0..8u64 {
        let rw = readers[(i % 2) as usize].rw_lock("flood");
        let stop = Arc::clone(&stop);
        flood.push(tokio::spawn(async move {
            tokio::time::sleep(hold * i as u32 / 8).await;
            let mut sections = 0u32;
            while !stop.load(Ordering::Relaxed) {
                let guard = rw.read().lock().await.unwrap();
                tokio::time::sleep(hold).await;
                guard.unlock().await.unwrap();
                sections += 1;
            }
            sections
        }));
    }
    tokio::time::sleep(hold * 2).await;
    let writer = LockClient::connect(&server.url()).await.unwrap();
    let mut worst = Duration::ZERO;
    for _ in 0..3 {
        let started = Instant::now();
        let guard = writer
            .rw_lock("flood")
            .write()
            .try_lock_for(Duration::from_secs(5))
            .await
            .expect("the writer was starved");
        worst = worst.max(started.elapsed());
        guard.unlock().await.unwrap();
        tokio::time::sleep(hold).await;
    }
    stop.store(true, Ordering::Relaxed);
    for reader in flood {
        assert!(reader.await.unwrap() > 0, "a reader never got in");
    }
    assert!(
        worst <= hold * 2,
        "the writer waited {worst:?} under a flood of {hold:?} readers"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_write_release_wakes_every_waiting_reader_of_a_process() {
    let server = RedisServer::start();
    let writer = LockClient::connect(&server.url()).await.unwrap();
    // The recheck is long, so only the unlock message can wake the readers in time.
    let readers = LockClient::builder()
        .max_wait_recheck(Duration::from_secs(5))
        .connect(&server.url())
        .await
        .unwrap();
    let write = writer.rw_lock("wake-all").write().lock().await.unwrap();
    let mut waiting = vec![];
    for _ in 0..4 {
        let rw = readers.rw_lock("wake-all");
        waiting.push(tokio::spawn(async move {
            let guard = rw.read().lock().await.unwrap();
            let at = Instant::now();
            (guard, at)
        }));
    }
    tokio::time::sleep(Duration::from_millis(500)).await;
    let released = Instant::now();
    write.unlock().await.unwrap();
    let mut guards = vec![];
    for reader in waiting {
        let (guard, at) = tokio::time::timeout(Duration::from_secs(3), reader)
            .await
            .expect("a reader was not woken")
            .unwrap();
        let after = at - released;
        assert!(
            after < Duration::from_millis(200),
            "a reader got in {after:?} after the release"
        );
        guards.push(guard);
    }
    for guard in guards {
        guard.unlock().await.unwrap();
    }
}

/// The acquire scripts of fresh readers logged since the last reset.
async fn reader_tries(admin: &mut MultiplexedConnection) -> usize {
    logged_commands(admin)
        .await
        .iter()
        .filter(|args| args[0].eq_ignore_ascii_case("evalsha"))
        .filter(|args| args.iter().any(|a| a == "read") && args.iter().any(|a| a == "fresh"))
        .count()
}

/// Writers go first, so a lock freed while live writers wait can only go to a writer:
/// its release must wake no reader. Four readers and two writers of one client wait
/// behind another client's writer; the two releases that pass the lock to a waiting
/// writer cost no reader's try, and the last writer's release wakes each reader once:
/// four reader tries in all (each release woke all four before: twelve).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_release_that_only_a_waiting_writer_can_use_wakes_no_reader() {
    const READERS: usize = 4;
    let server = RedisServer::start();
    let mut admin = admin(&server).await;
    let holder = LockClient::connect(&server.url()).await.unwrap();
    let waiting = patient_client(&server.url()).await;
    let write = holder
        .rw_lock("writers-first")
        .write()
        .lock()
        .await
        .unwrap();
    let mut tasks = vec![];
    for _ in 0..READERS {
        let rw = waiting.rw_lock("writers-first");
        tasks.push(tokio::spawn(async move {
            rw.read().lock().await.unwrap().unlock().await.unwrap();
        }));
    }
    for _ in 0..2 {
        let rw = waiting.rw_lock("writers-first");
        tasks.push(tokio::spawn(async move {
            let guard = rw.write().lock().await.unwrap();
            tokio::time::sleep(Duration::from_millis(20)).await;
            guard.unlock().await.unwrap();
        }));
    }
    // Every waiter tried, subscribed, and tried again once the subscription was confirmed.
    tokio::time::sleep(Duration::from_millis(300)).await;
    log_every_command(&mut admin).await;
    write.unlock().await.unwrap();
    for task in tasks {
        tokio::time::timeout(Duration::from_secs(3), task)
            .await
            .expect("every waiter got the lock without a recheck")
            .unwrap();
    }
    assert_eq!(
        reader_tries(&mut admin).await,
        READERS,
        "reader tries after the release, through two writers' turns"
    );
}

/// A release to waiting writers tells the readers to try when the last writer's entry
/// lapses, should no writer take the lock: a writer that died while it waited (its entry
/// written here, lapsing 600 ms from now) holds the readers back until then, and no
/// longer. Without that, they would sleep to their recheck (here about 3.3 s, a third of
/// a waiting writer's entry lifetime) or the released writer's lease (20 s).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn readers_get_in_when_a_dead_waiting_writers_entry_lapses() {
    let server = RedisServer::start();
    let mut admin = admin(&server).await;
    let holder = LockClient::connect(&server.url()).await.unwrap();
    let waiting = patient_client(&server.url()).await;
    let rw = holder.rw_lock("dead-writer");
    let write = rw
        .write()
        .lock_with_lease(Duration::from_secs(20))
        .await
        .unwrap();
    // The waiting writers' set, as a writer that waits writes it (its name is the
    // layout's; the writer leaves it when it gives up).
    let writer = tokio::spawn({
        let rw = waiting.rw_lock("dead-writer");
        async move { rw.write().try_lock_for(Duration::from_secs(10)).await }
    });
    let writers_set = loop {
        let keys: Vec<String> = redis::cmd("KEYS")
            .arg("dlock:rwwait:*")
            .query_async(&mut admin)
            .await
            .unwrap();
        if let Some(key) = keys.into_iter().next() {
            break key;
        }
        tokio::time::sleep(Duration::from_millis(2)).await;
    };
    writer.abort();
    let _ = writer.await;
    let mut readers = vec![];
    for _ in 0..2 {
        let rw = waiting.rw_lock("dead-writer");
        readers.push(tokio::spawn(async move {
            let guard = rw.read().lock().await.unwrap();
            (guard, Instant::now())
        }));
    }
    tokio::time::sleep(Duration::from_millis(300)).await;
    let (seconds, micros): (u64, u64) = redis::cmd("TIME").query_async(&mut admin).await.unwrap();
    let lapses_at = seconds * 1000 + micros / 1000 + 600;
    let () = redis::cmd("ZADD")
        .arg(&writers_set)
        .arg(lapses_at)
        .arg("gone:1")
        .query_async(&mut admin)
        .await
        .unwrap();
    let released = Instant::now();
    write.unlock().await.unwrap();
    for reader in readers {
        let (guard, at) = tokio::time::timeout(Duration::from_secs(10), reader)
            .await
            .expect("a reader never got in")
            .unwrap();
        let after = at - released;
        assert!(
            after >= Duration::from_millis(450) && after < Duration::from_millis(1500),
            "a reader got in {after:?} after the release; the dead writer's entry lapsed after 600 ms"
        );
        guard.unlock().await.unwrap();
    }
}

/// The writer a writers-only release wakes may stop waiting instead of taking the lock:
/// its leave must wake the readers, who were only told to try when its entry lapses
/// (10 s). The client's only waiting writer is cancelled before the release, at once
/// after it, or 0–3 ms after it (on its way to its try, or holding the lock it took, whose
/// dropped guard frees it), and the client's two readers must get in within 1 s.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_woken_writer_that_stops_waiting_lets_the_readers_in() {
    let server = RedisServer::start();
    let holder = LockClient::connect(&server.url()).await.unwrap();
    let waiting = patient_client(&server.url()).await;
    for round in 0..12u64 {
        let write = holder.rw_lock("gone-writer").write().lock().await.unwrap();
        let writer = tokio::spawn({
            let rw = waiting.rw_lock("gone-writer");
            async move {
                let _guard = rw.write().lock().await;
                std::future::pending::<()>().await;
            }
        });
        // The writer waits (its entry holds readers back) before the readers come.
        tokio::time::sleep(Duration::from_millis(100)).await;
        let mut readers = vec![];
        for _ in 0..2 {
            let rw = waiting.rw_lock("gone-writer");
            readers.push(tokio::spawn(async move { rw.read().lock().await.unwrap() }));
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
        let released = Instant::now();
        match round % 3 {
            0 => {
                writer.abort();
                write.unlock().await.unwrap();
            }
            1 => {
                write.unlock().await.unwrap();
                writer.abort();
            }
            _ => {
                write.unlock().await.unwrap();
                tokio::time::sleep(Duration::from_micros(round * 250)).await;
                writer.abort();
            }
        }
        for reader in readers {
            let guard = tokio::time::timeout(Duration::from_secs(15), reader)
                .await
                .unwrap_or_else(|_| panic!("round {round}: a reader never got in"))
                .unwrap();
            assert!(
                released.elapsed() < Duration::from_secs(1),
                "round {round}: a reader got in {:?} after the release",
                released.elapsed()
            );
            guard.unlock().await.unwrap();
        }
    }
}

/// Polls `future` until it completes or `delay` passed (sub-millisecond delays by
/// yielding), then drops it.
async fn cancel_after<F: std::future::Future>(future: F, delay: Duration) -> Option<F::Output> {
    let until = Instant::now() + delay;
    let deadline = async {
        while Instant::now() < until {
            tokio::task::yield_now().await;
        }
    };
    tokio::select! {
        biased;
        output = future => Some(output),
        () = deadline => None,
    }
}

async fn admin(server: &RedisServer) -> MultiplexedConnection {
    server
        .client()
        .get_multiplexed_async_connection()
        .await
        .unwrap()
}

/// Waits up to 2 s until nothing of the lock is left in Redis but `allowed` keys; the keys
/// still there at the end.
async fn leftovers(admin: &mut MultiplexedConnection, allowed: &[&str]) -> Vec<String> {
    let started = Instant::now();
    loop {
        let keys: Vec<String> = redis::cmd("KEYS")
            .arg("*")
            .query_async(admin)
            .await
            .unwrap();
        let left: Vec<String> = keys
            .into_iter()
            .filter(|k| {
                // Release memos expire on their own; fencing counters never do, by design.
                !k.starts_with("dlock:release:")
                    && !k.starts_with("dlock:fence:")
                    && !dlock_tests::written_by_connecting(k)
                    && !allowed.contains(&k.as_str())
            })
            .collect();
        if left.is_empty() || started.elapsed() > Duration::from_secs(2) {
            return left;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancelled_acquisitions_leave_no_hold_and_no_waiting_writer() {
    let server = RedisServer::start();
    let client = LockClient::connect(&server.url()).await.unwrap();
    let mut admin = admin(&server).await;
    let rw = client.rw_lock("cancel");
    // A free lock: cancelled in the middle of the acquire script's round trip.
    for step in 0..40u64 {
        let delay = Duration::from_micros(step * 50);
        let write = step % 2 == 0;
        let outcome = if write {
            cancel_after(rw.write().lock(), delay).await
        } else {
            cancel_after(rw.read().lock(), delay).await
        };
        if let Some(guard) = outcome {
            guard.unwrap().unlock().await.unwrap();
        }
        let left = leftovers(&mut admin, &[]).await;
        assert!(left.is_empty(), "step {step}: {left:?} left");
    }
    // A read-held lock: a writer cancelled while it waits (before, during and after its
    // first try, and in its nap) leaves no entry, so new readers pass at once.
    let read = rw.read().lock().await.unwrap();
    for delay_ms in [0u64, 1, 2, 5, 20, 300, 1200] {
        assert!(
            cancel_after(rw.write().lock(), Duration::from_millis(delay_ms))
                .await
                .is_none()
        );
        let left = leftovers(&mut admin, &["cancel"]).await;
        assert!(
            left.is_empty(),
            "writer cancelled after {delay_ms} ms: {left:?} left"
        );
        let reader = rw.read().try_lock().await;
        assert!(reader.is_ok(), "a reader was held back after {delay_ms} ms");
        reader.unwrap().unlock().await.unwrap();
    }
    // Re-entries cancelled in flight: the outer holds' counts come back to 1.
    for step in 0..20u64 {
        let delay = Duration::from_micros(step * 50);
        if let Some(guard) = cancel_after(read.scope(rw.read().lock()), delay).await {
            guard.unwrap().unlock().await.unwrap();
        }
    }
    let started = Instant::now();
    while read.hold_count().await.unwrap() != 1 {
        assert!(
            started.elapsed() < Duration::from_secs(2),
            "a cancelled re-entry's hold stayed"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    read.unlock().await.unwrap();
    let left = leftovers(&mut admin, &[]).await;
    assert!(left.is_empty(), "{left:?} left");
}

/// A reader that starts waiting beside readers of its client that already wait finds
/// the lock's channel subscribed and confirmed: it takes that subscription before its
/// first try, so the try needs no second one once a confirmation comes (which it already
/// has). The first reader pays for the subscription; each later one tries once, then
/// waits for the release. Before, every waiter tried twice before waiting.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reader_joining_waiting_readers_tries_once_before_the_release() {
    const LATER: usize = 3;
    let server = RedisServer::start();
    let mut admin = admin(&server).await;
    let holder = LockClient::connect(&server.url()).await.unwrap();
    let waiting = patient_client(&server.url()).await;
    let write = holder.rw_lock("joiners").write().lock().await.unwrap();
    let read = |client: &LockClient| {
        let rw = client.rw_lock("joiners");
        tokio::spawn(async move {
            rw.read().lock().await.unwrap().unlock().await.unwrap();
        })
    };
    let mut tasks = vec![read(&waiting)];
    // The first reader tried, subscribed, had it confirmed and tried again.
    tokio::time::sleep(Duration::from_millis(300)).await;
    log_every_command(&mut admin).await;
    for _ in 0..LATER {
        tasks.push(read(&waiting));
    }
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(
        reader_tries(&mut admin).await,
        LATER,
        "tries of the readers that joined, before the release"
    );
    write.unlock().await.unwrap();
    for task in tasks {
        tokio::time::timeout(Duration::from_secs(3), task)
            .await
            .expect("every reader got in without a recheck")
            .unwrap();
    }
}
