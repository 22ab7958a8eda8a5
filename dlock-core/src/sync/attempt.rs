//! The try step, the same for every primitive: one acquisition's calls of its primitive's
//! acquire script, what those calls may have left in Redis, and how that is cleaned up.
//!
//! A primitive builds the script call once ([`TryStep::new`]); the acquisition loop
//! (`sync::acquire`) runs it as often as needed ([`TryStep::run`]). The step retries fast transient failures, counts
//! every attempt, follows each call with `WAIT` when the client asks for replica
//! acknowledgements, and decodes the scripts' shared reply grammar ([`Reply`]). It also
//! tracks what an unanswered or busy call may have left behind:
//!
//! - a hold, while a call's reply is outstanding (lost reply, cancellation, a replica
//!   acknowledgement missing);
//! - a place among the waiters (the lock's waiter registry, the fair queue, the read-write
//!   lock's waiting writers), once a call of an acquisition that waits was sent.
//!
//! Until the primitive reports a grant ([`TryStep::granted`]), dropping the step (the
//! acquisition failed, timed out, or its future was dropped) hands the primitive's
//! cleanup releases to the client's background task, which retries them until Redis
//! answers: the cleanup of every primitive is written and tested once, here. An
//! acquisition that gives up (rather than being dropped) first tries the cleanup itself,
//! briefly ([`TryStep::give_up`]), so that a healthy Redis is clean when its caller goes
//! on, and an acquisition's `wait` still bounds it while Redis is down.

use std::sync::Arc;
use std::time::Duration;

use futures_util::future::join_all;
use tokio::time::Instant;

use crate::error::LockError;
use crate::fence::Fence;
use crate::kind::LockKind;
use crate::redis::{Backend, CallError};
use crate::scripts::ScriptCall;
use crate::sync::metrics::Metrics;
use crate::sync::recheck::place_lifetime;
use crate::sync::release::{self, NextInLine, ReleaseJob, ReleaseTiming, Sending};
use crate::sync::retry::RetryPolicy;
use crate::sync::wait::Waiter;

/// What a try step needs of the client it runs on.
pub(crate) trait Host: Sync {
    fn backend(&self) -> &Backend;
    fn retry(&self) -> RetryPolicy;
    /// How many replicas must confirm an acquisition, and within how long; `None`: none.
    fn replica_acks(&self) -> Option<(u32, Duration)>;
    fn metrics(&self) -> &Metrics;
    fn release_timing(&self) -> ReleaseTiming;
    /// Sends `job` to the client's background releases (never blocks, works anywhere).
    fn release_in_background(&self, job: ReleaseJob);
    /// Remembers `job`, about to be sent, for a replay on a new master (see
    /// `release::ReleaseLog`): a cleanup a failover loses is sent again like a guard's
    /// release, or what it gives back stays until its lease ends.
    fn record_release(&self, job: &ReleaseJob);
}

/// How long an acquisition that gives up (timed out, failed) may spend cleaning up before
/// it returns: one attempt of each cleanup release, so that a healthy Redis is clean when
/// the caller goes on (a waiting writer's entry no longer holds readers back, say), and a
/// Redis that does not answer costs the caller at most this beyond its wait (the cleanup
/// goes on in the background then).
const FOREGROUND_CLEANUP: Duration = Duration::from_millis(250);

