//! Runs multi-lock workloads from a separate OS process, for `tests/tests/family/multi_processes.rs`.
//!
//! Usage:
//! `dlock-multi <pair|transfer> <same-slot|sequential|none> <url-1> <url-2> <sections> <seed> [names...]`
//!
//! - `pair`: takes the multi-lock over `names` (given in this process's order) `sections`
//!   times; inside, an INCR/DECR probe on each name's server (`probe:<name>`) counts
//!   overlaps. Prints `sections <n> overlaps <m>`.
//! - `transfer`: 10 accounts (`acct:{bank}:<i>`, spread over both servers in sequential
//!   mode); each section moves 1 between a random pair by GET, then SET of both, under
//!   the multi-lock over the pair. Prints `sections <n>`.
//!
//! `same-slot` puts every name on the first server in one script; `sequential` puts the
//! k-th name (pair) or account k (transfer) on server k mod 2; `none` takes no lock (the
//! control run).

use std::time::Duration;

use dlock::{LockClient, MultiLock};
use redis::AsyncCommands;

#[derive(Clone, Copy, PartialEq)]
enum Mode {
    SameSlot,
    Sequential,
    Unlocked,
}

struct World {
    mode: Mode,
    clients: [LockClient; 2],
    data: [redis::aio::MultiplexedConnection; 2],
}

impl World {
    /// Which server name number `k` lives on.
    fn server(&self, k: usize) -> usize {
        if self.mode == Mode::Sequential {
            k % 2
        } else {
            0
        }
    }

    /// The multi-lock over `names` (numbered `ks`), `None` in the control run.
    fn multi(&self, names: &[String], ks: &[usize]) -> Option<MultiLock> {
        match self.mode {
            Mode::SameSlot => {
                Some(MultiLock::same_slot(&self.clients[0], names).expect("same slot"))
            }
            Mode::Sequential => Some(
                MultiLock::sequential(
                    names
                        .iter()
                        .zip(ks)
                        .map(|(name, &k)| self.clients[self.server(k)].lock(name)),
                )
                .expect("sequential"),
            ),
            Mode::Unlocked => None,
        }
    }
}

#[tokio::main]
async fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if args.len() < 6 {
        eprintln!("usage: dlock-multi <pair|transfer> <same-slot|sequential|none> <url-1> <url-2> <sections> <seed> [names...]");
        std::process::exit(2);
    }
    let mode = match args[1].as_str() {
        "same-slot" => Mode::SameSlot,
        "sequential" => Mode::Sequential,
        "none" => Mode::Unlocked,
        other => {
            eprintln!("dlock-multi: unknown mode {other:?}");
            std::process::exit(2)
        }
    };
    let sections: usize = args[4].parse().expect("sections");
    let seed: u64 = args[5].parse().expect("seed");
    let connect = |url: String| async move {
        let client = LockClient::connect(&url).await.expect("lock client");
        let data = redis::Client::open(url)
            .expect("url")
            .get_multiplexed_async_connection()
            .await
            .expect("data connection");
        (client, data)
    };
    let ((c1, d1), (c2, d2)) = (
        connect(args[2].clone()).await,
        connect(args[3].clone()).await,
    );
    let world = World {
        mode,
        clients: [c1, c2],
        data: [d1, d2],
    };
    match args[0].as_str() {
        "pair" => pair(&world, sections, &args[6..]).await,
        "transfer" => transfer(&world, sections, seed).await,
        other => {
            eprintln!("dlock-multi: unknown workload {other:?}");
            std::process::exit(2)
        }
    }
}

async fn pair(world: &World, sections: usize, names: &[String]) {
    // The k-th name of the sorted set lives on server k mod 2 in both processes.
    let mut sorted = names.to_vec();
    sorted.sort();
    let ks: Vec<usize> = names
        .iter()
        .map(|name| sorted.iter().position(|n| n == name).unwrap_or(0))
        .collect();
    let multi = world.multi(names, &ks);
    let mut overlaps = 0u64;
    for _ in 0..sections {
        let guard = match &multi {
            Some(multi) => Some(multi.lock().await.expect("multi-lock")),
            None => None,
        };
        let mut data = world.data.clone();
        for (name, &k) in names.iter().zip(&ks) {
            let n: i64 = data[world.server(k)]
                .incr(format!("probe:{name}"), 1)
                .await
                .expect("incr");
            if n > 1 {
                overlaps += 1;
            }
        }
        tokio::task::yield_now().await;
        for (name, &k) in names.iter().zip(&ks) {
            let _: i64 = data[world.server(k)]
                .decr(format!("probe:{name}"), 1)
                .await
                .expect("decr");
        }
        if let Some(guard) = guard {
            guard.unlock().await.expect("unlock");
        }
    }
    println!("sections {sections} overlaps {overlaps}");
}

async fn transfer(world: &World, sections: usize, seed: u64) {
    let mut state = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    let mut next = move |below: usize| {
        // xorshift64: enough to pick account pairs.
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        (state % below as u64) as usize
    };
    let mut data = world.data.clone();
    for _ in 0..sections {
        let from = next(10);
        let to = (from + 1 + next(9)) % 10;
        let names = [
            format!("acct:{{bank}}:{from}"),
            format!("acct:{{bank}}:{to}"),
        ];
        let multi = world.multi(&names, &[from, to]);
        let guard = match &multi {
            Some(multi) => Some(multi.lock().await.expect("multi-lock")),
            None => None,
        };
        let (sf, st) = (world.server(from), world.server(to));
        let a: i64 = data[sf].get(format!("balance:{from}")).await.expect("get");
        let b: i64 = data[st].get(format!("balance:{to}")).await.expect("get");
        // Each account also counts the transfers that touched it: a lost update of a
        // balance can cancel out in the total, one of a count cannot.
        let ta: i64 = data[sf].get(format!("touches:{from}")).await.expect("get");
        let tb: i64 = data[st].get(format!("touches:{to}")).await.expect("get");
        tokio::time::sleep(Duration::from_micros(200)).await;
        let _: () = data[sf]
            .set(format!("balance:{from}"), a - 1)
            .await
            .expect("set");
        let _: () = data[st]
            .set(format!("balance:{to}"), b + 1)
            .await
            .expect("set");
        let _: () = data[sf]
            .set(format!("touches:{from}"), ta + 1)
            .await
            .expect("set");
        let _: () = data[st]
            .set(format!("touches:{to}"), tb + 1)
            .await
            .expect("set");
        if let Some(guard) = guard {
            guard.unlock().await.expect("unlock");
        }
    }
    println!("sections {sections}");
}
