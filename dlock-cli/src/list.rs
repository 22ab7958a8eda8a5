//! `dlock list [--prefix P]`.

use dlock::{LockClient, LockError};
use serde::Serialize;

use crate::args::{RedLockServers, Target};
use crate::error::CliError;
use crate::inspect::redlock_view;
use crate::report::{print_json, LockView, RedLockView};

/// The JSON document of `list`.
#[derive(Serialize)]
struct Listing<T> {
    prefix: String,
    locks: Vec<T>,
    /// Keys under the prefix that no lock can have made (a name or a hash field that is
    /// not UTF-8, control characters, over the length limit): counted, not shown, so that
    /// one of them cannot stop the listing.
    skipped: usize,
}

pub(crate) async fn run(target: &Target, prefix: &str, json: bool) -> Result<(), CliError> {
    let lines = match target {
        Target::Client(client) => {
            let (locks, skipped) = locks(client, prefix).await?;
            if json {
                return print_json(&Listing {
                    prefix: prefix.to_owned(),
                    locks,
                    skipped,
                });
            }
            if skipped > 0 {
                eprintln!("dlock: skipped {skipped} key(s) under the prefix that no lock can have written");
            }
            locks.iter().map(LockView::line).collect::<Vec<_>>()
        }
        Target::RedLock(redlock) => {
            let locks = redlocks(redlock, prefix).await?;
            if json {
                return print_json(&Listing {
                    prefix: prefix.to_owned(),
                    locks,
                    skipped: 0,
                });
            }
            locks.iter().map(RedLockView::line).collect()
        }
    };
    if lines.is_empty() {
        println!("no locks whose name starts with {prefix:?}");
    }
    for line in lines {
        println!("{line}");
    }
    Ok(())
}

/// The locks under `prefix`, and how many keys there could not be read as one.
async fn locks(client: &LockClient, prefix: &str) -> Result<(Vec<LockView>, usize), CliError> {
    let listing = client.lock_listing(prefix).await?;
    let (mut locks, mut skipped) = (Vec::new(), listing.skipped);
    for name in listing.names {
        match client.lock(&name).inspect().await {
            Ok(info) => locks.push(LockView::from(&info)),
            // Replaced by something else since the scan: not a lock any more.
            Err(LockError::WrongType { .. }) => {}
            // A key no lock name can have made (written by something else).
            Err(LockError::InvalidName { .. }) => skipped += 1,
            Err(e) => return Err(e.into()),
        }
    }
    Ok((locks, skipped))
}

/// The names found on any RedLock server, each inspected on every server.
async fn redlocks(redlock: &RedLockServers, prefix: &str) -> Result<Vec<RedLockView>, CliError> {
    let mut names = Vec::new();
    let mut listed = 0;
    let mut first_error = None;
    for (_, client) in &redlock.servers {
        // A server that cannot be listed shows as an error in each lock's view, unless
        // no server could be listed.
        match client.list_locks(prefix).await {
            Ok(found) => {
                names.extend(found);
                listed += 1;
            }
            Err(e) => {
                first_error.get_or_insert(e);
            }
        }
    }
    if let Some(error) = first_error.filter(|_| listed == 0) {
        return Err(error.into());
    }
    names.sort();
    names.dedup();
    let mut views = Vec::new();
    for name in names {
        views.push(redlock_view(redlock, &name).await?);
    }
    Ok(views)
}
