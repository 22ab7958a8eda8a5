//! What a failed call to Redis means for the caller: retry now, retry later, or give up.

use std::time::Duration;

use redis::{RedisError, RetryMethod};

use crate::error::LockError;

/// A failed call: Redis answered with an error, or did not answer in time.
#[derive(Debug)]
pub(crate) enum CallError {
    Redis(RedisError),
    Timeout(Duration),
    /// Applied on the master, but `WAIT` counted fewer replicas than wanted.
    NotReplicated {
        acked: u64,
        wanted: u32,
        within: Duration,
    },
}

impl CallError {
    /// Worth retrying on the same or a fresh connection: timeouts, dropped connections,
    /// loading / failover errors (`READONLY`, `MOVED`, `TRYAGAIN`...). Script and type
    /// errors are not.
    pub(crate) fn is_transient(&self) -> bool {
        match self {
            CallError::Timeout(_) | CallError::NotReplicated { .. } => true,
            CallError::Redis(e) => !matches!(e.retry_method(), RetryMethod::NoRetry),
        }
    }

    /// Whether an immediate retry can help: not after a timeout (the server is slow) nor
    /// after a missing replica acknowledgement (`WAIT` already waited).
    pub(crate) fn is_quick_to_retry(&self) -> bool {
        matches!(self, CallError::Redis(_)) && self.is_transient()
    }

    pub(crate) fn into_lock_error(self, name: &str, action: &'static str) -> LockError {
        match self {
            CallError::Redis(source) => LockError::Redis {
                name: name.to_owned(),
                action,
                source,
            },
            CallError::Timeout(timeout) => LockError::CommandTimeout {
                name: name.to_owned(),
                action,
                timeout,
            },
            CallError::NotReplicated {
                acked,
                wanted,
                within,
            } => LockError::NotReplicated {
                name: name.to_owned(),
                acked,
                wanted,
                within,
            },
        }
    }
}

impl std::fmt::Display for CallError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            CallError::Redis(e) => e.fmt(f),
            CallError::Timeout(t) => {
                write!(f, "no answer within {}", humantime::format_duration(*t))
            }
            CallError::NotReplicated {
                acked,
                wanted,
                within,
            } => write!(
                f,
                "{acked} of {wanted} replicas confirmed within {}",
                humantime::format_duration(*within)
            ),
        }
    }
}
