//! The acquisition loop, the one every primitive runs: try, and until a try is granted,
//! wait (`sync::wait`) and try again; give up at the deadline or after an outage longer
//! than `failover_wait`, cleaning up what the tries left (`sync::attempt`).
//!
//! A primitive supplies its try step (its acquire script) and an [`Acquisition`]: what
//! its script's replies mean, and the few things only it knows (a lock a release handed
//! over while the owner waited, a cheaper check than a try after a first subscription).
//! It writes no loop of its own.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use crate::error::{LockError, PermitsAsked, Result};
use crate::protocol::Grant;
use crate::scripts::ScriptCall;
use crate::sync::attempt::{Reply, TryStep};
use crate::sync::release::ReleaseJob;
use crate::sync::wait::{GiveUp, NotYet, Waiter};

/// What a primitive makes of one try's reply.
pub(crate) enum Answer<G> {
    /// The try was granted: the primitive's guard.
    Acquired(G),
    /// Not yet: wait, then try again.
    NotYet(NotYet),
    /// Try again at once (the primitive changed its call, see [`Acquisition::next_call`]).
    Again,
    /// An answer waiting cannot change: give up with this error.
    Refused(LockError),
}

/// A primitive's side of one acquisition.
pub(crate) trait Acquisition {
    type Guard;

    /// The name a give-up names (the lock that blocked a multi-lock last).
    fn name(&self) -> &str;

    /// What the reply to the try sent at `sent_at` means.
    fn answer(&mut self, sent_at: Instant, reply: Reply) -> Answer<Self::Guard>;

    /// Before each try: a new call and owner when the acquisition must ask anew (a
    /// semaphore whose handle's capacity changed), or an error when it must stop.
    fn next_call(&mut self) -> Result<Option<(ScriptCall, Arc<str>)>> {
        Ok(None)
    }

    /// Once the waiter's subscriptions are confirmed after a busy try sent before them,
    /// until when it may sleep on without trying: a primitive that can tell more cheaply
    /// than a try whether a release passed it over meanwhile says so (at most
    /// `nap_until`); `None` tries now.
    fn missed(&self, nap_until: Instant) -> impl Future<Output = Option<Instant>> + Send {
        let _ = nap_until;
        std::future::ready(None)
    }

    /// For a semaphore, the permits asked of how many, which its timeout names.
    fn permits_asked(&self) -> Option<PermitsAsked> {
        None
    }

    /// After a wait in which a release granted the owner the lock (see `sync::grant`):
    /// the guard of the granted hold, which needs no try, or `None` to take the grant
    /// with a try (which finds the hold its own).
    fn handed_over(&mut self, grant: Grant) -> Option<Self::Guard> {
        let _ = grant;
        None
    }
}

/// Runs `acquisition`'s tries through `step`, waiting between them with `waiter`, until
/// one is granted or the acquisition gives up at `give_up_at` (`wait` is what the caller
/// asked for, in a timeout's error). Counts the outcome in the client's metrics.
pub(crate) async fn until_acquired<A, C>(
    acquisition: &mut A,
    step: &mut TryStep<'_, C>,
    waiter: &mut Waiter<'_>,
    wait: Option<Duration>,
    started: Instant,
) -> Result<A::Guard>
where
    A: Acquisition,
    C: Fn(&str) -> Vec<ReleaseJob>,
{
    let give_up_at = waiter.give_up_at();
    step.plan_first_wait(waiter);
    // Every way to give up breaks out with its error, counted, and one await cleans up:
    // no await inside a match on a reply, whose temporaries would then stay in the state
    // a waiting task keeps.
    let error = loop {
        match acquisition.next_call() {
            Ok(None) => {}
            Ok(Some((call, owner))) => {
                step.restart(call, owner);
                step.plan_first_wait(waiter);
            }
            Err(error) => break failed(step, error),
        }
        let not_yet = match step.run(give_up_at).await {
            Ok((sent_at, reply)) => match acquisition.answer(sent_at, reply) {
                Answer::Acquired(guard) => return Ok(acquired(step, started, guard)),
                Answer::NotYet(not_yet) => not_yet,
                Answer::Again => continue,
                Answer::Refused(error) => break failed(step, error),
            },
            Err(error) => NotYet::Unavailable(error),
        };
        // Boxed, as the clean-up: only an acquisition that finds the lock taken waits.
        let resumed =
            Box::pin(waiter.wait_or_check(not_yet, |nap_until| acquisition.missed(nap_until)))
                .await;
        // A grant is taken whenever a wait ended with one, so that none outlives the wait
        // it ended and stands for what later messages ask.
        let grant = resumed.as_ref().ok().and_then(|()| waiter.take_grant());
        if let Some(guard) = grant.and_then(|grant| acquisition.handed_over(grant)) {
            return Ok(acquired(step, started, guard));
        }
        match resumed {
            // The next try keeps the acquisition's place among the waiters for as long
            // as the wait after it may last.
            Ok(()) => step.plan_next_wait(waiter),
            Err(GiveUp::TimedOut) => {
                tracing::debug!(lock = %acquisition.name(), waited = ?started.elapsed(), "dlock: wait budget spent");
                step.metrics().timed_out();
                break LockError::Timeout {
                    name: acquisition.name().to_owned(),
                    waited: wait.unwrap_or_default(),
                    permits: acquisition.permits_asked(),
                };
            }
            Err(GiveUp::Unavailable(error)) => {
                break failed(step, error.into_lock_error(acquisition.name(), "acquire"));
            }
        }
    };
    Box::pin(step.give_up()).await;
    Err(error)
}

fn acquired<C: Fn(&str) -> Vec<ReleaseJob>, G>(
    step: &mut TryStep<'_, C>,
    started: Instant,
    guard: G,
) -> G {
    step.granted();
    step.metrics().acquired(started.elapsed());
    guard
}

/// Counts an acquisition that failed with `error`.
fn failed<C: Fn(&str) -> Vec<ReleaseJob>>(step: &TryStep<'_, C>, error: LockError) -> LockError {
    step.metrics().acquire_failed();
    error
}