/// What an acquire script answered: the reply grammar every acquire script shares.
#[derive(Debug)]
pub(crate) enum Reply {
    /// nil or `{token}`: the acquisition holds one key now, with the fencing token minted
    /// for it (or stored with it); `None` for a re-entry, a reader, a semaphore grant and
    /// clients without tokens.
    Granted(Option<Fence>),
    /// `{'ok', token...}`: the acquisition holds every key of a set, with each key's token
    /// (`None` where tokens are off).
    GrantedAll(Vec<Option<Fence>>),
    /// An integer, or `{'busy', i, ms}` for a set: key `at` (0-based) is held by another
    /// owner; the next try is worth it after `wait_ms` at the latest (negative: unknown).
    /// `untold`: `{'busy', i, ms, 'untold'}`, a lock the set passed on left waiters
    /// untold (see `lock/scripts/handoff.lua`).
    Busy {
        wait_ms: i64,
        at: usize,
        untold: bool,
    },
    /// `notheld`: a re-entry found its owner's hold gone.
    NotHeld,
    /// `upgrade`: a read-write lock's write re-entry found an owner that only reads.
    Upgrade,
    /// `drift:<n>`: a semaphore stores capacity `n`, not the handle's.
    Drift(u32),
    /// `wrongtype:[<i>:]<type>`: key `at` holds a value of this Redis type, not a lock.
    WrongType { found: String, at: usize },
    /// `kind:[<i>:]<kind>`: the name of key `at` is held as another kind of lock.
    OtherKind { found: LockKind, at: usize },
    /// `crowded:<n>`: the lock has `n` holders, the most it takes
    /// ([`MAX_HOLDERS`](crate::limits::MAX_HOLDERS)).
    Crowded(usize),
}

impl Reply {
    /// Whether the acquisition holds what it asked for now.
    pub(crate) fn is_granted(&self) -> bool {
        matches!(self, Reply::Granted(_) | Reply::GrantedAll(_))
    }

    /// The error for an answer that ends an acquisition of `requested` (or another call,
    /// `action`) of the lock `name` (for a set: the lock at the answer's position): its
    /// key holds another type of value, or its name another kind of lock; any other
    /// answer does not fit the call (a script of another dlock version loaded under the
    /// same hash, say) and is reported, never acted on.
    pub(crate) fn refusal(
        self,
        name: &str,
        action: &'static str,
        requested: LockKind,
    ) -> LockError {
        match self {
            Reply::WrongType { found, .. } => LockError::WrongType {
                name: name.to_owned(),
                found,
            },
            Reply::OtherKind { found, .. } => LockError::KindMismatch {
                name: name.to_owned(),
                requested,
                found,
            },
            Reply::Crowded(limit) => LockError::TooManyHolders {
                name: name.to_owned(),
                limit,
            },
            other => LockError::Redis {
                name: name.to_owned(),
                action,
                server: None,
                source: redis::RedisError::from((
                    redis::ErrorKind::UnexpectedReturnType,
                    "unexpected reply from a dlock script",
                    format!("{other:?}"),
                )),
            },
        }
    }
}

impl redis::FromRedisValue for Reply {
    fn from_redis_value(value: redis::Value) -> Result<Reply, redis::ParsingError> {
        match value {
            redis::Value::Nil => Ok(Reply::Granted(None)),
            redis::Value::Int(wait_ms) => Ok(Reply::Busy {
                wait_ms,
                at: 0,
                untold: false,
            }),
            redis::Value::Array(items) => Reply::from_items(&items),
            other => Reply::from_text(&String::from_redis_value(other)?),
        }
    }
}

impl Reply {
    /// An array reply: a grant's token, a set's tokens (`ok`), or a busy answer naming
    /// the lock that blocked (`busy`).
    fn from_items(items: &[redis::Value]) -> Result<Reply, redis::ParsingError> {
        match items {
            [single @ redis::Value::Int(_)] => match token(single)? {
                Some(fence) => Ok(Reply::Granted(Some(fence))),
                None => Err(unexpected(&items)),
            },
            [redis::Value::BulkString(tag), rest @ ..] if tag.as_slice() == b"ok" => rest
                .iter()
                .map(token)
                .collect::<Result<Vec<_>, _>>()
                .map(Reply::GrantedAll),
            [redis::Value::BulkString(tag), redis::Value::Int(at), redis::Value::Int(wait_ms), untold @ ..]
                if tag.as_slice() == b"busy" =>
            {
                let untold = match untold {
                    [] => false,
                    [redis::Value::BulkString(what)] if what.as_slice() == b"untold" => true,
                    _ => return Err(unexpected(&items)),
                };
                Ok(Reply::Busy {
                    wait_ms: *wait_ms,
                    at: key_position(*at)?,
                    untold,
                })
            }
            _ => Err(unexpected(&items)),
        }
    }

