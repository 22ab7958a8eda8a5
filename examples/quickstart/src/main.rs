//! dlock in one screen: a shared counter incremented by two clients with eight tasks each,
//! once under the lock (exact) and once without it (lost updates), plus re-entry and a
//! bounded wait.
//!
//! Uses the Redis at `DLOCK_REDIS_URL`, by default `redis://127.0.0.1:6379`. It writes
//! keys under `quickstart:` (and dlock's short-lived `dlock:release:` memos).

use std::time::{Duration, Instant};

use dlock::LockClient;
use redis::AsyncCommands;

const CLIENTS: usize = 2;
const TASKS: usize = 8;
const INCREMENTS: usize = 100;

/// `INCREMENTS` read-modify-write increments of `counter`: a `GET`, a pause where other
/// tasks can interleave (as real work would), a `SET`. Only the lock keeps it exact.
async fn increment(
    lock: dlock::Lock,
    mut redis: redis::aio::MultiplexedConnection,
    counter: &'static str,
    locked: bool,
) -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
    for _ in 0..INCREMENTS {
        let guard = if locked {
            Some(lock.lock().await?)
        } else {
            None
        };
        let value: Option<i64> = redis.get(counter).await?;
        tokio::time::sleep(Duration::from_micros(200)).await;
        let () = redis.set(counter, value.unwrap_or(0) + 1).await?;
        if let Some(guard) = guard {
            guard.unlock().await?;
        }
    }
    Ok(())
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
    let url =
        std::env::var("DLOCK_REDIS_URL").unwrap_or_else(|_| "redis://127.0.0.1:6379".to_owned());
    let mut clients = Vec::new();
    for _ in 0..CLIENTS {
        clients.push(
            LockClient::builder()
                .key_prefix("quickstart:")
                .connect(&url)
                .await?,
        );
    }
    let mut redis = redis::Client::open(url.as_str())?
        .get_multiplexed_async_connection()
        .await?;
    let expected = (CLIENTS * TASKS * INCREMENTS) as i64;

    let mut exact = true;
    for (locked, label, counter) in [
        (true, "Locked", "quickstart:counter:locked"),
        (false, "Unlocked", "quickstart:counter:unlocked"),
    ] {
        let () = redis.del(counter).await?;
        let started = Instant::now();
        let mut tasks = Vec::new();
        for client in &clients {
            for _ in 0..TASKS {
                let (lock, conn) = (client.lock("counter"), redis.clone());
                tasks.push(tokio::spawn(increment(lock, conn, counter, locked)));
            }
        }
        for result in futures_util::future::join_all(tasks).await {
            result??;
        }
        let total: i64 = redis.get(counter).await?;
        println!(
            "{label}: {CLIENTS} clients x {TASKS} tasks x {INCREMENTS} increments -> counter {total} of {expected} in {:.2?}",
            started.elapsed()
        );
        if locked {
            exact = total == expected;
        }
    }

    // Re-entry inside a guard's scope, and a bounded wait that gives up.
    let lock = clients[0].lock("report");
    let guard = lock.lock().await?;
    let count = guard
        .scope(async {
            let again = lock.lock().await?;
            let count = lock.hold_count().await?;
            again.unlock().await?;
            Ok::<_, dlock::LockError>(count)
        })
        .await?;
    println!("re-entered \"report\": hold count {count}");
    match clients[1]
        .lock("report")
        .try_lock_for(Duration::from_millis(200))
        .await
    {
        Err(e) if e.is_timeout() => println!("second client: {e}"),
        other => println!("second client: unexpected {other:?}"),
    }
    guard.unlock().await?;
    // Before the process exits: whatever the clients still owe Redis (a waiter's cleanup
    // after its timeout, say) is done, so nothing of theirs is left behind.
    for client in &clients {
        client.shutdown().await?;
    }

    if exact {
        println!("locked run exact: no lost update");
        Ok(())
    } else {
        Err("the locked run lost updates".into())
    }
}
