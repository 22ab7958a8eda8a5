//! [`Lock`]: a named lock handle and the acquisition loop.

use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use crate::client::{LockClient, ReplicaAcks};
use crate::error::{LockError, LossReason, Result};
use crate::guard::LockGuard;
use crate::keys::LockKeys;
use crate::lease::lease_millis;
use crate::redis::CallError;
use crate::scripts::scripts;
use crate::sync::held::Held;
use crate::sync::local::{Place, Ticket, Turn};
use crate::sync::owner;
use crate::sync::pubsub::Subscription;
use crate::sync::release::{ReleaseJob, ReleaseKind};

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
    /// The key, shared with the client's local line for it.
    line: Arc<str>,
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
            line: keys.key.as_str().into(),
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
        let Some(held) = owner::current_hold(inner.id_bits(), &self.keys.key) else {
            return Ok(0);
        };
        let count: Option<u32> = self
            .query(
                "check",
                redis::cmd("HGET").arg(&self.keys.key).arg(&*held.field),
            )
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
    /// deleted. The former holder's guard finds out at its next renewal, or at once when a
    /// task of its client waits for the lock (`lost()`), and its `unlock` reports
    /// [`LockError::NotHeld`].
    ///
    /// # Errors
    ///
    /// [`LockError::WrongType`] when the key holds another type of value (application
    /// data, which is left alone); Redis errors.
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
        let reply: Reply = inner
            .backend
            .invoke(&invocation)
            .await
            .map_err(|e| e.into_lock_error(&self.name, "force-unlock"))?;
        let deleted = match reply {
            Reply::Number(deleted) => deleted == 1,
            Reply::WrongType(found) => return Err(self.wrong_type(found)),
            other => return Err(self.unexpected("force-unlock", &other)),
        };
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

    fn wrong_type(&self, found: String) -> LockError {
        LockError::WrongType {
            name: self.name.to_string(),
            found,
        }
    }

    /// The acquisition: a re-entry inside a live scope of this lock, otherwise a new owner
    /// that lines up locally and then waits in Redis. `wait: None` waits forever;
    /// `lease: None` uses the watchdog.
    async fn acquire(&self, wait: Option<Duration>, lease: Option<Duration>) -> Result<LockGuard> {
        self.check_name()?;
        if let Some(lease) = lease {
            lease_millis("lease", lease)?;
        }
        let inner = &self.client.inner;
        inner.keep_running();
        let started = Instant::now();
        // A wait too long to represent is a wait without end.
        let give_up_at = wait.and_then(|wait| started.checked_add(wait));

        if let Some(outer) = owner::current_hold(inner.id_bits(), &self.keys.key) {
            if let Some(guard) = self.reenter(&outer, lease, started).await? {
                return Ok(guard);
            }
            // The outer hold turned out to be gone (it is reported lost now): the scope
            // owns nothing, so this is a new owner's acquisition.
        }
        let Some(turn) = self
            .wait_for_turn(inner.local.join(&self.line), give_up_at)
            .await
        else {
            inner.metrics.timed_out();
            return Err(self.timeout(wait));
        };
        self.acquire_new(turn, wait, lease, started, give_up_at)
            .await
    }

    /// A re-entry under `outer`'s owner: one more hold, or `None` when Redis no longer has
    /// the outer hold.
    ///
    /// The lease rule: an explicit lease is never stretched by a re-entry unless the
    /// re-entry itself asks for a longer explicit one. A re-entry without a lease inside a
    /// watchdog hold is renewed like it; inside an explicit lease it lives on that lease
    /// (same expiry, no renewal).
    async fn reenter(
        &self,
        outer: &Arc<Held>,
        lease: Option<Duration>,
        started: Instant,
    ) -> Result<Option<LockGuard>> {
        let inner = &self.client.inner;
        let watchdog = inner.settings.watchdog_timeout;
        let (lease_ms, renewal, lease) = match (lease, outer.renewal) {
            (Some(lease), _) => (lease_millis("lease", lease)?, None, Some(lease)),
            (None, Some(_)) => (
                lease_millis("lease", watchdog)?,
                Some(watchdog),
                Some(watchdog),
            ),
            (None, None) => (0, None, None),
        };
        let op = inner.next_op();
        let mut attempt = Attempt {
            lock: self,
            field: Arc::clone(&outer.field),
            kind: AttemptKind::Reentry { op },
            maybe_applied: false,
        };
        let (sent_at, reply) = match attempt.run(lease_ms, None).await {
            Ok(outcome) => outcome,
            Err(error) => {
                inner.metrics.acquire_failed();
                return Err(error.into_lock_error(&self.name, "acquire"));
            }
        };
        match reply {
            Reply::Acquired => {
                attempt.maybe_applied = false;
                let deadline = lease.map_or_else(|| outer.deadline(), |lease| sent_at + lease);
                let held = Held::new(
                    Arc::clone(&self.name),
                    Arc::clone(&self.keys),
                    Arc::clone(&outer.field),
                    renewal,
                    deadline,
                    Arc::clone(&inner.metrics),
                );
                inner.metrics.acquired(started.elapsed());
                tracing::debug!(lock = %self.name, owner = %outer.field, "dlock: re-entered");
                Ok(Some(LockGuard::new(self.client.clone(), Arc::new(held))))
            }
            Reply::NotHeld | Reply::Number(_) => {
                outer.mark_lost(LossReason::NotHeldOnCheck);
                Ok(None)
            }
            Reply::WrongType(found) => {
                inner.metrics.acquire_failed();
                Err(self.wrong_type(found))
            }
        }
    }

    /// Waits in the client's local line until `ticket` has the turn, or `None` when
    /// `give_up_at` passes first.
    ///
    /// The first waiter watches the holder: it marks the holder lost (which gives up the
    /// turn) when its lease runs out, and checks it in Redis after every unlock message
    /// for the lock and every `max_wait_recheck`, so that a force unlock or an expiry seen
    /// by Redis frees the line as soon as a waiter in another process would get the lock.
    ///
    /// A task waiting behind a hold it took itself (`lock()` twice without `scope`) waits
    /// forever; the same state is legitimate when another future of the task holds it
    /// (`join!`), so it cannot be refused. After [`SELF_WAIT_WARNING`] it is logged.
    async fn wait_for_turn(
        &self,
        ticket: Ticket<Held>,
        give_up_at: Option<Instant>,
    ) -> Option<Turn<Held>> {
        let inner = &self.client.inner;
        let recheck = inner.settings.max_wait_recheck;
        let mut watching: Option<Subscription> = None;
        let warn_at = tokio::time::Instant::now() + SELF_WAIT_WARNING;
        let mut warned = false;
        let give_up = async {
            match give_up_at {
                Some(at) => tokio::time::sleep_until(at).await,
                None => std::future::pending().await,
            }
        };
        tokio::pin!(give_up);
        loop {
            let holder = match ticket.place() {
                Place::Turn => return Some(ticket.into_turn()),
                Place::First => ticket.holder(),
                Place::Behind => None,
            };
            let Some(holder) = holder else {
                tokio::select! {
                    () = ticket.moved() => continue,
                    () = &mut give_up => return None,
                }
            };
            let subscription =
                watching.get_or_insert_with(|| inner.pubsub.subscribe(&self.keys.channel));
            // Outside any task (the body of `block_on`, `#[tokio::main]`) both are `None`.
            let own_hold = !warned && holder.acquired_in == tokio::task::try_id();
            tokio::select! {
                () = ticket.moved() => {}
                _ = holder.wait_lost() => {}
                () = subscription.noticed() => self.check_holder(&holder).await,
                () = tokio::time::sleep(recheck) => self.check_holder(&holder).await,
                () = tokio::time::sleep_until(warn_at), if own_hold => {
                    warned = true;
                    tracing::warn!(lock = %self.name, "dlock: this task has waited {} for a lock it acquired itself and still holds; unless another future of the task (join!) releases it, this never ends. To take a lock again inside its own critical section, run that code in `guard.scope(...)`", humantime::format_duration(SELF_WAIT_WARNING));
                }
                () = &mut give_up => return None,
            }
        }
    }

    /// Marks `holder` lost when Redis no longer has its hold.
    async fn check_holder(&self, holder: &Held) {
        if !holder.is_live() {
            return;
        }
        let held: std::result::Result<bool, CallError> = self
            .client
            .inner
            .backend
            .query(
                redis::cmd("HEXISTS")
                    .arg(&self.keys.key)
                    .arg(&*holder.field),
            )
            .await;
        if let Ok(false) = held {
            holder.mark_lost(LossReason::NotHeldOnCheck);
        }
    }

    /// A new owner's acquisition, once it has the local turn: tries, then waits for
    /// unlock messages (or the holder's TTL, or `max_wait_recheck`) and tries again, riding
    /// out Redis errors for up to `failover_wait`.
    async fn acquire_new(
        &self,
        turn: Turn<Held>,
        wait: Option<Duration>,
        lease: Option<Duration>,
        started: Instant,
        give_up_at: Option<Instant>,
    ) -> Result<LockGuard> {
        let inner = &self.client.inner;
        let settings = &inner.settings;
        let renewal = lease.is_none().then_some(settings.watchdog_timeout);
        let lease = lease.unwrap_or(settings.watchdog_timeout);
        let lease_ms = lease_millis("lease", lease)?;
        let owner = inner.next_owner();
        let mut attempt = Attempt {
            lock: self,
            field: format!("{}:{owner}", inner.id).into(),
            kind: AttemptKind::New,
            maybe_applied: false,
        };
        let mut subscription: Option<Subscription> = None;

        // Start of the current run of Redis errors, if any.
        let mut outage: Option<Instant> = None;
        loop {
            let (sent_at, reply) = match attempt.run(lease_ms, give_up_at).await {
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
            let ttl = match reply {
                Reply::Acquired => {
                    attempt.maybe_applied = false;
                    let held = Arc::new(Held::new(
                        Arc::clone(&self.name),
                        Arc::clone(&self.keys),
                        Arc::clone(&attempt.field),
                        renewal,
                        sent_at + lease,
                        Arc::clone(&inner.metrics),
                    ));
                    held.keep_turn(turn);
                    inner.metrics.acquired(started.elapsed());
                    tracing::debug!(lock = %self.name, owner, waited = ?started.elapsed(), "dlock: acquired");
                    return Ok(LockGuard::new(self.client.clone(), held));
                }
                Reply::Number(ttl) => ttl,
                Reply::WrongType(found) => {
                    inner.metrics.acquire_failed();
                    return Err(self.wrong_type(found));
                }
                Reply::NotHeld => {
                    inner.metrics.acquire_failed();
                    return Err(self.unexpected("acquire", &reply));
                }
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

/// How long a task waits behind a hold it acquired itself before that is logged (see
/// `Lock::wait_for_turn`).
const SELF_WAIT_WARNING: Duration = Duration::from_secs(5);

/// Whether `pause` from now ends before `deadline`; a pause too long to represent does not.
fn before(pause: Duration, deadline: Instant) -> bool {
    Instant::now()
        .checked_add(pause)
        .is_some_and(|end| end < deadline)
}

/// What a lock script answered (see `scripts/acquire.lua` and `scripts/force_unlock.lua`).
#[derive(Debug)]
enum Reply {
    /// nil: the owner holds the lock now.
    Acquired,
    /// An integer: the other owner's TTL in ms (acquire: busy), or 1 / 0 for whether a
    /// lock was deleted (force unlock).
    Number(i64),
    /// A re-entry found the owner's hold gone.
    NotHeld,
    /// The key holds a value of this Redis type, not a lock; nothing was written.
    WrongType(String),
}

impl redis::FromRedisValue for Reply {
    fn from_redis_value(value: redis::Value) -> std::result::Result<Reply, redis::ParsingError> {
        match value {
            redis::Value::Nil => Ok(Reply::Acquired),
            redis::Value::Int(n) => Ok(Reply::Number(n)),
            other => {
                let text = String::from_redis_value(other)?;
                match text.split_once(':') {
                    _ if text == "notheld" => Ok(Reply::NotHeld),
                    Some(("wrongtype", found)) => Ok(Reply::WrongType(found.to_owned())),
                    _ => Err(format!("unexpected reply from a dlock script: {text:?}").into()),
                }
            }
        }
    }
}

impl Lock {
    /// A reply the script does not give for this call (a script of another dlock version
    /// loaded under the same hash, say): reported, never acted on.
    fn unexpected(&self, action: &'static str, reply: &Reply) -> LockError {
        let source = redis::RedisError::from((
            redis::ErrorKind::UnexpectedReturnType,
            "unexpected reply from a dlock script",
            format!("{reply:?}"),
        ));
        LockError::Redis {
            name: self.name.to_string(),
            action,
            source,
        }
    }
}

/// Which acquisition an [`Attempt`] makes.
#[derive(Debug, Clone, Copy)]
enum AttemptKind {
    /// A new owner id, used by this acquisition only.
    New,
    /// One more hold for an owner whose scope we are in; `op` names its marker.
    Reentry { op: u64 },
}

/// One acquisition's attempts to run the acquire script; if dropped while an attempt may
/// have taken a hold (its reply never came), queues the release of exactly that hold.
struct Attempt<'a> {
    lock: &'a Lock,
    field: Arc<str>,
    kind: AttemptKind,
    maybe_applied: bool,
}

impl Attempt<'_> {
    /// The script's marker (re-entries only), kind and marker lifetime.
    fn script_args(&self) -> (Option<String>, &'static str, u64) {
        match self.kind {
            AttemptKind::New => (None, "fresh", 0),
            AttemptKind::Reentry { op } => (
                Some(self.lock.keys.marker(&self.field, op)),
                "reenter",
                self.lock.client.inner.settings.memo_ttl().as_millis() as u64,
            ),
        }
    }

    /// Runs the acquire script, retrying fast transient failures. Returns the send time of
    /// the successful call and the script's reply.
    async fn run(
        &mut self,
        lease_ms: u64,
        give_up_at: Option<Instant>,
    ) -> Result<(Instant, Reply), CallError> {
        let inner = &self.lock.client.inner;
        let (marker, kind, marker_ms) = self.script_args();
        // A new owner has no marker; the lock key fills the slot (one slot for every key).
        let marker = marker.as_deref().unwrap_or(&self.lock.keys.key);
        let mut invocation = scripts().acquire.prepare_invoke();
        invocation
            .key(&self.lock.keys.key)
            .key(marker)
            .arg(lease_ms)
            .arg(&*self.field)
            .arg(kind)
            .arg(marker_ms);
        let started = Instant::now();
        let mut failures = 0;
        loop {
            // Stays true after an error reply too: a script refused half-way (an ACL
            // denying PEXPIRE after HSET, say) keeps what it wrote, so the compensating
            // release is needed then as well.
            self.maybe_applied = true;
            let sent_at = Instant::now();
            let outcome = match inner.settings.replica_acks {
                None => inner.backend.invoke::<Reply>(&invocation).await,
                Some(acks) => {
                    self.acquire_replicated(lease_ms, (marker, kind, marker_ms), acks)
                        .await
                }
            };
            match outcome {
                Ok(reply) => {
                    if !matches!(reply, Reply::Acquired) {
                        // Redis answered "busy" or refused before writing: nothing of ours
                        // is there.
                        self.maybe_applied = false;
                    }
                    return Ok((sent_at, reply));
                }
                Err(error) => {
                    let retry = inner
                        .settings
                        .retry()
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
    /// connection and `WAIT` covers the script's write. The connection is one of its own:
    /// `WAIT` blocks it, and must not delay the client's other commands. Taken but not confirmed by enough
    /// replicas is an error; the hold stays `maybe_applied` and is released if the caller
    /// gives up (a retry of the same acquisition finds it applied and adds nothing).
    async fn acquire_replicated(
        &self,
        lease_ms: u64,
        (marker, kind, marker_ms): (&str, &str, u64),
        acks: ReplicaAcks,
    ) -> Result<Reply, CallError> {
        let wait_ms = u64::try_from(acks.within.as_millis()).unwrap_or(u64::MAX);
        let mut pipeline = redis::pipe();
        pipeline
            .cmd("EVALSHA")
            .arg(scripts().acquire.get_hash())
            .arg(2)
            .arg(&self.lock.keys.key)
            .arg(marker)
            .arg(lease_ms)
            .arg(&*self.field)
            .arg(kind)
            .arg(marker_ms)
            .cmd("WAIT")
            .arg(acks.replicas)
            .arg(wait_ms);
        let backend = &self.lock.client.inner.backend;
        let (reply, acked): (Reply, u64) = backend.query_blocking(&pipeline).await?;
        if matches!(reply, Reply::Acquired) && acked < u64::from(acks.replicas) {
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
        if !self.maybe_applied {
            return;
        }
        let inner = &self.lock.client.inner;
        tracing::debug!(lock = %self.lock.name, "dlock: acquire outcome unknown; releasing in the background");
        let kind = match self.kind {
            AttemptKind::New => ReleaseKind::Owner {
                op: inner.next_op(),
            },
            AttemptKind::Reentry { op } => ReleaseKind::Reentry { op },
        };
        inner.release_in_background(ReleaseJob {
            name: Arc::clone(&self.lock.name),
            keys: Arc::clone(&self.lock.keys),
            field: Arc::clone(&self.field),
            kind,
        });
    }
}
