//! [`LockGuard`]: proof of a held lock, and the ways to give it back.

use std::future::Future;
use std::sync::Arc;

use tokio::time::Instant;

use crate::client::LockClient;
use crate::error::{LockError, Result};
use crate::fence::Fence;
use crate::lock::keys::LockKeys;
use crate::scripts::catalog::lock::scripts;
use crate::sync::held::Held;
use crate::sync::observe::{self, HoldRecord, Observed};
use crate::sync::owner;
use crate::sync::release::{self, ReleaseJob, Released, Sending};

/// A held lock: one hold of it. Release it with [`unlock`](LockGuard::unlock).
///
/// `Send` and `'static`: it can move between tasks and be stored in structs.
///
/// Every guard gives back exactly its own hold. A re-entry (an acquisition inside the
/// [`scope`](LockGuard::scope) of a guard of the same lock) adds a hold under the same
/// owner; the lock is free in Redis only when the owner's last hold is given back, so a
/// live inner guard keeps the lock even after the outer guard was released.
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
    watchdog_id: Option<u64>,
    /// The release, built at acquisition with its own operation id, so that a release
    /// interrupted in `unlock` and finished by `Drop` counts once.
    release: ReleaseJob,
    released: bool,
    /// Counts the lock as held until the guard is gone; `None` for the guards a
    /// multi-lock is made of (the multi-lock's guard has the record).
    record: Option<HoldRecord>,
}

impl std::fmt::Debug for LockGuard {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LockGuard")
            .field("lock", &self.held.name)
            .field("owner", &self.held.field)
            .field("watchdog", &self.watchdog_id.is_some())
            .finish()
    }
}

impl LockGuard {
    /// A guard for `held`, renewed by the watchdog when it has a renewal lease, and given
    /// back by the primitive's release `release(op)` (`op`: the release's operation id).
    ///
    /// Every primitive hands out this guard: the hold's owner field in its hash
    /// ([`Held::key`], [`Held::field`]) counts its holds, and the release operation says
    /// how to give one back.
    pub(crate) fn new(
        client: LockClient,
        held: Arc<Held>,
        release: impl FnOnce(u64) -> ReleaseJob,
    ) -> LockGuard {
        let watchdog_id = held
            .renewal
            .is_some()
            .then(|| client.inner.registry.register(Arc::clone(&held)));
        let release = release(client.inner.next_op());
        LockGuard {
            client,
            held,
            watchdog_id,
            release,
            released: false,
            record: None,
        }
    }

    /// The hold this guard gives back.
    pub(crate) fn held(&self) -> &Arc<Held> {
        &self.held
    }

    /// The span around the attribute's body under this guard.
    pub(crate) fn hold_span(&self) -> tracing::Span {
        observe::hold_span(&self.held.name, self.held.label())
    }

    /// The client the lock belongs to.
    pub(crate) fn client(&self) -> &LockClient {
        &self.client
    }

    /// The lock's name.
    pub fn name(&self) -> &str {
        &self.held.name
    }

    /// The fencing token of this hold: `Some` for the lock, the fair lock and the write
    /// lock (minted by Redis when the owner got the lock, larger than every token of that
    /// lock before it); `None` for read locks, semaphore permits and clients built with
    /// [`fencing_tokens(false)`](crate::LockClientBuilder::fencing_tokens). A re-entry
    /// returns its outer hold's token, so a nested section's write never makes the outer
    /// section's later write look stale.
    ///
    /// Send it with every write the lock protects and let the storage refuse a token
    /// lower than the highest it has seen: that stops a holder who paused past its lease
    /// (or lost the lock in a failover) from overwriting its successor's work.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> dlock::Result<()> {
    /// # let server = dlock_tests::RedisServer::start();
    /// # let client = dlock::LockClient::connect(&server.url()).await?;
    /// let lock = client.lock("invoice:9");
    /// let first = lock.lock().await?;
    /// let token = first.fencing_token().expect("locks are fenced by default");
    /// first.unlock().await?;
    /// let second = lock.lock().await?;
    /// assert!(second.fencing_token() > Some(token));
    /// second.unlock().await?;
    /// # Ok(())
    /// # }
    /// ```
    pub fn fencing_token(&self) -> Option<Fence> {
        self.held.fence
    }

