//! [`LockClient::list_locks`]: the lock names under the client's key prefix, by `SCAN`, and
//! the description of a client id found in a lock.

use std::collections::HashMap;

use super::layout::Layout;
use super::Participant;
use crate::client::registration::client_key;
use crate::client::{ClientDescription, LockClient};
use crate::error::Result;
use crate::names::{check_text, glob_escape};
use crate::semaphore::keys::SemKeys;

impl LockClient {
    /// The names (without the key prefix) of the locks whose name starts with
    /// `name_prefix`, sorted: every hash under this client's key prefix laid out as a
    /// lock, a fair lock or a read-write lock, and every semaphore (its capacity key, which
    /// stays while no permit is held), found with `SCAN` on every master of the
    /// deployment (never `KEYS`, which would block Redis) and read with `HGETALL`. A lock
    /// taken or released meanwhile may or may not be listed; a name used by a lock and a
    /// semaphore at once is listed once. Keys that cannot be a lock's (a name or a field
    /// that is not UTF-8) are left out: [`lock_listing`](LockClient::lock_listing)
    /// counts them.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> dlock::Result<()> {
    /// # let server = dlock_tests::RedisServer::start();
    /// # let client = dlock::LockClient::connect(&server.url()).await?;
    /// let guard = client.lock("invoice:7").lock().await?;
    /// let _other = client.lock("stock:1").lock().await?;
    /// let reader = client.rw_lock("invoice:8").read().lock().await?;
    /// let permit = client.semaphore("invoice:9", 2).acquire(1).await?;
    /// assert_eq!(
    ///     client.list_locks("invoice:").await?,
    ///     ["invoice:7", "invoice:8", "invoice:9"]
    /// );
    /// # guard.unlock().await?;
    /// # reader.unlock().await?;
    /// # permit.unlock().await?;
    /// # Ok(())
    /// # }
    /// ```
    ///
    /// # Errors
    ///
    /// [`LockError::InvalidName`](crate::LockError::InvalidName) for a prefix over [`MAX_NAME_LEN`](crate::limits::MAX_NAME_LEN)
    /// bytes or with a control character; Redis errors.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: it only reads.
    pub async fn list_locks(&self, name_prefix: &str) -> Result<Vec<String>> {
        Ok(self.lock_listing(name_prefix).await?.names)
    }

    /// [`list_locks`](LockClient::list_locks), with the count of keys under the prefix it
    /// left out because no lock can have written them (a key name, or a field or value of
    /// a hash, that is not UTF-8): one key another program wrote there must not stop an
    /// operator from listing the locks, nor hide that it is there.
    ///
    /// # Errors
    ///
    /// As [`list_locks`](LockClient::list_locks).
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: it only reads.
    pub async fn lock_listing(&self, name_prefix: &str) -> Result<LockListing> {
        check_text("name prefix", name_prefix)?;
        let prefix = self.key_prefix();
        let pattern = format!("{}*", glob_escape(&format!("{prefix}{name_prefix}")));
        let backend = &self.inner.backend;
        let (keys, mut skipped) = backend
            .scan(&pattern, "hash")
            .await
            .map_err(|e| e.into_lock_error(name_prefix, "list"))?;
        let mut names = Vec::new();
        for key in keys {
            let fields: Vec<(Vec<u8>, Vec<u8>)> = backend
                .query(redis::cmd("HGETALL").arg(&key))
                .await
                .map_err(|e| e.into_lock_error(&key, "list"))?;
            let Some(hash) = utf8_hash(fields) else {
                skipped += 1;
                continue;
            };
            // Gone since the scan, or someone else's hash.
            if hash.is_empty() || Layout::parse(hash).is_none() {
                continue;
            }
            if let Some(name) = key.strip_prefix(prefix) {
                names.push(name.to_owned());
            }
        }
        let (capacities, unreadable) = backend
            .scan(&SemKeys::capacity_pattern(prefix, name_prefix), "string")
            .await
            .map_err(|e| e.into_lock_error(name_prefix, "list"))?;
        skipped += unreadable;
        names.extend(
            capacities
                .iter()
                .filter_map(|key| SemKeys::name_of_capacity(prefix, key)),
        );
        names.sort();
        names.dedup();
        Ok(LockListing { names, skipped })
    }

    /// `id` (an owner field or a client id) with the description its client registered.
    pub(crate) async fn describe(&self, id: String) -> Result<Participant> {
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
        Ok(Participant {
            client: text.as_deref().and_then(ClientDescription::decode),
            id,
            client_id,
        })
    }
}

/// What [`LockClient::lock_listing`] found under a prefix.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct LockListing {
    /// The lock names, sorted (see [`LockClient::list_locks`]).
    pub names: Vec<String>,
    /// Keys under the prefix left out because no lock can have written them: a name, or
    /// a hash's field or value, that is not UTF-8.
    pub skipped: usize,
}

/// The hash `fields` as text, or `None` when a field or value is not UTF-8 (no dlock
/// script writes one).
fn utf8_hash(fields: Vec<(Vec<u8>, Vec<u8>)>) -> Option<HashMap<String, String>> {
    fields
        .into_iter()
        .map(|(field, value)| {
            Some((
                String::from_utf8(field).ok()?,
                String::from_utf8(value).ok()?,
            ))
        })
        .collect()
}