    /// A refusal: `<what>:<detail>` or, for a key of a set, `<what>:<i>:<detail>`.
    fn from_text(text: &str) -> Result<Reply, redis::ParsingError> {
        let (what, rest) = text.split_once(':').unwrap_or((text, ""));
        let (at, detail) = match rest.split_once(':') {
            Some((i, detail)) if i.bytes().all(|b| b.is_ascii_digit()) => {
                let i: i64 = i.parse().map_err(|_| unexpected(&text))?;
                (key_position(i)?, detail)
            }
            _ => (0, rest),
        };
        match what {
            "notheld" => Ok(Reply::NotHeld),
            "upgrade" => Ok(Reply::Upgrade),
            "crowded" => detail
                .parse()
                .map(Reply::Crowded)
                .map_err(|_| unexpected(&text)),
            "drift" => detail
                .parse()
                .map(Reply::Drift)
                .map_err(|_| unexpected(&text)),
            "wrongtype" => Ok(Reply::WrongType {
                found: detail.to_owned(),
                at,
            }),
            "kind" => LockKind::from_script(detail)
                .map(|found| Reply::OtherKind { found, at })
                .ok_or_else(|| unexpected(&text)),
            _ => Err(unexpected(&text)),
        }
    }
}

/// An acquire script's answer that fits no reply of the grammar.
fn unexpected(what: &dyn std::fmt::Debug) -> redis::ParsingError {
    format!("unexpected reply from a dlock acquire script: {what:?}").into()
}

/// A fencing token in a reply: `0` for none.
fn token(value: &redis::Value) -> Result<Option<Fence>, redis::ParsingError> {
    match value {
        redis::Value::Int(0) => Ok(None),
        redis::Value::Int(n) => u64::try_from(*n)
            .map(|n| Some(Fence::new(n)))
            .map_err(|_| format!("a dlock fencing token must be positive, got {n}").into()),
        other => Err(unexpected(other)),
    }
}

/// A Lua key position (from 1) as an index (from 0).
fn key_position(lua: i64) -> Result<usize, redis::ParsingError> {
    usize::try_from(lua - 1).map_err(|_| format!("bad key position {lua}").into())
}

/// Where a call's "an earlier try may have registered this acquisition" flag goes: the
/// index of that argument (`'1'` / `'0'`) in the script call.
#[derive(Clone, Copy)]
pub(crate) struct RegisteredFlag(pub(crate) usize);

/// Where a call's "how long the waiter's place lives" argument goes (in ms: the lock's
/// registry, a read-write lock's promises), set before each try from the recheck planned
/// after it (see [`TryStep::plan_next_wait`]).
#[derive(Clone, Copy)]
pub(crate) struct PlaceLifetime(pub(crate) usize);

/// One acquisition's tries of its acquire script (see the module documentation).
///
/// `cleanup` builds, for the step's owner, the releases that undo whatever a call may have
/// left: every hold the owner may have taken, and its place among the waiters. It is
/// called only when needed (on drop before a grant), so the common path builds nothing.
pub(crate) struct TryStep<'a, C: Fn(&str) -> Vec<ReleaseJob>> {
    host: &'a dyn Host,
    name: &'a str,
    call: ScriptCall,
    /// Whom the calls acquire for (the owner field, a semaphore's grant id).
    owner: Arc<str>,
    cleanup: C,
    /// Follow each call with `WAIT` when the client asks for replica acknowledgements.
    replicated: bool,
    /// The acquisition waits: its busy calls take a place among the waiters.
    waits: bool,
    registered_flag: Option<RegisteredFlag>,
    /// The place-lifetime argument and the value the call has in it.
    place_lifetime: Option<(PlaceLifetime, u64)>,
    /// A call may have taken a hold whose reply has not come (or was not confirmed).
    maybe_applied: bool,
    /// A call of this waiting acquisition was sent: it may have a place among the waiters.
    may_be_waiting: bool,
    /// The last call was answered: Redis is there to clean up in the foreground.
    answered: bool,
}

