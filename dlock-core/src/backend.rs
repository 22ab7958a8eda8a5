//! The connection seam: every command dlock sends to Redis goes through [`Backend`].
//!
//! Today it wraps one server behind a reconnecting multiplexed connection; the topologies
//! of `dlock-config` (replicas, Sentinel, Cluster) plug in here without touching the lock
//! logic above it.

use std::future::Future;
use std::time::Duration;

use redis::aio::{ConnectionManager, ConnectionManagerConfig, PubSub};
use redis::{FromRedisValue, RedisError, RetryMethod, ScriptInvocation};

use crate::error::LockError;
use crate::scripts::scripts;

/// A failed call: Redis answered with an error, or did not answer in time.
#[derive(Debug)]
pub(crate) enum CallError {
    Redis(RedisError),
    Timeout(Duration),
}

impl CallError {
    /// Worth retrying on the same or a fresh connection: timeouts, dropped connections,
    /// loading / failover errors. Script and type errors are not.
    pub(crate) fn is_transient(&self) -> bool {
        match self {
            CallError::Timeout(_) => true,
            CallError::Redis(e) => !matches!(e.retry_method(), RetryMethod::NoRetry),
        }
    }

    /// Redis did not answer in time (the request may still be applied later).
    pub(crate) fn is_timeout(&self) -> bool {
        matches!(self, CallError::Timeout(_))
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
        }
    }
}

/// How the client reaches Redis.
#[derive(Clone)]
pub(crate) struct Backend {
    client: redis::Client,
    conn: ConnectionManager,
    command_timeout: Duration,
}

/// Connection options the backend needs from the client settings.
pub(crate) struct ConnectOptions {
    pub(crate) connect_timeout: Duration,
    pub(crate) command_timeout: Duration,
}

impl Backend {
    /// Connects to the single server at `url` (`redis://` or `rediss://`).
    pub(crate) async fn connect(url: &str, options: &ConnectOptions) -> Result<Backend, LockError> {
        let shown = redact(url);
        let client = redis::Client::open(url)
            .map_err(|e| LockError::Config(format!("invalid Redis address {shown:?}: {e}")))?;
        let config = ConnectionManagerConfig::new()
            .set_connection_timeout(Some(options.connect_timeout))
            .set_response_timeout(Some(options.command_timeout))
            .set_number_of_retries(2);
        let connecting = ConnectionManager::new_with_config(client.clone(), config);
        let conn = match tokio::time::timeout(options.connect_timeout, connecting).await {
            Ok(Ok(conn)) => conn,
            Ok(Err(source)) => {
                return Err(LockError::Connect {
                    address: shown,
                    source: Some(source),
                })
            }
            Err(_) => {
                return Err(LockError::Connect {
                    address: shown,
                    source: None,
                })
            }
        };
        let backend = Backend {
            client,
            conn,
            command_timeout: options.command_timeout,
        };
        backend.load_scripts().await.map_err(|e| match e {
            CallError::Redis(source) => LockError::Connect {
                address: shown,
                source: Some(source),
            },
            CallError::Timeout(_) => LockError::Connect {
                address: shown,
                source: None,
            },
        })?;
        Ok(backend)
    }

    /// Loads every script up front, so the first lock operation is one `EVALSHA` round
    /// trip. (After a server restart `NOSCRIPT` makes `invoke` reload them.)
    async fn load_scripts(&self) -> Result<(), CallError> {
        let all = scripts();
        for script in [&all.acquire, &all.release, &all.renew, &all.force_unlock] {
            let mut conn = self.conn.clone();
            self.bounded(async move { script.load_async(&mut conn).await })
                .await?;
        }
        Ok(())
    }

    /// The command that announces a release on a lock's channel.
    pub(crate) fn publish_command(&self) -> &'static str {
        "publish"
    }

    /// Runs a script, bounded by the command timeout.
    pub(crate) async fn invoke<T: FromRedisValue>(
        &self,
        invocation: &ScriptInvocation<'_>,
    ) -> Result<T, CallError> {
        let mut conn = self.conn.clone();
        self.bounded(async move { invocation.invoke_async(&mut conn).await })
            .await
    }

    /// Runs a plain command, bounded by the command timeout.
    pub(crate) async fn query<T: FromRedisValue>(&self, cmd: &redis::Cmd) -> Result<T, CallError> {
        let mut conn = self.conn.clone();
        self.bounded(async move { cmd.query_async(&mut conn).await })
            .await
    }

    /// A dedicated connection for subscriptions.
    pub(crate) async fn pubsub(&self) -> Result<PubSub, CallError> {
        self.bounded(self.client.get_async_pubsub()).await
    }

    async fn bounded<T>(
        &self,
        call: impl Future<Output = redis::RedisResult<T>>,
    ) -> Result<T, CallError> {
        match tokio::time::timeout(self.command_timeout, call).await {
            Ok(Ok(value)) => Ok(value),
            Ok(Err(e)) if e.is_timeout() => Err(CallError::Timeout(self.command_timeout)),
            Ok(Err(e)) => Err(CallError::Redis(e)),
            Err(_) => Err(CallError::Timeout(self.command_timeout)),
        }
    }
}

/// `url` with any password replaced by `***`, for error messages and logs.
pub(crate) fn redact(url: &str) -> String {
    let Some((scheme, rest)) = url.split_once("://") else {
        return url.to_owned();
    };
    let Some((credentials, host)) = rest.rsplit_once('@') else {
        return url.to_owned();
    };
    match credentials.split_once(':') {
        Some((user, _password)) => format!("{scheme}://{user}:***@{host}"),
        None => url.to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::redact;

    #[test]
    fn redact_hides_passwords_only() {
        assert_eq!(redact("redis://127.0.0.1:6379"), "redis://127.0.0.1:6379");
        assert_eq!(
            redact("redis://app:s3cr@t@127.0.0.1:6379/0"),
            "redis://app:***@127.0.0.1:6379/0"
        );
        assert_eq!(redact("rediss://:pw@127.0.0.1"), "rediss://:***@127.0.0.1");
        assert_eq!(redact("not a url"), "not a url");
    }
}
