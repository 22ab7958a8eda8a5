//! The implementation of [`dlock`](https://docs.rs/dlock): the client, the lock
//! primitives and their Lua scripts.
//!
//! Applications depend on `dlock`, which re-exports this crate's API together with the
//! `#[distributed_lock]` attribute and the TOML configuration, and documents it; this
//! crate is published so that `dlock` can be assembled from it, and its API is `dlock`'s.
//! The repository's `docs/ARCHITECTURE.md` maps its modules.

#[doc(hidden)]
#[path = "private.rs"]
pub mod __private;
mod background;
mod client;
mod error;
mod fair;
mod fence;
mod fenced;
mod kind;
mod lease;
mod lock;
mod multi;
mod names;
mod redact;
mod redis;
mod redlock;
mod rw;
mod scripts;
mod semaphore;
mod sync;

pub use crate::redis::{ScriptMode, Topology};
pub use client::global::{global_client, set_global};
pub use client::{
    ClientDescription, LockClient, LockClientBuilder, MAX_COMMAND_TIMEOUT, REGISTRATION_TTL,
};
pub use error::{LockError, LossReason, Result};
pub use fair::FairLock;
pub use fence::Fence;
pub use fenced::FencedWrites;
pub use kind::LockKind;
pub use lease::MAX_LEASE;
pub use lock::guard::LockGuard;
pub use lock::{
    Lock, LockClientRef, LockHolder, LockInfo, LockTracker, OwnerHold, ReadWriteInfo,
    ReadWriteMode, SemaphoreInfo,
};
pub use multi::{MultiGuard, MultiLock};
pub use names::MAX_NAME_LEN;
pub use redlock::{RedLock, RedLockClient, RedLockGuard};
pub use rw::{ReadLock, ReadWriteLock, WriteLock};
pub use scripts::FunctionLibrary;
pub use semaphore::Semaphore;
pub use sync::metrics::{Stats, LATENCY_BOUNDS};
pub use sync::owner::current_fence;

/// `url` with any password replaced by `***`, for logs and error messages: the userinfo
/// password of every scheme, the `pass` parameter of Unix socket URLs (also written
/// percent-encoded, and any parameter whose name says it is a password or token), and
/// for a string that is no valid URL, everything that could be one. dlock shows every
/// address it puts in an error, a log line or a `Debug` output this way.
///
/// ```
/// assert_eq!(
///     dlock::redact_url("redis://app:hunter2@127.0.0.1:6379"),
///     "redis://app:***@127.0.0.1:6379"
/// );
/// assert_eq!(
///     dlock::redact_url("redis+unix:///run/redis.sock?user=app&pa%73s=hunter2&db=1"),
///     "redis+unix:///run/redis.sock?user=app&pa%73s=***&db=1"
/// );
/// // Not a URL (the port is not a number): all that could be secret is hidden.
/// assert_eq!(
///     dlock::redact_url("redis://app:hunter2@127.0.0.1:63a9?db=1"),
///     "redis://app:***@127.0.0.1:63a9?db=***"
/// );
/// ```
pub fn redact_url(url: &str) -> String {
    redact::redact(url)
}
