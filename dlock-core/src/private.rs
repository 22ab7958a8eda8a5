//! Support for the code `#[distributed_lock]` generates. Not a public API: names and
//! signatures here change without notice.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use crate::client::LockClient;
use crate::error::{LockError, Result};
use crate::lock::guard::LockGuard;
use crate::multi::{MultiGuard, MultiLock};
use crate::redlock::{RedLockClient, RedLockGuard};

pub use crate::client::global::global_client;

/// What `client = expr` may evaluate to: a [`LockClient`], a [`RedLockClient`], or a
/// reference or `Arc` of one.
pub trait IntoClient {
    /// The client the attribute acquires from.
    type Client: Source;
    /// A handle to the client (a cheap clone).
    fn to_client(&self) -> Self::Client;
}

impl IntoClient for LockClient {
    type Client = LockClient;
    fn to_client(&self) -> LockClient {
        self.clone()
    }
}

impl IntoClient for RedLockClient {
    type Client = RedLockClient;
    fn to_client(&self) -> RedLockClient {
        self.clone()
    }
}

impl<T: IntoClient + ?Sized> IntoClient for &T {
    type Client = T::Client;
    fn to_client(&self) -> T::Client {
        (**self).to_client()
    }
}

impl<T: IntoClient + ?Sized> IntoClient for Arc<T> {
    type Client = T::Client;
    fn to_client(&self) -> T::Client {
        (**self).to_client()
    }
}

/// A client the attribute takes one lock from.
pub trait Source {
    /// What it hands out.
    type Guard: Guard;
    /// Acquires the lock of `kind` called `key` the way the attribute's `wait` / `lease`
    /// options say.
    fn acquire(
        self,
        kind: Kind,
        key: String,
        wait: Option<Duration>,
        lease: Option<Duration>,
    ) -> impl Future<Output = Result<Self::Guard>> + Send;
}

/// What the attribute does with a guard: run the body in its scope, give it back after.
pub trait Guard {
    /// Runs the body as part of the guard's call chain (re-entry inside works).
    fn scope<F: Future>(&self, body: F) -> impl Future<Output = F::Output>;
    /// Releases after the body; a failure cannot change the body's result any more, so
    /// it is logged.
    fn release(self) -> impl Future<Output = ()>;
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
    /// One permit of the semaphore ([`LockClient::semaphore`]) with this capacity.
    Permits(u32),
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

impl Source for LockClient {
    type Guard = LockGuard;

    async fn acquire(
        self,
        kind: Kind,
        key: String,
        wait: Option<Duration>,
        lease: Option<Duration>,
    ) -> Result<LockGuard> {
        match kind {
            Kind::Reentrant => acquire_with!(self.lock(&key), wait, lease),
            Kind::Fair => acquire_with!(self.fair_lock(&key), wait, lease),
            Kind::Read => acquire_with!(self.rw_lock(&key).read(), wait, lease),
            Kind::Write => acquire_with!(self.rw_lock(&key).write(), wait, lease),
            Kind::Permits(permits) => {
                let semaphore = self.semaphore(&key, permits);
                match (wait, lease) {
                    (None, None) => semaphore.acquire(1).await,
                    (None, Some(lease)) => semaphore.acquire_with_lease(1, lease).await,
                    (Some(wait), None) => semaphore.try_acquire_for(1, wait).await,
                    (Some(wait), Some(lease)) => semaphore.try_acquire_with(1, wait, lease).await,
                }
            }
        }
    }
}

impl Source for RedLockClient {
    type Guard = RedLockGuard;

    async fn acquire(
        self,
        kind: Kind,
        key: String,
        wait: Option<Duration>,
        lease: Option<Duration>,
    ) -> Result<RedLockGuard> {
        if kind != Kind::Reentrant {
            return Err(LockError::Config(format!(
                "#[distributed_lock] on lock {key:?}: a RedLockClient takes plain exclusive locks; \
                 remove `kind` / `permits`, or pass a LockClient as `client`"
            )));
        }
        acquire_with!(self.lock(&key), wait, lease)
    }
}

/// Acquires one lock from `client`.
pub async fn acquire<S: Source>(
    client: Result<S>,
    kind: Kind,
    key: String,
    wait: Option<Duration>,
    lease: Option<Duration>,
) -> Result<S::Guard> {
    client?.acquire(kind, key, wait, lease).await
}

/// Acquires every lock of `keys`, all or none (`keys = [...]`): in one script when they
/// share a cluster slot, else one after another in the canonical order.
pub async fn acquire_all(
    client: Result<LockClient>,
    keys: Vec<String>,
    wait: Option<Duration>,
    lease: Option<Duration>,
) -> Result<MultiGuard> {
    let client = client?;
    let multi = match MultiLock::same_slot(&client, &keys) {
        Ok(multi) => multi,
        Err(LockError::CrossSlot { .. }) => {
            MultiLock::sequential(keys.iter().map(|key| client.lock(key)))?
        }
        Err(error) => return Err(error),
    };
    acquire_with!(&multi, wait, lease)
}

/// Logs a release that failed after the body ran.
fn log_release_failure(name: &str, error: &LockError) {
    tracing::warn!(lock = %name, %error, "dlock: #[distributed_lock] release failed after the body ran");
}

impl Guard for LockGuard {
    fn scope<F: Future>(&self, body: F) -> impl Future<Output = F::Output> {
        LockGuard::scope(self, body)
    }

    async fn release(self) {
        let name = self.name().to_owned();
        if let Err(error) = self.unlock().await {
            log_release_failure(&name, &error);
        }
    }
}

impl Guard for MultiGuard {
    fn scope<F: Future>(&self, body: F) -> impl Future<Output = F::Output> {
        MultiGuard::scope(self, body)
    }

    async fn release(self) {
        let names = self.names().join(", ");
        if let Err(error) = self.unlock().await {
            log_release_failure(&names, &error);
        }
    }
}

/// A RedLock is not reentrant: the body runs as it is.
impl Guard for RedLockGuard {
    fn scope<F: Future>(&self, body: F) -> impl Future<Output = F::Output> {
        body
    }

    async fn release(self) {
        let name = self.name().to_owned();
        if let Err(error) = self.unlock().await {
            log_release_failure(&name, &error);
        }
    }
}

/// Gives the body's future the function's declared output type, so that `?` and `return`
/// inside it infer exactly as in the original function.
pub fn typed_body<T, F: Future<Output = T>>(body: F) -> F {
    body
}
