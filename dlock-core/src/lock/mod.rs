//! [`Lock`]: a named lock handle and the acquisition loop.
//!
//! The files: `mod.rs`: `Lock` and `LockClient::lock`; `keys.rs`: `LockKeys`, the names
//! of a lock that every primitive built on its hash shares; `layout.rs`: the hash parsed
//! for inspection; `acquire.rs`: re-entry or a new owner, the local line (its first waiter
//! asks Redis at once about an old hold, and again once its subscription is confirmed), the
//! acquire call run by a `TryStep` and the wait between tries on the client's wake channel;
//! `guard.rs`: `LockGuard` (`unlock`, `scope`, `lost`; `hold_until` for the attribute's
//! `min_hold`), the guard of every single-key primitive: a hold plus the release operation
//! its primitive built; `release_ops.rs`: the lock's releases as operations for
//! `sync::release`; `scripts/` (`mod.rs` builds them; `handoff.lua`, spliced into the
//! others: the waiter registry, the hand-off to the longest-waiting owner whose client
//! still listens, the kinds' markers; `acquire`, `release` — also `withdraw` for an
//! acquisition that ended without a guard and `leave` for a hand-off its owner no longer
//! waits for —, `renew`, `extend` (a grant's), `force_unlock`, which tells the holders'
//! clients, and `hold_until`, the attribute's `min_hold`). The protocol is
//! docs/PROTOCOL.md. The Redis layout (the hash, the waiter registry, the naps set,
//! each client's wake channel and its `pass:`, `next:`, `wake:` and `lost:` messages) is
//! in docs/LAYOUT.md.

mod acquire;
pub(crate) mod guard;
pub(crate) mod keys;
pub(crate) mod layout;
pub(crate) mod release_ops;
pub(crate) mod scripts;

use std::sync::Arc;
use std::time::Duration;

use crate::client::LockClient;
use crate::error::{LockError, Result};
use crate::kind::LockKind;
use crate::lock::guard::LockGuard;
use crate::lock::keys::LockKeys;
use crate::lock::release_ops::{release_job, ReleaseKind};
use crate::names::check_text;
use crate::protocol::GRANT;
use crate::scripts::catalog::lock::scripts;
use crate::sync::attempt::Reply;
use crate::sync::owner;
use crate::sync::release::OwnerRelease;
use crate::sync::verbs::acquisition_verbs;

/// A handle to one named lock, from [`LockClient::lock`]. Cheap to clone; creating it does
/// not talk to Redis. A name that is empty, longer than [`MAX_NAME_LEN`](crate::limits::MAX_NAME_LEN) bytes or contains
/// an ASCII control character is reported as [`LockError::InvalidName`] by every
/// operation.
///
/// Every acquisition method returns a [`LockGuard`]. They differ in how long they wait
/// and whether the lock has an explicit lease:
///
/// | method | waits | lease |
/// |---|---|---|
/// | [`lock`](Lock::lock) | until acquired (or the client's `default_wait`) | watchdog |
/// | [`lock_with_lease`](Lock::lock_with_lease) | until acquired (or `default_wait`) | explicit |
/// | [`try_lock`](Lock::try_lock) | no | watchdog |
/// | [`try_lock_for`](Lock::try_lock_for) | up to `wait` | watchdog |
/// | [`try_lock_with_lease`](Lock::try_lock_with_lease) | up to `wait` | explicit |
///
/// # Waiting across processes
///
/// A try that finds the lock taken registers its owner as waiting (one entry per waiting
/// owner, oldest first). A release hands the lock to the longest-waiting owner whose
/// client still listens (one try at Redis per release, however many wait; a waiter whose
/// process died is passed over): it gives that owner the lock, a hold of 100 ms which the
/// owner extends to its lease at once, so that a caller elsewhere that needs no wake-up
/// cannot take it first and the owner needs no try of its own (it takes the grant with a
/// try where it cannot count on it as it is: with `replica_acks`, a lease under 100 ms,
/// too little of the grant left, its route to Redis moved, or a fencing token it wants
/// and the grant lacks, see docs/PROTOCOL.md). A grant made to an owner
/// that stopped waiting meanwhile (its acquisition timed out or was dropped) is given
/// back by that owner's withdraw, which grants the lock on; and the waiter after it is
/// told to try when the grant lapses, in case the one it was made for froze or died.
/// Within one client, tasks line up and a release gives the lock to the next (a local
/// grant), for at most 8 in a row while other clients wait; then it goes to them.
/// [`try_lock`](Lock::try_lock), which does not wait, never registers. While a lock is
/// granted, [`is_locked`](Lock::is_locked) reports it taken.
///
/// So a live waiter gets a free lock within a grant's 100 ms plus a round trip, whatever
/// the other waiters do; `max_wait_recheck` is only a safety net for a message Redis
/// lost.
///
/// # Kinds on one name
///
/// A lock's name is shared with the [`FairLock`](crate::FairLock) and the
/// [`ReadWriteLock`](crate::ReadWriteLock) of the same name (see
/// [`LockKind`](crate::inspect::LockKind)): while one of them holds it, an acquisition of this lock
/// fails at once with [`LockError::KindMismatch`] rather than wait for a release it would
/// never hear of.
///
/// # Cancel safety
///
/// All acquisition methods are cancel safe: dropping the future never leaves a lock
/// behind. If the acquire script may have run when the future is dropped (its reply was
/// outstanding), a release for the same owner is queued in the background.
#[derive(Clone)]
pub struct Lock {
    client: LockClient,
    name: Arc<str>,
    keys: Arc<LockKeys>,
    /// The key, shared with the client's local line for it and with its holds.
    line: Arc<str>,
    /// This client's wake channel for the lock (see `LockKeys::wake_channel`).
    wake: Arc<str>,
    /// The `leave` of one of the client's owners that no longer waits, for a message
    /// meant for it.
    leave: OwnerRelease,
    /// The `withdraw` of one of the client's owners that no longer waits, for the lock a
    /// release gave it (the local line's task that stopped waiting).
    withdraw: OwnerRelease,
}

