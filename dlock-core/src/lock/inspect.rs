//! [`Lock::inspect`] and [`LockClient::list_locks`]: what Redis holds for a lock, read
//! with read-only commands, for operators (the `dlock` command-line tool) and tests.
//!
//! The names come from `names.rs`, so a tool built on this never spells dlock's layout
//! itself: the lock hash (owner field `<client id>:<n>` → hold count, `<owner>:f` →
//! fencing token, `!next` → the client a release reserved the lock for), the waiter
//! registry (a sorted set named like the unlock channel), the unlock channel's
//! subscribers, the fair lock's queue, the fencing-token counter and each client's
//! description (`client::registration`).

use std::collections::HashMap;
use std::time::Duration;

use futures_util::future::try_join_all;

use super::Lock;
use crate::client::{ClientDescription, LockClient};
use crate::error::{LockError, Result};
use crate::names::{check_text, client_key, FairKeys};

/// A snapshot of one lock in Redis, from [`Lock::inspect`]. Each part is read by its own
/// command, so a lock that changes meanwhile may show parts of two moments.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct LockInfo {
    /// The lock name (without the key prefix).
    pub name: String,
    /// The Redis key of the lock hash.
    pub key: String,
    /// Who holds the lock: one entry per owner (a reentrant lock has at most one).
    pub holders: Vec<LockHolder>,
    /// Time until the lock expires; `None` when nobody holds it.
    pub remaining_lease: Option<Duration>,
    /// The client a release reserved the free lock for (for 100 ms), if any.
    pub reserved_for: Option<LockClientRef>,
    /// The clients registered as waiting for the lock, longest-waiting first.
    pub waiting_clients: Vec<LockClientRef>,
    /// How many connections listen on the lock's unlock channel: one per waiting client
    /// (a client's waiters share its subscription), plus any watchers.
    pub subscribers: u64,
    /// A fair lock's queue of waiting tasks, in order: each entry's owner field and
    /// client. Empty for other locks.
    pub fair_queue: Vec<LockClientRef>,
    /// The last fencing token minted for this lock's counter, which every lock name with
    /// the same cluster slot anchor shares; `None` before the first one.
    pub fencing_counter: Option<u64>,
}

/// One owner of a lock, in [`LockInfo::holders`].
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct LockHolder {
    /// The owner field (`<client id>:<n>`) and its client.
    pub owner: LockClientRef,
    /// How many holds the owner has (re-entries count).
    pub holds: u64,
    /// The fencing token of the owner's hold, when its client minted one.
    pub fence: Option<u64>,
}

/// An id found in a lock (an owner field or a client id) and the description its client
/// registered, when it is still there.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct LockClientRef {
    /// The id as Redis holds it.
    pub id: String,
    /// The client id in it (the part before the first `:`).
    pub client_id: String,
    /// What the client says about itself; `None` when it never registered (a user
    /// without the `dlock:client:` key pattern) or is gone.
    pub client: Option<ClientDescription>,
}

/// The lock hash's fields, sorted into their meanings.
#[derive(Default)]
struct Fields {
    holds: Vec<(String, u64)>,
    fences: HashMap<String, u64>,
    reserved_for: Option<String>,
}

/// The hash field that reserves a free lock for one client.
const RESERVATION: &str = "!next";

impl Fields {
    /// Sorts `hash` (from `HGETALL`) into holds, fences and the reservation; `None` when
    /// a field fits none of them (not a lock of this layout: a read-write lock, say).
    fn parse(hash: HashMap<String, String>) -> Option<Fields> {
        let mut fields = Fields::default();
        for (field, value) in hash {
            if field == RESERVATION {
                fields.reserved_for = Some(value);
            } else if let Some(owner) = field.strip_suffix(":f").filter(|o| is_owner(o)) {
                fields.fences.insert(owner.to_owned(), value.parse().ok()?);
            } else if is_owner(&field) {
                fields.holds.push((field, value.parse().ok()?));
            } else {
                return None;
            }
        }
        fields.holds.sort();
        Some(fields)
    }
}

/// Whether `field` is an owner field: `<client id>:<number>`.
fn is_owner(field: &str) -> bool {
    field.split_once(':').is_some_and(|(client, n)| {
        !client.is_empty() && !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit())
    })
}

