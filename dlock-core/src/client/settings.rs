//! A client's validated settings, and what the shared machinery derives from them.

use std::time::Duration;

use crate::sync::release::{ReleaseTiming, HAND_OFF_RESERVATION};
use crate::sync::retry::RetryPolicy;

/// Validated settings of a client.
#[derive(Debug, Clone)]
pub(crate) struct Settings {
    pub(crate) watchdog_timeout: Duration,
    pub(crate) key_prefix: String,
    pub(crate) command_timeout: Duration,
    pub(crate) max_wait_recheck: Duration,
    pub(crate) failover_wait: Duration,
    pub(crate) default_wait: Option<Duration>,
    pub(crate) retry_attempts: u32,
    pub(crate) retry_delay: Duration,
    pub(crate) replica_acks: Option<ReplicaAcks>,
    /// Whether exclusive acquisitions mint a fencing token (`INCR` in the acquire script).
    pub(crate) fencing_tokens: bool,
    /// The name asked for with `client_name`; `None`: the default, made from the id.
    pub(crate) client_name: Option<String>,
    /// Whether the client writes its description (`registration`).
    pub(crate) describe: bool,
}

/// How many replicas must confirm an acquisition, and how long to wait for them.
#[derive(Debug, Clone, Copy)]
pub(crate) struct ReplicaAcks {
    pub(crate) replicas: u32,
    pub(crate) within: Duration,
}

impl Settings {
    /// The acquire scripts' fencing argument: `'1'` mints a token on a fresh grant.
    pub(crate) fn fence_arg(&self) -> &'static str {
        if self.fencing_tokens {
            "1"
        } else {
            "0"
        }
    }

    /// How long a release memo (or re-entry marker) lives in Redis: long enough to cover
    /// every retry of one release (see `release.lua`), at most 3 × 60 s + 1 s with the
    /// bounded command timeout.
    pub(crate) fn memo_ttl(&self) -> Duration {
        self.command_timeout * 3 + Duration::from_secs(1)
    }

    /// How calls of this client are retried.
    pub(crate) fn retry(&self) -> RetryPolicy {
        RetryPolicy {
            attempts: self.retry_attempts,
            delay: self.retry_delay,
            within: self.command_timeout,
        }
    }

    /// How releases of this client are retried and remembered.
    pub(crate) fn release_timing(&self) -> ReleaseTiming {
        ReleaseTiming {
            retry: self.retry(),
            memo_ttl: self.memo_ttl(),
            reservation: HAND_OFF_RESERVATION,
            replica_acks: self.replica_acks.map(|acks| (acks.replicas, acks.within)),
        }
    }

    /// How long a lock's waiter registry outlives its last registration, with the
    /// client's own recheck interval (see [`Settings::registry_lifetime`]).
    pub(crate) fn registry_ttl(&self) -> Duration {
        Settings::registry_lifetime(self.max_wait_recheck)
    }

    /// How long a waiter's place among the waiters (its registration, the promise it was
    /// made) lives past a try after which it sleeps at most `recheck` without a message:
    /// three such sleeps and a second, so that two lost or late tries do not cost a live
    /// waiter its place. A waiting owner registers again at every try and leaves when it
    /// stops waiting (or is passed over once its client is gone): this only bounds the
    /// life of a place every client abandoned. The scripts only ever lengthen a
    /// registry's life, so a client whose waiters recheck less often (many of them wait,
    /// see `sync::recheck`) keeps its places whatever other clients' tries set.
    pub(crate) fn registry_lifetime(recheck: Duration) -> Duration {
        recheck
            .saturating_mul(3)
            .saturating_add(Duration::from_secs(1))
            .min(Duration::from_secs(24 * 60 * 60))
    }
}