impl LockClient {
    /// A handle to the lock called `name` (the key is the client's key prefix + `name`).
    ///
    /// Creating a handle does not talk to Redis; an empty name, one over
    /// [`MAX_NAME_LEN`](crate::limits::MAX_NAME_LEN) bytes or one with an ASCII control character
    /// is reported by the handle's operations as [`LockError::InvalidName`].
    pub fn lock(&self, name: &str) -> Lock {
        Lock::new(self.clone(), name)
    }
}

impl std::fmt::Debug for Lock {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Lock")
            .field("name", &self.name)
            .field("key", &self.keys.key)
            .finish()
    }
}

impl Lock {
    pub(crate) fn new(client: LockClient, name: &str) -> Lock {
        let keys = Arc::new(LockKeys::new(&client.inner.settings.key_prefix, name));
        let name: Arc<str> = name.into();
        // The cleanups of waiters that stopped waiting: not counted as releases.
        let cleanup = {
            let (keys, name) = (Arc::clone(&keys), Arc::clone(&name));
            Arc::new(move |owner: &str, kind| release_job(&name, &keys, owner, kind).uncounted())
        };
        let withdraw = Arc::clone(&cleanup);
        Lock {
            wake: keys.wake_channel(&client.inner.id_text).into(),
            line: keys.key.as_str().into(),
            leave: Arc::new(move |owner| cleanup(owner, ReleaseKind::Leave)),
            withdraw: Arc::new(move |owner| withdraw(owner, ReleaseKind::Withdraw)),
            client,
            name,
            keys,
        }
    }

    /// Names are checked when used, so that `client.lock(name)` stays infallible.
    pub(crate) fn check_name(&self) -> Result<()> {
        if self.name.is_empty() {
            return Err(LockError::invalid_name(
                "lock name",
                "",
                "a lock name must not be empty".to_owned(),
            ));
        }
        check_text("lock name", &self.name)
    }

    /// The client the lock belongs to.
    pub(crate) fn client(&self) -> &LockClient {
        &self.client
    }

    /// The lock's Redis names.
    pub(crate) fn keys(&self) -> &LockKeys {
        &self.keys
    }

    /// This client's wake channel for the lock: where the hand-offs to its waiters arrive.
    pub(crate) fn wake_channel(&self) -> &str {
        &self.wake
    }

    /// The `leave` of one of this client's owners that no longer waits, for a message
    /// meant for it (see `sync::pubsub`).
    pub(crate) fn leave(&self) -> &OwnerRelease {
        &self.leave
    }

    /// The lock's name, without the key prefix.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The Redis key of the lock hash (key prefix + name).
    pub fn key(&self) -> &str {
        &self.keys.key
    }

    acquisition_verbs!("Lock", LockGuard, "Lock#cancel-safety");

    /// Whether anyone holds the lock.
    ///
    /// # Errors
    ///
    /// Redis errors.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: it only reads.
    pub async fn is_locked(&self) -> Result<bool> {
        self.check_name()?;
        let exists: bool = self
            .query("check", redis::cmd("EXISTS").arg(&self.keys.key))
            .await?;
        Ok(exists)
    }

    /// Whether the current call chain holds the lock: code inside
    /// [`LockGuard::scope`] of a guard of this lock (or inside a `#[distributed_lock]`
    /// function). Outside such a scope there is no call-chain owner and this is `false`.
    ///
    /// # Errors
    ///
    /// Redis errors.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: it only reads.
    pub async fn is_held(&self) -> Result<bool> {
        Ok(self.hold_count().await? > 0)
    }

