//! [`LockGuard`]: proof of a held lock, and the ways to give it back.

use std::future::Future;
use std::sync::Arc;

use crate::client::LockClient;
use crate::error::{LockError, Result};
use crate::held::Held;
use crate::local::Turn;
use crate::owner;
use crate::release::{self, ReleaseJob, ReleaseMode, Released};

/// A held lock. Release it with [`unlock`](LockGuard::unlock).
///
/// `Send` and `'static`: it can move between tasks and be stored in structs.
///
/// # Dropping
///
/// Dropping a guard without `unlock` (an early return, a `?`, a panic, or the cancellation
/// of the future that owned it) queues the release to the client's background task: `Drop`
/// never blocks and needs no runtime. Failures there are logged; the lease is the last
/// safety net. Prefer `unlock().await` on the normal path: it reports errors.
#[must_use = "dropping the guard releases the lock in the background at once"]
pub struct LockGuard {
    client: LockClient,
    held: Arc<Held>,
    owner: u64,
    mode: ReleaseMode,
    watchdog_id: Option<u64>,
    /// The release operation id, fixed at acquisition so that a release interrupted in
    /// `unlock` and finished by `Drop` counts once.
    release_op: u64,
    released: bool,
    /// This task's place at the head of the client's local line for the lock; given up
    /// (after the release) when the guard goes.
    _turn: Option<Turn>,
}

impl std::fmt::Debug for LockGuard {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LockGuard")
            .field("lock", &self.held.name)
            .field("owner", &self.owner)
            .field("reentrant", &(self.mode == ReleaseMode::One))
            .field("watchdog", &self.watchdog_id.is_some())
            .finish()
    }
}

impl LockGuard {
    pub(crate) fn new(
        client: LockClient,
        held: Held,
        owner: u64,
        mode: ReleaseMode,
        watchdog: bool,
        turn: Option<Turn>,
    ) -> LockGuard {
        let held = Arc::new(held);
        let watchdog_id = watchdog.then(|| client.inner.registry.register(Arc::clone(&held)));
        let release_op = client.inner.next_op();
        LockGuard {
            client,
            held,
            owner,
            mode,
            watchdog_id,
            release_op,
            released: false,
            _turn: turn,
        }
    }

    /// The lock's name.
    pub fn name(&self) -> &str {
        &self.held.name
    }

    /// Runs `future` as part of this guard's call chain: acquiring the same lock (same
    /// client, same name) anywhere inside re-enters it (hold count + 1) instead of waiting
    /// for itself. Other locks, and this lock from outside the scope, are unaffected.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> dlock_core::Result<()> {
    /// # let server = dlock_tests::RedisServer::start();
    /// # let client = dlock_core::LockClient::connect(&server.url()).await?;
    /// let lock = client.lock("account:7");
    /// let outer = lock.lock().await?;
    /// outer
    ///     .scope(async {
    ///         let inner = lock.lock().await?; // re-enters, does not deadlock
    ///         assert_eq!(lock.hold_count().await?, 2);
    ///         inner.unlock().await
    ///     })
    ///     .await?;
    /// outer.unlock().await?;
    /// # Ok(())
    /// # }
    /// ```
    ///
    /// Futures that run concurrently *inside* the scope (e.g. `join!` in it) all belong to
    /// the chain and may all re-enter; futures outside it never share ownership.
    pub fn scope<F: Future>(&self, future: F) -> impl Future<Output = F::Output> {
        owner::scope(
            self.client.inner.id_bits(),
            self.held.keys.key.as_str().into(),
            self.owner,
            future,
        )
    }

    /// Releases this hold and reports the outcome.
    ///
    /// # Errors
    ///
    /// [`LockError::NotHeld`] when the lease ran out or the lock was force-unlocked before
    /// this call (another owner's lock is never touched); Redis errors when Redis could not
    /// be reached, in which case the release is retried in the background.
    ///
    /// # Cancel safety
    ///
    /// Cancelling the returned future hands the release to the background task; a release
    /// that already reached Redis is not applied twice.
    pub async fn unlock(mut self) -> Result<()> {
        self.stop_renewal();
        let inner = &self.client.inner;
        let job = self.job();
        let outcome = release::release(&inner.backend, &inner.settings, &job).await;
        if outcome.is_ok() {
            inner.release_log.record(&job);
        }
        match outcome {
            Ok(Released::NotHeld) => {
                inner.metrics.released(false);
                self.released = true;
                Err(LockError::NotHeld {
                    name: self.held.name.to_string(),
                })
            }
            Ok(_) => {
                inner.metrics.released(true);
                self.released = true;
                Ok(())
            }
            // `released` stays false: Drop hands the same operation to the background.
            Err(error) => Err(error.into_lock_error(&self.held.name, "release")),
        }
    }

    /// Completes with [`LockError::Lost`] if the lock is lost while this guard holds it: a
    /// renewal found it gone, or the local deadline passed without a confirmed renewal
    /// (Redis unreachable). Never completes once the guard is released.
    ///
    /// The returned future owns what it needs, so it can race the critical section:
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> dlock_core::Result<()> {
    /// # let server = dlock_tests::RedisServer::start();
    /// # let client = dlock_core::LockClient::connect(&server.url()).await?;
    /// # async fn long_work() {}
    /// let guard = client.lock("report").lock().await?;
    /// tokio::select! {
    ///     () = long_work() => guard.unlock().await?,
    ///     lost = guard.lost() => return Err(lost),
    /// }
    /// # Ok(())
    /// # }
    /// ```
    pub fn lost(&self) -> impl Future<Output = LockError> + Send + 'static {
        let held = Arc::clone(&self.held);
        async move {
            let reason = held.wait_lost().await;
            LockError::Lost {
                name: held.name.to_string(),
                reason,
            }
        }
    }

    /// Whether the lock is known to be lost (see [`lost`](LockGuard::lost)).
    pub fn is_lost(&self) -> bool {
        self.held.loss().is_some()
    }

    /// The local deadline: until this instant Redis cannot have expired the lock (send
    /// time of the last confirmed acquire or renewal + lease). The watchdog moves it
    /// forward; past it the guard counts as lost.
    pub fn deadline(&self) -> std::time::Instant {
        self.held.deadline().into_std()
    }

    fn stop_renewal(&mut self) {
        self.held.mark_released();
        if let Some(id) = self.watchdog_id.take() {
            self.client.inner.registry.unregister(id);
        }
    }

    fn job(&self) -> ReleaseJob {
        ReleaseJob {
            name: Arc::clone(&self.held.name),
            keys: Arc::clone(&self.held.keys),
            field: Arc::clone(&self.held.field),
            mode: self.mode,
            op: self.release_op,
        }
    }
}

impl Drop for LockGuard {
    fn drop(&mut self) {
        if self.released {
            return;
        }
        self.stop_renewal();
        tracing::debug!(lock = %self.held.name, "dlock: guard dropped; releasing in the background");
        self.client.inner.release_in_background(self.job());
    }
}
