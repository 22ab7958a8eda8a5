//! [`ReadWriteLock`]: many readers or one writer, both reentrant, with writer preference
//! and a lease per reader.
//!
//! One Redis hash per lock (layout in `scripts/common.lua`): the mode, each owner's read
//! and write hold counts, and each owner's deadline in server time. Every script drops
//! the owners whose deadline passed, so a crashed reader frees the lock on its own lease.
//! Waiting writers keep an entry in a sorted set in the lock's slot; while one is live,
//! new readers wait behind it.

mod acquire;
pub(crate) mod layout;
mod release_ops;

use std::sync::Arc;
use std::time::Duration;

use crate::client::LockClient;
use crate::error::{LockError, Result};
use crate::lock::guard::LockGuard;
use crate::lock::keys::LockKeys;
use crate::names::check_text;
use crate::sync::verbs::{acquisition_verbs, Acquire};

/// A handle to one named read-write lock, from [`LockClient::rw_lock`]: many readers or
/// one writer. Cheap to clone; creating it does not talk to Redis. A bad name is reported
/// as [`LockError::InvalidName`] by every operation.
///
/// - **Reentrant.** Inside the [`scope`](LockGuard::scope) of a read guard, taking the
///   read lock again adds a hold to the same owner; inside a write guard's scope, taking
///   the write lock again does too, and never stretches the lease (the key's TTL stays at
///   most the lease, however deep the nesting).
/// - **Downgrade.** Inside a write guard's scope the read lock is granted at once (same
///   owner). When the write guard is released, the read hold stays, keeps its renewal,
///   and readers waiting in every process are woken.
/// - **No upgrade.** Taking the write lock inside a read guard's scope (with no write
///   guard around it) fails at once with [`LockError::UpgradeNotSupported`]: two readers
///   upgrading together would wait for each other forever.
/// - **Writer preference.** Once a writer waits, new readers wait behind it (re-entrant
///   reads of current readers still pass), so a steady flow of readers cannot starve
///   writers. A waiting writer's entry lapses 10 s after its last try if its process dies.
/// - **A lease per reader.** Each reader's hold ends on its own lease (server time): a
///   crashed reader blocks writers only until its lease runs out. The watchdog renews only
///   the holds of its own client.
/// - **At most [`MAX_HOLDERS`](crate::limits::MAX_HOLDERS) owners.** One more reader is
///   refused at once with [`LockError::TooManyHolders`]: every call counts the owners,
///   and the bound keeps it short for everyone sharing the server.
///
/// Outside any scope every acquisition is a new owner, exactly as with
/// [`Lock`](crate::Lock): a task that takes the write lock twice without `scope` waits
/// for itself.
///
/// With [`replica_acks`](crate::LockClientBuilder::replica_acks), read and write holds
/// count only once the replicas confirmed them, as the lock's do.
///
/// ```
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> dlock::Result<()> {
/// # let server = dlock_tests::RedisServer::start();
/// # let client = dlock::LockClient::connect(&server.url()).await?;
/// let prices = client.rw_lock("prices");
/// let first = prices.read().lock().await?;
/// let second = prices.read().lock().await?; // readers share the lock
/// assert!(prices.write().try_lock().await.is_err());
/// first.unlock().await?;
/// second.unlock().await?;
/// let writer = prices.write().lock().await?;
/// writer.unlock().await?;
/// # Ok(())
/// # }
/// ```
///
/// # Cancel safety
///
/// All acquisition methods are cancel safe: dropping the future never leaves a hold
/// behind, nor a waiting writer's entry. If the acquire script may have run when the
/// future is dropped (its reply was outstanding), or a writer left an entry, a release of
/// exactly that acquisition is queued in the background.
#[derive(Clone)]
pub struct ReadWriteLock {
    shared: Arc<Shared>,
}

/// What the handles of one read-write lock share.
pub(crate) struct Shared {
    client: LockClient,
    name: Arc<str>,
    keys: LockKeys,
    /// The key, shared with the holds.
    key: Arc<str>,
    /// The waiting writers' sorted set.
    writers: String,
}

/// Which hold: a read or a write hold.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Kind {
    Read,
    Write,
}

/// The suffix of an owner's write count field (its read count field is the owner).
const WRITE_SUFFIX: &str = ":w";

impl Kind {
    fn as_str(self) -> &'static str {
        match self {
            Kind::Read => "read",
            Kind::Write => "write",
        }
    }

    /// The hash field counting `owner`'s holds of this kind.
    fn field(self, owner: &str) -> String {
        match self {
            Kind::Read => owner.to_owned(),
            Kind::Write => format!("{owner}{WRITE_SUFFIX}"),
        }
    }
}

