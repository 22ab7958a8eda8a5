//! [`SemaphorePermit`]: the permits one acquisition holds.

use std::future::Future;
use std::time::Instant;

use crate::error::{LockError, Result};
use crate::lock::guard::LockGuard;

/// `n` permits of a [`Semaphore`](crate::Semaphore), from one acquisition, held while this
/// value lives: the watchdog renews the grant (unless it has an explicit lease), and
/// [`unlock`](SemaphorePermit::unlock) or dropping it gives the permits back.
///
/// A permit is a guard like the locks' ([`LockGuard`]) with the same contract for
/// `unlock`, `lost` and `scope`; what differs is what it counts. [`permits`](Self::permits)
/// is how many it holds; there is no re-entry and no fencing token (permits are not
/// exclusive, so no order of holders exists for a token to number):
///
/// ```compile_fail
/// # async fn f(permit: dlock::SemaphorePermit) {
/// let token = permit.fencing_token(); // no such method: permits are not fenced
/// # }
/// ```
#[must_use = "dropping the permit gives its permits back at once, in the background"]
#[derive(Debug)]
pub struct SemaphorePermit {
    guard: LockGuard,
    permits: u32,
}

impl SemaphorePermit {
    pub(super) fn new(guard: LockGuard, permits: u32) -> SemaphorePermit {
        SemaphorePermit { guard, permits }
    }

    /// The guard underneath, for the attribute's runtime, which runs every single-key
    /// primitive's body the same way.
    pub(crate) fn into_guard(self) -> LockGuard {
        self.guard
    }

    /// The semaphore's name.
    pub fn name(&self) -> &str {
        self.guard.name()
    }

    /// How many permits this acquisition holds.
    pub fn permits(&self) -> u32 {
        self.permits
    }

    /// The permits Redis holds for this grant now: [`permits`](Self::permits) while it is
    /// held, 0 once its lease ran out or it was released.
    ///
    /// # Errors
    ///
    /// Redis errors.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: it only reads.
    pub async fn held_permits(&self) -> Result<u32> {
        self.guard.hold_count().await
    }

    /// Whether Redis still has this grant (its lease has not run out and nobody reclaimed
    /// it).
    ///
    /// # Errors
    ///
    /// Redis errors.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: it only reads.
    pub async fn is_held(&self) -> Result<bool> {
        self.guard.is_held().await
    }

    /// Runs `future` as part of this permit's call chain, as [`LockGuard::scope`] does.
    /// A semaphore is not reentrant: an acquisition inside takes new permits like any
    /// other. The attribute runs its body this way, as it does for every guard.
    pub fn scope<F: Future>(&self, future: F) -> impl Future<Output = F::Output> + use<F> {
        self.guard.scope(future)
    }

    /// Gives the permits back and reports the outcome: the same contract as
    /// [`LockGuard::unlock`].
    ///
    /// # Errors
    ///
    /// [`LockError::NotHeld`] when the grant's lease ran out (and the permits went back to
    /// the pool) before this call; Redis errors when Redis could not be reached, in which
    /// case the release is retried in the background.
    ///
    /// # Cancel safety
    ///
    /// Cancelling the returned future hands the release to the background task; a release
    /// that already reached Redis is not applied twice.
    pub async fn unlock(self) -> Result<()> {
        self.guard.unlock().await
    }

    /// Completes with [`LockError::Lost`] if the grant is lost while held (see
    /// [`LockGuard::lost`]).
    pub fn lost(&self) -> impl Future<Output = LockError> + Send + 'static + use<> {
        self.guard.lost()
    }

    /// Whether the grant is known to be lost.
    pub fn is_lost(&self) -> bool {
        self.guard.is_lost()
    }

    /// Until this instant Redis cannot have expired the grant (see
    /// [`LockGuard::deadline`]).
    pub fn deadline(&self) -> Instant {
        self.guard.deadline()
    }
}
