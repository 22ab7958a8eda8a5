//! Connections lent to one call at a time, for commands that block the connection they
//! run on.
//!
//! `WAIT` (after an acquisition with `replica_acks`) holds its connection until enough
//! replicas answer or its timeout passes. On the client's shared multiplexed connection
//! every other command would queue behind it, renewals and releases of unrelated locks
//! included: with no replica reachable, a handful of concurrent acquisitions pushed every
//! command past the command timeout and unrelated locks were lost. So each such call gets
//! a connection of its own, kept for reuse afterwards.

use std::sync::Mutex;

use redis::aio::MultiplexedConnection;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

/// At most this many blocking calls run at once; further ones wait for a connection.
/// Each holds a server connection for up to the `WAIT` timeout.
const MAX_CONNECTIONS: usize = 16;

/// The idle connections, and permits that bound how many exist.
pub(crate) struct ExclusivePool {
    idle: Mutex<Vec<Idle>>,
    permits: std::sync::Arc<Semaphore>,
}

struct Idle {
    /// The deployment generation (see `Backend::generation`) the connection was opened in:
    /// after a Sentinel failover it points at the old master and is dropped.
    generation: u64,
    conn: MultiplexedConnection,
}

/// A connection lent to one call. Dropped without [`Lent::give_back`] (the call failed,
/// timed out or was cancelled), it is closed: its state is unknown.
pub(crate) struct Lent<'a> {
    pool: &'a ExclusivePool,
    generation: u64,
    conn: MultiplexedConnection,
    _permit: OwnedSemaphorePermit,
}

impl Default for ExclusivePool {
    fn default() -> ExclusivePool {
        ExclusivePool {
            idle: Mutex::new(Vec::new()),
            permits: std::sync::Arc::new(Semaphore::new(MAX_CONNECTIONS)),
        }
    }
}

impl ExclusivePool {
    /// An idle connection of `generation`, or a new one from `open`. Waits while
    /// [`MAX_CONNECTIONS`] are lent.
    pub(crate) async fn take<F>(
        &self,
        generation: u64,
        open: impl FnOnce() -> F,
    ) -> redis::RedisResult<Lent<'_>>
    where
        F: std::future::Future<Output = redis::RedisResult<MultiplexedConnection>>,
    {
        // The pool never closes its semaphore; if it ever did, the call fails cleanly.
        let permit = std::sync::Arc::clone(&self.permits)
            .acquire_owned()
            .await
            .map_err(|_| {
                redis::RedisError::from((
                    redis::ErrorKind::Io,
                    "the pool of exclusive connections is closed",
                ))
            })?;
        let reused = {
            let mut idle = self.idle.lock().unwrap_or_else(|p| p.into_inner());
            idle.retain(|entry| entry.generation == generation);
            idle.pop()
        };
        let conn = match reused {
            Some(entry) => entry.conn,
            None => open().await?,
        };
        Ok(Lent {
            pool: self,
            generation,
            conn,
            _permit: permit,
        })
    }
}

impl Lent<'_> {
    pub(crate) fn conn(&mut self) -> &mut MultiplexedConnection {
        &mut self.conn
    }

    /// Returns the connection for the next call: it answered, so it is in a known state.
    pub(crate) fn give_back(self) {
        let mut idle = self.pool.idle.lock().unwrap_or_else(|p| p.into_inner());
        idle.push(Idle {
            generation: self.generation,
            conn: self.conn,
        });
    }
}
