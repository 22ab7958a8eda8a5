//! The shared-counter workload of the mutual-exclusion tests: a deliberately non-atomic
//! `GET` / +1 / `SET` that only a lock keeps exact.

use std::time::Duration;

use dlock::LockClient;
use redis::AsyncCommands;

/// How the increments are protected.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Guarding {
    /// Each increment runs under the named dlock lock.
    Locked,
    /// No lock: the control run, which must lose updates.
    Unlocked,
}

/// Runs `tasks` concurrent tasks doing `increments` read-modify-write increments each of
/// the integer at `counter`, through `client` (for the lock) and a plain connection to
/// `url` (for the counter).
///
/// # Panics
///
/// On any Redis or lock error: the workload is for tests.
pub async fn increment_counter(
    client: &LockClient,
    url: &str,
    lock_name: &str,
    counter: &str,
    guarding: Guarding,
    tasks: usize,
    increments: usize,
) {
    let redis = redis::Client::open(url).expect("valid Redis URL");
    let conn = redis
        .get_multiplexed_async_connection()
        .await
        .expect("counter connection");
    increment_counter_on(
        client, conn, lock_name, counter, guarding, tasks, increments,
    )
    .await;
}

/// [`increment_counter`] with the counter read and written through `conn` (e.g. a cluster
/// connection).
///
/// # Panics
///
/// On any Redis or lock error.
pub async fn increment_counter_on<C>(
    client: &LockClient,
    conn: C,
    lock_name: &str,
    counter: &str,
    guarding: Guarding,
    tasks: usize,
    increments: usize,
) where
    C: redis::aio::ConnectionLike + Clone + Send + Sync + 'static,
{
    let mut handles = Vec::new();
    for _ in 0..tasks {
        let lock = client.lock(lock_name);
        let mut conn = conn.clone();
        let counter = counter.to_owned();
        handles.push(tokio::spawn(async move {
            for _ in 0..increments {
                let guard = match guarding {
                    Guarding::Locked => Some(lock.lock().await.expect("acquire")),
                    Guarding::Unlocked => None,
                };
                let value: Option<i64> = conn.get(&counter).await.expect("GET counter");
                // Give the other tasks a chance to interleave, as real work would.
                tokio::time::sleep(Duration::from_micros(200)).await;
                let () = conn
                    .set(&counter, value.unwrap_or(0) + 1)
                    .await
                    .expect("SET counter");
                if let Some(guard) = guard {
                    guard.unlock().await.expect("release");
                }
            }
        }));
    }
    for handle in handles {
        handle.await.expect("workload task panicked");
    }
}
