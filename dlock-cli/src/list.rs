//! `dlock list [--prefix P]`.

use dlock_core::{LockClient, LockError};
use serde::Serialize;

use crate::error::CliError;
use crate::report::{print_json, LockView};

/// The JSON document of `list`.
#[derive(Serialize)]
struct Listing {
    prefix: String,
    locks: Vec<LockView>,
}

pub async fn run(client: &LockClient, prefix: &str, json: bool) -> Result<(), CliError> {
    let mut locks = Vec::new();
    for name in client.list_locks(prefix).await? {
        match client.lock(&name).inspect().await {
            Ok(info) => locks.push(LockView::from(&info)),
            // Replaced by something else since the scan: not a lock any more.
            Err(LockError::WrongType { .. }) => {}
            Err(e) => return Err(e.into()),
        }
    }
    if json {
        return print_json(&Listing {
            prefix: prefix.to_owned(),
            locks,
        });
    }
    if locks.is_empty() {
        println!("no locks whose name starts with {prefix:?}");
    }
    for lock in &locks {
        println!("{}", lock.line());
    }
    Ok(())
}
