//! The acquisition verbs of Redisson's `RLock` (`lock()`, `lock(lease)`, `tryLock()`,
//! `tryLock(wait)`, `tryLock(wait, lease)`), written once for every lock handle over its
//! one acquisition, [`Acquire::acquire`], which the attribute's runtime calls directly.

use std::future::Future;
use std::time::Duration;

use crate::error::Result;

/// The one acquisition a lock handle's verbs come down to.
pub(crate) trait Acquire {
    /// What an acquisition hands out.
    type Guard;

    /// The wait of a call that names none: the client's `default_wait` (`None`: no end).
    fn default_wait(&self) -> Option<Duration>;

    /// Acquires, waiting up to `wait` (`None`: no end), with an explicit `lease` or (when
    /// `None`) the watchdog; `template` is the attribute's key as written (`goods:<id>`),
    /// the label of the acquisition's span and metrics (`None` for the manual API).
    fn acquire(
        &self,
        wait: Option<Duration>,
        lease: Option<Duration>,
        template: Option<&'static str>,
    ) -> impl Future<Output = Result<Self::Guard>> + Send;
}

/// The five verbs of a handle implementing [`Acquire`], with their documentation;
/// `$handle` names the type in links, `$guard` is what they return, `$cancel` the link to
/// the notes on cancellation.
macro_rules! acquisition_verbs {
    ($handle:literal, $guard:ty, $cancel:literal) => {
        #[doc = concat!("Acquires, waiting as long as it takes (or the client's `default_wait`); the watchdog keeps the lease alive while the guard lives. See [`", $handle, "`] for what acquiring means here.")]
        ///
        /// # Errors
        ///
        /// [`LockError::Timeout`](crate::LockError::Timeout) only when the client has a
        /// `default_wait`; [`LockError::Redis`](crate::LockError::Redis) /
        /// [`LockError::CommandTimeout`](crate::LockError::CommandTimeout) when Redis
        /// fails (after riding out a failover for up to the client's `failover_wait`);
        #[doc = concat!("the refusals [`", $handle, "`] lists (a bad name, another kind on the name...).")]
        ///
        /// # Cancel safety
        ///
        #[doc = concat!("Cancel safe: see [the notes](", $cancel, ").")]
        pub async fn lock(&self) -> $crate::error::Result<$guard> {
            use $crate::sync::verbs::Acquire as _;
            self.acquire(self.default_wait(), None, None).await
        }

        /// Acquires, waiting as long as it takes (or the client's `default_wait`); it
        /// expires after `lease` and is not renewed.
        ///
        /// # Errors
        ///
        /// [`LockError::InvalidDuration`](crate::LockError::InvalidDuration) for a lease
        /// under 1 ms or over [`MAX_LEASE`](crate::limits::MAX_LEASE) (nothing is sent to
        #[doc = concat!("Redis); otherwise as [`lock`](", $handle, "::lock).")]
        ///
        /// # Cancel safety
        ///
        #[doc = concat!("Cancel safe: see [the notes](", $cancel, ").")]
        pub async fn lock_with_lease(
            &self,
            lease: std::time::Duration,
        ) -> $crate::error::Result<$guard> {
            use $crate::sync::verbs::Acquire as _;
            self.acquire(self.default_wait(), Some(lease), None).await
        }

        /// One attempt, no waiting; the watchdog keeps the lease alive.
        ///
        /// # Errors
        ///
        /// [`LockError::Timeout`](crate::LockError::Timeout) when it is taken now;
        #[doc = concat!("otherwise as [`lock`](", $handle, "::lock).")]
        ///
        /// # Cancel safety
        ///
        #[doc = concat!("Cancel safe: see [the notes](", $cancel, ").")]
        pub async fn try_lock(&self) -> $crate::error::Result<$guard> {
            use $crate::sync::verbs::Acquire as _;
            self.acquire(Some(std::time::Duration::ZERO), None, None)
                .await
        }

        /// Waits up to `wait`; the watchdog keeps the lease alive.
        ///
        /// # Errors
        ///
        /// [`LockError::Timeout`](crate::LockError::Timeout) when `wait` passes first;
        #[doc = concat!("otherwise as [`lock`](", $handle, "::lock).")]
        ///
        /// # Cancel safety
        ///
        #[doc = concat!("Cancel safe: see [the notes](", $cancel, ").")]
        pub async fn try_lock_for(
            &self,
            wait: std::time::Duration,
        ) -> $crate::error::Result<$guard> {
            use $crate::sync::verbs::Acquire as _;
            self.acquire(Some(wait), None, None).await
        }

        /// Waits up to `wait`; it expires after `lease` and is not renewed.
        ///
        /// # Errors
        ///
        /// [`LockError::Timeout`](crate::LockError::Timeout) when `wait` passes first;
        #[doc = concat!("otherwise as [`lock_with_lease`](", $handle, "::lock_with_lease).")]
        ///
        /// # Cancel safety
        ///
        #[doc = concat!("Cancel safe: see [the notes](", $cancel, ").")]
        pub async fn try_lock_with_lease(
            &self,
            wait: std::time::Duration,
            lease: std::time::Duration,
        ) -> $crate::error::Result<$guard> {
            use $crate::sync::verbs::Acquire as _;
            self.acquire(Some(wait), Some(lease), None).await
        }
    };
}
pub(crate) use acquisition_verbs;
