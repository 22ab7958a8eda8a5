//! [`FencedWrites`]: the storage side of fencing tokens when the storage is Redis. A
//! write to an application key carries the writer's [`Fence`]; a script applies it only
//! when the token is at least the highest that has written the key, and records it, in
//! the same atomic step. A holder that paused past its lease (or lost its lock in a
//! failover) and writes after a later holder is refused instead of overwriting.
//!
//! Redis layout (all in the application key's cluster slot, see `fenced::keys::FencedKeys`):
//! - `<key>`: the application key, as the application names it (no key prefix): a string.
//! - `dlock:fenced:<prefix>{tag}:<key>`: hash, field `fence` = the highest token that has
//!   written `<key>`, in decimal. No TTL: it must outlive every holder that could still
//!   present an older token, or such a holder would be let through again. About 100
//!   bytes plus the key's length per key ever written. It can be deleted once the
//!   application key is gone for good and no process can still write it with a token
//!   taken before (e.g. after all writers restarted, or a retention of the longest
//!   lease + pause the application tolerates).
//! - `dlock:fencedop:<prefix>{tag}:<client-id>:<op>`: the memo of one `incr_by` call,
//!   holding its result, for the client's memo time (3 × command timeout + 1 s), so that
//!   a retry after a lost reply returns the first result instead of adding twice.
//!
//! Scripts: `scripts/write.lua` (SET / INCRBY under the token check) and
//! `scripts/highest.lua` (reads the highest token). Both check the types they find
//! first and write nothing when a key holds something else.

pub(crate) mod keys;

use crate::client::LockClient;
use crate::error::{LockError, Result};
use crate::fence::Fence;
use crate::fenced::keys::FencedKeys;
use crate::names::check_text;
use crate::redis::CallError;
use crate::scripts::catalog::fenced::fenced_scripts;

