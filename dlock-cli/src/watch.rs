//! `dlock watch <name>`: the holder at the start and at every change.
//!
//! Redis reports each change of the lock hash itself: the watch reads the hash on a
//! connection of its own with `CLIENT TRACKING ON` (RESP3, to the master that owns the
//! key: `Lock::track`), and Redis pushes an `invalidate` message at the next write, expiry
//! or deletion of it; the watch then reads again at once, which also arms the next
//! message. So holds far shorter than any poll are seen. The unlock channel would not do:
//! a release publishes only when a client waits, and an acquisition never does.
//!
//! The hash is also read every `--interval` (default 1 s), in case a report is lost with
//! its connection. A user without `+client|tracking` (or a server that refuses tracking)
//! gets a warning on stderr and only that poll: a hold shorter than it can go unseen then.
//!
//! With a RedLock config each server is watched so, and a change is any server's.

use std::time::Duration;

use dlock::{inspect::LockTracker, Lock};
use serde::Serialize;
use tokio::sync::mpsc;
use tokio::time::Instant;

use crate::args::Target;
use crate::error::CliError;
use crate::escape::shown_text;
use crate::report::{millis, print_json, HolderView};

/// One observed state of the lock.
#[derive(Serialize)]
struct Change {
    /// Milliseconds since the watch started.
    at_ms: u64,
    /// The holders (with a RedLock config: the owners holding it on a quorum of servers).
    holders: Vec<HolderView>,
    /// With a RedLock config: the owner ids each server holds, in the config's order.
    #[serde(skip_serializing_if = "Option::is_none")]
    servers: Option<Vec<Vec<String>>>,
}

/// The JSON document of `watch`.
#[derive(Serialize)]
struct Watched {
    lock: String,
    changes: Vec<Change>,
}

/// What a source reports: its index and its holders, or why it stopped.
type Report = Result<(usize, Vec<HolderView>), CliError>;

pub(crate) async fn run(
    target: &Target,
    name: &str,
    duration: Option<Duration>,
    interval: Duration,
    json: bool,
) -> Result<(), CliError> {
    let (locks, quorum): (Vec<(String, Lock)>, Option<usize>) = match target {
        Target::Client(client) => (vec![(String::new(), client.lock(name))], None),
        Target::RedLock(redlock) => (
            redlock
                .servers
                .iter()
                .map(|(shown, client)| (shown.clone(), client.lock(name)))
                .collect(),
            Some(redlock.quorum),
        ),
    };
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
    let (sender, mut reports) = mpsc::unbounded_channel();
    let followers: Vec<_> = locks
        .into_iter()
        .enumerate()
        .map(|(index, (shown, lock))| {
            let sender = sender.clone();
            tokio::spawn(async move {
                if let Err(e) = follow(index, &shown, lock, interval, &sender).await {
                    let _ = sender.send(Err(e));
                }
            })
        })
        .collect();
    drop(sender);
    let mut latest: Vec<Option<Vec<HolderView>>> = vec![None; followers.len()];
    let mut changes: Vec<Change> = Vec::new();
    let outcome = loop {
        let report = tokio::select! {
            stopped = &mut stop => break stopped,
            report = reports.recv() => report,
        };
        let (index, holders) = match report {
            Some(Ok(report)) => report,
            Some(Err(e)) => break Err(e),
            None => break Ok(()),
        };
        latest[index] = Some(holders);
        let Some(all) = latest.iter().cloned().collect::<Option<Vec<_>>>() else {
            continue; // not every server read yet
        };
        let change = state(all, quorum, millis(started.elapsed()));
        let ids = |c: &Change| {
            let holders: Vec<String> = c.holders.iter().map(|h| h.owner.id.clone()).collect();
            (holders, c.servers.clone())
        };
        if changes.last().is_some_and(|last| ids(last) == ids(&change)) {
            continue;
        }
        if !json {
            println!("{}", line(name, &change, latest.len()));
        }
        changes.push(change);
    };
    for follower in followers {
        follower.abort();
    }
    outcome?;
    if json {
        print_json(&Watched {
            lock: name.to_owned(),
            changes,
        })?;
    }
    Ok(())
}

