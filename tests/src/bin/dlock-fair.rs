//! Waits for a fair lock from a separate OS process, one task per waiter id read from stdin.
//!
//! Usage: `dlock-fair <redis-url> <lock-name> <grants-key> <entry-timeout-ms> <hold-ms> [--plain]`
//!
//! Every line of stdin is a waiter id: a task starts for it at once, acquires the lock
//! (`--plain`: the reentrant lock, as a control), appends its id to the Redis list
//! `<grants-key>`, holds the lock `<hold-ms>` and releases it. At the end of stdin the
//! process waits for its tasks and exits. The test decides the enqueue order by writing
//! one id at a time.

use std::io::BufRead;
use std::time::Duration;

use dlock::LockClient;

#[tokio::main]
async fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if args.len() < 5 {
        eprintln!("usage: dlock-fair <redis-url> <lock-name> <grants-key> <entry-timeout-ms> <hold-ms> [--plain]");
        std::process::exit(2);
    }
    let millis = |i: usize| -> Duration {
        Duration::from_millis(args[i].parse().unwrap_or_else(|_| {
            eprintln!(
                "dlock-fair: argument {} must be a number, got {:?}",
                i + 1,
                args[i]
            );
            std::process::exit(2)
        }))
    };
    let (entry_timeout, hold) = (millis(3), millis(4));
    let plain = args.get(5).map(String::as_str) == Some("--plain");
    let client = LockClient::connect(&args[0]).await.unwrap_or_else(|e| {
        eprintln!("dlock-fair: {e}");
        std::process::exit(1)
    });
    let redis = redis::Client::open(args[0].as_str()).expect("redis url");
    let (lines, mut ids) = tokio::sync::mpsc::unbounded_channel::<String>();
    std::thread::spawn(move || {
        for line in std::io::stdin().lock().lines() {
            let Ok(line) = line else { break };
            if lines.send(line.trim().to_owned()).is_err() {
                break;
            }
        }
    });
    let mut tasks = Vec::new();
    while let Some(id) = ids.recv().await {
        let (client, redis) = (client.clone(), redis.clone());
        let (name, grants) = (args[1].clone(), args[2].clone());
        tasks.push(tokio::spawn(async move {
            let guard = if plain {
                client.lock(&name).lock().await
            } else {
                client
                    .fair_lock(&name)
                    .with_entry_timeout(entry_timeout)
                    .lock()
                    .await
            }
            .unwrap_or_else(|e| panic!("waiter {id}: {e}"));
            let mut conn = redis
                .get_multiplexed_async_connection()
                .await
                .expect("connect");
            let _: i64 = redis::cmd("RPUSH")
                .arg(&grants)
                .arg(&id)
                .query_async(&mut conn)
                .await
                .expect("RPUSH");
            tokio::time::sleep(hold).await;
            guard.unlock().await.expect("unlock");
        }));
    }
    for task in tasks {
        task.await.expect("a waiter panicked");
    }
}
