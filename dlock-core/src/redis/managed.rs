//! The command connection to one server: one multiplexed connection, reopened when it
//! drops, that never leaves a call waiting on a connection that is gone.
//!
//! The client library queues each call for the task that owns the socket. When the
//! server closes the socket, that task fails the calls it has written and stops; but a
//! call handed over in the same instant can land in the queue after the task has
//! drained it for the last time. Nothing then writes that call or fails it, and it waits
//! out the command timeout although it never reached the server: a release sent right
//! after `CLIENT KILL` did so about once in a few hundred tries.
//!
//! So a call still unanswered after [`CHECK_AFTER`] sends a `PING` on the same
//! connection. A connection whose task has stopped refuses the `PING` at once, and the
//! call is failed as dropped, which callers retry on the new connection this opens; on
//! a live connection the `PING` is merely queued or answered, and the call goes on
//! waiting. A call that the connection had written is failed by the connection itself
//! before its task stops, so a call still waiting then was never sent.

use std::future::Future;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures_util::future::{BoxFuture, Shared};
use futures_util::FutureExt;
use redis::aio::{ConnectionLike, MultiplexedConnection};
use redis::{AsyncConnectionConfig, Cmd, Pipeline, RedisFuture, RedisResult, Value};

/// How long a call waits for its answer before its connection is checked. Far above a
/// healthy round trip, so that normal traffic sends no checks; far below the command
/// timeout, so that a lost call costs a fraction of it.
const CHECK_AFTER: Duration = Duration::from_millis(250);

/// A connection to one server, reopened after it drops. Cheap to clone: clones share
/// the connection.
#[derive(Clone)]
pub(super) struct ManagedConnection {
    shared: Arc<Inner>,
}

struct Inner {
    client: redis::Client,
    config: AsyncConnectionConfig,
    db: i64,
    current: Mutex<Opening>,
}

/// The connection calls use now: open, or being opened.
#[derive(Clone)]
struct Opening {
    /// Counts the openings, so that many calls failing on one connection reopen it once.
    attempt: u64,
    connection: Shared<BoxFuture<'static, RedisResult<MultiplexedConnection>>>,
}

impl ManagedConnection {
    /// Opens the first connection to `client`'s server. Calls have no response timeout of
    /// their own: every call the backend makes is bounded by its command timeout.
    pub(super) async fn connect(
        client: redis::Client,
        connect_timeout: Duration,
    ) -> RedisResult<ManagedConnection> {
        let config = AsyncConnectionConfig::new()
            .set_connection_timeout(Some(connect_timeout))
            .set_response_timeout(None);
        let first = client
            .get_multiplexed_async_connection_with_config(&config)
            .await?;
        let db = client.get_connection_info().redis_settings().db();
        Ok(ManagedConnection {
            shared: Arc::new(Inner {
                client,
                config,
                db,
                current: Mutex::new(Opening {
                    attempt: 0,
                    connection: futures_util::future::ready(Ok(first)).boxed().shared(),
                }),
            }),
        })
    }

    /// Sends `call` on the current connection, and reopens that connection when it turns
    /// out to be gone.
    async fn send<'a, T, F, Fut>(&'a self, call: F) -> RedisResult<T>
    where
        F: FnOnce(MultiplexedConnection) -> Fut,
        Fut: Future<Output = RedisResult<T>> + 'a,
    {
        let opening = self.current();
        let connection = match opening.connection.await {
            Ok(connection) => connection,
            Err(error) => {
                if error.is_io_error() {
                    self.reopen(opening.attempt);
                }
                return Err(error);
            }
        };
        let checked = connection.clone();
        let result = unless_lost(checked, call(connection)).await;
        if let Err(error) = &result
            && error.is_unrecoverable_error()
        {
            self.reopen(opening.attempt);
        }
        result
    }

    fn current(&self) -> Opening {
        self.opening().clone()
    }

    /// The opening calls use now, also after a panic elsewhere poisoned its lock (it is
    /// replaced whole, never left half-written).
    fn opening(&self) -> std::sync::MutexGuard<'_, Opening> {
        self.shared
            .current
            .lock()
            .unwrap_or_else(|p| p.into_inner())
    }

    /// Starts opening a new connection in place of opening `failed`, unless that was done
    /// already. The opening starts now, not at the next call.
    fn reopen(&self, failed: u64) {
        let mut current = self.opening();
        if current.attempt != failed {
            return;
        }
        let client = self.shared.client.clone();
        let config = self.shared.config.clone();
        let connection = async move {
            client
                .get_multiplexed_async_connection_with_config(&config)
                .await
        }
        .boxed()
        .shared();
        *current = Opening {
            attempt: failed + 1,
            connection: connection.clone(),
        };
        tokio::spawn(connection.map(drop));
    }
}

/// Awaits `call`, sent on `connection`; fails it as dropped if `connection` is found gone
/// while the call is still unanswered (see the module's notes).
pub(super) async fn unless_lost<T>(
    connection: MultiplexedConnection,
    call: impl Future<Output = RedisResult<T>>,
) -> RedisResult<T> {
    let mut call = std::pin::pin!(call);
    tokio::select! {
        biased;
        answer = &mut call => answer,
        () = gone(connection) => {
            // The connection's task failed the calls it had written before it stopped:
            // if this one was among them, its own error is ready now.
            (&mut call).now_or_never().unwrap_or_else(|| Err(never_sent()))
        }
    }
}

/// Resolves when `connection`, checked once after [`CHECK_AFTER`], is gone; otherwise
/// never.
async fn gone(mut connection: MultiplexedConnection) {
    tokio::time::sleep(CHECK_AFTER).await;
    let checked: RedisResult<()> = redis::cmd("PING").query_async(&mut connection).await;
    match checked {
        Err(error) if error.is_unrecoverable_error() => {}
        _ => std::future::pending().await,
    }
}

/// The error of a call whose connection was gone before it was written: a dropped
/// connection, which callers retry.
fn never_sent() -> redis::RedisError {
    std::io::Error::new(
        std::io::ErrorKind::BrokenPipe,
        "the connection closed before the call was written",
    )
    .into()
}

impl ConnectionLike for ManagedConnection {
    fn req_packed_command<'a>(&'a mut self, cmd: &'a Cmd) -> RedisFuture<'a, Value> {
        Box::pin(
            self.send(
                move |mut connection| async move { connection.send_packed_command(cmd).await },
            ),
        )
    }

    fn req_packed_commands<'a>(
        &'a mut self,
        pipeline: &'a Pipeline,
        offset: usize,
        count: usize,
    ) -> RedisFuture<'a, Vec<Value>> {
        Box::pin(self.send(move |mut connection| async move {
            connection
                .send_packed_commands(pipeline, offset, count)
                .await
        }))
    }

    fn get_db(&self) -> i64 {
        self.shared.db
    }
}