impl Lock {
    /// What Redis holds for this lock now: holders with their hold counts, fencing
    /// tokens and clients, the remaining lease, the waiting clients, the subscribers of
    /// the unlock channel, a fair lock's queue and the fencing counter. Read-only
    /// (`TYPE`, `HGETALL`, `PTTL`, `ZRANGE`, `PUBSUB NUMSUB` or `SHARDNUMSUB`, `GET`).
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> dlock_core::Result<()> {
    /// # let server = dlock_tests::RedisServer::start();
    /// let client = dlock_core::LockClient::builder()
    ///     .client_name("billing")
    ///     .connect(&server.url())
    ///     .await?;
    /// let lock = client.lock("invoice:7");
    /// let guard = lock.lock().await?;
    /// # tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    /// let info = lock.inspect().await?;
    /// assert_eq!(info.holders[0].holds, 1);
    /// let holder = info.holders[0].owner.client.as_ref().map(|c| c.name.as_str());
    /// assert_eq!(holder, Some("billing"));
    /// guard.unlock().await?;
    /// assert!(lock.inspect().await?.holders.is_empty());
    /// # Ok(())
    /// # }
    /// ```
    ///
    /// # Errors
    ///
    /// [`LockError::WrongType`] when the key holds something other than a lock of this
    /// layout (application data, a read-write lock); Redis errors.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: it only reads.
    pub async fn inspect(&self) -> Result<LockInfo> {
        let fields = self.fields().await?;
        let keys = self.keys();
        let remaining_lease = self.remaining_lease().await?;
        let waiting: Vec<String> = self
            .query(
                "inspect",
                redis::cmd("ZRANGE").arg(&keys.channel).arg(0).arg(-1),
            )
            .await?;
        let fair = FairKeys::new(self.client().key_prefix(), self.name());
        let queued: Vec<String> = self
            .query(
                "inspect",
                redis::cmd("ZRANGE").arg(&fair.queue).arg(0).arg(-1),
            )
            .await?;
        let numsub = if self.client().inner.backend.is_cluster() {
            "SHARDNUMSUB"
        } else {
            "NUMSUB"
        };
        let subscribers: HashMap<String, u64> = self
            .client()
            .inner
            .backend
            .query_in_slot_of(
                redis::cmd("PUBSUB").arg(numsub).arg(&keys.channel),
                &keys.channel,
            )
            .await
            .map_err(|e| e.into_lock_error(self.name(), "inspect"))?;
        let fencing_counter: Option<u64> = self
            .query("inspect", redis::cmd("GET").arg(&keys.fence))
            .await?;
        let client = self.client();
        let describe = |id: String| async move { client.describe(id).await };
        let reserved_for = fields.reserved_for.clone();
        let holders = self.described(fields).await?;
        Ok(LockInfo {
            name: self.name().to_owned(),
            key: keys.key.clone(),
            holders,
            remaining_lease,
            reserved_for: match reserved_for {
                Some(id) => Some(describe(id).await?),
                None => None,
            },
            waiting_clients: try_join_all(waiting.into_iter().map(describe)).await?,
            subscribers: subscribers.values().sum(),
            fair_queue: try_join_all(queued.into_iter().map(describe)).await?,
            fencing_counter,
        })
    }
}

impl Lock {
    /// Who holds the lock now ([`LockInfo::holders`] alone): the one read a watcher
    /// repeats, `TYPE` and `HGETALL` and a `GET` of each holder's description.
    ///
    /// # Errors
    ///
    /// As for [`inspect`](Lock::inspect).
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: it only reads.
    pub async fn holders(&self) -> Result<Vec<LockHolder>> {
        let fields = self.fields().await?;
        self.described(fields).await
    }

    /// The lock hash's fields, sorted; a key of another type or layout is `WrongType`.
    async fn fields(&self) -> Result<Fields> {
        self.check_name()?;
        let key = &self.keys().key;
        let found: String = self.query("inspect", redis::cmd("TYPE").arg(key)).await?;
        if found != "hash" && found != "none" {
            return Err(self.wrong_type(found));
        }
        let hash: HashMap<String, String> = self
            .query("inspect", redis::cmd("HGETALL").arg(key))
            .await?;
        Fields::parse(hash).ok_or_else(|| self.wrong_type("hash".to_owned()))
    }

