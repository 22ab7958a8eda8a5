//! `dlock force-unlock <name> [--yes]`.

use dlock_core::LockClient;
use serde::Serialize;
use tokio::io::{AsyncBufReadExt, BufReader};

use crate::error::CliError;
use crate::report::{print_json, LockView};

/// The JSON document of `force-unlock`.
#[derive(Serialize)]
struct Outcome {
    lock: LockView,
    confirmed: bool,
    /// Whether a lock was deleted (false when it was free, or not confirmed).
    unlocked: bool,
}

pub async fn run(client: &LockClient, name: &str, yes: bool, json: bool) -> Result<(), CliError> {
    let info = client.lock(name).inspect().await?;
    let view = LockView::from(&info);
    let confirmed = yes || confirm(&view).await?;
    let unlocked = if !confirmed {
        false
    } else if info.fair_queue.is_empty() {
        client.lock(name).force_unlock().await?
    } else {
        // A fair lock's force-unlock also wakes the head of its queue.
        client.fair_lock(name).force_unlock().await?
    };
    if json {
        return print_json(&Outcome {
            lock: view,
            confirmed,
            unlocked,
        });
    }
    match (confirmed, unlocked) {
        (false, _) => println!("not confirmed: {name} left as it is"),
        (true, true) => println!("force-unlocked {name}"),
        (true, false) => println!("{name} was not locked: nothing to do"),
    }
    Ok(())
}

/// Shows the lock on stderr and asks; only `y` or `yes` confirms.
async fn confirm(view: &LockView) -> Result<bool, CliError> {
    eprint!("{}force-unlock {}? [y/N] ", view.text(), view.name);
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
