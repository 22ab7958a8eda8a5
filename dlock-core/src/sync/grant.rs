//! A lock a release gave to a waiter of another client (`held:` messages, see
//! `lock/scripts/handoff.lua`'s `grant_to_oldest`): the waiter holds it from the message
//! on, without a try of its own, and extends the short grant to its lease at once.
//!
//! Between clients a hand-off used to be the release, its message, and the woken waiter's
//! own try; the grant saves that try's round trip. What makes it safe:
//!
//! - **The deadline is counted from a send of the waiter's own**, and a grant the waiter
//!   cannot hold as it is (`replica_acks`, a token it wants and lacks, a short lease, too
//!   little left, a route moved since its first send: `sync::pubsub::Route`) it takes
//!   with a try, which finds the hold its own: both decided by
//!   [`protocol::take_up`](crate::protocol::take_up).
//! - **The grant is short** (100 ms): a chosen waiter that never takes it up (its process
//!   froze, died or was cut off after its client received the message) holds the others
//!   up no longer than that, and the next waiter was told to try when it lapses. The holder extends it to its lease with the extension
//!   (`lock/scripts/extend.lua`), which touches only a hold that is still its own.
//! - **Whoever hears `held:` holds a hold that exists.** The release writes the hold
//!   before the message, and only for an owner whose client listens on that server: a
//!   message also reaches a client still subscribed on a replica (after a failover),
//!   which the server does not count, and that client is told `pass:` instead.
//! - **An acquisition that ended meanwhile cleans up as always**: its `withdraw` release, sent
//!   after its last try, deletes any hold a grant gave its owner.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use crate::error::LossReason;
use crate::redis::Backend;
use crate::scripts::ScriptCall;
use crate::sync::held::Held;
use crate::sync::retry::backoff;
use crate::sync::watchdog::Renewal;

/// Extends the granted hold `held` (made [`extending`](Held::extending)) to `lease` with
/// `call` (the lock's extend script for its owner), in a task of its own: the hold's guard
/// is in its owner's hands already. A transient error is retried while the hold is live
/// (until the grant's deadline at the latest); a hold Redis no longer has for its owner is
/// lost, and `leave` runs: the owner no longer waits either (a try of it that came back
/// busy after the grant was made may have registered it again: the grant it took up was
/// gone by then, force-unlocked, say), so nothing of it stays among the waiters. The
/// script also tells the waiters that were promised a sleep past the new lease's end to
/// try again (see `lock/scripts/extend.lua`).
///
/// (A client with `replica_acks` takes a grant with a try instead, see
/// [`protocol::take_up`](crate::protocol::take_up), so the extension needs no `WAIT`.)
pub(crate) fn extend(
    backend: Backend,
    held: Arc<Held>,
    call: ScriptCall,
    lease: Duration,
    retry_delay: Duration,
    leave: impl FnOnce() + Send + 'static,
) {
    let extended = Arc::clone(&held);
    spawn_settling(held, async move {
        let mut failures = 0;
        while extended.is_live() {
            let sent_at = Instant::now();
            match backend.invoke::<Renewal>(&call).await {
                Ok(renewal) => {
                    let loss = match renewal {
                        Renewal::Renewed => {
                            extended.extend_to(sent_at + lease);
                            tracing::trace!(lock = %extended.name, "dlock: granted hold extended");
                            return;
                        }
                        Renewal::NotHeld => LossReason::NotHeldOnRenewal,
                        Renewal::WrongType(found) => LossReason::WrongType { found },
                    };
                    if !extended.is_released() {
                        extended.mark_lost(loss);
                    }
                    leave();
                    return;
                }
                Err(error) => {
                    failures += 1;
                    tracing::debug!(lock = %extended.name, %error, "dlock: extending a granted hold failed; retrying");
                    tokio::time::sleep(backoff(retry_delay, failures)).await;
                }
            }
        }
    });
}

/// Spawns `extension`, after which `held`'s extension is settled however it ends: also
/// when its task is dropped before it first runs (its runtime shut down), so that what
/// waits for the extension (a re-entry) goes on, with the grant's deadline.
fn spawn_settling(held: Arc<Held>, extension: impl Future<Output = ()> + Send + 'static) {
    let settled = Settled(held);
    tokio::spawn(async move {
        let _settled = settled;
        extension.await;
    });
}

/// Marks a grant's extension settled when dropped.
struct Settled(Arc<Held>);

impl Drop for Settled {
    fn drop(&mut self) {
        self.0.extension_settled();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn what_waits_for_an_extension_reads_the_extended_deadline() {
        use crate::sync::held::HoldOwner;
        use crate::sync::metrics::Metrics;
        let grant_ends = Instant::now() + Duration::from_millis(100);
        let owner = HoldOwner {
            name: "l".into(),
            key: "l".into(),
            renew_script: &crate::scripts::catalog::lock::scripts().renew,
            field: "c:1".into(),
        };
        let held =
            Arc::new(Held::new(owner, None, grant_ends, Arc::new(Metrics::default())).extending());
        let reader = tokio::spawn({
            let held = Arc::clone(&held);
            async move {
                held.extended().await;
                held.deadline()
            }
        });
        tokio::task::yield_now().await;
        assert!(!reader.is_finished(), "read before the extension settled");
        let extended = grant_ends + Duration::from_secs(5);
        held.extend_to(extended);
        held.extension_settled();
        assert_eq!(reader.await.unwrap(), extended);
        // Once settled, nothing waits any more.
        tokio::time::timeout(Duration::from_secs(1), held.extended())
            .await
            .unwrap();
    }

    /// A re-entry waits for its outer grant's extension: an extension task dropped before
    /// it first ran (its runtime shut down) must still let it go on. Seen failing (the
    /// wait never ended) with the settling made inside the task.
    #[test]
    fn an_extension_dropped_before_it_runs_is_settled() {
        use crate::sync::held::HoldOwner;
        use crate::sync::metrics::Metrics;
        let owner = HoldOwner {
            name: "l".into(),
            key: "l".into(),
            renew_script: &crate::scripts::catalog::lock::scripts().renew,
            field: "c:1".into(),
        };
        let ends = Instant::now() + Duration::from_millis(100);
        let held = Arc::new(Held::new(owner, None, ends, Arc::new(Metrics::default())).extending());
        let doomed = tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap();
        // The task is spawned but never polled: `block_on` returns at once.
        doomed.block_on(async { spawn_settling(Arc::clone(&held), std::future::pending()) });
        drop(doomed);
        let waiting = tokio::runtime::Builder::new_current_thread()
            .enable_time()
            .build()
            .unwrap();
        let settled = waiting.block_on(async {
            tokio::time::timeout(Duration::from_secs(2), held.extended()).await
        });
        assert!(settled.is_ok(), "a re-entry would wait for ever");
    }
}
