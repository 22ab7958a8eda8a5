//! `dlock force-unlock <name> [--yes]`.
//!
//! Only locks and fair locks have a force-unlock (`Lock::force_unlock`,
//! `FairLock::force_unlock`). A read-write lock or a semaphore is refused with the reason
//! before anything is asked or changed: neither has a force-unlock that would tell its
//! waiting writers or the semaphore's waiters (and `Lock::force_unlock` refuses a name
//! held as another kind of lock).

use dlock::{inspect::LockKind, LockClient};
use serde::Serialize;
use tokio::io::{AsyncBufReadExt, BufReader};

use crate::args::{RedLockServers, Target};
use crate::error::CliError;
use crate::escape::shown_text;
use crate::inspect::redlock_view;
use crate::report::{print_json, shown, LockView, RedLockView};

/// The JSON document of `force-unlock`.
#[derive(Serialize)]
struct Outcome<T> {
    lock: T,
    confirmed: bool,
    /// Whether a lock was deleted (false when it was free, or not confirmed); with a
    /// RedLock config, on at least one server.
    unlocked: bool,
    /// With a RedLock config: on how many servers a lock was deleted.
    #[serde(skip_serializing_if = "Option::is_none")]
    servers_unlocked: Option<usize>,
}

/// Asks (unless `yes`) and force-unlocks; returns whether the operator confirmed.
pub(crate) async fn run(
    target: &Target,
    name: &str,
    yes: bool,
    json: bool,
) -> Result<bool, CliError> {
    match target {
        Target::Client(client) => one(client, name, yes, json).await,
        Target::RedLock(redlock) => every_server(redlock, name, yes, json).await,
    }
}

async fn one(client: &LockClient, name: &str, yes: bool, json: bool) -> Result<bool, CliError> {
    let info = client.lock(name).inspect().await?;
    let view = LockView::from(&info);
    refuse_other_kinds(&view)?;
    let question = format!("force-unlock {}", shown_text(name));
    let confirmed = yes || confirm(&view.text(), &question).await?;
    let unlocked = if !confirmed {
        false
    } else if info.kind == LockKind::Fair {
        // A fair lock's force-unlock also wakes the head of its queue.
        client.fair_lock(name).force_unlock().await?
    } else {
        client.lock(name).force_unlock().await?
    };
    if json {
        print_json(&Outcome {
            lock: view,
            confirmed,
            unlocked,
            servers_unlocked: None,
        })?;
    } else {
        report(name, confirmed, unlocked, "");
    }
    Ok(confirmed)
}

async fn every_server(
    redlock: &RedLockServers,
    name: &str,
    yes: bool,
    json: bool,
) -> Result<bool, CliError> {
    let view: RedLockView = redlock_view(redlock, name).await?;
    for lock in view.servers.iter().filter_map(|s| s.lock.as_ref()) {
        refuse_other_kinds(lock)?;
    }
    let question = format!("force-unlock {}", shown_text(name));
    let confirmed = yes || confirm(&view.text(), &question).await?;
    let mut deleted = 0;
    if confirmed {
        for (_, client) in &redlock.servers {
            if client.lock(name).force_unlock().await? {
                deleted += 1;
            }
        }
    }
    if json {
        print_json(&Outcome {
            lock: view,
            confirmed,
            unlocked: deleted > 0,
            servers_unlocked: Some(deleted),
        })?;
    } else {
        let on = format!(" on {deleted} of {} servers", redlock.servers.len());
        report(name, confirmed, deleted > 0, &on);
    }
    Ok(confirmed)
}

fn report(name: &str, confirmed: bool, unlocked: bool, on: &str) {
    let name = shown_text(name);
    match (confirmed, unlocked) {
        (false, _) => println!("not confirmed: {name} left as it is"),
        (true, true) => println!("force-unlocked {name}{on}"),
        (true, false) => println!("{name} was not locked: nothing to do"),
    }
}

/// A read-write lock or a semaphore has no force-unlock: say so, and what to do.
fn refuse_other_kinds(view: &LockView) -> Result<(), CliError> {
    let what = match view.kind {
        "read_write" => "a read-write lock",
        "semaphore" => "a semaphore",
        _ => return Ok(()),
    };
    let left = view.remaining_lease_ms.map_or(String::new(), |ms| {
        format!(" (its lease ends in {})", shown(ms))
    });
    Err(CliError::Refused(format!(
        "{:?} is {what}, which has no force-unlock: nothing was changed. Stop its holders, or wait for their leases to run out{left}",
        view.name
    )))
}

/// Shows the lock (`text`) on stderr and asks `question`; only `y` or `yes` confirms.
pub(crate) async fn confirm(text: &str, question: &str) -> Result<bool, CliError> {
    eprint!("{text}{question}? [y/N] ");
    let mut answer = String::new();
    BufReader::new(tokio::io::stdin())
        .read_line(&mut answer)
        .await
        .map_err(|source| CliError::Io {
            what: "reading the confirmation from stdin",
            source,
        })?;
    Ok(matches!(
        answer.trim().to_ascii_lowercase().as_str(),
        "y" | "yes"
    ))
}
