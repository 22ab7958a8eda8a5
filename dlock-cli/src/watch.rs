//! `dlock watch <name>`: the holder at the start and at every change.
//!
//! The holder is read every `--interval` (`Lock::holders`: two commands and one per
//! holder) rather than heard on the unlock channel: a release publishes only when a
//! client waits, and an acquisition never does, so the channel misses most hand-offs. A
//! hold shorter than the interval can go unseen.

use std::time::Duration;

use dlock_core::LockClient;
use serde::Serialize;
use tokio::time::Instant;

use crate::error::CliError;
use crate::report::{millis, print_json, HolderView};

/// One observed state of the lock.
#[derive(Serialize)]
struct Change {
    /// Milliseconds since the watch started.
    at_ms: u64,
    holders: Vec<HolderView>,
}

/// The JSON document of `watch`.
#[derive(Serialize)]
struct Watched {
    lock: String,
    changes: Vec<Change>,
}

pub async fn run(
    client: &LockClient,
    name: &str,
    duration: Option<Duration>,
    interval: Duration,
    json: bool,
) -> Result<(), CliError> {
    let lock = client.lock(name);
    let started = Instant::now();
    let stop = async {
        match duration {
            Some(duration) => {
                tokio::time::sleep(duration).await;
                Ok(())
            }
            None => tokio::signal::ctrl_c().await.map_err(CliError::Signal),
        }
    };
    tokio::pin!(stop);
    let mut changes: Vec<Change> = Vec::new();
    let mut ticks = tokio::time::interval(interval);
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            stopped = &mut stop => {
                stopped?;
                break;
            }
            _ = ticks.tick() => {}
        }
        let holders: Vec<HolderView> = lock.holders().await?.iter().map(HolderView::from).collect();
        let same = changes.last().is_some_and(|last| {
            let ids = |h: &[HolderView]| h.iter().map(|h| h.owner.id.clone()).collect::<Vec<_>>();
            ids(&last.holders) == ids(&holders)
        });
        if same {
            continue;
        }
        let change = Change {
            at_ms: millis(started.elapsed()),
            holders,
        };
        if !json {
            let holders: Vec<String> = change.holders.iter().map(HolderView::text).collect();
            let state = if holders.is_empty() {
                "free".to_owned()
            } else {
                format!("held by {}", holders.join("; "))
            };
            println!("+{}ms {name}: {state}", change.at_ms);
        }
        changes.push(change);
    }
    if json {
        print_json(&Watched {
            lock: name.to_owned(),
            changes,
        })?;
    }
    Ok(())
}
