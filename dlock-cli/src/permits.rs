//! `dlock set-permits <name> <permits> [--yes]`: stores a semaphore's capacity.
//!
//! A semaphore's capacity stays in Redis while nobody holds a permit (it is what every
//! handle must agree with), so a service redeployed with another size meets
//! `LockError::CapacityMismatch` until someone changes it: this is that someone, doing
//! what `Semaphore::set_permits` does (waiters under the old capacity adopt the new one).
//! A name held as a lock of another kind is refused before anything is asked or changed;
//! a RedLock config has no semaphores.

use dlock::{inspect::LockKind, LockClient};
use serde::Serialize;

use crate::args::Target;
use crate::error::CliError;
use crate::escape::shown_text;
use crate::report::{print_json, LockView};
use crate::unlock::confirm;

/// The JSON document of `set-permits`.
#[derive(Serialize)]
struct Outcome {
    semaphore: LockView,
    confirmed: bool,
    /// The capacity stored before (`null`: none was).
    before: Option<u64>,
    /// The capacity stored now (`null` when not confirmed).
    after: Option<u64>,
}

/// Asks (unless `yes`) and stores `permits` as the semaphore's capacity; returns whether
/// the operator confirmed.
pub(crate) async fn run(
    target: &Target,
    name: &str,
    permits: u32,
    yes: bool,
    json: bool,
) -> Result<bool, CliError> {
    let Target::Client(client) = target else {
        return Err(CliError::Refused(
            "a RedLock config has no semaphores: point --config at the deployment's config"
                .to_owned(),
        ));
    };
    set(client, name, permits, yes, json).await
}

async fn set(
    client: &LockClient,
    name: &str,
    permits: u32,
    yes: bool,
    json: bool,
) -> Result<bool, CliError> {
    let info = client.lock(name).inspect().await?;
    let view = LockView::from(&info);
    let before = info.semaphore.as_ref().and_then(|sem| sem.capacity);
    // A free name inspects as a lock: only a held lock of another kind is refused.
    if info.kind != LockKind::Semaphore && !view.holders.is_empty() {
        return Err(CliError::Refused(format!(
            "{:?} is held as a {}, not a semaphore: nothing was changed",
            name,
            info.kind.as_str()
        )));
    }
    let question = format!("set the capacity of {} to {permits}", shown_text(name));
    let confirmed = yes || confirm(&view.text(), &question).await?;
    if confirmed {
        client.semaphore(name, permits).set_permits(permits).await?;
    }
    if json {
        print_json(&Outcome {
            semaphore: view,
            confirmed,
            before,
            after: confirmed.then_some(u64::from(permits)),
        })?;
    } else if confirmed {
        let before = before.map_or("none".to_owned(), |c| c.to_string());
        println!("capacity of {}: {before} -> {permits}", shown_text(name));
    } else {
        println!("not confirmed: {} left as it is", shown_text(name));
    }
    Ok(confirmed)
}