impl<'a, C: Fn(&str) -> Vec<ReleaseJob>> TryStep<'a, C> {
    /// The tries of `call` for `owner` of the lock `name` (in logs), cleaned up by
    /// `cleanup`.
    pub(crate) fn new(
        host: &'a dyn Host,
        name: &'a str,
        owner: Arc<str>,
        call: ScriptCall,
        cleanup: C,
    ) -> Self {
        TryStep {
            host,
            name,
            call,
            owner,
            cleanup,
            replicated: false,
            waits: false,
            registered_flag: None,
            place_lifetime: None,
            maybe_applied: false,
            may_be_waiting: false,
            answered: false,
        }
    }

    /// Each call is confirmed by the replicas the client asks for (`replica_acks`): a
    /// grant that fewer replicas confirmed is an error ([`CallError::NotReplicated`]), and
    /// stays to be found by the next try or released by the cleanup.
    pub(crate) fn replicated(mut self) -> Self {
        self.replicated = true;
        self
    }

    /// The acquisition waits when busy, so its busy calls may take a place among the
    /// waiters (the script's registration, a queue entry, a waiting writer's entry): the
    /// cleanup then also runs when no call may have taken a hold. `flag`, when given, is
    /// the argument that tells the script whether an earlier call may have registered it
    /// (a grant then takes it out of the registry).
    pub(crate) fn waiting(mut self, waits: bool, flag: Option<RegisteredFlag>) -> Self {
        self.waits = waits;
        self.registered_flag = flag;
        self
    }

    /// The call's argument `at` says how long a waiting try keeps its place (`ms` as
    /// the call was built): see [`TryStep::plan_next_wait`].
    pub(crate) fn keeping_place(mut self, at: PlaceLifetime, ms: u64) -> Self {
        self.place_lifetime = Some((at, ms));
        self
    }

    /// Before every try: `waiter` plans the longest sleep after it (see
    /// `Waiter::plan_recheck`), and the try keeps the acquisition's place among the
    /// waiters that long (`sync::recheck::place_lifetime`), when the call has a
    /// place-lifetime argument (a single try keeps none, and some primitives' places live
    /// by other means).
    pub(crate) fn plan_next_wait(&mut self, waiter: &mut Waiter<'_>) {
        let recheck = waiter.plan_recheck();
        let Some((PlaceLifetime(at), sent)) = &mut self.place_lifetime else {
            return;
        };
        let lifetime = place_lifetime(recheck);
        let ms = u64::try_from(lifetime.as_millis()).unwrap_or(u64::MAX);
        if ms != *sent {
            *sent = ms;
            self.call.set_arg(*at, &ms.to_string());
        }
    }

    /// Before the first try of an acquisition that waits: plans the wait after it as
    /// [`plan_next_wait`](Self::plan_next_wait) does. The task counts among its client's
    /// waiting tasks from then on, so that tasks that start waiting together space their
    /// first rechecks out too: counted only once they had waited, thousands of them
    /// would all try again one interval after their first try.
    pub(crate) fn plan_first_wait(&mut self, waiter: &mut Waiter<'_>) {
        if waiter.waits() {
            self.plan_next_wait(waiter);
        }
    }

