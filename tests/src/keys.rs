//! dlock's Redis names for a lock, and what they hold, read the way dlock's scripts read
//! them (docs/LAYOUT.md): a test reads a lock's holders, marks, registry and naps here,
//! never by parsing the hash by hand, so that a field added beside a hold (a grant's
//! `!next`, a `min_hold`'s `!held`, a fencing token) never breaks a test that counts holds.
//!
//! Names are built for a lock name with a hash tag (`{goods}:1`), whose helpers hash by
//! that tag; an untagged name's helpers take a computed anchor, which tests need not know.

use std::collections::{BTreeMap, HashMap};
use std::time::{Duration, Instant};

/// The Redis names of one lock.
#[derive(Debug, Clone)]
pub struct LockKeys {
    /// The lock hash: key prefix + lock name.
    pub key: String,
    /// The waiter registry (owner → registration time in µs), which is also the name of
    /// the lock's unlock channel.
    pub registry: String,
    /// What the lock's waiters were told they may sleep until (owner → server ms).
    pub naps: String,
    /// The fencing-token counter of the lock's slot anchor.
    pub fence: String,
    /// `<key prefix>{tag}`.
    scope: String,
    /// The lock name.
    name: String,
}

impl LockKeys {
    /// The names of the lock `name` of a client with key prefix `prefix`.
    ///
    /// # Panics
    ///
    /// When `name` has no hash tag.
    pub fn new(prefix: &str, name: &str) -> LockKeys {
        let open = name.find('{').expect("a lock name with a hash tag");
        let close = open + name[open..].find('}').expect("a closed hash tag");
        assert!(close > open + 1, "an empty hash tag in {name:?}");
        let scope = format!("{prefix}{}", &name[open..=close]);
        LockKeys {
            key: format!("{prefix}{name}"),
            registry: format!("dlock:unlock:{scope}:{name}"),
            naps: format!("dlock:unlock:{scope}!{name}"),
            fence: format!("dlock:fence:{scope}"),
            scope,
            name: name.to_owned(),
        }
    }

    /// The channel on which the lock's messages for the waiters of `client_id` arrive.
    pub fn wake_channel(&self, client_id: &str) -> String {
        format!("dlock:unlock:{}#{client_id}:{}", self.scope, self.name)
    }
}

/// The owners holding the lock hash `key` and their hold counts; marks (`!next`,
/// `!held`, `!fair`, `mode`…) and fencing tokens (`<owner>:f`) are left out.
///
/// # Panics
///
/// When Redis fails, or a hold count is not a number.
pub fn holders(conn: &mut redis::Connection, key: &str) -> HashMap<String, u32> {
    fields(conn, key)
        .into_iter()
        .filter(|(field, _)| is_owner(field))
        .map(|(field, count)| {
            let count = count
                .parse()
                .unwrap_or_else(|_| panic!("hold count of {field} in {key}: {count:?}"));
            (field, count)
        })
        .collect()
}

/// The marks of the lock hash `key` (its fields starting with `!`), e.g. `!next` → the
/// owner a release passed the lock to.
pub fn marks(conn: &mut redis::Connection, key: &str) -> BTreeMap<String, String> {
    fields(conn, key)
        .into_iter()
        .filter(|(field, _)| field.starts_with('!'))
        .collect()
}

/// The owners registered as waiting in `registry`, longest-waiting first.
pub fn registered(conn: &mut redis::Connection, registry: &str) -> Vec<String> {
    redis::cmd("ZRANGE")
        .arg(registry)
        .arg(0)
        .arg(-1)
        .query(conn)
        .expect("ZRANGE of a registry")
}

/// The owners with a promise in the naps set `naps`.
pub fn napping(conn: &mut redis::Connection, naps: &str) -> Vec<String> {
    registered(conn, naps)
}

/// Whether `key` exists.
pub fn exists(conn: &mut redis::Connection, key: &str) -> bool {
    redis::cmd("EXISTS")
        .arg(key)
        .query::<bool>(conn)
        .expect("EXISTS")
}

/// How long `key` took to be gone (asked every 2 ms); `None` when it is still there
/// after `limit`.
///
/// # Panics
///
/// When Redis fails.
pub async fn gone_within(
    conn: &mut redis::Connection,
    key: &str,
    limit: Duration,
) -> Option<Duration> {
    let started = Instant::now();
    while exists(conn, key) {
        if started.elapsed() >= limit {
            return None;
        }
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
    Some(started.elapsed())
}

fn fields(conn: &mut redis::Connection, key: &str) -> BTreeMap<String, String> {
    redis::cmd("HGETALL")
        .arg(key)
        .query(conn)
        .unwrap_or_else(|e| panic!("HGETALL {key}: {e}"))
}

/// An owner field: `<client id>:<number>`.
fn is_owner(field: &str) -> bool {
    field.split_once(':').is_some_and(|(client, n)| {
        !client.is_empty() && !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit())
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_tagged_name_keeps_its_tag_in_every_helper() {
        let keys = LockKeys::new("shop:", "{goods}:1");
        assert_eq!(keys.key, "shop:{goods}:1");
        assert_eq!(keys.registry, "dlock:unlock:shop:{goods}:{goods}:1");
        assert_eq!(keys.naps, "dlock:unlock:shop:{goods}!{goods}:1");
        assert_eq!(keys.fence, "dlock:fence:shop:{goods}");
        assert_eq!(
            keys.wake_channel("c1"),
            "dlock:unlock:shop:{goods}#c1:{goods}:1"
        );
    }
}
