//! A client's validated settings, and what the shared machinery derives from them.

use std::time::Duration;

use tokio::time::Instant;

use crate::protocol::GRANT;
use crate::sync::recheck::{place_lifetime, LONGEST_SPACED_RECHECK};
use crate::sync::release::ReleaseTiming;
use crate::sync::retry::RetryPolicy;
use crate::sync::wait::WaitPolicy;

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
            grant: GRANT,
            replica_acks: self.replica_acks.map(|acks| (acks.replicas, acks.within)),
        }
    }

    /// How long a lock's waiter registry outlives its last registration, with the
    /// client's own recheck interval (see `sync::recheck::place_lifetime`).
    pub(crate) fn registry_ttl(&self) -> Duration {
        place_lifetime(self.max_wait_recheck)
    }

    /// How a primitive's waiter waits by default: the client's recheck interval, spaced
    /// out when many tasks wait (see `sync::recheck`), its failover wait, until
    /// `give_up_at`; `patient: false` for a single try.
    pub(crate) fn wait_policy(&self, give_up_at: Option<Instant>, patient: bool) -> WaitPolicy {
        WaitPolicy {
            recheck: self.max_wait_recheck,
            longest_recheck: LONGEST_SPACED_RECHECK,
            failover_wait: self.failover_wait,
            give_up_at,
            patient,
        }
    }
}