    /// Runs the script until Redis answers, retrying fast transient failures while the
    /// pause ends before `give_up_at`. Returns the send time of the call that answered (a
    /// lease counts from it) and the script's reply.
    pub(crate) async fn run(
        &mut self,
        give_up_at: Option<Instant>,
    ) -> Result<(Instant, Reply), CallError> {
        if let Some(RegisteredFlag(index)) = self.registered_flag {
            self.call
                .set_arg(index, if self.may_be_waiting { "1" } else { "0" });
        }
        // Set before the call is sent, and kept after an error reply too: a script refused
        // half-way (an ACL denying PEXPIRE after HSET, say) keeps what it wrote.
        self.maybe_applied = true;
        self.may_be_waiting |= self.waits;
        let host = self.host;
        let (first, name) = (&self.call, self.name);
        // A retry of a call whose first send's reply was lost: that send may have
        // registered the owner, so the retry says so (a grant then takes it out of the
        // waiters). Made only if a retry happens: the common call is sent once.
        let flag_again = self
            .registered_flag
            .filter(|_| self.waits)
            .map(|RegisteredFlag(index)| index);
        // (Sync, as the acquisition's future is Send: the closure is kept across awaits.)
        let retried = std::sync::OnceLock::new();
        let sends = std::sync::atomic::AtomicBool::new(false);
        let acks = self.replicated.then(|| host.replica_acks()).flatten();
        // Boxed: the call's future is the largest state of an acquisition (about 1 KB,
        // most of it the client library's), and unboxed it would stay in the acquisition's
        // own future for as long as that waits between tries; boxed, a waiting task holds
        // only what it needs to wait.
        let outcome = Box::pin(host.retry().run(name, give_up_at, || {
            let again = sends.swap(true, std::sync::atomic::Ordering::Relaxed);
            let call = match flag_again {
                Some(index) if again => retried.get_or_init(|| {
                    let mut call = first.clone();
                    call.set_arg(index, "1");
                    call
                }),
                _ => first,
            };
            async move {
                host.metrics().attempted();
                match acks {
                    None => host.backend().invoke::<Reply>(call).await,
                    // The script followed by `WAIT` (see `Backend::invoke_replicated`);
                    // boxed, so that the common call's future stays small.
                    Some(acks) => {
                        Box::pin(host.backend().invoke_replicated(
                            name,
                            call,
                            acks,
                            Reply::is_granted,
                        ))
                        .await
                    }
                }
            }
        }))
        .await;
        // Replicas that did not confirm in time: Redis itself answered.
        self.answered = matches!(outcome, Ok(_) | Err(CallError::NotReplicated { .. }));
        match &outcome {
            Ok((_, reply)) => tracing::trace!(lock = %self.name, ?reply, "dlock: try answered"),
            Err(error) => tracing::trace!(lock = %self.name, %error, "dlock: try failed"),
        }
        if let Ok((_, reply)) = &outcome
            && !reply.is_granted()
        {
            // Busy or refused before writing a hold: no hold of ours is there.
            self.maybe_applied = false;
            // Kept as it is while the acquisition waits: a try sends it again.
            self.call.shrink_to_fit();
        }
        outcome
    }

    /// The acquisition gives up (its wait ran out, or it failed): if Redis answered its
    /// last call, cleans up now what its calls may have left, in one attempt per release
    /// bounded by [`FOREGROUND_CLEANUP`], so that the caller returns to a clean state.
    /// What does not finish in time, or follows a call Redis did not answer (it is down
    /// or stalled: the caller is not kept waiting for it), is left to the background when
    /// the step is dropped.
    pub(crate) async fn give_up(&mut self) {
        if !self.answered || (!self.maybe_applied && !self.may_be_waiting) {
            return;
        }
        let host = self.host;
        let backend = host.backend();
        let mut timing = host.release_timing();
        timing.retry.attempts = 0;
        let jobs = (self.cleanup)(&self.owner);
        for job in &jobs {
            host.record_release(job);
        }
        let cleanups = jobs
            .iter()
            .map(|job| release::release(backend, timing, job, NextInLine::NONE, Sending::First));
        match tokio::time::timeout(FOREGROUND_CLEANUP, join_all(cleanups)).await {
            Ok(outcomes) if outcomes.iter().all(Result::is_ok) => self.granted(),
            _ => {
                tracing::debug!(lock = %self.name, "dlock: cleanup of an acquisition that gave up did not finish; going on in the background")
            }
        }
    }

    /// The last call granted the acquisition, and the caller now owns what it took (its
    /// guard releases it): nothing is left to clean up. The grant took the owner out of
    /// the waiters (every acquire script does, when told it may be there).
    pub(crate) fn granted(&mut self) {
        self.maybe_applied = false;
        self.may_be_waiting = false;
    }

