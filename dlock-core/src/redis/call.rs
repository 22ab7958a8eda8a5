//! What a failed call to Redis means for the caller: retry now, retry later, or give up.

use std::sync::Arc;
use std::time::Duration;

use redis::{RedisError, RetryMethod};

use crate::error::LockError;

/// A failed call: Redis answered with an error, or did not answer in time. The second
/// field names the deployment that failed (passwords redacted), once the connection
/// layer has attached it ([`CallError::at`]), so that the user's error says where.
#[derive(Debug)]
pub(crate) enum CallError {
    Redis(RedisError, Option<Arc<str>>),
    Timeout(Duration, Option<Arc<str>>),
    /// Applied on the master, but `WAIT` counted fewer replicas than wanted.
    NotReplicated {
        acked: u64,
        wanted: u32,
        within: Duration,
    },
}

impl From<RedisError> for CallError {
    fn from(error: RedisError) -> Self {
        CallError::Redis(error, None)
    }
}

impl CallError {
    /// No answer within `limit`, from a server not named yet.
    pub(crate) fn timeout(limit: Duration) -> Self {
        CallError::Timeout(limit, None)
    }

    /// The same error, naming `server` unless it already names one.
    pub(crate) fn at(self, server: &str) -> Self {
        match self {
            CallError::Redis(error, None) => CallError::Redis(error, Some(Arc::from(server))),
            CallError::Timeout(limit, None) => CallError::Timeout(limit, Some(Arc::from(server))),
            other => other,
        }
    }

    /// Worth retrying on the same or a fresh connection: timeouts, dropped connections,
    /// loading / failover errors (`READONLY`, `MOVED`, `TRYAGAIN`...). Script and type
    /// errors are not.
    pub(crate) fn is_transient(&self) -> bool {
        match self {
            CallError::Timeout(..) | CallError::NotReplicated { .. } => true,
            CallError::Redis(e, _) => !matches!(e.retry_method(), RetryMethod::NoRetry),
        }
    }

    /// Whether an immediate retry can help: not after a timeout (the server is slow) nor
    /// after a missing replica acknowledgement (`WAIT` already waited).
    pub(crate) fn is_quick_to_retry(&self) -> bool {
        matches!(self, CallError::Redis(..)) && self.is_transient()
    }

    pub(crate) fn into_lock_error(self, name: &str, action: &'static str) -> LockError {
        match self {
            CallError::Redis(source, server) => LockError::Redis {
                name: name.to_owned(),
                action,
                server: server.map(|server| server.to_string()),
                source,
            },
            CallError::Timeout(timeout, server) => LockError::CommandTimeout {
                name: name.to_owned(),
                action,
                server: server.map(|server| server.to_string()),
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
            CallError::Redis(e, _) => e.fmt(f),
            CallError::Timeout(t, _) => {
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
