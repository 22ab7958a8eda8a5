//! A connection on which Redis reports changes of one key (client-side caching's
//! invalidation messages, `CLIENT TRACKING ON` over RESP3): an operator's watch hears
//! every change of a lock hash instead of polling it and missing short holds.
//!
//! Tracking is per connection and per key read on it: after `CLIENT TRACKING ON`, each
//! key the connection reads is remembered, and the next write to it (by anyone, expiry
//! and deletion included) pushes one `invalidate` message naming it; the key is then
//! forgotten until the connection reads it again. So the connection reads the key itself
//! (the read that arms the next message) and must reach the server that owns the key:
//! the one server, the Sentinel's current master, or the master of the key's cluster
//! slot.

use redis::aio::MultiplexedConnection;
use redis::{Cmd, ConnectionAddr, FromRedisValue, PushInfo, PushKind, RedisError, Value};
use tokio::sync::{mpsc, watch};

use super::connect::client_with;
use super::scan::slot_master;
use super::topology::TlsFiles;
use super::{read, Backend, CallError, Route};

/// A dedicated RESP3 connection with tracking on, and the pushes it receives.
pub(crate) struct Tracking {
    backend: Backend,
    conn: MultiplexedConnection,
    pushes: mpsc::UnboundedReceiver<PushInfo>,
    /// The backend's generation when the connection was opened: it moves on when the
    /// master moved (a Sentinel failover) or the runtime changed, and then this
    /// connection no longer talks to the server that owns the key.
    generation: watch::Receiver<u64>,
}

impl Backend {
    /// A tracking connection to the master that owns `key` (not yet tracking anything:
    /// read the key on it with [`Tracking::query`]). A user without `+client|tracking`
    /// gets the `NOPERM` error.
    pub(crate) async fn tracking(&self, key: &str) -> Result<Tracking, CallError> {
        self.follow_runtime().await?;
        // Taken before the master is chosen, so that a move while connecting is seen.
        let mut generation = self.generation();
        generation.borrow_and_update();
        // A direct or Sentinel node's connection info carries its TLS parameters; a
        // cluster node's address is built here, so its TLS files are applied again.
        let (info, tls) = match &self.shared.route {
            Route::Direct(node) => (
                read(node).client.get_connection_info().clone(),
                TlsFiles::default(),
            ),
            Route::Sentinel(route) => (
                route.node().client.get_connection_info().clone(),
                TlsFiles::default(),
            ),
            Route::Cluster(route) => {
                let mut conn = read(&route.conn);
                let slots: Value = self
                    .bounded(redis::cmd("CLUSTER").arg("SLOTS").query_async(&mut conn))
                    .await?;
                let slot = u16::try_from(crate::names::slot_of(key.as_bytes())).unwrap_or(0);
                let (host, port) = slot_master(slots, slot)?.ok_or_else(|| {
                    CallError::from(RedisError::from((
                        redis::ErrorKind::Io,
                        "no cluster master serves the lock's slot",
                    )))
                })?;
                let mut addr = route.template.addr().clone();
                match &mut addr {
                    ConnectionAddr::Tcp(h, p)
                    | ConnectionAddr::TcpTls {
                        host: h, port: p, ..
                    } => {
                        *h = host;
                        *p = port;
                    }
                    _ => {
                        return Err(CallError::from(RedisError::from((
                            redis::ErrorKind::InvalidClientConfig,
                            "a cluster node on a unix socket",
                        ))))
                    }
                }
                (route.template.clone().set_addr(addr), route.tls.clone())
            }
        };
        let settings = info
            .redis_settings()
            .clone()
            .set_protocol(redis::ProtocolVersion::RESP3);
        let info = info.set_redis_settings(settings);
        let client = client_with(info, &tls).map_err(CallError::from)?;
        let (sender, pushes) = mpsc::unbounded_channel();
        let options = self.shared.options;
        let config = redis::AsyncConnectionConfig::new()
            .set_connection_timeout(Some(options.connect_timeout))
            .set_response_timeout(Some(options.command_timeout))
            .set_push_sender(sender);
        let mut conn = self
            .bounded(client.get_multiplexed_async_connection_with_config(&config))
            .await?;
        if let Some(name) = self.shared.name.get() {
            let _: Result<(), _> = self
                .bounded(
                    redis::cmd("CLIENT")
                        .arg("SETNAME")
                        .arg(&**name)
                        .query_async(&mut conn),
                )
                .await;
        }
        let () = self
            .bounded(
                redis::cmd("CLIENT")
                    .arg("TRACKING")
                    .arg("ON")
                    .query_async(&mut conn),
            )
            .await?;
        Ok(Tracking {
            backend: self.clone(),
            conn,
            pushes,
            generation,
        })
    }
}

impl Tracking {
    /// Runs a read on the tracking connection (which tracks the keys it reads), bounded
    /// by the command timeout.
    pub(crate) async fn query<T: FromRedisValue>(&mut self, cmd: &Cmd) -> Result<T, CallError> {
        self.backend.bounded(cmd.query_async(&mut self.conn)).await
    }

    /// Waits for the next invalidation of one of `keys` (or of every key: a flush). `false`
    /// when no more reports of the key's master will come: the connection is gone, or
    /// the client moved to another master (a Sentinel failover) or runtime.
    pub(crate) async fn changed(&mut self, keys: &[String]) -> bool {
        loop {
            let push = tokio::select! {
                push = self.pushes.recv() => push,
                // A closed sender means the client is gone: nothing more to report either.
                _ = self.generation.changed() => return false,
            };
            let Some(push) = push else {
                return false;
            };
            match push.kind {
                PushKind::Invalidate => {
                    let invalidated = push.data.into_iter().next().unwrap_or(Value::Nil);
                    match invalidated {
                        Value::Nil => return true,
                        invalidated => {
                            let changed: Vec<Vec<u8>> =
                                FromRedisValue::from_redis_value(invalidated).unwrap_or_default();
                            if changed
                                .iter()
                                .any(|k| keys.iter().any(|key| k == key.as_bytes()))
                            {
                                return true;
                            }
                        }
                    }
                }
                PushKind::Disconnection => return false,
                _ => {}
            }
        }
    }
}
