//! What every primitive shares: holds and their loss, the local line, call-chain
//! ownership, unlock notifications, the wait between tries, renewal, release, retries,
//! statistics, spans and exported metrics. Each primitive (the reentrant lock in `lock/`)
//! builds on these and plugs its own scripts in: a release is a `release::ReleaseOp`, a
//! hold names its renew script, its tries run in `acquire::until_acquired`, which hands
//! each outcome that is not a grant to `wait::Waiter`, and the whole acquisition runs in
//! `observe::acquisition`.
//!
//! The files: what every primitive shares. `acquire.rs`: the acquisition loop every
//! primitive runs (`until_acquired`: try, wait, try again, give up and clean up), to which
//! a primitive supplies its try step and an `Acquisition` (what its replies mean, a lock
//! handed over while it waited, a cheap check after a first subscription); `attempt.rs`:
//! the one try step (`TryStep`): a
//! primitive's acquire script run with retries, attempt counting and, with `replica_acks`,
//! `WAIT`; the scripts' shared reply grammar (`Reply`, and `Reply::refusal` for the answers
//! that end an acquisition); what a call may have left (a hold whose reply never came, a
//! place among the waiters) and its cleanup, in the foreground when an acquisition gives up
//! and Redis answers, else in the background when the step is dropped; `held.rs`: one
//! hold's state (deadline, lost or released, its local turn, when it was acquired);
//! `line.rs`: a task's wait in the local line for its turn (the first task watches the
//! holder as the core's `LineWatch` says, and reports the line's length for `inspect`);
//! `local.rs`: the per-process first-come-first-served line per key, generic over the
//! holder, the cohort bound (`protocol::LOCAL_RUN_BOUND`: at most 8 local hand-offs in a row while
//! other clients wait, then the lock goes to them), and the lock a release gives to the
//! line's next task in its own script (that task's hold, lease and token: no try of its
//! own), given back (its `withdraw`) when that task stopped waiting; `grant.rs`: a lock another
//! client's release gave to a waiter (`held:` messages), extended to the lease (whether
//! it is held as it is, and until when, is `protocol::take_up`'s decision); `owner.rs`: which hold a call
//! chain (`scope`) re-enters, and the innermost hold of a kind (a read-write lock's write
//! hold, say) up the chain; `heard.rs`: what a subscribed channel has heard (Redis's
//! confirmation, the messages so far), one small state shared by the channel's
//! subscriptions; `pubsub.rs`: channel subscriptions shared by a client's
//! waiters, changes sent in batches (one `SUBSCRIBE` / `UNSUBSCRIBE` for every change
//! queued, one `SSUBSCRIBE` per slot in a cluster), a channel kept subscribed 50 ms after
//! its last waiter (`LINGER`); a lock's wake channel routes each message to the waiting
//! owner it names (`OwnerWake`: try now, or when a grant to another lapses) and answers a message
//! for an owner that no longer waits with the lock's `leave` (an `OwnerRelease`), a shared channel
//! wakes one waiter per message (or every waiter that asks); `wait.rs`: the wait between
//! tries (subscribe — an owner to every channel a hand-off to it can come by, before its
//! first try when they are subscribed already —, nap until a message, the time the busy
//! answer gave or the recheck, ride out an outage, stop at the deadline); `recheck.rs`:
//! how long a waiter sleeps without a message (its primitive's interval, spaced out to
//! about a thousand rechecks a second per client when many tasks wait); `watchdog.rs`:
//! batched renewals, and one renewal outside its rounds (`renew_once`: a multi-lock's early
//! holds); `release.rs`: running, retrying, logging and replaying a release, with
//! the releasing client's `NextInLine` (a local task waits next; it may keep the lock) and the
//! script's `NextHolder` answer, and `BackgroundReleases`, the queue of releases nobody
//! awaits, counted until Redis answered each (`LockClient::shutdown`); `retry.rs`: when a
//! failed call is tried again; `metrics.rs`: the client's counters and latency histogram
//! (`LockClient::stats`); `observe.rs`: what acquisitions and holds tell the outside: every
//! primitive's acquisition runs in `observe::acquisition` (the `dlock.acquire` span, the
//! waiter gauge, the outcome), its guard keeps a `HoldRecord` (held gauge, hold time) and
//! labels its `Held` for losses and release failures; the attribute's template reaches it
//! through a task-local set by `private::acquire` (`with_template`); with the `metrics`
//! feature it records `dlock_*` through the `metrics` facade, labelled by `kind` and
//! `key_template` (`*` for the manual API), never by name

pub(crate) mod acquire;
pub(crate) mod attempt;
pub(crate) mod grant;
pub(crate) mod heard;
pub(crate) mod held;
pub(crate) mod line;
pub(crate) mod local;
pub(crate) mod metrics;
pub(crate) mod observe;
pub(crate) mod owner;
pub(crate) mod pubsub;
pub(crate) mod recheck;
pub(crate) mod release;
pub(crate) mod retry;
pub(crate) mod verbs;
pub(crate) mod wait;
pub(crate) mod watchdog;
