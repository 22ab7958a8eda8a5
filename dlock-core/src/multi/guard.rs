//! [`MultiGuard`]: every lock of a [`MultiLock`](super::MultiLock), held together.

use std::future::Future;
use std::sync::Arc;

use crate::error::{LockError, Result};
use crate::fence::Fence;
use crate::lock::guard::LockGuard;
use crate::sync::observe::{self, HoldRecord, Observed};
use crate::sync::owner;

/// Every lock of a [`MultiLock`](super::MultiLock), held together: one hold of each, in
/// the canonical order. Release them with [`unlock`](MultiGuard::unlock).
///
/// `Send` and `'static`, like [`LockGuard`]. Each lock is its own hold in Redis (its own
/// owner field, renewal and release), and losing any one of them makes the whole guard
/// lost ([`lost`](MultiGuard::lost) names it).
///
/// # Dropping
///
/// Dropping the guard without `unlock` queues the release of every lock to its client's
/// background task, as dropping each [`LockGuard`] would.
#[must_use = "dropping the guard releases every lock in the background at once"]
#[derive(Debug)]
pub struct MultiGuard {
    /// In canonical order.
    guards: Vec<LockGuard>,
    /// Counts the set as one held lock until the guard is gone.
    record: Option<HoldRecord>,
}

/// Each lock's losses and release failures count under the set's label.
impl Observed for MultiGuard {
    fn observe(&mut self, hold: HoldRecord) {
        for guard in &self.guards {
            guard.held().set_label(hold.label());
        }
        self.record = Some(hold);
    }
}

impl MultiGuard {
    pub(super) fn new(guards: Vec<LockGuard>) -> MultiGuard {
        MultiGuard {
            guards,
            record: None,
        }
    }

    /// The span around the attribute's body under this guard.
    pub(crate) fn hold_span(&self) -> tracing::Span {
        let label = self.record.as_ref().map(HoldRecord::label);
        observe::hold_span(&self.names().join(", "), label)
    }

    /// The names of the locks held, in canonical order.
    pub fn names(&self) -> Vec<&str> {
        self.guards.iter().map(LockGuard::name).collect()
    }

    /// The fencing token of each lock held, as (name, token) in canonical order: one per
    /// lock, each from that lock's own counter, so each is checked against the records
    /// that lock protects. Empty for a client built with
    /// [`fencing_tokens(false)`](crate::LockClientBuilder::fencing_tokens).
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> dlock::Result<()> {
    /// # let server = dlock_tests::RedisServer::start();
    /// # let client = dlock::LockClient::connect(&server.url()).await?;
    /// let pair = dlock::MultiLock::sequential([client.lock("x"), client.lock("y")])?;
    /// let guard = pair.lock().await?;
    /// let tokens = guard.fencing_tokens();
    /// assert_eq!(tokens.iter().map(|(name, _)| *name).collect::<Vec<_>>(), ["x", "y"]);
    /// guard.unlock().await?;
    /// # Ok(())
    /// # }
    /// ```
    pub fn fencing_tokens(&self) -> Vec<(&str, Fence)> {
        self.guards
            .iter()
            .filter_map(|guard| Some((guard.name(), guard.fencing_token()?)))
            .collect()
    }

    /// Releases every lock (all at once) and reports the outcome.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> dlock::Result<()> {
    /// # let server = dlock_tests::RedisServer::start();
    /// # let client = dlock::LockClient::connect(&server.url()).await?;
    /// let pair = dlock::MultiLock::sequential([client.lock("x"), client.lock("y")])?;
    /// let guard = pair.lock().await?;
    /// client.lock("y").force_unlock().await?;
    /// match guard.unlock().await {
    ///     Err(dlock::LockError::PartialUnlock { failures }) => {
    ///         assert_eq!(failures.len(), 1);
    ///         assert_eq!(failures[0].0, "y"); // and "x" was released
    ///     }
    ///     other => panic!("{other:?}"),
    /// }
    /// assert!(!client.lock("x").is_locked().await?);
    /// # Ok(())
    /// # }
    /// ```
    ///
    /// # Errors
    ///
    /// The contract of every guard's `unlock`: [`LockError::NotHeld`] (naming every lock,
    /// joined by `", "`) when no lock of the set was held any more. Otherwise, when any
    /// release failed, [`LockError::PartialUnlock`] lists every lock whose release failed,
    /// with what its own [`LockGuard::unlock`] reported; the locks it does not list were
    /// released (one that failed with a Redis error is retried in the background).
    ///
    /// # Cancel safety
    ///
    /// Cancelling the returned future hands every release not yet confirmed to the
    /// background task; a release that already reached Redis is not applied twice.
    pub async fn unlock(self) -> Result<()> {
        let count = self.guards.len();
        let outcomes = futures_util::future::join_all(self.guards.into_iter().map(|guard| {
            let name = guard.name().to_owned();
            async move { (name, guard.unlock().await) }
        }))
        .await;
        let failures: Vec<(String, LockError)> = outcomes
            .into_iter()
            .filter_map(|(name, outcome)| outcome.err().map(|error| (name, error)))
            .collect();
        let none_held = failures.len() == count
            && failures
                .iter()
                .all(|(_, error)| matches!(error, LockError::NotHeld { .. }));
        if failures.is_empty() {
            Ok(())
        } else if none_held {
            // Nothing was released: the verdict every guard gives for a hold already gone.
            let names: Vec<String> = failures.into_iter().map(|(name, _)| name).collect();
            Err(LockError::NotHeld {
                name: names.join(", "),
            })
        } else {
            Err(LockError::PartialUnlock { failures })
        }
    }

    /// Completes with [`LockError::Lost`], naming the lock, as soon as any lock of the
    /// set is lost while the guard holds it (see [`LockGuard::lost`]). Never completes
    /// once the guard is released. Owns what it needs, so it can race the critical
    /// section.
    pub fn lost(&self) -> impl Future<Output = LockError> + Send + 'static + use<> {
        let each: Vec<_> = self
            .guards
            .iter()
            .map(|guard| Box::pin(guard.lost()))
            .collect();
        async move { futures_util::future::select_all(each).await.0 }
    }

    /// Whether any lock of the set is known to be lost.
    pub fn is_lost(&self) -> bool {
        self.guards.iter().any(LockGuard::is_lost)
    }

    /// Runs `future` in the scope of every lock held (see [`LockGuard::scope`]): taking
    /// any of them again inside, alone or in another multi-lock, re-enters it.
    pub fn scope<F: Future>(&self, future: F) -> impl Future<Output = F::Output> + use<F> {
        owner::scope_all(
            self.guards
                .iter()
                .map(|guard| (guard.client().inner.id_bits(), Arc::clone(guard.held())))
                .collect(),
            future,
        )
    }

    /// The earliest local deadline of the holds (see [`LockGuard::deadline`]): until
    /// then Redis cannot have expired any of them.
    pub fn deadline(&self) -> std::time::Instant {
        self.guards
            .iter()
            .map(LockGuard::deadline)
            .min()
            .unwrap_or_else(std::time::Instant::now)
    }
}
