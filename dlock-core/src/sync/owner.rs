//! Who owns a lock: the logical call chain, tracked with a task-local scope.
//!
//! Redisson identifies an owner by thread id. Async code has no stable thread, and one task
//! can run several futures concurrently (`join!`, `select!`), so dlock follows the call
//! chain instead: an acquisition outside any scope gets a fresh owner id; running code
//! inside [`LockGuard::scope`](crate::LockGuard::scope) (the attribute macro does this for
//! its function body) makes the guard's owner visible to everything that code awaits, and
//! an acquisition of the *same* lock there re-enters instead of deadlocking. Two futures
//! that each acquire a lock without an enclosing scope for it never share ownership, and
//! a scope outlives its guard's ownership: once the guard is released or lost, code still
//! running in the scope (a spawned task, say) acquires as a new owner.

use std::future::Future;
use std::sync::Arc;

use futures_util::future::Either;

use crate::fence::Fence;
use crate::sync::held::Held;

tokio::task_local! {
    static CHAIN: Arc<Frame>;
}

/// One held lock in the current call chain.
struct Frame {
    client_id: u128,
    held: Arc<Held>,
    parent: Option<Arc<Frame>>,
}

/// The hold under which the current call chain owns `key` of client `client_id`: the
/// innermost scope of a guard of that lock that is neither released nor lost. A scope
/// whose guard is gone (a task spawned inside it can outlive the guard) owns nothing.
pub(crate) fn current_hold(client_id: u128, key: &str) -> Option<Arc<Held>> {
    find_hold(client_id, key, |_| true)
}

/// Like [`current_hold`], but the innermost live hold that `which` accepts: for a
/// primitive whose holds come in kinds (the read-write lock's read and write holds), so
/// that it can ask whether the chain holds a kind anywhere, not only innermost.
pub(crate) fn find_hold(
    client_id: u128,
    key: &str,
    which: impl Fn(&Held) -> bool,
) -> Option<Arc<Held>> {
    CHAIN
        .try_with(|top| {
            let mut frame = Some(top);
            while let Some(f) = frame {
                if f.client_id == client_id
                    && *f.held.key == *key
                    && which(&f.held)
                    && f.held.is_live()
                {
                    return Some(Arc::clone(&f.held));
                }
                frame = f.parent.as_ref();
            }
            None
        })
        .ok()
        .flatten()
}

/// The fencing token of the innermost hold of the call chain that has one, of any lock
/// and client: what code inside a guard's [`scope`](crate::LockGuard::scope) (a
/// `#[distributed_lock]` body) sends with its writes. `None` outside every scope and in
/// scopes of holds without a token (read locks, semaphore permits, clients built with
/// `fencing_tokens(false)`).
///
/// The token is returned even after its hold was lost: it still names the holder the code
/// runs as, and the storage, which saw any later holder's larger token, is what refuses
/// the late write. (Whether the hold is still live is [`LockGuard::lost`](crate::LockGuard::lost)'s
/// question.)
///
/// ```
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> dlock::Result<()> {
/// # let server = dlock_tests::RedisServer::start();
/// # let client = dlock::LockClient::connect(&server.url()).await?;
/// assert_eq!(dlock::fencing::current_fence(), None);
/// let guard = client.lock("ledger:7").lock().await?;
/// let token = guard.fencing_token();
/// let seen = guard.scope(async { dlock::fencing::current_fence() }).await;
/// assert_eq!(seen, token);
/// guard.unlock().await?;
/// # Ok(())
/// # }
/// ```
pub fn current_fence() -> Option<Fence> {
    CHAIN
        .try_with(|top| {
            let mut frame = Some(top);
            while let Some(f) = frame {
                if let Some(fence) = f.held.fence {
                    return Some(fence);
                }
                frame = f.parent.as_ref();
            }
            None
        })
        .ok()
        .flatten()
}

/// Runs `future` with `held` recorded as a hold of the chain.
pub(crate) fn scope<F: Future>(
    client_id: u128,
    held: Arc<Held>,
    future: F,
) -> impl Future<Output = F::Output> {
    let frame = Frame {
        client_id,
        held,
        parent: CHAIN.try_with(Arc::clone).ok(),
    };
    CHAIN.scope(Arc::new(frame), future)
}

/// Runs `future` with every hold of `holds` (client id, hold) recorded in the chain, as
/// if each were scoped inside the previous one: the scope of a guard that holds several
/// locks at once (the multi-lock), whose number is known only at run time.
pub(crate) fn scope_all<F: Future>(
    holds: Vec<(u128, Arc<Held>)>,
    future: F,
) -> impl Future<Output = F::Output> {
    let mut parent = CHAIN.try_with(Arc::clone).ok();
    for (client_id, held) in holds {
        parent = Some(Arc::new(Frame {
            client_id,
            held,
            parent,
        }));
    }
    match parent {
        Some(top) => Either::Left(CHAIN.scope(top, future)),
        // No holds and no enclosing chain: nothing to record.
        None => Either::Right(future),
    }
}
