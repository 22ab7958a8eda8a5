//! The implementation of [`dlock`](https://docs.rs/dlock): the client, the lock
//! primitives and their Lua scripts.
//!
//! Applications depend on `dlock`, which re-exports this crate's API together with the
//! `#[distributed_lock]` attribute and the TOML configuration, and documents it; this
//! crate is published so that `dlock` can be assembled from it, and its API is `dlock`'s.
//! The repository's `docs/ARCHITECTURE.md` maps its modules.

#![warn(missing_debug_implementations, unreachable_pub)]
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
#[cfg(test)]
mod naming_tests;
#[doc(hidden)]
pub mod protocol;
mod redact;
mod redis;
pub mod redlock;
mod rw;
mod scripts;
mod semaphore;
mod sync;

pub use crate::redis::{ScriptMode, Topology};
pub use client::global::{global_client, set_global};
pub use client::{LockClient, LockClientBuilder};
pub use error::{ErrorKind, LockError, LossReason, PermitsAsked, Result};
pub use fair::FairLock;
pub use lock::guard::LockGuard;
pub use lock::Lock;
pub use multi::{MultiGuard, MultiLock};
pub use rw::{ReadLock, ReadWriteLock, WriteLock};
pub use semaphore::{Semaphore, SemaphorePermit};

pub mod inspect;

pub mod fencing {
    //! Fencing tokens: the number each exclusive acquisition mints
    //! ([`LockGuard::fencing_token`](crate::LockGuard::fencing_token), [`current_fence`]
    //! inside a scope), and [`FencedWrites`], the Redis writes that refuse a token older
    //! than one they have seen ([`LockClient::fenced`](crate::LockClient::fenced)).
    pub use crate::fence::Fence;
    pub use crate::fenced::FencedWrites;
    pub use crate::sync::owner::current_fence;
}

pub mod limits {
    //! The bounds dlock checks its inputs against, and the intervals operators see.
    pub use crate::client::REGISTRATION_TTL;
    pub use crate::lease::{MAX_COMMAND_TIMEOUT, MAX_LEASE};
    pub use crate::names::MAX_NAME_LEN;
    pub use crate::scripts::MAX_HOLDERS;
}

pub mod admin {
    //! For the people who run Redis: dlock's scripts as a function library to load with
    //! an administrator's credentials, and the redaction dlock applies to every address it
    //! shows.
    pub use crate::scripts::FunctionLibrary;

    /// `url` with any password replaced by `***`, for logs and error messages: the userinfo
    /// password of every scheme, the `pass` parameter of Unix socket URLs (also written
    /// percent-encoded, and any parameter whose name says it is a password or token), and
    /// for a string that is no valid URL, everything that could be one. dlock shows every
    /// address it puts in an error, a log line or a `Debug` output this way.
    ///
    /// ```
    /// assert_eq!(
    ///     dlock::admin::redact_url("redis://app:hunter2@127.0.0.1:6379"),
    ///     "redis://app:***@127.0.0.1:6379"
    /// );
    /// assert_eq!(
    ///     dlock::admin::redact_url("redis+unix:///run/redis.sock?user=app&pa%73s=hunter2&db=1"),
    ///     "redis+unix:///run/redis.sock?user=app&pa%73s=***&db=1"
    /// );
    /// // Not a URL (the port is not a number): all that could be secret is hidden.
    /// assert_eq!(
    ///     dlock::admin::redact_url("redis://app:hunter2@127.0.0.1:63a9?db=1"),
    ///     "redis://app:***@127.0.0.1:63a9?db=***"
    /// );
    /// ```
    pub fn redact_url(url: &str) -> String {
        crate::redact::redact(url)
    }
}
