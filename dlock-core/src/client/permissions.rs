//! What the client's Redis user may run, checked on connect: every command dlock's
//! scripts call (a script runs with its caller's rights), and the ones the client sends
//! itself that a rule may leave out. A missing one would otherwise show only when a script
//! reaches it, half-way: a grant that wrote its hold and then was refused `PEXPIREAT`
//! leaves a hold that never expires, and one refused `PUBSUB NUMSUB` has popped the waiter
//! it never tells. So a client whose user lacks any of them refuses to start, naming each.
//!
//! The list is read off the scripts themselves (`redis.call('…'`), so it cannot fall
//! behind them; the server's ACL answers for each without running it
//! (`redis.acl_check_cmd`, in the `client_probe` script).

use std::collections::BTreeSet;

use crate::client::layout::layout_key;
use crate::error::{LockError, Result};
use crate::redis::Backend;
use crate::scripts::catalog::client::client_scripts;
use crate::scripts::catalog::every_script;

/// Fails with [`LockError::MissingCommands`] when the user of `backend` may not run a
/// command dlock needs there (with `replica_acks`, `WAIT` too).
pub(crate) async fn check(backend: &Backend, key_prefix: &str, replica_acks: bool) -> Result<()> {
    let needed = needed(backend.is_cluster(), replica_acks);
    let key = layout_key(key_prefix);
    // A key and a channel in the client's own patterns (a memo's, a wake channel's): the
    // check also asks about the arguments, which must be ones the client uses.
    let probe_key = format!("dlock:release:{key_prefix}{{dlock}}:probe");
    let probe_channel = format!("dlock:unlock:{key_prefix}{{dlock}}#probe:probe");
    let mut call = client_scripts().probe.prepare_invoke();
    call.key(&key);
    for command in &needed {
        let Some(args) = arguments(command) else {
            // A command no check is written for yet (the unit test below catches it).
            continue;
        };
        call.arg(args.len() + 1).arg(command.as_str());
        for arg in args {
            call.arg(match *arg {
                KEY => probe_key.as_str(),
                CHANNEL => probe_channel.as_str(),
                word => word,
            });
        }
    }
    let missing: Vec<String> = backend
        .invoke(&call)
        .await
        .map_err(|e| e.into_lock_error(&key, "check the commands its user may run, keyed by"))?;
    if missing.is_empty() {
        return Ok(());
    }
    Err(LockError::MissingCommands {
        address: backend.shown().to_owned(),
        missing,
    })
}

/// The commands to ask about: every command the scripts call by name, the publish command
/// and subscriber count of the deployment (sharded in a cluster), and `WAIT`.
fn needed(cluster: bool, replica_acks: bool) -> BTreeSet<String> {
    let (publish, numsub) = if cluster {
        ("spublish", "pubsub|shardnumsub")
    } else {
        ("publish", "pubsub|numsub")
    };
    let mut needed: BTreeSet<String> = every_script()
        .flat_map(|script| called_by_name(script.code()))
        .map(str::to_ascii_lowercase)
        .map(|command| match command.as_str() {
            "pubsub" => numsub.to_owned(),
            _ => command,
        })
        .collect();
    needed.insert(publish.to_owned());
    if replica_acks {
        needed.insert("wait".to_owned());
    }
    needed
}

/// Where a check takes the client's key and channel.
const KEY: &str = "<key>";
const CHANNEL: &str = "<channel>";

/// The arguments `command` is checked with: as many as it takes (the check reads them as
/// the command would, and Redis 7.0.15 was seen to crash on a keyed command checked
/// without its arguments), a key or a channel where the command names one.
fn arguments(command: &str) -> Option<&'static [&'static str]> {
    Some(match command {
        "time" => &[],
        "del" | "exists" | "get" | "hgetall" | "hkeys" | "hlen" | "incr" | "pttl" | "type"
        | "zpopmin" => &[KEY],
        "hdel" | "hexists" | "hget" | "hmget" | "zrem" | "zscore" => &[KEY, "x"],
        "incrby" | "pexpire" | "pexpireat" | "set" => &[KEY, "1"],
        "hset" | "hincrby" | "zadd" | "zcount" | "zrange" | "zrangebyscore" => &[KEY, "1", "1"],
        "publish" | "spublish" => &[CHANNEL, "x"],
        "pubsub|numsub" | "pubsub|shardnumsub" => &[CHANNEL],
        "wait" => &["0", "0"],
        _ => return None,
    })
}

/// The commands a script calls by name: the literal first argument of each `redis.call`
/// and `redis.pcall` (the publish command, passed in a variable, is not among them).
fn called_by_name(code: &str) -> impl Iterator<Item = &str> {
    ["redis.call('", "redis.pcall('"]
        .into_iter()
        .flat_map(move |opening| {
            code.match_indices(opening)
                .map(move |(at, _)| at + opening.len())
        })
        .filter_map(move |start| {
            let name = &code[start..];
            name.find('\'').map(|end| &name[..end])
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_commands_are_read_off_the_scripts() {
        let single = needed(false, false);
        for command in [
            "hset",
            "pexpireat",
            "zpopmin",
            "time",
            "publish",
            "pubsub|numsub",
        ] {
            assert!(single.contains(command), "{command}: {single:?}");
        }
        assert!(!single.contains("pubsub") && !single.contains("wait"));
        let cluster = needed(true, true);
        for command in ["spublish", "pubsub|shardnumsub", "wait"] {
            assert!(cluster.contains(command), "{command}: {cluster:?}");
        }
        assert!(!cluster.contains("publish"));
        // Every command asked about has its check's arguments.
        for command in single.iter().chain(&cluster) {
            assert!(
                arguments(command).is_some(),
                "no check written for {command}"
            );
        }
        assert_eq!(
            called_by_name("redis.call('hset', k) redis.pcall('hget', k) redis.call(x)")
                .collect::<Vec<_>>(),
            ["hset", "hget"]
        );
    }
}