    /// How many times the current call chain holds the lock (0 outside a guard's
    /// [`scope`](LockGuard::scope), or when the lease ran out).
    ///
    /// # Errors
    ///
    /// Redis errors.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: it only reads.
    pub async fn hold_count(&self) -> Result<u32> {
        self.check_name()?;
        let inner = &self.client.inner;
        let Some(held) = owner::current_hold(inner.id_bits(), &self.keys.key) else {
            return Ok(0);
        };
        let count: Option<u32> = self
            .query(
                "check",
                redis::cmd("HGET").arg(&self.keys.key).arg(&*held.field),
            )
            .await?;
        Ok(count.unwrap_or(0))
    }

    /// Time until the lock expires; `None` when it is not locked (or has no expiry, which
    /// dlock never creates).
    ///
    /// # Errors
    ///
    /// Redis errors.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: it only reads.
    pub async fn remaining_lease(&self) -> Result<Option<Duration>> {
        self.check_name()?;
        let ttl: i64 = self
            .query("check", redis::cmd("PTTL").arg(&self.keys.key))
            .await?;
        Ok(u64::try_from(ttl).ok().map(Duration::from_millis))
    }

    /// Deletes the lock whoever holds it and passes it to the longest-waiting waiter.
    /// Returns whether a lock was deleted. The former holder's guard finds out at its next
    /// renewal, or at once when a task of its client waits for the lock (`lost()`), and
    /// its `unlock` reports [`LockError::NotHeld`].
    ///
    /// # Errors
    ///
    /// [`LockError::KindMismatch`] when the name is held as a fair or read-write lock
    /// (use that kind's own force unlock, which tells its waiters);
    /// [`LockError::WrongType`] when the key holds another type of value, or a hash that
    /// is not in the lock's layout (application data, which is left alone); Redis errors.
    ///
    /// # Cancel safety
    ///
    /// If cancelled after the command was sent, the lock may or may not have been deleted.
    pub async fn force_unlock(&self) -> Result<bool> {
        self.check_name()?;
        let inner = &self.client.inner;
        let mut invocation = scripts().force_unlock.prepare_invoke();
        invocation
            .key(&self.keys.key)
            .key(&self.keys.channel)
            .key(&self.keys.naps)
            .arg(inner.backend.publish_command())
            .arg(GRANT.as_millis() as u64);
        let reply: redis::Value = inner
            .backend
            .invoke(&invocation)
            .await
            .map_err(|e| e.into_lock_error(&self.name, "force-unlock"))?;
        // The number of locks deleted, with 'untold' after it when the hand-off stopped at
        // its bound with waiters left untold; otherwise the shared reply grammar's refusals.
        let (deleted, untold) = match reply {
            redis::Value::Int(deleted) => (deleted == 1, false),
            redis::Value::Array(items) => match items.as_slice() {
                [redis::Value::Int(deleted), redis::Value::BulkString(untold)]
                    if untold.as_slice() == b"untold" =>
                {
                    (*deleted == 1, true)
                }
                _ => return Err(self.unexpected("force-unlock", &items)),
            },
            other => {
                let refusal = <Reply as redis::FromRedisValue>::from_redis_value(other)
                    .map_err(|e| self.unexpected("force-unlock", &e))?;
                return Err(refusal.refusal(&self.name, "force-unlock", LockKind::Lock));
            }
        };
        if untold {
            // An owner that never waited leaves: the lock's `leave` goes on passing it.
            let nobody = inner.new_owner_field();
            let job = release_job(&self.name, &self.keys, &nobody, ReleaseKind::Leave);
            inner.release_in_background(job.uncounted());
        }
        tracing::info!(lock = %self.name, deleted, "dlock: force unlock");
        Ok(deleted)
    }

    /// The error for a reply this lock's script never gives (a script of another dlock
    /// version loaded under the same hash, say): reported, never acted on.
    fn unexpected(&self, action: &'static str, reply: &dyn std::fmt::Debug) -> LockError {
        LockError::Redis {
            name: self.name.to_string(),
            action,
            server: None,
            source: redis::RedisError::from((
                redis::ErrorKind::UnexpectedReturnType,
                "unexpected reply from a dlock script",
                format!("{reply:?}"),
            )),
        }
    }

    fn timeout(&self, wait: Option<Duration>) -> LockError {
        LockError::Timeout {
            name: self.name.to_string(),
            waited: wait.unwrap_or_default(),
            permits: None,
        }
    }

    /// One command about this lock, its errors named after it (also for `inspect`).
    pub(crate) async fn query<T: redis::FromRedisValue>(
        &self,
        action: &'static str,
        cmd: &redis::Cmd,
    ) -> Result<T> {
        self.client
            .inner
            .backend
            .query(cmd)
            .await
            .map_err(|e| e.into_lock_error(&self.name, action))
    }

    /// The error for this lock's key holding another type of value.
    pub(crate) fn wrong_type(&self, found: String) -> LockError {
        LockError::WrongType {
            name: self.name.to_string(),
            found,
        }
    }
}
