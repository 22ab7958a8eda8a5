//! dlock in one screen: a shared counter incremented by two clients with eight tasks each,
//! once under the lock (exact) and once without it (lost updates), plus re-entry and a
//! bounded wait.
//!
//! Uses the Redis at `DLOCK_REDIS_URL`, or starts a throw-away `redis-server` on a free
//! loopback port when that is not set.

use std::time::{Duration, Instant};

use dlock_core::LockClient;
use dlock_tests::workload::{increment_counter, Guarding};
use dlock_tests::RedisServer;
use redis::AsyncCommands;

const CLIENTS: usize = 2;
const TASKS: usize = 8;
const INCREMENTS: usize = 100;

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let (_server, url) = match std::env::var("DLOCK_REDIS_URL") {
        Ok(url) => (None, url),
        Err(_) => {
            let server = RedisServer::start();
            let url = server.url();
            println!("started redis-server at {url}");
            (Some(server), url)
        }
    };
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
    for (guarding, counter) in [
        (Guarding::Locked, "quickstart:counter:locked"),
        (Guarding::Unlocked, "quickstart:counter:unlocked"),
    ] {
        let () = redis.del(counter).await?;
        let started = Instant::now();
        let runs = clients.iter().map(|client| {
            increment_counter(
                client, &url, "counter", counter, guarding, TASKS, INCREMENTS,
            )
        });
        futures_util::future::join_all(runs).await;
        let total: i64 = redis.get(counter).await?;
        println!(
            "{guarding:?}: {CLIENTS} clients x {TASKS} tasks x {INCREMENTS} increments -> counter {total} of {expected} in {:.2?}",
            started.elapsed()
        );
        if guarding == Guarding::Locked {
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
            Ok::<_, dlock_core::LockError>(count)
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

    if exact {
        println!("locked run exact: no lost update");
        Ok(())
    } else {
        Err("the locked run lost updates".into())
    }
}
