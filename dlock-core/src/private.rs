//! Support for the code `#[distributed_lock]` generates. Not a public API: names and
//! signatures here change without notice.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use crate::client::LockClient;
use crate::error::Result;
use crate::lock::guard::LockGuard;

pub use crate::client::global::global_client;

/// What `client = expr` may evaluate to.
pub trait IntoClient {
    /// A handle to the client (a cheap clone).
    fn to_client(&self) -> LockClient;
}

impl IntoClient for LockClient {
    fn to_client(&self) -> LockClient {
        self.clone()
    }
}

impl<T: IntoClient + ?Sized> IntoClient for &T {
    fn to_client(&self) -> LockClient {
        (**self).to_client()
    }
}

impl<T: IntoClient + ?Sized> IntoClient for Arc<T> {
    fn to_client(&self) -> LockClient {
        (**self).to_client()
    }
}

/// Whether a `lease` of `secs` s + `nanos` ns is within [`MAX_LEASE`](crate::MAX_LEASE);
/// the attribute checks its `lease` with it at compile time.
pub const fn lease_fits(secs: u64, nanos: u32) -> bool {
    let max = crate::MAX_LEASE.as_secs();
    secs < max || (secs == max && nanos == 0)
}

/// Which lock the attribute's `kind` option names.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// The reentrant lock ([`LockClient::lock`]), the default.
    Reentrant,
    /// The fair lock ([`LockClient::fair_lock`]).
    Fair,
    /// The read side of the read-write lock ([`LockClient::rw_lock`]).
    Read,
    /// The write side of the read-write lock.
    Write,
}

/// One acquisition the way the attribute's `wait` / `lease` options say, on any handle
/// with the lock's four acquisition methods.
macro_rules! acquire_with {
    ($handle:expr, $wait:expr, $lease:expr) => {{
        let handle = $handle;
        match ($wait, $lease) {
            (None, None) => handle.lock().await,
            (None, Some(lease)) => handle.lock_with_lease(lease).await,
            (Some(wait), None) => handle.try_lock_for(wait).await,
            (Some(wait), Some(lease)) => handle.try_lock_with(wait, lease).await,
        }
    }};
}

/// Acquires the lock of `kind` called `key` the way the attribute's `wait` / `lease`
/// options say.
pub async fn acquire(
    client: Result<LockClient>,
    kind: Kind,
    key: String,
    wait: Option<Duration>,
    lease: Option<Duration>,
) -> Result<LockGuard> {
    let client = client?;
    match kind {
        Kind::Reentrant => acquire_with!(client.lock(&key), wait, lease),
        Kind::Fair => acquire_with!(client.fair_lock(&key), wait, lease),
        Kind::Read => acquire_with!(client.rw_lock(&key).read(), wait, lease),
        Kind::Write => acquire_with!(client.rw_lock(&key).write(), wait, lease),
    }
}

/// Releases after the body; a failure cannot change the body's result any more, so it is
/// logged.
pub async fn release(guard: LockGuard) {
    let name = guard.name().to_owned();
    if let Err(error) = guard.unlock().await {
        tracing::warn!(lock = %name, %error, "dlock: #[distributed_lock] release failed after the body ran");
    }
}

/// Gives the body's future the function's declared output type, so that `?` and `return`
/// inside it infer exactly as in the original function.
pub fn typed_body<T, F: Future<Output = T>>(body: F) -> F {
    body
}