/// Writes to application keys in Redis that refuse stale fencing tokens; from
/// [`LockClient::fenced`].
///
/// Each write names an application key (used as given, without the client's key
/// prefix) and the writer's [`Fence`], the token its lock handed out. It is applied only
/// when the token is **at least** the highest token that has written that key through
/// these helpers; the token is then recorded as the new highest. A lower token gets
/// [`LockError::StaleToken`] and nothing is written: a later holder of the lock has
/// written the key, so this holder's lock was lost (a pause past its lease, a failover)
/// and its critical section must stop. "At least", not "greater": a holder writes several
/// times in one section with one token (a re-entry shares its outer hold's token).
///
/// The check and the write are one Lua script, so no other write can come between them.
/// That is what fencing needs from any storage: the comparison in the same atomic step as
/// the write. Writes that bypass these helpers (a plain `SET`) are not checked and do not
/// move the highest token.
///
/// Cheap to clone; creating it does not talk to Redis. Writes go through the client's
/// connection, command timeout and retries like every other command; they are not
/// confirmed by replicas even with
/// [`replica_acks`](crate::LockClientBuilder::replica_acks), so a failover can lose a
/// write and its token together (the key then goes back to an older value and token,
/// consistently).
///
/// ```
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> dlock::Result<()> {
/// # let server = dlock_tests::RedisServer::start();
/// # let client = dlock::LockClient::connect(&server.url()).await?;
/// use dlock::{LockError, fencing::Fence};
///
/// let fenced = client.fenced();
/// // Tokens come from the lock; `Fence::new` stands in for them here.
/// fenced.set("stock:42", "7", Fence::new(5)).await?;
/// assert_eq!(fenced.incr_by("stock:42", -1, Fence::new(5)).await?, 6); // same holder again
/// fenced.set("stock:42", "10", Fence::new(6)).await?; // a later holder
/// // The first holder wakes up from a pause and writes: refused, nothing written.
/// match fenced.incr_by("stock:42", -1, Fence::new(5)).await {
///     Err(LockError::StaleToken { seen: 6, presented: 5, .. }) => {}
///     other => panic!("{other:?}"),
/// }
/// assert_eq!(fenced.highest_fence("stock:42").await?, Some(Fence::new(6)));
/// # Ok(())
/// # }
/// ```
#[derive(Clone, Debug)]
pub struct FencedWrites {
    client: LockClient,
}

impl LockClient {
    /// The fenced writes of this client: Redis writes that refuse stale fencing tokens.
    /// They land in the Redis this client locks on, which need not be where the
    /// application keeps its data; data elsewhere needs its store to check the token (see
    /// [`Fence`]). See [`FencedWrites`].
    pub fn fenced(&self) -> FencedWrites {
        FencedWrites {
            client: self.clone(),
        }
    }
}

/// What `write.lua` and `highest.lua` answer.
enum Reply {
    /// Applied; the new value (`incr_by`) or empty (`set`).
    Applied(String),
    /// An `incr_by` call already applied by an earlier attempt; its result.
    AlreadyApplied(String),
    /// Refused: the highest token that has written the key.
    Stale(String),
    /// The highest token (`highest.lua`).
    Highest(String),
    /// `highest.lua`: no fenced write reached the key.
    NeverWritten,
    /// A key holds another type: the application key (`true`) or the bookkeeping key.
    WrongType { at_app_key: bool, found: String },
}

impl redis::FromRedisValue for Reply {
    fn from_redis_value(value: redis::Value) -> std::result::Result<Reply, redis::ParsingError> {
        let text = String::from_redis_value(value)?;
        let (kind, rest) = text.split_once(':').unwrap_or((text.as_str(), ""));
        let rest = rest.to_owned();
        Ok(match kind {
            "ok" => Reply::Applied(rest),
            "done" => Reply::AlreadyApplied(rest),
            "stale" => Reply::Stale(rest),
            "fence" => Reply::Highest(rest),
            "none" => Reply::NeverWritten,
            "wrongtype" => match rest.split_once(':') {
                Some((at, found)) => Reply::WrongType {
                    at_app_key: at == "app",
                    found: found.to_owned(),
                },
                None => return Err(unexpected(&text)),
            },
            _ => return Err(unexpected(&text)),
        })
    }
}

fn unexpected(text: &str) -> redis::ParsingError {
    format!("unexpected reply from a dlock fenced-write script: {text:?}").into()
}

/// The two writes of `write.lua`.
enum Write<'a> {
    Set(&'a [u8]),
    IncrBy(i64),
}

impl FencedWrites {
    /// Sets `key` to `value` if `fence` is at least the highest token that has written
    /// `key`, and records `fence` as the highest. Like `SET`: any TTL the key had is gone.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> dlock::Result<()> {
    /// # let server = dlock_tests::RedisServer::start();
    /// # let client = dlock::LockClient::connect(&server.url()).await?;
    /// let guard_token = dlock::fencing::Fence::new(3); // from the lock's guard
    /// client.fenced().set("profile:9", b"{\"name\":\"Ada\"}", guard_token).await?;
    /// let stale = client.fenced().set("profile:9", "older", dlock::fencing::Fence::new(2)).await;
    /// assert!(matches!(stale, Err(dlock::LockError::StaleToken { .. })));
    /// # Ok(())
    /// # }
    /// ```
    ///
    /// # Errors
    ///
    /// [`LockError::StaleToken`] when a higher token has written `key` (nothing written;
    /// do not retry with the same token); [`LockError::FencedWrongType`] when `key` holds
    /// a non-string (a hash, a list...) or its bookkeeping key is not a hash;
    /// [`LockError::InvalidName`] for an empty key, one over
    /// [`MAX_NAME_LEN`](crate::limits::MAX_NAME_LEN) bytes or with ASCII control characters
    /// (nothing sent); [`LockError::NotReplicated`] when the client has
    /// [`replica_acks`](crate::LockClientBuilder::replica_acks) and fewer replicas confirmed
    /// the write in time, asked again while the command timeout allows (it was written
    /// on the master; a retry of `set` with the same token is harmless);
    /// [`LockError::Redis`] / [`LockError::CommandTimeout`] when Redis
    /// fails. A call whose reply was lost is retried like any command: harmless, since the
    /// same value with the same token writes the same thing (unless another write of the
    /// same token came between, which the holder itself would have sent).
    ///
    /// # Cancel safety
    ///
    /// Dropped before Redis answered, the write may or may not have been applied (with
    /// its token check: never a stale one). Read the key to know.
    pub async fn set(&self, key: &str, value: impl AsRef<[u8]>, fence: Fence) -> Result<()> {
        self.write(key, Write::Set(value.as_ref()), fence)
            .await
            .map(drop)
    }

    /// `INCRBY key delta` (a negative `delta` decrements) if `fence` is at least the
    /// highest token that has written `key`, recording `fence` as the highest; returns the
    /// new value. A missing key counts from 0.
    ///
    /// A call is applied at most once: it carries an id, and the script leaves a memo of
    /// its result for the client's memo time, so a retry after a lost reply (a dropped
    /// connection) returns the first result instead of adding `delta` again.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> dlock::Result<()> {
    /// # let server = dlock_tests::RedisServer::start();
    /// # let client = dlock::LockClient::connect(&server.url()).await?;
    /// let fenced = client.fenced();
    /// let token = dlock::fencing::Fence::new(1);
    /// assert_eq!(fenced.incr_by("seats:7", 10, token).await?, 10);
    /// assert_eq!(fenced.incr_by("seats:7", -3, token).await?, 7);
    /// # Ok(())
    /// # }
    /// ```
    ///
    /// # Errors
    ///
    /// As [`set`](FencedWrites::set); and [`LockError::Redis`] with INCRBY's own error
    /// when the value is not an integer or the sum would overflow an `i64` (nothing
    /// written). After [`LockError::NotReplicated`] the increment was applied on the
    /// master, once: calling `incr_by` again would add `delta` a second time, so read the
    /// key instead.
    ///
    /// # Cancel safety
    ///
    /// Dropped before Redis answered, the increment may or may not have been applied, at
    /// most once. Read the key to know.
    pub async fn incr_by(&self, key: &str, delta: i64, fence: Fence) -> Result<i64> {
        let value = self.write(key, Write::IncrBy(delta), fence).await?;
        value
            .parse()
            .map_err(|_| self.parse_error(key, "increment", format!("not an integer: {value:?}")))
    }

    /// The highest token that has written `key` through these helpers, or `None` when
    /// none has.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> dlock::Result<()> {
    /// # let server = dlock_tests::RedisServer::start();
    /// # let client = dlock::LockClient::connect(&server.url()).await?;
    /// let fenced = client.fenced();
    /// assert_eq!(fenced.highest_fence("report:1").await?, None);
    /// fenced.set("report:1", "done", dlock::fencing::Fence::new(4)).await?;
    /// assert_eq!(fenced.highest_fence("report:1").await?, Some(dlock::fencing::Fence::new(4)));
    /// # Ok(())
    /// # }
    /// ```
    ///
    /// # Errors
    ///
    /// [`LockError::FencedWrongType`] when the bookkeeping key is not a hash;
    /// [`LockError::InvalidName`] as for [`set`](FencedWrites::set); Redis errors.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: it only reads.
    pub async fn highest_fence(&self, key: &str) -> Result<Option<Fence>> {
        let names = self.names(key)?;
        let inner = &self.client.inner;
        let mut invocation = fenced_scripts().highest.prepare_invoke();
        invocation.key(&names.fence);
        let invocation = &invocation;
        let (_, reply) = inner
            .settings
            .retry()
            .run(key, None, || inner.backend.invoke::<Reply>(invocation))
            .await
            .map_err(|e| e.into_lock_error(key, "read the fencing token of"))?;
        match reply {
            Reply::Highest(seen) => Ok(Some(Fence::new(token(key, &names, &seen)?))),
            Reply::NeverWritten => Ok(None),
            other => Err(self.refusal(key, &names, other)),
        }
    }

    /// Runs `write.lua`; the value part of its answer.
    async fn write(&self, key: &str, write: Write<'_>, fence: Fence) -> Result<String> {
        let names = self.names(key)?;
        let inner = &self.client.inner;
        let mut invocation = fenced_scripts().write.prepare_invoke();
        invocation.key(key).key(&names.fence);
        match write {
            Write::Set(value) => {
                invocation
                    .key(&names.fence)
                    .arg("set")
                    .arg(fence.get().to_string())
                    .arg(value);
            }
            Write::IncrBy(delta) => {
                // One id per call, kept across its retries: the memo makes it count once.
                let memo = format!("{}{}:{}", names.op_prefix, inner.id, inner.next_op());
                let memo_ms = u64::try_from(inner.settings.memo_ttl().as_millis())
                    .unwrap_or(u64::MAX)
                    .max(1);
                invocation
                    .key(memo)
                    .arg("incrby")
                    .arg(fence.get().to_string())
                    .arg(delta)
                    .arg(memo_ms);
            }
        }
        let invocation = &invocation;
        // With `replica_acks`, a write counts once replicas confirmed it, as an acquisition
        // does: after a failover the promoted replica has what was acknowledged. A write
        // not confirmed in time is sent again with its `WAIT` while a whole wait still
        // fits in the command timeout (the memo makes an increment count once), then
        // reported as `NotReplicated`.
        let acks = inner
            .settings
            .replica_acks
            .map(|acks| (acks.replicas, acks.within));
        let applied = |reply: &Reply| matches!(reply, Reply::Applied(_) | Reply::AlreadyApplied(_));
        let command_timeout = inner.settings.command_timeout;
        let (_, reply) = inner
            .settings
            .retry()
            .run(key, None, || async move {
                let Some(acks) = acks else {
                    return inner.backend.invoke::<Reply>(invocation).await;
                };
                let started = std::time::Instant::now();
                loop {
                    match inner
                        .backend
                        .invoke_replicated(key, invocation, acks, applied)
                        .await
                    {
                        Err(CallError::NotReplicated { .. })
                            if started.elapsed() + acks.1 * 2 < command_timeout => {}
                        outcome => return outcome,
                    }
                }
            })
            .await
            .map_err(|e: CallError| e.into_lock_error(key, "make a fenced write for"))?;
        match reply {
            Reply::Applied(value) | Reply::AlreadyApplied(value) => Ok(value),
            Reply::Stale(seen) => Err(LockError::StaleToken {
                key: key.to_owned(),
                seen: token(key, &names, &seen)?,
                presented: fence.get(),
            }),
            other => Err(self.refusal(key, &names, other)),
        }
    }

    /// The names of `key`'s bookkeeping, once `key` is known to be usable.
    fn names(&self, key: &str) -> Result<FencedKeys> {
        if key.is_empty() {
            return Err(LockError::invalid_name(
                "fenced key",
                key,
                "a fenced write needs a key".to_owned(),
            ));
        }
        check_text("fenced key", key)?;
        Ok(FencedKeys::new(&self.client.inner.settings.key_prefix, key))
    }

    /// The error for a reply that refuses for another reason than a stale token.
    fn refusal(&self, key: &str, names: &FencedKeys, reply: Reply) -> LockError {
        match reply {
            Reply::WrongType { at_app_key, found } => LockError::FencedWrongType {
                key: key.to_owned(),
                at: if at_app_key { key } else { &names.fence }.to_owned(),
                found,
            },
            _ => self.parse_error(key, "read", "an answer out of place".to_owned()),
        }
    }

    /// A reply dlock cannot make sense of (the bookkeeping hash written by something
    /// else), as a Redis error naming `key`.
    fn parse_error(&self, key: &str, action: &'static str, detail: String) -> LockError {
        LockError::Redis {
            name: key.to_owned(),
            action,
            server: None,
            source: redis::RedisError::from((
                redis::ErrorKind::UnexpectedReturnType,
                "unexpected fenced-write reply",
                detail,
            )),
        }
    }
}

/// The token recorded in `key`'s bookkeeping hash; [`LockError::FencedRecordCorrupt`]
/// when what is recorded there is no token (something else wrote the hash).
fn token(key: &str, names: &FencedKeys, text: &str) -> Result<u64> {
    text.parse().map_err(|_| {
        let shown = match text.char_indices().nth(64) {
            Some((cut, _)) => format!("{}…", &text[..cut]),
            None => text.to_owned(),
        };
        LockError::FencedRecordCorrupt {
            key: key.to_owned(),
            at: names.fence.clone(),
            found: shown,
        }
    })
}
