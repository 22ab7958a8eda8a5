//! `dlock inspect <name>`.

use crate::args::{RedLockServers, Target};
use crate::error::CliError;
use crate::report::{print_json, LockView, RedLockView, ServerView};

pub(crate) async fn run(target: &Target, name: &str, json: bool) -> Result<(), CliError> {
    match target {
        Target::Client(client) => {
            let view = LockView::from(&client.lock(name).inspect().await?);
            if json {
                print_json(&view)
            } else {
                print!("{}", view.text());
                Ok(())
            }
        }
        Target::RedLock(redlock) => {
            let view = redlock_view(redlock, name).await?;
            if json {
                print_json(&view)
            } else {
                print!("{}", view.text());
                Ok(())
            }
        }
    }
}

/// `name` inspected on every RedLock server; a server that fails shows its error (a
/// RedLock works without a minority), unless every server fails.
pub(crate) async fn redlock_view(
    redlock: &RedLockServers,
    name: &str,
) -> Result<RedLockView, CliError> {
    let mut servers = Vec::new();
    let mut first_error = None;
    for (shown, client) in &redlock.servers {
        let (lock, error) = match client.lock(name).inspect().await {
            Ok(info) => (Some(LockView::from(&info)), None),
            Err(e) => {
                let text = e.to_string();
                first_error.get_or_insert(e);
                (None, Some(text))
            }
        };
        servers.push(ServerView {
            server: shown.clone(),
            lock,
            error,
        });
    }
    if let Some(error) = first_error.filter(|_| servers.iter().all(|s| s.lock.is_none())) {
        return Err(error.into());
    }
    Ok(RedLockView::new(name, redlock.quorum, servers))
}
