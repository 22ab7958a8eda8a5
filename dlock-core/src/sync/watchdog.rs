//! Lease renewal for holds taken without an explicit lease.
//!
//! One task per client renews every registered hold once per period (watchdog timeout /
//! 3), in batches: one renew script call carries up to [`BATCH`] holds, so 10,000 held
//! locks cost a handful of round trips per period instead of 10,000 timers. A failed round
//! is retried with backoff until the next period; only a definitive "not held" from Redis,
//! or the local deadline passing, marks a guard lost.
//!
//! Each hold names its primitive's renew script ([`Held::renew_script`]); a batch holds
//! one script's holds (of one slot in a cluster). Every renew script follows one contract:
//! `ARGV[1]` is the lease in ms, then hold `i` is `KEYS[i]` with its owner in
//! `ARGV[i + 1]`; it answers one entry per hold: 1 renewed, 0 not held by that owner, or
//! the Redis type found when the key holds something else (a per-hold failure never
//! aborts the batch).
//!
//! With `replica_acks`, a renewal counts (moves the holds' local deadlines) only once the
//! replicas confirmed it, as an acquisition does. Otherwise a holder cut off with a
//! deposed master — which goes on answering for seconds after a failover — would keep
//! extending its deadline there while the promoted replica lets its copy of the lock
//! expire and hands it to someone else; the holder would learn of it only later. Counted
//! only when confirmed, the deadline stays behind the expiry every replica has.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

use tokio::time::Instant;

use crate::error::LossReason;
use crate::names::slot_of;
use crate::redis::Backend;
use crate::sync::held::Held;
use crate::sync::metrics::Metrics;
use crate::sync::retry::backoff;

/// Locks per `renew` script call.
const BATCH: usize = 512;

/// The set of locks the watchdog keeps alive.
#[derive(Default)]
pub(crate) struct Registry {
    entries: Mutex<HashMap<u64, Arc<Held>>>,
    next_id: AtomicU64,
}

impl Registry {
    pub(crate) fn register(&self, held: Arc<Held>) -> u64 {
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        self.lock_entries().insert(id, held);
        id
    }

    pub(crate) fn unregister(&self, id: u64) {
        self.lock_entries().remove(&id);
    }

    fn snapshot(&self) -> Vec<(u64, Arc<Held>)> {
        self.lock_entries()
            .iter()
            .map(|(id, held)| (*id, Arc::clone(held)))
            .collect()
    }

