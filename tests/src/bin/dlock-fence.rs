//! Takes one lock `n` times from a separate OS process and prints, for each acquisition,
//! the monotonic clock inside the critical section and the fencing token, one
//! `<nanoseconds> <token>` line each, for `fence_tokens.rs` to check across processes.
//!
//! Usage: `dlock-fence <redis-url> <lock-name> <acquisitions> [--local-tokens]`
//!
//! `--local-tokens` is the test's control: it prints a per-process count instead of the
//! token Redis minted, which the cross-process check must reject.

use dlock::LockClient;

#[tokio::main(flavor = "current_thread")]
async fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if args.len() < 3 {
        eprintln!("usage: dlock-fence <redis-url> <lock-name> <acquisitions> [--local-tokens]");
        std::process::exit(2);
    }
    let acquisitions: u64 = args[2].parse().unwrap_or_else(|_| {
        eprintln!(
            "dlock-fence: acquisitions must be a number, got {:?}",
            args[2]
        );
        std::process::exit(2)
    });
    let local = args.get(3).map(String::as_str) == Some("--local-tokens");
    let client = LockClient::connect(&args[0]).await.unwrap_or_else(|e| {
        eprintln!("dlock-fence: {e}");
        std::process::exit(1)
    });
    let lock = client.lock(&args[1]);
    let mut lines = String::new();
    for n in 1..=acquisitions {
        let guard = lock.lock().await.unwrap_or_else(|e| {
            eprintln!("dlock-fence: lock: {e}");
            std::process::exit(1)
        });
        // Read inside the critical section: holds never overlap, so these times order
        // the holders as the lock did.
        let at = monotonic_ns();
        let token = match (local, guard.fencing_token()) {
            (true, _) => n,
            (false, Some(token)) => token.get(),
            (false, None) => {
                eprintln!("dlock-fence: a lock guard without a fencing token");
                std::process::exit(1)
            }
        };
        guard.unlock().await.unwrap_or_else(|e| {
            eprintln!("dlock-fence: unlock: {e}");
            std::process::exit(1)
        });
        lines.push_str(&format!("{at} {token}\n"));
    }
    print!("{lines}");
}

/// `CLOCK_MONOTONIC` in nanoseconds: one clock for every process of the machine.
fn monotonic_ns() -> u64 {
    let now = rustix::time::clock_gettime(rustix::time::ClockId::Monotonic);
    // CLOCK_MONOTONIC counts from boot: never negative.
    u64::try_from(now.tv_sec).unwrap_or(0) * 1_000_000_000 + u64::try_from(now.tv_nsec).unwrap_or(0)
}