/// Reads `lock`'s holders at the start, at each change Redis reports and every
/// `interval`, and sends them; returns when the receiver is gone.
async fn follow(
    index: usize,
    shown: &str,
    lock: Lock,
    interval: Duration,
    reports: &mpsc::UnboundedSender<Report>,
) -> Result<(), CliError> {
    let on = if shown.is_empty() {
        String::new()
    } else {
        format!(" on {shown}")
    };
    let mut tracker: Option<LockTracker> = match lock.track().await {
        Ok(tracker) => Some(tracker),
        Err(e) => {
            eprintln!(
                "dlock: warning: Redis will not report changes of {:?}{on} ({e}); reading it every {} instead, so a shorter hold can go unseen (the user needs +client|tracking)",
                lock.name(),
                humantime::format_duration(interval)
            );
            None
        }
    };
    let mut ticks = tokio::time::interval(interval);
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    ticks.tick().await; // the first tick is now
    loop {
        let holders = match &mut tracker {
            Some(tracker) => tracker.holders().await?,
            None => lock.holders().await?,
        };
        let views = holders.iter().map(HolderView::from).collect();
        if reports.send(Ok((index, views))).is_err() {
            return Ok(());
        }
        let Some(active) = &mut tracker else {
            ticks.tick().await;
            continue;
        };
        tokio::select! {
            changed = active.changed() => {
                if let Err(stopped) = changed {
                    // The connection dropped or the master moved: track on the master
                    // the client uses now, else fall back to the poll.
                    tracker = match lock.track().await {
                        Ok(tracker) => Some(tracker),
                        Err(e) => {
                            eprintln!(
                                "dlock: warning: change reports of {:?}{on} stopped ({stopped}) and cannot be resumed ({e}); reading it every {} instead",
                                lock.name(),
                                humantime::format_duration(interval)
                            );
                            None
                        }
                    };
                }
            }
            _ = ticks.tick() => {}
        }
    }
}

/// The state every source's `holders` make: the one source's holders, or with a RedLock
/// `quorum` the owners holding the lock on a quorum of servers, and each server's owners.
fn state(mut holders: Vec<Vec<HolderView>>, quorum: Option<usize>, at_ms: u64) -> Change {
    let Some(quorum) = quorum else {
        return Change {
            at_ms,
            holders: holders.pop().unwrap_or_default(),
            servers: None,
        };
    };
    let servers: Vec<Vec<String>> = holders
        .iter()
        .map(|on| on.iter().map(|h| h.owner.id.clone()).collect())
        .collect();
    let mut held: Vec<HolderView> = Vec::new();
    for holder in holders.iter().flatten() {
        let count = servers
            .iter()
            .filter(|ids| ids.contains(&holder.owner.id))
            .count();
        if count >= quorum && !held.iter().any(|h| h.owner.id == holder.owner.id) {
            held.push(holder.clone());
        }
    }
    Change {
        at_ms,
        holders: held,
        servers: Some(servers),
    }
}

/// `+12ms job: held by <holder>`, with a RedLock's server count.
fn line(name: &str, change: &Change, nodes: usize) -> String {
    let holders: Vec<String> = change.holders.iter().map(HolderView::text).collect();
    let mut state = if holders.is_empty() {
        "free".to_owned()
    } else {
        format!("held by {}", holders.join("; "))
    };
    if let Some(servers) = &change.servers {
        let holding = servers.iter().filter(|ids| !ids.is_empty()).count();
        if holders.is_empty() && holding > 0 {
            state = format!("free (no quorum; {holding} of {nodes} servers hold a lock)");
        } else if !holders.is_empty() {
            let id = &change.holders[0].owner.id;
            let on = servers.iter().filter(|ids| ids.contains(id)).count();
            state = format!("{state} (on {on} of {nodes} servers)");
        }
    }
    format!("+{}ms {}: {state}", change.at_ms, shown_text(name))
}