    /// Runs `future` as part of this guard's call chain: acquiring the same lock (same
    /// client, same name) anywhere inside re-enters it (hold count + 1) instead of waiting
    /// for itself. Other locks, and this lock from outside the scope, are unaffected.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> dlock::Result<()> {
    /// # let server = dlock_tests::RedisServer::start();
    /// # let client = dlock::LockClient::connect(&server.url()).await?;
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
    ///
    /// Each re-entry is a hold of its own, given back by its own guard: an inner guard that
    /// leaves the scope (guards are `Send + 'static`) keeps the lock held after the outer
    /// guard is released. A re-entry never stretches an explicit lease: without a lease of
    /// its own it lives on the outer guard's lease (renewed with it when the outer guard
    /// has the watchdog, expiring with it otherwise), and with an explicit lease the lock
    /// expires no earlier than both leases.
    ///
    /// The scope owns the lock only while this guard does. Code that runs on after the
    /// guard was released or lost (a task spawned inside the scope, say) acquires as a new
    /// owner, waiting like anyone else.
    ///
    /// A task spawned inside the scope is a separate owner too, from the start: it does
    /// not inherit the scope (tokio task-locals stay with their task), so its `lock()`
    /// waits for this guard, and a scope that awaits such a task while holding the guard
    /// waits forever. Run the spawned future inside the scope instead —
    /// `tokio::spawn(guard.scope(work))` — or release the guard before waiting for the
    /// task.
    ///
    /// Outside a scope, the same task taking the lock again while it holds it
    /// (`lock()` twice) waits for itself, forever with `lock()`. That cannot be refused
    /// outright: the same state is legitimate when another future of the task (under
    /// `join!`) holds the lock and will release it. After 5 s of such a wait dlock logs a
    /// warning naming the lock and this method.
    pub fn scope<F: Future>(&self, future: F) -> impl Future<Output = F::Output> + use<F> {
        owner::scope(self.client.inner.id_bits(), Arc::clone(&self.held), future)
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
        inner.keep_running();
        let job = &self.release;
        let next_in_line = self.held.next_in_line();
        let timing = inner.settings.release_timing();
        let sent_at = Instant::now();
        inner.release_log.record(job);
        let outcome =
            release::release(&inner.backend, timing, job, next_in_line, Sending::First).await;
        if let Ok(released) = outcome {
            match released {
                Released::Free(next) => self.held.give_up_turn_after(next, sent_at),
                Released::NotHeld | Released::StillHeld(_) => self.held.give_up_turn(),
            }
        }
        match outcome {
            Ok(Released::NotHeld) => {
                inner.metrics.released(false);
                if let Some(label) = self.held.label() {
                    observe::release_failed(label);
                }
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

    /// Gives back this hold but leaves the lock taken in Redis until `until` (the
    /// attribute's `min_hold`: acquisition + the minimum hold), so that no other node runs
    /// the same job before then. Value-checked in `hold_until.lua`: a lock that is no
    /// longer this owner's is not touched. The waiters promised a sleep past `until` are
    /// told to try again, so that they take the lock when the shorter hold ends, not at
    /// their next recheck. Past `until` it is a plain [`unlock`]; a re-entered lock (the owner holds
    /// it more than once) gives back one hold normally.
    ///
    /// When Redis fails, the lock is left to expire at the end of its lease (never freed
    /// earlier than asked), and the error is returned.
    ///
    /// [`unlock`]: LockGuard::unlock
    pub(crate) async fn hold_until(mut self, until: std::time::Instant) -> Result<()> {
        let remaining = until.saturating_duration_since(std::time::Instant::now());
        let millis = u64::try_from(remaining.as_millis()).unwrap_or(u64::MAX);
        if millis == 0 {
            return self.unlock().await;
        }
        self.stop_renewal();
        let inner = &self.client.inner;
        inner.keep_running();
        // Only the lock's guards come here: its waiter registry is the lock's.
        let keys = LockKeys::new(&inner.settings.key_prefix, &self.held.name);
        let mut invocation = scripts().hold_until.prepare_invoke();
        invocation
            .key(&*self.held.key)
            .key(&keys.channel)
            .key(&keys.naps)
            .arg(&*self.held.field)
            .arg(millis)
            .arg(inner.backend.publish_command());
        let reply: std::result::Result<i64, _> = inner.backend.invoke(&invocation).await;
        if let Ok(holds) = reply
            && holds > 1
        {
            return self.unlock().await;
        }
        // Applied, not ours, or unknown: in every case nothing is left for Drop to release
        // (an unknown outcome is left to the lease rather than freed before `until`).
        self.released = true;
        self.held.give_up_turn();
        match reply {
            Ok(0) => {
                inner.metrics.released(true);
                Ok(())
            }
            Ok(_) => {
                inner.metrics.released(false);
                Err(LockError::NotHeld {
                    name: self.held.name.to_string(),
                })
            }
            Err(error) => Err(error.into_lock_error(&self.held.name, "hold")),
        }
    }

    /// How many holds this guard's owner has on the lock in Redis: 1 for a guard taken
    /// outside any scope, one more for every live re-entry of its call chain, 0 when the
    /// lock is no longer this owner's (lease ran out, force-unlocked).
    ///
    /// Unlike [`Lock::hold_count`](crate::Lock::hold_count), which asks about the current
    /// call chain and is 0 outside the guard's [`scope`](LockGuard::scope), this asks
    /// about the guard itself, so it is the one to use right after `lock()`.
    ///
    /// # Errors
    ///
    /// Redis errors.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: it only reads.
    pub async fn hold_count(&self) -> Result<u32> {
        let count: Option<u32> = self
            .client
            .inner
            .backend
            .query(
                redis::cmd("HGET")
                    .arg(&*self.held.key)
                    .arg(&*self.held.field),
            )
            .await
            .map_err(|e| e.into_lock_error(&self.held.name, "check"))?;
        Ok(count.unwrap_or(0))
    }

    /// Whether this guard's owner still holds the lock in Redis (see
    /// [`hold_count`](LockGuard::hold_count)).
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

    /// Completes with [`LockError::Lost`] if the lock is lost while this guard holds it: a
    /// renewal found it gone, or the local deadline passed without a confirmed renewal
    /// (Redis unreachable). Never completes once the guard is released.
    ///
    /// The returned future owns what it needs, so it can race the critical section:
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> dlock::Result<()> {
    /// # let server = dlock_tests::RedisServer::start();
    /// # let client = dlock::LockClient::connect(&server.url()).await?;
    /// # async fn long_work() {}
    /// let guard = client.lock("report").lock().await?;
    /// tokio::select! {
    ///     () = long_work() => guard.unlock().await?,
    ///     lost = guard.lost() => return Err(lost),
    /// }
    /// # Ok(())
    /// # }
    /// ```
    pub fn lost(&self) -> impl Future<Output = LockError> + Send + 'static + use<> {
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
    /// forward; past it the guard counts as lost. A lock another client's release gave
    /// this guard's owner starts with the 100 ms grant's deadline, moved to the lease's
    /// by the extension sent as the guard is handed out (one round trip).
    pub fn deadline(&self) -> std::time::Instant {
        self.held.deadline().into_std()
    }

    fn stop_renewal(&mut self) {
        self.held.mark_released();
        if let Some(id) = self.watchdog_id.take() {
            self.client.inner.registry.unregister(id);
        }
    }
}

impl Observed for LockGuard {
    fn observe(&mut self, hold: HoldRecord) {
        self.held.set_label(hold.label());
        self.record = Some(hold);
    }
}

impl Drop for LockGuard {
    fn drop(&mut self) {
        if self.released {
            return;
        }
        self.stop_renewal();
        tracing::debug!(lock = %self.held.name, "dlock: guard dropped; releasing in the background");
        let mut job = self.release.clone();
        job.label = self.held.label();
        self.client.inner.release_in_background(job);
        // The next local waiter may find the lock still held until the background
        // release ran; it then waits for the release's unlock message like anyone else.
        self.held.give_up_turn();
    }
}