    /// The holders in `fields`, each with its client's description.
    async fn described(&self, fields: Fields) -> Result<Vec<LockHolder>> {
        let client = self.client();
        try_join_all(fields.holds.into_iter().map(|(owner, holds)| {
            let fence = fields.fences.get(&owner).copied();
            async move {
                Ok::<_, LockError>(LockHolder {
                    owner: client.describe(owner).await?,
                    holds,
                    fence,
                })
            }
        }))
        .await
    }
}

impl LockClient {
    /// The names (without the key prefix) of the locks whose name starts with
    /// `name_prefix`, sorted: every hash under this client's key prefix laid out as a
    /// lock or a fair lock (read-write locks and semaphores have other layouts), found
    /// with `SCAN` on every master of the deployment (never `KEYS`, which would block
    /// Redis) and read with `HGETALL`. A lock taken or released meanwhile may or may not
    /// be listed.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> dlock_core::Result<()> {
    /// # let server = dlock_tests::RedisServer::start();
    /// # let client = dlock_core::LockClient::connect(&server.url()).await?;
    /// let guard = client.lock("invoice:7").lock().await?;
    /// let _other = client.lock("stock:1").lock().await?;
    /// assert_eq!(client.list_locks("invoice:").await?, ["invoice:7"]);
    /// # guard.unlock().await?;
    /// # Ok(())
    /// # }
    /// ```
    ///
    /// # Errors
    ///
    /// [`LockError::InvalidName`] for a prefix over [`MAX_NAME_LEN`](crate::MAX_NAME_LEN)
    /// bytes or with a control character; Redis errors.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: it only reads.
    pub async fn list_locks(&self, name_prefix: &str) -> Result<Vec<String>> {
        check_text("name prefix", name_prefix)?;
        let prefix = self.key_prefix();
        let pattern = format!("{}*", glob_escape(&format!("{prefix}{name_prefix}")));
        let backend = &self.inner.backend;
        let keys = backend
            .scan(&pattern, "hash")
            .await
            .map_err(|e| e.into_lock_error(name_prefix, "list"))?;
        let mut names = Vec::new();
        for key in keys {
            let hash: HashMap<String, String> = backend
                .query(redis::cmd("HGETALL").arg(&key))
                .await
                .map_err(|e| e.into_lock_error(&key, "list"))?;
            // Gone since the scan, or someone else's hash.
            if hash.is_empty() || Fields::parse(hash).is_none() {
                continue;
            }
            if let Some(name) = key.strip_prefix(prefix) {
                names.push(name.to_owned());
            }
        }
        Ok(names)
    }

    /// `id` (an owner field or a client id) with the description its client registered.
    async fn describe(&self, id: String) -> Result<LockClientRef> {
        let client_id = id
            .split_once(':')
            .map_or(id.as_str(), |(c, _)| c)
            .to_owned();
        let key = client_key(self.key_prefix(), &client_id);
        let text: Option<String> = self
            .inner
            .backend
            .query(redis::cmd("GET").arg(&key))
            .await
            .map_err(|e| e.into_lock_error(&key, "inspect"))?;
        Ok(LockClientRef {
            client: text.as_deref().and_then(ClientDescription::decode),
            id,
            client_id,
        })
    }
}

/// `text` with the glob characters of `SCAN MATCH` escaped, so that it matches itself.
fn glob_escape(text: &str) -> String {
    let mut escaped = String::with_capacity(text.len());
    for c in text.chars() {
        if matches!(c, '*' | '?' | '[' | ']' | '\\') {
            escaped.push('\\');
        }
        escaped.push(c);
    }
    escaped
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lock_fields_are_sorted_into_holds_fences_and_the_reservation() {
        let hash = HashMap::from([
            ("c1:1".to_owned(), "2".to_owned()),
            ("c1:1:f".to_owned(), "17".to_owned()),
            ("!next".to_owned(), "c2".to_owned()),
        ]);
        let fields = Fields::parse(hash).unwrap();
        assert_eq!(fields.holds, [("c1:1".to_owned(), 2)]);
        assert_eq!(fields.fences.get("c1:1"), Some(&17));
        assert_eq!(fields.reserved_for.as_deref(), Some("c2"));
        for foreign in [
            ("mode", "read"),
            ("c1:1:w", "1"),
            ("c1:x", "1"),
            ("c1:1", "x"),
        ] {
            let hash = HashMap::from([(foreign.0.to_owned(), foreign.1.to_owned())]);
            assert!(Fields::parse(hash).is_none(), "{foreign:?}");
        }
    }

    #[test]
    fn glob_characters_are_escaped() {
        assert_eq!(glob_escape("a*b?[c]\\"), "a\\*b\\?\\[c\\]\\\\");
    }
}
