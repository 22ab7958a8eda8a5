//! When a cluster slot moves, the server tells each connection subscribed to one of its
//! shard channels with an unasked `sunsubscribe` push, which the client library takes for
//! the answer to the oldest request in flight on that connection. Commands must never
//! share a connection with sharded subscriptions: this test keeps two kinds of command in
//! flight (one whose answer is always `true`, one always `false`) on a client whose waiter
//! is subscribed in the slot, moves the slot away and back, and requires every answer to
//! be the right one and no error to quote a push. Found by the soak, where an acquisition
//! failed with `Response type not string compatible (push SUnsubscribe)`.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use dlock::{LockClient, Topology};
use dlock_tests::RedisCluster;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_moved_slot_never_answers_a_command() {
    let cluster = RedisCluster::start();
    let topology = Topology::cluster(cluster.node_urls());
    let connect = || async {
        LockClient::builder()
            .max_wait_recheck(Duration::from_secs(30))
            .connect_to(&topology)
            .await
            .unwrap()
    };
    let holder = connect().await;
    let client = connect().await;
    let guard = holder.lock("{moved}:held").lock().await.unwrap();
    // A waiter keeps the client subscribed to a shard channel of the slot.
    let waiter = {
        let lock = client.lock("{moved}:held");
        tokio::spawn(async move { lock.try_lock_for(Duration::from_secs(60)).await })
    };
    tokio::time::sleep(Duration::from_millis(300)).await;

    let stop = Arc::new(AtomicBool::new(false));
    let answers = Arc::new(AtomicU64::new(0));
    let asking = |name: &'static str, expected: bool| {
        let (lock, stop, answers) = (client.lock(name), stop.clone(), answers.clone());
        tokio::spawn(async move {
            let mut wrong = Vec::new();
            while !stop.load(Ordering::Relaxed) {
                match lock.is_locked().await {
                    Ok(answer) if answer == expected => {
                        answers.fetch_add(1, Ordering::Relaxed);
                    }
                    Ok(answer) => wrong.push(format!("{name}: {answer}, expected {expected}")),
                    // Failover errors the client did not ride out are allowed; an answer
                    // meant for a subscription is not.
                    Err(e) if e.to_string().contains("push") => wrong.push(format!("{name}: {e}")),
                    Err(_) => {}
                }
            }
            wrong
        })
    };
    let askers = [
        asking("{moved}:held", true),
        asking("{moved}:free", false),
        asking("{moved}:held", true),
        asking("{moved}:free", false),
    ];
    let slot = cluster.key_slot("{moved}:held");
    for _ in 0..2 {
        cluster.failover_slot(slot);
        // The old master must catch up as a replica before it can take the slot back.
        tokio::time::sleep(Duration::from_secs(2)).await;
    }
    stop.store(true, Ordering::Relaxed);
    let mut wrong = Vec::new();
    for asker in askers {
        wrong.extend(asker.await.unwrap());
    }
    println!(
        "2 slot failovers under {} commands in flight: {} wrong answers",
        answers.load(Ordering::Relaxed),
        wrong.len()
    );
    assert!(
        wrong.is_empty(),
        "answers meant for other requests: {wrong:?}"
    );
    assert!(!waiter.is_finished(), "the waiter got a held lock");
    guard.unlock().await.unwrap();
    let woken = waiter.await.unwrap();
    woken
        .expect("the waiter is woken after the failovers")
        .unlock()
        .await
        .unwrap();
}
