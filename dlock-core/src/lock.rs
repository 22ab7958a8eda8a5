//! [`Lock`]: a named lock handle and the acquisition loop.

use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use crate::backend::CallError;
use crate::client::{LockClient, ReplicaAcks};
use crate::error::{LockError, Result};
use crate::guard::LockGuard;
use crate::held::Held;
use crate::keys::LockKeys;
use crate::lease::lease_millis;
use crate::owner;
use crate::pubsub::Subscription;
use crate::release::{ReleaseJob, ReleaseMode};
use crate::scripts::scripts;

/// The longest lock name (and the longest key prefix) accepted, in bytes: 4096.
///
/// The name is repeated in the lock's unlock channel and release memo keys, in every
/// unlock message and in every log line about the lock, so a runaway name (say, a request
/// body used as a key by mistake) multiplies. Longer names are reported as
/// [`LockError::InvalidName`] by every operation; nothing is sent to Redis.
pub const MAX_NAME_LEN: usize = 4096;

/// Checks a lock name or key prefix (`what`) for what every name must satisfy: at most
/// [`MAX_NAME_LEN`] bytes and no ASCII control characters. Control characters (NUL, line
/// breaks, escape...) are never meant in a key, and would corrupt log lines that show it.
pub(crate) fn check_text(what: &'static str, text: &str) -> Result<()> {
    if text.len() > MAX_NAME_LEN {
        return Err(LockError::invalid_name(
            what,
            text,
            format!("a {what} is at most {MAX_NAME_LEN} bytes"),
        ));
    }
    if let Some((at, control)) = text.char_indices().find(|(_, c)| c.is_ascii_control()) {
        return Err(LockError::invalid_name(
            what,
            text,
            format!(
                "a {what} must not contain ASCII control characters; found U+{:04X} at byte {at}",
                u32::from(control)
            ),
        ));
    }
    Ok(())
}

/// A handle to one named lock, from [`LockClient::lock`]. Cheap to clone; creating it does
/// not talk to Redis. A name that is empty, longer than [`MAX_NAME_LEN`] bytes or contains
/// an ASCII control character is reported as [`LockError::InvalidName`] by every
/// operation.
///
/// Every acquisition method returns a [`LockGuard`]. They differ in how long they wait
/// and whether the lock has an explicit lease:
///
/// | method | waits | lease |
/// |---|---|---|
/// | [`lock`](Lock::lock) | until acquired (or the client's `default_wait`) | watchdog |
/// | [`lock_with_lease`](Lock::lock_with_lease) | until acquired (or `default_wait`) | explicit |
/// | [`try_lock`](Lock::try_lock) | no | watchdog |
/// | [`try_lock_for`](Lock::try_lock_for) | up to `wait` | watchdog |
/// | [`try_lock_with`](Lock::try_lock_with) | up to `wait` | explicit |
///
/// # Cancel safety
///
/// All acquisition methods are cancel safe: dropping the future never leaves a lock
/// behind. If the acquire script may have run when the future is dropped (its reply was
/// outstanding), a release for the same owner is queued in the background.
#[derive(Clone)]
pub struct Lock {
    client: LockClient,
    name: Arc<str>,
    keys: Arc<LockKeys>,
}

impl std::fmt::Debug for Lock {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Lock")
            .field("name", &self.name)
            .field("key", &self.keys.key)
            .finish()
    }
}

impl Lock {
    pub(crate) fn new(client: LockClient, name: &str) -> Lock {
        let keys = LockKeys::new(&client.inner.settings.key_prefix, name);
        Lock {
            client,
            name: name.into(),
            keys: Arc::new(keys),
        }
    }

    /// Names are checked when used, so that `client.lock(name)` stays infallible.
    fn check_name(&self) -> Result<()> {
        if self.name.is_empty() {
            return Err(LockError::invalid_name(
                "lock name",
                "",
                "a lock name must not be empty".to_owned(),
            ));
        }
        check_text("lock name", &self.name)
    }

    /// The lock's name, without the key prefix.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The Redis key of the lock hash (key prefix + name).
    pub fn key(&self) -> &str {
        &self.keys.key
    }

    /// Acquires the lock, waiting as long as it takes (or the client's `default_wait`);
    /// the watchdog keeps the lease alive while the guard lives.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> dlock_core::Result<()> {
    /// # let server = dlock_tests::RedisServer::start();
    /// # let client = dlock_core::LockClient::connect(&server.url()).await?;
    /// let lock = client.lock("goods:42");
    /// let guard = lock.lock().await?;
    /// assert!(lock.is_locked().await?);
    /// guard.unlock().await?;
    /// assert!(!lock.is_locked().await?);
    /// # Ok(())
    /// # }
    /// ```
    ///
    /// # Errors
    ///
    /// [`LockError::Redis`] / [`LockError::CommandTimeout`] when Redis fails (after
    /// waiting through a failover for up to the client's `failover_wait`);
    /// [`LockError::Timeout`] only when the client has a `default_wait`.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: see [the type-level notes](Lock#cancel-safety).
    pub async fn lock(&self) -> Result<LockGuard> {
        self.acquire(self.client.inner.settings.default_wait, None)
            .await
    }

