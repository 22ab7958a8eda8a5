//! One RedLock server's part of a round: the reentrant lock's scripts (same hash layout,
//! `lock/scripts/`) run through that server's own client, each call bounded by the round's
//! per-server timeout.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use crate::client::LockClient;
use crate::lock::release_ops::{release_job, ReleaseKind};
use crate::names::LockKeys;
use crate::redis::CallError;
use crate::scripts::scripts;
use crate::sync::release::{self, HandOff, ReleaseJob, Released};

/// What one server answered to the acquire script.
#[derive(Debug)]
pub(super) enum Grant {
    /// The round's owner holds the lock there now (also when a retried call found its own
    /// field: the acquire script is own-value tolerant).
    Granted,
    /// Another owner holds it there.
    Busy,
    /// The key holds another type of value there; nothing was written.
    WrongType(String),
}

impl redis::FromRedisValue for Grant {
    fn from_redis_value(value: redis::Value) -> Result<Grant, redis::ParsingError> {
        match value {
            redis::Value::Nil => Ok(Grant::Granted),
            redis::Value::Int(_) => Ok(Grant::Busy),
            other => {
                let text = String::from_redis_value(other)?;
                match text.split_once(':') {
                    Some(("wrongtype", found)) => Ok(Grant::WrongType(found.to_owned())),
                    _ => Err(format!("unexpected reply from the acquire script: {text:?}").into()),
                }
            }
        }
    }
}

/// `call`, given up after `limit`: a server that does not answer in time counts as failed
/// for this round (its call may still have been applied).
pub(super) async fn bounded<T>(
    limit: Duration,
    call: impl Future<Output = Result<T, CallError>>,
) -> Result<T, CallError> {
    tokio::time::timeout(limit, call)
        .await
        .unwrap_or(Err(CallError::Timeout(limit)))
}

/// One try of the acquire script for the new owner `field` (a fresh owner: one round's).
pub(super) async fn acquire(
    node: &LockClient,
    keys: &LockKeys,
    field: &str,
    lease_ms: u64,
) -> Result<Grant, CallError> {
    let mut invocation = scripts().acquire.prepare_invoke();
    // A fresh owner needs no marker: the lock key fills KEYS[2] (one slot for every key).
    // No fencing token: counters on independent servers would not order the holders.
    invocation
        .key(&keys.key)
        .key(&keys.key)
        .key(&keys.fence)
        .key(&keys.channel)
        .arg(lease_ms)
        .arg(field)
        .arg("fresh")
        .arg(0)
        .arg("0")
        // A RedLock waits by rounds, not for unlock messages: it never registers.
        .arg("")
        .arg(0);
    node.inner.backend.invoke(&invocation).await
}

/// One try of the renew script: whether `field` still holds the lock there (its expiry is
/// at least `lease_ms` now).
pub(super) async fn renew(
    node: &LockClient,
    keys: &LockKeys,
    field: &str,
    lease_ms: u64,
) -> Result<bool, CallError> {
    let mut invocation = scripts().renew.prepare_invoke();
    invocation.key(&keys.key).arg(lease_ms).arg(field);
    let answers: Vec<redis::Value> = node.inner.backend.invoke(&invocation).await?;
    Ok(matches!(answers.first(), Some(redis::Value::Int(1))))
}

/// The release of every hold of `field` there, under a memo of its own so that retries
/// (in the foreground or the background) count once.
pub(super) fn release_of(
    node: &LockClient,
    name: &Arc<str>,
    keys: &LockKeys,
    field: &str,
) -> ReleaseJob {
    release_job(
        name,
        keys,
        field,
        ReleaseKind::Owner {
            op: node.inner.next_op(),
        },
    )
}

/// Runs `job` with the server client's release retries, given up after `limit` (the job
/// then belongs to the background release).
pub(super) async fn release(
    node: &LockClient,
    job: &ReleaseJob,
    limit: Duration,
) -> Result<Released, CallError> {
    let settings = &node.inner.settings;
    bounded(
        limit,
        release::release(
            &node.inner.backend,
            settings.release_timing(),
            job,
            HandOff::NONE,
        ),
    )
    .await
}

/// Whether the lock key exists there.
pub(super) async fn exists(
    node: &LockClient,
    keys: &LockKeys,
    limit: Duration,
) -> Result<bool, CallError> {
    bounded(
        limit,
        node.inner
            .backend
            .query(redis::cmd("EXISTS").arg(&keys.key)),
    )
    .await
}
