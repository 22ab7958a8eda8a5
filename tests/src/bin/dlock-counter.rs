//! Increments a shared Redis counter under a dlock lock from a separate OS process.
//!
//! Usage: `dlock-counter <redis-url> <lock-name> <counter-key> <tasks> <increments> [--no-lock]`

use dlock::LockClient;
use dlock_tests::workload::{increment_counter, Guarding};

#[tokio::main]
async fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if args.len() < 5 {
        eprintln!(
            "usage: dlock-counter <redis-url> <lock-name> <counter-key> <tasks> <increments> [--no-lock]"
        );
        std::process::exit(2);
    }
    let number = |i: usize| -> usize {
        args[i].parse().unwrap_or_else(|_| {
            eprintln!(
                "dlock-counter: argument {} must be a number, got {:?}",
                i + 1,
                args[i]
            );
            std::process::exit(2)
        })
    };
    let (tasks, increments) = (number(3), number(4));
    let guarding = if args.get(5).map(String::as_str) == Some("--no-lock") {
        Guarding::Unlocked
    } else {
        Guarding::Locked
    };
    let client = LockClient::connect(&args[0]).await.unwrap_or_else(|e| {
        eprintln!("dlock-counter: {e}");
        std::process::exit(1)
    });
    increment_counter(
        &client, &args[0], &args[1], &args[2], guarding, tasks, increments,
    )
    .await;
}
