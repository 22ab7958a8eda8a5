//! [`LockTracker`]: one lock watched on a connection where Redis reports each change.

use std::collections::HashMap;

use super::{holders_of, LockHolder};
use crate::error::Result;
use crate::lock::Lock;
use crate::redis::Tracking;

/// One lock watched through a connection on which Redis itself reports each change of
/// the lock hash, from [`Lock::track`]: a watcher that only polled would miss a hold
/// shorter than its interval.
///
/// The connection is dedicated to this tracker: RESP3, `CLIENT TRACKING ON`, to the
/// server that owns the lock key (the one server, the Sentinel's current master, or the
/// master of the key's cluster slot). Each [`holders`](LockTracker::holders) reads the
/// hash on it, which asks Redis to report the next change; [`changed`](LockTracker::changed)
/// waits for that report. Read-write locks are tracked too, and a semaphore: while no
/// lock hash exists, its grants hash is read (and so reported) as well.
///
/// ```
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> dlock::Result<()> {
/// # let server = dlock_tests::RedisServer::start();
/// # let client = dlock::LockClient::connect(&server.url()).await?;
/// let lock = client.lock("job");
/// let mut tracker = lock.track().await?;
/// assert!(tracker.holders().await?.is_empty()); // also arms the next report
/// let guard = lock.lock().await?;
/// tracker.changed().await?; // Redis reported the acquisition
/// assert_eq!(tracker.holders().await?.len(), 1);
/// # guard.unlock().await?;
/// # Ok(())
/// # }
/// ```
pub struct LockTracker {
    lock: Lock,
    tracking: Tracking,
}

impl std::fmt::Debug for LockTracker {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LockTracker")
            .field("name", &self.lock.name())
            .finish_non_exhaustive()
    }
}

impl Lock {
    /// A [`LockTracker`] for this lock: opens its connection and turns tracking on.
    ///
    /// # Errors
    ///
    /// [`LockError::Redis`](crate::LockError::Redis) with `NOPERM` for a user without `+client|tracking` (a
    /// watcher can fall back to polling [`holders`](Lock::holders)); connection errors.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: a dropped call closes the connection it opened.
    pub async fn track(&self) -> Result<LockTracker> {
        self.check_name()?;
        let tracking = self
            .client()
            .inner
            .backend
            .tracking(&self.keys().key)
            .await
            .map_err(|e| e.into_lock_error(self.name(), "track"))?;
        Ok(LockTracker {
            lock: self.clone(),
            tracking,
        })
    }
}

impl LockTracker {
    /// Who holds the lock now, as [`Lock::holders`], read on the tracking connection:
    /// Redis reports the next change of the hash after this read.
    ///
    /// # Errors
    ///
    /// As [`Lock::holders`].
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: it only reads (a dropped read may leave the next report unarmed; read
    /// again).
    pub async fn holders(&mut self) -> Result<Vec<LockHolder>> {
        let key = self.lock.keys().key.clone();
        let name = self.lock.name().to_owned();
        let found: String = self
            .tracking
            .query(redis::cmd("TYPE").arg(&key))
            .await
            .map_err(|e| e.into_lock_error(&name, "track"))?;
        if found != "hash" && found != "none" {
            return Err(self.lock.wrong_type(found));
        }
        let hash: HashMap<String, String> = self
            .tracking
            .query(redis::cmd("HGETALL").arg(&key))
            .await
            .map_err(|e| e.into_lock_error(&name, "track"))?;
        let layout = self.lock.parse_layout(hash)?;
        if layout.is_some() {
            return self.lock.holders_in(layout).await;
        }
        // No lock hash: a semaphore's grants, read here so that their changes are
        // reported too.
        let grants: HashMap<String, String> = self
            .tracking
            .query(redis::cmd("HGETALL").arg(self.lock.grants_key()))
            .await
            .map_err(|e| e.into_lock_error(&name, "track"))?;
        Ok(holders_of(self.lock.live_grants(grants).await?))
    }

    /// Waits until Redis reports a change of the lock hash since the last
    /// [`holders`](LockTracker::holders) (a write, its expiry or deletion, or a flush).
    ///
    /// # Errors
    ///
    /// [`LockError::Redis`](crate::LockError::Redis) when no more reports will come from the lock's master: the
    /// connection is lost, or the client followed the master elsewhere (a Sentinel
    /// failover), so the tracked server may no longer own the lock. Track again with
    /// [`Lock::track`], which connects to the master the client uses now.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: a report that arrives meanwhile is kept for the next call.
    pub async fn changed(&mut self) -> Result<()> {
        let keys = [self.lock.keys().key.clone(), self.lock.grants_key()];
        if self.tracking.changed(&keys).await {
            return Ok(());
        }
        Err(crate::redis::CallError::from(redis::RedisError::from((
            redis::ErrorKind::Io,
            "the tracking connection closed or the lock's master moved: track again",
        )))
        .into_lock_error(self.lock.name(), "track"))
    }
}
