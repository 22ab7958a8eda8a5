//! One RedLock server's part of a round: the reentrant lock's scripts (same hash layout,
//! `lock/scripts/`) run through that server's own client, each call bounded by the round's
//! per-server timeout.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use crate::client::LockClient;
use crate::lock::keys::LockKeys;
use crate::lock::release_ops::{release_job, ReleaseKind};
use crate::lock::scripts::{acquire_call, AcquireArgs};
use crate::redis::CallError;
use crate::scripts::catalog::lock::scripts;
use crate::sync::attempt::Reply;
use crate::sync::release::{self, NextInLine, ReleaseJob, Released, Sending};

/// `call` to `node`, given up after `limit`: a server that does not answer in time counts
/// as failed for this round (its call may still have been applied).
pub(super) async fn bounded<T>(
    node: &LockClient,
    limit: Duration,
    call: impl Future<Output = Result<T, CallError>>,
) -> Result<T, CallError> {
    tokio::time::timeout(limit, call)
        .await
        .unwrap_or_else(|_| Err(CallError::timeout(limit).at(node.inner.backend.shown())))
}

/// One try of the acquire script for the new owner `field` (a fresh owner: one round's).
/// A retried call that finds its own field counts as granted: the script is own-value
/// tolerant.
pub(super) async fn acquire(
    node: &LockClient,
    keys: &LockKeys,
    field: &str,
    lease_ms: u64,
) -> Result<Reply, CallError> {
    // No fencing token: counters on independent servers would not order the holders. A
    // RedLock waits by rounds, not for unlock messages: it never registers.
    let invocation = acquire_call(
        keys,
        field,
        AcquireArgs {
            lease_ms,
            fence: "0",
            registry_ms: 0,
            publish: node.inner.backend.publish_command(),
            reentry: None,
        },
    );
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

/// The release of every hold of `field` on a server: idempotent by itself, so retries (in
/// the foreground or the background) count once.
pub(super) fn release_of(name: &Arc<str>, keys: &LockKeys, field: &str) -> ReleaseJob {
    release_job(name, keys, field, ReleaseKind::Withdraw)
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
        node,
        limit,
        release::release(
            &node.inner.backend,
            settings.release_timing(),
            job,
            NextInLine::NONE,
            Sending::First,
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
        node,
        limit,
        node.inner
            .backend
            .query(redis::cmd("EXISTS").arg(&keys.key)),
    )
    .await
}
