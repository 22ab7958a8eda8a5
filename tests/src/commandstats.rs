//! How many times a server ran each command, from `INFO commandstats`: the oracle of the
//! tests that count what dlock sends (scripts' inner commands are counted too).

use std::collections::HashMap;

/// Calls per command name (lower case, e.g. `evalsha`, `pexpire`, `client|list`).
pub fn parse_command_calls(commandstats: &str) -> HashMap<String, u64> {
    commandstats
        .lines()
        .filter_map(|line| {
            let (name, rest) = line.strip_prefix("cmdstat_")?.split_once(':')?;
            let calls = rest.split(',').find_map(|kv| kv.strip_prefix("calls="))?;
            Some((name.to_owned(), calls.parse().ok()?))
        })
        .collect()
}

/// [`parse_command_calls`] of the server behind `conn`.
///
/// # Panics
///
/// If `INFO` fails.
pub fn command_calls(conn: &mut impl redis::ConnectionLike) -> HashMap<String, u64> {
    let info: String = redis::cmd("INFO")
        .arg("commandstats")
        .query(conn)
        .expect("INFO commandstats");
    parse_command_calls(&info)
}

/// Polls the server behind `conn` every 5 ms until its command counts satisfy `done`: a
/// test waits for work dlock sends in the background (a waiter's tries and checks).
/// A point to wait for, not a bound on how fast it comes: a loaded machine takes seconds
/// for thousands of waiters' checks.
///
/// # Panics
///
/// After 30 s without it, with `what` and the last counts.
pub async fn wait_for_calls(
    conn: &mut impl redis::ConnectionLike,
    what: &str,
    done: impl Fn(&HashMap<String, u64>) -> bool,
) {
    let started = std::time::Instant::now();
    loop {
        let calls = command_calls(conn);
        if done(&calls) {
            return;
        }
        assert!(
            started.elapsed() < std::time::Duration::from_secs(30),
            "waited 30 s for {what}: {calls:?}"
        );
        tokio::time::sleep(std::time::Duration::from_millis(5)).await;
    }
}

#[cfg(test)]
mod tests {
    use super::parse_command_calls;

    #[test]
    fn reads_calls_per_command() {
        let info = "# Commandstats\r\ncmdstat_evalsha:calls=12,usec=340,usec_per_call=28.33,rejected_calls=0,failed_calls=1\r\ncmdstat_client|list:calls=2,usec=9\r\n";
        let calls = parse_command_calls(info);
        assert_eq!(calls["evalsha"], 12);
        assert_eq!(calls["client|list"], 2);
        assert_eq!(calls.len(), 2);
    }
}
