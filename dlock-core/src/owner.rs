//! Who owns a lock: the logical call chain, tracked with a task-local scope.
//!
//! Redisson identifies an owner by thread id. Async code has no stable thread, and one task
//! can run several futures concurrently (`join!`, `select!`), so dlock follows the call
//! chain instead: an acquisition outside any scope gets a fresh owner id; running code
//! inside [`LockGuard::scope`](crate::LockGuard::scope) (the attribute macro does this for
//! its function body) makes the guard's owner visible to everything that code awaits, and
//! an acquisition of the *same* lock there re-enters instead of deadlocking. Two futures
//! that each acquire a lock without an enclosing scope for it never share ownership.

use std::future::Future;
use std::sync::Arc;

tokio::task_local! {
    static CHAIN: Arc<Frame>;
}

/// One held lock in the current call chain.
struct Frame {
    client_id: u128,
    key: Arc<str>,
    owner: u64,
    parent: Option<Arc<Frame>>,
}

/// The owner id under which the current call chain holds `key` of client `client_id`.
pub(crate) fn current_owner(client_id: u128, key: &str) -> Option<u64> {
    CHAIN
        .try_with(|top| {
            let mut frame = Some(top);
            while let Some(f) = frame {
                if f.client_id == client_id && &*f.key == key {
                    return Some(f.owner);
                }
                frame = f.parent.as_ref();
            }
            None
        })
        .ok()
        .flatten()
}

/// Runs `future` with `owner` recorded as the holder of `key` for the chain.
pub(crate) fn scope<F: Future>(
    client_id: u128,
    key: Arc<str>,
    owner: u64,
    future: F,
) -> impl Future<Output = F::Output> {
    let frame = Frame {
        client_id,
        key,
        owner,
        parent: CHAIN.try_with(Arc::clone).ok(),
    };
    CHAIN.scope(Arc::new(frame), future)
}