    /// Acquires the lock, waiting as long as it takes; the key expires after `lease` and is
    /// not renewed.
    ///
    /// # Errors
    ///
    /// [`LockError::InvalidDuration`] for a lease under 1 ms or over
    /// [`MAX_LEASE`](crate::MAX_LEASE) (nothing is sent to Redis); Redis errors as for
    /// [`lock`](Lock::lock).
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: see [the type-level notes](Lock#cancel-safety).
    pub async fn lock_with_lease(&self, lease: Duration) -> Result<LockGuard> {
        self.acquire(self.client.inner.settings.default_wait, Some(lease))
            .await
    }

    /// One attempt, no waiting; the watchdog keeps the lease alive.
    ///
    /// # Errors
    ///
    /// [`LockError::Timeout`] when another owner holds the lock.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: see [the type-level notes](Lock#cancel-safety).
    pub async fn try_lock(&self) -> Result<LockGuard> {
        self.acquire(Some(Duration::ZERO), None).await
    }

    /// Waits up to `wait` for the lock; the watchdog keeps the lease alive.
    ///
    /// # Errors
    ///
    /// [`LockError::Timeout`] when `wait` passes before the lock is free.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: see [the type-level notes](Lock#cancel-safety).
    pub async fn try_lock_for(&self, wait: Duration) -> Result<LockGuard> {
        self.acquire(Some(wait), None).await
    }

    /// Waits up to `wait` for the lock; the key expires after `lease` and is not renewed.
    ///
    /// # Errors
    ///
    /// [`LockError::Timeout`] when `wait` passes first; [`LockError::InvalidDuration`] for
    /// a bad lease.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: see [the type-level notes](Lock#cancel-safety).
    pub async fn try_lock_with(&self, wait: Duration, lease: Duration) -> Result<LockGuard> {
        self.acquire(Some(wait), Some(lease)).await
    }

    /// Whether anyone holds the lock.
    ///
    /// # Errors
    ///
    /// Redis errors.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: it only reads.
    pub async fn is_locked(&self) -> Result<bool> {
        self.check_name()?;
        let exists: bool = self
            .query("check", redis::cmd("EXISTS").arg(&self.keys.key))
            .await?;
        Ok(exists)
    }

    /// Whether the current call chain holds the lock: code inside
    /// [`LockGuard::scope`] of a guard of this lock (or inside a `#[distributed_lock]`
    /// function). Outside such a scope there is no call-chain owner and this is `false`.
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

    /// How many times the current call chain holds the lock (0 outside a guard's
    /// [`scope`](LockGuard::scope), or when the lease ran out).
    ///
    /// # Errors
    ///
    /// Redis errors.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: it only reads.
    pub async fn hold_count(&self) -> Result<u32> {
        self.check_name()?;
        let inner = &self.client.inner;
        let Some(owner) = owner::current_owner(inner.id_bits(), &self.keys.key) else {
            return Ok(0);
        };
        let field = format!("{}:{owner}", inner.id);
        let count: Option<u32> = self
            .query("check", redis::cmd("HGET").arg(&self.keys.key).arg(field))
            .await?;
        Ok(count.unwrap_or(0))
    }

    /// Time until the lock expires; `None` when it is not locked (or has no expiry, which
    /// dlock never creates).
    ///
    /// # Errors
    ///
    /// Redis errors.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: it only reads.
    pub async fn remaining_lease(&self) -> Result<Option<Duration>> {
        self.check_name()?;
        let ttl: i64 = self
            .query("check", redis::cmd("PTTL").arg(&self.keys.key))
            .await?;
        Ok(u64::try_from(ttl).ok().map(Duration::from_millis))
    }

    /// Deletes the lock whoever holds it and wakes a waiter. Returns whether a lock was
    /// deleted. The former holder's guard finds out at its next renewal (`lost()`), and
    /// its `unlock` reports [`LockError::NotHeld`].
    ///
    /// # Errors
    ///
    /// Redis errors.
    ///
    /// # Cancel safety
    ///
    /// If cancelled after the command was sent, the lock may or may not have been deleted.
    pub async fn force_unlock(&self) -> Result<bool> {
        self.check_name()?;
        let inner = &self.client.inner;
        let mut invocation = scripts().force_unlock.prepare_invoke();
        invocation
            .key(&self.keys.key)
            .key(&self.keys.channel)
            .arg(inner.backend.publish_command());
        let deleted: bool = inner
            .backend
            .invoke(&invocation)
            .await
            .map_err(|e| e.into_lock_error(&self.name, "force-unlock"))?;
        tracing::info!(lock = %self.name, deleted, "dlock: force unlock");
        Ok(deleted)
    }

    fn timeout(&self, wait: Option<Duration>) -> LockError {
        LockError::Timeout {
            name: self.name.to_string(),
            waited: wait.unwrap_or_default(),
        }
    }

    async fn query<T: redis::FromRedisValue>(
        &self,
        action: &'static str,
        cmd: &redis::Cmd,
    ) -> Result<T> {
        self.client
            .inner
            .backend
            .query(cmd)
            .await
            .map_err(|e| e.into_lock_error(&self.name, action))
    }

    /// The acquisition loop. `wait: None` waits forever; `lease: None` uses the watchdog.
    async fn acquire(&self, wait: Option<Duration>, lease: Option<Duration>) -> Result<LockGuard> {
        self.check_name()?;
        let inner = &self.client.inner;
        let settings = &inner.settings;
        let watchdog = lease.is_none();
        let lease = lease.unwrap_or(settings.watchdog_timeout);
        let lease_ms = lease_millis("lease", lease)?;
        let started = Instant::now();
        // A wait too long to represent is a wait without end.
        let give_up_at = wait.and_then(|wait| started.checked_add(wait));

        let reentered = owner::current_owner(inner.id_bits(), &self.keys.key);
        // Local contenders line up; a re-entry already holds its chain's turn.
        let turn = match reentered {
            Some(_) => None,
            None => match inner.local.wait_turn(&self.keys.key, give_up_at).await {
                Some(turn) => Some(turn),
                None => {
                    inner.metrics.timed_out();
                    return Err(self.timeout(wait));
                }
            },
        };
        let owner = reentered.unwrap_or_else(|| inner.next_owner());
        let field: Arc<str> = format!("{}:{owner}", inner.id).into();
        let mut attempt = Attempt {
            lock: self,
            field: Arc::clone(&field),
            // Only a fresh owner may be cleaned up wholesale; a re-entry's stray hold goes
            // with the outermost guard's release.
            compensate: reentered.is_none(),
            maybe_applied: false,
        };
        let mut subscription: Option<Subscription> = None;

        // Start of the current run of Redis errors, if any.
        let mut outage: Option<Instant> = None;
        loop {
            let (sent_at, busy_ttl) = match attempt.run(lease_ms, give_up_at).await {
                Ok(reply) => {
                    outage = None;
                    reply
                }
                Err(error) => {
                    let since = *outage.get_or_insert_with(Instant::now);
                    let pause = settings.max_wait_recheck.min(Duration::from_millis(200));
                    let patient = wait != Some(Duration::ZERO)
                        && error.is_transient()
                        && since.elapsed().saturating_add(pause) < settings.failover_wait
                        && give_up_at.is_none_or(|at| before(pause, at));
                    if !patient {
                        inner.metrics.acquire_failed();
                        return Err(error.into_lock_error(&self.name, "acquire"));
                    }
                    tracing::debug!(lock = %self.name, %error, "dlock: Redis unavailable while waiting; retrying");
                    tokio::time::sleep(pause).await;
                    continue;
                }
            };
            let Some(ttl) = busy_ttl else {
                attempt.maybe_applied = false;
                let held = Held::new(
                    Arc::clone(&self.name),
                    Arc::clone(&self.keys),
                    field,
                    lease,
                    sent_at,
                    Arc::clone(&inner.metrics),
                );
                inner.metrics.acquired(started.elapsed());
                tracing::debug!(lock = %self.name, owner, reentered = reentered.is_some(), waited = ?started.elapsed(), "dlock: acquired");
                let mode = if reentered.is_some() {
                    ReleaseMode::One
                } else {
                    ReleaseMode::All
                };
                return Ok(LockGuard::new(
                    self.client.clone(),
                    held,
                    owner,
                    mode,
                    watchdog,
                    turn,
                ));
            };

            let now = Instant::now();
            let remaining = match give_up_at {
                Some(at) if at <= now => {
                    tracing::debug!(lock = %self.name, waited = ?started.elapsed(), "dlock: wait budget spent");
                    inner.metrics.timed_out();
                    return Err(self.timeout(wait));
                }
                Some(at) => at - now,
                None => Duration::MAX,
            };
            let recheck = settings.max_wait_recheck.min(remaining);
            match &mut subscription {
                None => {
                    // Subscribe, then try again once Redis confirmed: a release published
                    // between our attempt and the subscription would otherwise be missed.
                    tracing::trace!(lock = %self.name, ttl, "dlock: waiting for release");
                    let new = subscription.insert(inner.pubsub.subscribe(&self.keys.channel));
                    let _ = tokio::time::timeout(recheck, new.confirmed()).await;
                }
                Some(subscription) => {
                    // Never sleep past the holder's TTL, the recheck interval or the budget.
                    let nap = u64::try_from(ttl)
                        .map(Duration::from_millis)
                        .map_or(recheck, |ttl| ttl.min(recheck));
                    let _ = tokio::time::timeout(nap, subscription.notified()).await;
                }
            }
        }
    }
}

/// Whether `pause` from now ends before `deadline`; a pause too long to represent does not.
fn before(pause: Duration, deadline: Instant) -> bool {
    Instant::now()
        .checked_add(pause)
        .is_some_and(|end| end < deadline)
}

/// One owner's attempts to run the acquire script; queues a release if dropped while an
/// attempt may have taken the lock (its reply never came).
struct Attempt<'a> {
    lock: &'a Lock,
    field: Arc<str>,
    compensate: bool,
    maybe_applied: bool,
}