impl LockClient {
    /// A handle to the read-write lock called `name` (the key is the client's key prefix
    /// + `name`).
    ///
    /// Creating a handle does not talk to Redis; a bad name is reported by the handle's
    /// operations as [`LockError::InvalidName`]. The name is shared with the
    /// [`Lock`](crate::Lock) and the [`FairLock`](crate::FairLock) of the same name: an
    /// acquisition that finds it held as another kind fails with
    /// [`LockError::KindMismatch`] (see [`LockKind`](crate::inspect::LockKind)).
    pub fn rw_lock(&self, name: &str) -> ReadWriteLock {
        let keys = LockKeys::new(&self.inner.settings.key_prefix, name);
        ReadWriteLock {
            shared: Arc::new(Shared {
                client: self.clone(),
                name: name.into(),
                key: keys.key.as_str().into(),
                writers: keys.waiting_writers(),
                keys,
            }),
        }
    }
}

impl std::fmt::Debug for ReadWriteLock {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ReadWriteLock")
            .field("name", &self.shared.name)
            .field("key", &self.shared.key)
            .finish()
    }
}

impl ReadWriteLock {
    /// The lock's name, without the key prefix.
    pub fn name(&self) -> &str {
        &self.shared.name
    }

    /// The Redis key of the lock hash (key prefix + name).
    pub fn key(&self) -> &str {
        &self.shared.key
    }

    /// The read side: shared with other readers, excluded by a writer.
    pub fn read(&self) -> ReadLock {
        ReadLock { rw: self.clone() }
    }

    /// The write side: excludes readers and other writers.
    pub fn write(&self) -> WriteLock {
        WriteLock { rw: self.clone() }
    }

    /// Whether anyone holds the lock, for reading or writing.
    ///
    /// # Errors
    ///
    /// [`LockError::InvalidName`]; Redis errors.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: it only reads.
    pub async fn is_locked(&self) -> Result<bool> {
        self.check_name()?;
        let exists: bool = self
            .shared
            .client
            .inner
            .backend
            .query(redis::cmd("EXISTS").arg(&*self.shared.key))
            .await
            .map_err(|e| e.into_lock_error(&self.shared.name, "check"))?;
        Ok(exists)
    }

    /// Names are checked when used, so that `client.rw_lock(name)` stays infallible.
    fn check_name(&self) -> Result<()> {
        if self.shared.name.is_empty() {
            return Err(LockError::invalid_name(
                "lock name",
                "",
                "a lock name must not be empty".to_owned(),
            ));
        }
        check_text("lock name", &self.shared.name)
    }
}

/// The acquisition methods of [`ReadLock`] and [`WriteLock`]: the same table as
/// [`Lock`](crate::Lock)'s, for one kind of hold.
macro_rules! side {
    ($side:ident, $doc_name:literal, $kind:expr, $what:literal, $summary:literal) => {
        #[doc = $summary]
        ///
        /// | method | waits | lease |
        /// |---|---|---|
        /// | `lock` | until acquired (or the client's `default_wait`) | watchdog |
        /// | `lock_with_lease` | until acquired (or `default_wait`) | explicit |
        /// | `try_lock` | no | watchdog |
        /// | `try_lock_for` | up to `wait` | watchdog |
        /// | `try_lock_with_lease` | up to `wait` | explicit |
        ///
        /// Every method returns a [`LockGuard`]; its `hold_count` counts this owner's
        #[doc = concat!($what, " holds.")]
        ///
        /// # Cancel safety
        ///
        /// Cancel safe: see [the notes on `ReadWriteLock`](ReadWriteLock#cancel-safety).
        #[derive(Clone)]
        pub struct $side {
            rw: ReadWriteLock,
        }

        impl std::fmt::Debug for $side {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.debug_struct(stringify!($side))
                    .field("name", &self.rw.shared.name)
                    .finish()
            }
        }

        impl $side {
            /// The lock's name, without the key prefix.
            pub fn name(&self) -> &str {
                &self.rw.shared.name
            }

            acquisition_verbs!($doc_name, LockGuard, "ReadWriteLock#cancel-safety");
        }

        /// The acquisition of this side, traced and measured (`sync::observe`).
        impl Acquire for $side {
            type Guard = LockGuard;

            fn default_wait(&self) -> Option<Duration> {
                self.rw.shared.client.inner.settings.default_wait
            }

            async fn acquire(
                &self,
                wait: Option<Duration>,
                lease: Option<Duration>,
                template: Option<&'static str>,
            ) -> Result<LockGuard> {
                self.rw.acquire($kind, wait, lease, template).await
            }
        }
    };
}

side!(
    ReadLock,
    "ReadLock",
    Kind::Read,
    "read",
    "The read side of a [`ReadWriteLock`], from [`ReadWriteLock::read`]: shared with other readers."
);
side!(
    WriteLock,
    "WriteLock",
    Kind::Write,
    "write",
    "The write side of a [`ReadWriteLock`], from [`ReadWriteLock::write`]: excludes everyone else."
);