    fn lock_entries(&self) -> std::sync::MutexGuard<'_, HashMap<u64, Arc<Held>>> {
        self.entries.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// Timing of the renewal loop.
#[derive(Clone, Copy)]
pub(crate) struct Schedule {
    /// The watchdog timeout (validated by the client builder).
    pub(crate) lease: Duration,
    pub(crate) retry_delay: Duration,
    /// `replica_acks`: how many replicas must confirm a renewal, within how long.
    pub(crate) replica_acks: Option<(u32, Duration)>,
}

/// Runs until the registry is dropped (the client is gone).
pub(crate) async fn run(
    registry: Weak<Registry>,
    backend: Backend,
    schedule: Schedule,
    metrics: Arc<Metrics>,
) {
    let period = schedule.lease / 3;
    let mut next = Instant::now() + period;
    let mut failures: u32 = 0;
    loop {
        tokio::time::sleep_until(next).await;
        let Some(registry) = registry.upgrade() else {
            return;
        };
        let held = registry.snapshot();
        let round_started = Instant::now();
        match renew_round(&registry, &backend, &schedule, &held, &metrics).await {
            Ok(()) => {
                failures = 0;
                next = round_started + period;
            }
            Err(error) => {
                metrics.renewal_failed();
                failures += 1;
                expire_overdue(&registry, &held);
                let backoff = backoff(schedule.retry_delay, failures);
                tracing::warn!(%error, locks = held.len(), attempt = failures, "dlock: lease renewal failed; retrying");
                next = Instant::now() + backoff.min(period);
            }
        }
    }
}

/// Renews every lock in `held`; drops the ones Redis no longer has for us.
///
/// The batches go out concurrently over the multiplexed connection(s), so a round costs
/// about one round trip per node however many batches it has. In a cluster a script may
/// only touch one slot, so batches are per slot there.
async fn renew_round(
    registry: &Registry,
    backend: &Backend,
    schedule: &Schedule,
    held: &[(u64, Arc<Held>)],
    metrics: &Metrics,
) -> Result<(), crate::redis::CallError> {
    let batches = batches(held, backend.is_cluster());
    let lease_ms = schedule.lease.as_millis() as u64;
    let rounds = batches.iter().map(|batch| async move {
        // One script per batch: `batches` groups by it.
        let mut invocation = batch[0].1.renew_script.prepare_invoke();
        invocation.arg(lease_ms);
        for (_, lock) in batch {
            invocation.key(&*lock.key).arg(&*lock.field);
        }
        let sent_at = Instant::now();
        let renewed: Vec<Renewal> = match schedule.replica_acks {
            None => backend.invoke(&invocation).await?,
            Some(acks) => {
                let any_renewed = |reply: &Vec<Renewal>| reply.contains(&Renewal::Renewed);
                backend
                    .invoke_replicated(&batch[0].1.name, &invocation, acks, any_renewed)
                    .await?
            }
        };
        for ((id, lock), renewal) in batch.iter().zip(renewed) {
            let reason = match renewal {
                Renewal::Renewed => {
                    lock.confirm(sent_at);
                    metrics.renewed();
                    tracing::trace!(lock = %lock.name, "dlock: lease renewed");
                    continue;
                }
                Renewal::NotHeld => LossReason::NotHeldOnRenewal,
                Renewal::WrongType(found) => LossReason::WrongType { found },
            };
            registry.unregister(*id);
            // A guard released while this round was in flight is not "lost".
            if !lock.is_released() {
                lock.mark_lost(reason);
            }
        }
        Ok(())
    });
    futures_util::future::join_all(rounds)
        .await
        .into_iter()
        .collect()
}

/// A registered hold and its registry id.
type Entry = (u64, Arc<Held>);

/// Splits `held` into renew calls of at most [`BATCH`] holds of one renew script (and of
/// one slot in a cluster). Never empty.
fn batches(held: &[(u64, Arc<Held>)], per_slot: bool) -> Vec<Vec<Entry>> {
    let mut groups: HashMap<(&str, usize), Vec<Entry>> = HashMap::new();
    for (id, lock) in held {
        let slot = if per_slot {
            slot_of(lock.key.as_bytes())
        } else {
            0
        };
        groups
            .entry((lock.renew_script.name(), slot))
            .or_default()
            .push((*id, Arc::clone(lock)));
    }
    groups
        .into_values()
        .flat_map(|group| {
            group
                .chunks(BATCH)
                .map(<[(u64, Arc<Held>)]>::to_vec)
                .collect::<Vec<_>>()
        })
        .collect()
}

/// After a failed round: locks whose local deadline passed are lost, whatever Redis says later.
fn expire_overdue(registry: &Registry, held: &[(u64, Arc<Held>)]) {
    for (id, lock) in held {
        if lock.loss().is_some() {
            registry.unregister(*id);
        }
    }
}

/// One renewal of `held` to `lease` outside the watchdog's rounds (a multi-lock keeping
/// its early explicit-lease holds alive, a granted hold extended to its lease): a
/// confirmed one moves the hold's deadline; one that finds the hold gone, or its key
/// holding another type, marks it lost (unless it was released meanwhile) and returns
/// why. An error is the caller's to retry or report.
///
/// With `replica_acks` (`acks`), it counts only once the replicas confirmed it, as the
/// watchdog's rounds do: unconfirmed, it is [`CallError::NotReplicated`] and the deadline
/// stays where the last confirmed acquisition or renewal put it.
///
/// A hold past its deadline is lost for good and not renewed (the watchdog's rounds skip
/// such holds too): a renewal confirmed now could not undo the time the lock went
/// unconfirmed, and a late one would otherwise revive a hold whose loss nobody had read
/// yet.
pub(crate) async fn renew_once(
    backend: &Backend,
    held: &Held,
    lease: Duration,
    acks: Option<(u32, Duration)>,
) -> Result<Option<LossReason>, crate::redis::CallError> {
    if let Some(reason) = held.loss() {
        return Ok(Some(reason));
    }
    let mut invocation = held.renew_script.prepare_invoke();
    invocation
        .arg(lease.as_millis() as u64)
        .key(&*held.key)
        .arg(&*held.field);
    let sent_at = Instant::now();
    let renewed: Vec<Renewal> = match acks {
        None => backend.invoke(&invocation).await?,
        Some(acks) => {
            let renewed = |reply: &Vec<Renewal>| reply.contains(&Renewal::Renewed);
            backend
                .invoke_replicated(&held.name, &invocation, acks, renewed)
                .await?
        }
    };
    let reason = match renewed.into_iter().next() {
        Some(Renewal::Renewed) => {
            held.extend_to(sent_at + lease);
            return Ok(None);
        }
        Some(Renewal::WrongType(found)) => LossReason::WrongType { found },
        Some(Renewal::NotHeld) | None => LossReason::NotHeldOnRenewal,
    };
    if !held.is_released() {
        held.mark_lost(reason);
    }
    Ok(Some(reason))
}

/// One lock's entry in the `renew` script's answer (and the `extend` script's, see
/// `sync::grant`).
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Renewal {
    Renewed,
    NotHeld,
    /// The key holds a value of this Redis type: something overwrote the lock.
    WrongType(&'static str),
}

impl redis::FromRedisValue for Renewal {
    fn from_redis_value(value: redis::Value) -> Result<Renewal, redis::ParsingError> {
        match value {
            redis::Value::Int(1) => Ok(Renewal::Renewed),
            redis::Value::Int(0) => Ok(Renewal::NotHeld),
            other => Ok(Renewal::WrongType(redis_type(&String::from_redis_value(
                other,
            )?))),
        }
    }
}

/// The name of a Redis type as a `'static` string, for [`LossReason::WrongType`].
fn redis_type(name: &str) -> &'static str {
    const TYPES: [&str; 7] = ["string", "list", "set", "zset", "hash", "stream", "none"];
    TYPES
        .into_iter()
        .find(|known| *known == name)
        .unwrap_or("value of another type")
}