    /// From now on the step tries `call` for `owner` (a semaphore whose capacity changed
    /// while it waited asks anew under a grant id of its own): whatever the calls so far
    /// may have left goes to the background, as when a step is dropped.
    pub(crate) fn restart(&mut self, call: ScriptCall, owner: Arc<str>) {
        self.clean_up_in_background();
        self.call = call;
        self.owner = owner;
        self.answered = false;
    }

    /// The client's counters, where the acquisition's outcome is counted.
    pub(crate) fn metrics(&self) -> &Metrics {
        self.host.metrics()
    }

    fn clean_up_in_background(&mut self) {
        if !self.maybe_applied && !self.may_be_waiting {
            return;
        }
        tracing::debug!(lock = %self.name, holds = self.maybe_applied, waiting = self.may_be_waiting, "dlock: acquisition ended without a guard; cleaning up in the background");
        for job in (self.cleanup)(&self.owner) {
            self.host.release_in_background(job.uncounted());
        }
        self.granted();
    }
}

impl<C: Fn(&str) -> Vec<ReleaseJob>> Drop for TryStep<'_, C> {
    fn drop(&mut self) {
        self.clean_up_in_background();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use redis::{FromRedisValue, Value};

    fn decode(value: Value) -> Reply {
        Reply::from_redis_value(value).unwrap()
    }

    fn text(s: &str) -> Value {
        Value::BulkString(s.as_bytes().to_vec())
    }

    #[test]
    fn the_shared_reply_grammar_decodes_every_answer() {
        assert!(matches!(decode(Value::Nil), Reply::Granted(None)));
        assert!(
            matches!(decode(Value::Array(vec![Value::Int(7)])), Reply::Granted(Some(f)) if f.get() == 7)
        );
        assert!(matches!(
            decode(Value::Array(vec![text("ok"), Value::Int(3), Value::Int(0)])),
            Reply::GrantedAll(tokens) if tokens.len() == 2 && tokens[1].is_none()
        ));
        assert!(matches!(
            decode(Value::Int(250)),
            Reply::Busy {
                wait_ms: 250,
                at: 0,
                untold: false
            }
        ));
        assert!(matches!(
            decode(Value::Array(vec![
                text("busy"),
                Value::Int(2),
                Value::Int(-1)
            ])),
            Reply::Busy {
                wait_ms: -1,
                at: 1,
                untold: false
            }
        ));
        assert!(matches!(
            decode(Value::Array(vec![
                text("busy"),
                Value::Int(1),
                Value::Int(30),
                text("untold")
            ])),
            Reply::Busy {
                wait_ms: 30,
                at: 0,
                untold: true
            }
        ));
        assert!(matches!(decode(text("notheld")), Reply::NotHeld));
        assert!(matches!(decode(text("upgrade")), Reply::Upgrade));
        assert!(matches!(decode(text("drift:5")), Reply::Drift(5)));
        assert!(matches!(
            decode(text("wrongtype:string")),
            Reply::WrongType { found, at: 0 } if found == "string"
        ));
        assert!(matches!(
            decode(text("wrongtype:3:list")),
            Reply::WrongType { found, at: 2 } if found == "list"
        ));
        assert!(matches!(
            decode(text("kind:read_write")),
            Reply::OtherKind {
                found: LockKind::ReadWrite,
                at: 0
            }
        ));
        assert!(matches!(
            decode(text("kind:2:fair")),
            Reply::OtherKind {
                found: LockKind::Fair,
                at: 1
            }
        ));
    }

    #[test]
    fn answers_outside_the_grammar_are_errors_not_guesses() {
        for value in [
            text("kind:semaphore-ish"),
            text("drift:many"),
            text("busy"),
            Value::Array(vec![Value::Int(0)]),
            Value::Array(vec![Value::Int(-4)]),
            Value::Array(vec![text("busy"), Value::Int(0), Value::Int(5)]),
            Value::Array(vec![Value::Int(1), Value::Int(2)]),
        ] {
            assert!(Reply::from_redis_value(value.clone()).is_err(), "{value:?}");
        }
    }
}
