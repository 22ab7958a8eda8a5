//! The API's decided contracts that the type system can state (docs/API.md), checked at
//! compile time: this file compiling is the test. Every lock handle has the same five
//! verbs returning its guard; every guard can leave its scope (`Send + 'static`), has
//! `unlock`, `scope`, `lost`, `is_lost` and `deadline`; handles and guards are `Debug`;
//! handles are cheap `Clone`s shareable across tasks. What the type system refuses (no
//! `fencing_token` on a `SemaphorePermit` or a `RedLockGuard`) is a `compile_fail` doc test
//! on those types.

use std::future::Future;
use std::time::{Duration, Instant};

use dlock::redlock::{RedLock, RedLockGuard};
use dlock::{
    FairLock, Lock, LockError, LockGuard, MultiGuard, MultiLock, ReadLock, Semaphore,
    SemaphorePermit, WriteLock,
};

fn handle<H: Clone + Send + Sync + std::fmt::Debug + 'static>() {}
fn guard<G: Send + std::fmt::Debug + 'static>() {}

/// The five verbs, each returning `G` (not called: only their types are checked).
macro_rules! five_verbs {
    ($handle:ty, $guard:ty) => {{
        async fn verbs(h: &$handle) -> Vec<dlock::Result<$guard>> {
            let (wait, lease) = (Duration::from_secs(1), Duration::from_secs(5));
            vec![
                h.lock().await,
                h.lock_with_lease(lease).await,
                h.try_lock().await,
                h.try_lock_for(wait).await,
                h.try_lock_with_lease(wait, lease).await,
            ]
        }
        let _ = verbs;
    }};
}

/// A guard's common surface (not called: only the types are checked).
macro_rules! guard_surface {
    ($guard:ty) => {{
        async fn surface(g: $guard) -> dlock::Result<()> {
            let _lost: LockError = {
                let lost = g.lost();
                fn owned<F: Future<Output = LockError> + Send + 'static>(f: F) -> F {
                    f
                }
                owned(lost).await
            };
            let _: bool = g.is_lost();
            let _: Instant = g.deadline();
            let _: u8 = g.scope(async { 1 }).await;
            g.unlock().await
        }
        let _ = surface;
    }};
}

#[test]
fn every_handle_and_guard_has_the_decided_surface() {
    handle::<Lock>();
    handle::<FairLock>();
    handle::<ReadLock>();
    handle::<WriteLock>();
    handle::<MultiLock>();
    handle::<RedLock>();
    handle::<Semaphore>();
    guard::<LockGuard>();
    guard::<SemaphorePermit>();
    guard::<MultiGuard>();
    guard::<RedLockGuard>();

    five_verbs!(Lock, LockGuard);
    five_verbs!(FairLock, LockGuard);
    five_verbs!(ReadLock, LockGuard);
    five_verbs!(WriteLock, LockGuard);
    five_verbs!(MultiLock, MultiGuard);
    five_verbs!(RedLock, RedLockGuard);

    guard_surface!(LockGuard);
    guard_surface!(SemaphorePermit);
    guard_surface!(MultiGuard);
    guard_surface!(RedLockGuard);
}