impl Attempt<'_> {
    /// Runs the acquire script, retrying fast transient failures. Returns the send time of
    /// the successful call and `None` when acquired, or the holder's TTL in ms when busy.
    async fn run(
        &mut self,
        lease_ms: u64,
        give_up_at: Option<Instant>,
    ) -> Result<(Instant, Option<i64>), CallError> {
        let inner = &self.lock.client.inner;
        let mut invocation = scripts().acquire.prepare_invoke();
        invocation
            .key(&self.lock.keys.key)
            .arg(lease_ms)
            .arg(&*self.field);
        let started = Instant::now();
        let mut failures = 0;
        loop {
            // Stays true after an error reply too: a script refused half-way (an ACL
            // denying PEXPIRE after HSET, say) keeps what it wrote, so the compensating
            // release is needed then as well.
            self.maybe_applied = true;
            let sent_at = Instant::now();
            let outcome = match inner.settings.replica_acks {
                None => inner.backend.invoke::<Option<i64>>(&invocation).await,
                Some(acks) => self.acquire_replicated(lease_ms, acks).await,
            };
            match outcome {
                Ok(reply) => {
                    if reply.is_some() {
                        // Redis answered "busy": nothing of ours is there.
                        self.maybe_applied = false;
                    }
                    return Ok((sent_at, reply));
                }
                Err(error) => {
                    let retry = inner
                        .settings
                        .retry_after(&error, failures, started)
                        .filter(|delay| give_up_at.is_none_or(|at| before(*delay, at)));
                    match retry {
                        Some(delay) => {
                            failures += 1;
                            tracing::debug!(lock = %self.lock.name, %error, "dlock: acquire failed; retrying");
                            tokio::time::sleep(delay).await;
                        }
                        None => return Err(error),
                    }
                }
            }
        }
    }

    /// The acquire script followed by `WAIT` in one pipeline, so both run on the same
    /// connection and `WAIT` covers the script's write. Taken but not confirmed by enough
    /// replicas is an error; the lock stays `maybe_applied` and is released if the caller
    /// gives up (a retry by the same owner re-enters it instead).
    async fn acquire_replicated(
        &self,
        lease_ms: u64,
        acks: ReplicaAcks,
    ) -> Result<Option<i64>, CallError> {
        let wait_ms = u64::try_from(acks.within.as_millis()).unwrap_or(u64::MAX);
        let mut pipeline = redis::pipe();
        pipeline
            .cmd("EVALSHA")
            .arg(scripts().acquire.get_hash())
            .arg(1)
            .arg(&self.lock.keys.key)
            .arg(lease_ms)
            .arg(&*self.field)
            .cmd("WAIT")
            .arg(acks.replicas)
            .arg(wait_ms);
        let backend = &self.lock.client.inner.backend;
        let (reply, acked): (Option<i64>, u64) = backend.query_pipeline(&pipeline).await?;
        if reply.is_none() && acked < u64::from(acks.replicas) {
            tracing::warn!(lock = %self.lock.name, acked, wanted = acks.replicas, "dlock: acquisition not confirmed by enough replicas");
            return Err(CallError::NotReplicated {
                acked,
                wanted: acks.replicas,
                within: acks.within,
            });
        }
        Ok(reply)
    }
}

impl Drop for Attempt<'_> {
    fn drop(&mut self) {
        if self.maybe_applied && self.compensate {
            let inner = &self.lock.client.inner;
            tracing::debug!(lock = %self.lock.name, "dlock: acquire outcome unknown; releasing in the background");
            inner.release_in_background(ReleaseJob {
                name: Arc::clone(&self.lock.name),
                keys: Arc::clone(&self.lock.keys),
                field: Arc::clone(&self.field),
                mode: ReleaseMode::All,
                op: inner.next_op(),
            });
        }
    }
}
