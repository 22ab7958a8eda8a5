//! The connection seam: every command dlock sends to Redis goes through [`Backend`], which
//! hides the deployment (one server, a Sentinel-managed master, a Cluster) from the lock
//! logic above it.
//!
//! - `call`: what a failed call means ([`CallError`]);
//! - `connect`: addresses, credentials and TLS, opening connections;
//! - `sentinel`: finding, following and watching a Sentinel-managed master;
//! - `subscriber`: the connection that receives unlock messages;
//! - `managed`: the command connection to one server, reopened when it drops, that
//!   never leaves a call waiting on a connection that is gone;
//! - `exclusive`: connections lent to one blocking call (`WAIT`);
//! - `runtime_probe`: noticing that the runtime driving the connections shut down;
//! - `silent`: replacing a connection that stopped answering (half open);
//! - `scan`: `SCAN` over every master, for operators' listings;
//! - `scripting`: running dlock's scripts as `EVALSHA` or as `FCALL` of its function
//!   library;
//! - `topology`: the public description of a deployment;
//! - `tracking`: a connection on which Redis reports each change of one key (`dlock watch`).

mod call;
mod connect;
mod exclusive;
mod managed;
mod replicated;
mod runtime_probe;
mod scan;
mod scripting;
mod sentinel;
mod silent;
mod subscriber;
mod topology;
mod tracking;

pub(crate) use call::CallError;
pub use scripting::ScriptMode;
use scripting::Scripting;
pub(crate) use subscriber::{Subscriber, SubscriberEvent};
use topology::TlsFiles;
pub use topology::Topology;
pub(crate) use topology::TopologyKind;
pub(crate) use tracking::Tracking;

use std::future::Future;
use std::sync::{Arc, Mutex, OnceLock, RwLock};
use std::time::Duration;

use redis::aio::{ConnectionLike, MultiplexedConnection};
use redis::cluster::ClusterClient;
use redis::cluster_async::ClusterConnection;
use redis::{Cmd, FromRedisValue, Pipeline, PushInfo, RedisError, RedisFuture, RedisResult, Value};
use tokio::sync::{mpsc, watch};

use crate::background::Background;
use crate::error::LockError;
use crate::redact::{list, redact};
use crate::scripts::ScriptCall;
use connect::{
    connect_cluster, connect_error, connect_node, connection_info, install_tls_provider, open,
    Transport,
};
use exclusive::ExclusivePool;
use managed::{unless_lost, ManagedConnection};
use runtime_probe::RuntimeProbe;
use sentinel::SentinelRoute;

/// Connection options the backend needs from the client settings.
#[derive(Clone, Copy)]
pub(crate) struct ConnectOptions {
    pub(crate) connect_timeout: Duration,
    pub(crate) command_timeout: Duration,
}

/// How the client reaches Redis. Cheap to clone.
#[derive(Clone)]
pub(crate) struct Backend {
    shared: Arc<Shared>,
}

struct Shared {
    route: Route,
    options: ConnectOptions,
    /// Bumped when the subscriber must reconnect (a Sentinel failover moved the master).
    generation: watch::Sender<u64>,
    /// Connections for calls that block the connection they run on (`WAIT`).
    exclusive: ExclusivePool,
    /// Tells when the runtime that drives the connections has shut down.
    probe: Mutex<RuntimeProbe>,
    /// Held while reopening the connections on a new runtime, so that it happens once.
    reopening: tokio::sync::Mutex<()>,
    /// Set while a connection that stopped answering is being replaced.
    replacing: std::sync::atomic::AtomicBool,
    /// Replaced connections kept open a while (see `silent`).
    retired: silent::Retired,
    /// How scripts run, decided once when connecting (`EVALSHA` until then).
    scripting: OnceLock<Scripting>,
    /// The client's name, given to the connections opened for one call (`WAIT`).
    name: OnceLock<Arc<str>>,
    /// How the deployment is named in errors (passwords redacted).
    shown: String,
}

enum Route {
    /// One server (also the master of a master/replicas deployment).
    Direct(Box<RwLock<Node>>),
    Sentinel(Box<SentinelRoute>),
    Cluster(Box<ClusterRoute>),
}

struct ClusterRoute {
    /// Opens the command connection again on a new runtime.
    client: ClusterClient,
    /// The command connection; it never subscribes (see `connect::ClusterClients`).
    conn: RwLock<ClusterConnection>,
    /// Opens the subscriber's connections, whose pushes go to `pushes`.
    subscriber: ClusterClient,
    /// Sharded pub/sub messages; taken by the subscriber task.
    pushes: Mutex<Option<mpsc::UnboundedReceiver<PushInfo>>>,
    /// The first configured node's address and settings (credentials, database, TLS or
    /// not): a connection of its own to one master copies them with that master's address.
    template: redis::ConnectionInfo,
    /// The configured TLS root and client certificates, for such a connection.
    tls: TlsFiles,
}

/// A connection to one server.
#[derive(Clone)]
struct Node {
    client: redis::Client,
    conn: ManagedConnection,
    /// Which connection this is (unique in the process): a call that got no answer names
    /// the connection it used, so that a silent connection is replaced once, not once per
    /// call that met it.
    serial: u64,
}

impl Node {
    async fn connect(client: redis::Client, options: ConnectOptions) -> RedisResult<Node> {
        let conn = ManagedConnection::connect(client.clone(), options.connect_timeout).await?;
        Ok(Node {
            client,
            conn,
            serial: silent::next_serial(),
        })
    }

    fn address(&self) -> String {
        self.client.get_connection_info().addr().to_string()
    }
}

/// A connection for one call.
enum Conn {
    /// A server's connection, and its [`Node::serial`].
    Node(ManagedConnection, u64),
    Cluster(ClusterConnection),
}

impl Conn {
    /// The serial of a server's connection; `None` in a cluster, whose connection
    /// replaces its per-node connections itself.
    fn serial(&self) -> Option<u64> {
        match self {
            Conn::Node(_, serial) => Some(*serial),
            Conn::Cluster(_) => None,
        }
    }
}

impl ConnectionLike for Conn {
    fn req_packed_command<'a>(&'a mut self, cmd: &'a Cmd) -> RedisFuture<'a, Value> {
        match self {
            Conn::Node(conn, _) => conn.req_packed_command(cmd),
            Conn::Cluster(conn) => conn.req_packed_command(cmd),
        }
    }

    fn req_packed_commands<'a>(
        &'a mut self,
        pipeline: &'a Pipeline,
        offset: usize,
        count: usize,
    ) -> RedisFuture<'a, Vec<Value>> {
        match self {
            Conn::Node(conn, _) => conn.req_packed_commands(pipeline, offset, count),
            Conn::Cluster(conn) => conn.req_packed_commands(pipeline, offset, count),
        }
    }

    fn get_db(&self) -> i64 {
        match self {
            Conn::Node(conn, _) => conn.get_db(),
            Conn::Cluster(conn) => conn.get_db(),
        }
    }
}

impl Backend {
    /// Connects to `topology`, makes its scripts runnable as `mode` asks, and follows the
    /// Sentinel master.
    pub(crate) async fn connect(
        topology: &Topology,
        options: ConnectOptions,
        background: &Background,
        mode: ScriptMode,
    ) -> Result<Backend, LockError> {
        let (backend, shown) = Backend::open(topology, options).await?;
        let scripting = backend.prepare_scripts(mode, &shown).await?;
        tracing::debug!(?scripting, "dlock: scripts ready");
        let _ = backend.shared.scripting.set(scripting);
        if let Route::Sentinel(route) = &backend.shared.route {
            backend
                .watch_sentinels(&route.sentinels, &shown, background)
                .await;
        }
        Ok(backend)
    }

    /// Connects to `topology` and nothing more (no scripts, no Sentinel watch): the
    /// connection an administrator's one-off command needs. Also returns how the
    /// deployment is named in errors (passwords redacted).
    pub(crate) async fn open(
        topology: &Topology,
        options: ConnectOptions,
    ) -> Result<(Backend, String), LockError> {
        install_tls_provider();
        let tls = &topology.tls;
        tls.check()?;
        let (route, shown) = match &topology.kind {
            TopologyKind::Single { address } => {
                let client = open(address, &topology.auth, tls)?;
                (
                    Route::Direct(Box::new(RwLock::new(
                        connect_node(client, address, options).await?,
                    ))),
                    redact(address),
                )
            }
            TopologyKind::MasterReplicas { master, replicas } => {
                for replica in replicas {
                    open(replica, &topology.auth, tls)?;
                }
                let client = open(master, &topology.auth, tls)?;
                (
                    Route::Direct(Box::new(RwLock::new(
                        connect_node(client, master, options).await?,
                    ))),
                    redact(master),
                )
            }
            TopologyKind::Sentinel {
                master_name,
                sentinels,
            } => {
                let shown = format!("sentinel master {master_name:?} via {}", list(sentinels));
                let sentinels = sentinels
                    .iter()
                    .map(|sentinel| open(sentinel, &topology.sentinel_auth, tls))
                    .collect::<Result<Vec<_>, _>>()?;
                let transport = Transport::of_sentinels(&sentinels, tls)?;
                let route = SentinelRoute::connect(
                    master_name,
                    sentinels,
                    transport,
                    &topology.auth,
                    options,
                )
                .await
                .map_err(|e| connect_error(shown.clone(), e))?;
                (Route::Sentinel(Box::new(route)), shown)
            }
            TopologyKind::Cluster { nodes } => {
                let shown = format!("cluster via {}", list(nodes));
                let infos = nodes
                    .iter()
                    .map(|node| connection_info(node, &topology.auth))
                    .collect::<Result<Vec<_>, _>>()?;
                let template = infos[0].clone();
                let clients = connect_cluster(infos, tls, options)
                    .await
                    .map_err(|e| match e {
                        CallError::Redis(source, _)
                            if source.kind() == redis::ErrorKind::InvalidClientConfig =>
                        {
                            LockError::Config(format!(
                                "invalid cluster nodes {}: {source}",
                                list(nodes)
                            ))
                        }
                        other => connect_error(shown.clone(), other),
                    })?;
                let route = Route::Cluster(Box::new(ClusterRoute {
                    client: clients.commands,
                    conn: RwLock::new(clients.conn),
                    subscriber: clients.subscriber,
                    pushes: Mutex::new(Some(clients.pushes)),
                    template,
                    tls: tls.clone(),
                }));
                (route, shown)
            }
        };
        let backend = Backend {
            shared: Arc::new(Shared {
                route,
                options,
                generation: watch::channel(0).0,
                exclusive: ExclusivePool::default(),
                probe: Mutex::new(RuntimeProbe::start()),
                reopening: tokio::sync::Mutex::new(()),
                replacing: std::sync::atomic::AtomicBool::new(false),
                retired: silent::Retired::default(),
                scripting: OnceLock::new(),
                name: OnceLock::new(),
                shown: shown.clone(),
            }),
        };
        Ok((backend, shown))
    }

    fn scripting(&self) -> Scripting {
        self.shared
            .scripting
            .get()
            .copied()
            .unwrap_or(Scripting::Eval)
    }

    /// How the deployment is named in errors: its addresses, passwords redacted.
    pub(crate) fn shown(&self) -> &str {
        &self.shared.shown
    }

    /// The command that announces a release on a lock's channel: sharded in a cluster, so
    /// that the message only travels within the lock's shard.
    pub(crate) fn publish_command(&self) -> &'static str {
        match self.shared.route {
            Route::Cluster(_) => "spublish",
            _ => "publish",
        }
    }

    /// Whether the master can move under the client (Sentinel failovers).
    pub(crate) fn is_sentinel(&self) -> bool {
        matches!(self.shared.route, Route::Sentinel(_))
    }

    /// The address of the one server this backend talks to directly (a single server, or
    /// the master of a master/replicas deployment); `None` under Sentinel or a cluster,
    /// whose master moves. RedLock uses it to refuse such nodes and two nodes on one server.
    pub(crate) fn direct_address(&self) -> Option<String> {
        match &self.shared.route {
            Route::Direct(node) => Some(read(node).address()),
            _ => None,
        }
    }

    /// Whether renewals must be grouped by cluster slot (one multi-key script per slot).
    pub(crate) fn is_cluster(&self) -> bool {
        matches!(self.shared.route, Route::Cluster(_))
    }

    /// Runs a script, bounded by the command timeout.
    pub(crate) async fn invoke<T: FromRedisValue>(
        &self,
        call: &ScriptCall,
    ) -> Result<T, CallError> {
        let mut used = None;
        let result = self
            .bounded_call(async {
                let mut conn = self.conn().await?;
                used = conn.serial();
                self.run_script(&mut conn, call).await
            })
            .await;
        self.after(result, used).await
    }

    /// Runs a pipeline that blocks the connection it runs on (`WAIT`), on a connection of
    /// its own (see [`ExclusivePool`]), bounded by the command timeout. A `NOSCRIPT` error
    /// (script cache emptied by a restart or failover) reloads the scripts and runs the
    /// pipeline once more.
    pub(crate) async fn query_blocking<T: FromRedisValue>(
        &self,
        pipeline: &Pipeline,
    ) -> Result<T, CallError> {
        let run = || {
            self.bounded_call(async {
                self.follow_runtime().await?;
                let generation = *self.shared.generation.borrow();
                let pool = &self.shared.exclusive;
                let mut lent = pool
                    .take(generation, || self.open_exclusive())
                    .await
                    .map_err(CallError::from)?;
                let checked = lent.conn().clone();
                let result = unless_lost(checked, pipeline.query_async(lent.conn())).await;
                if result.is_ok() {
                    lent.give_back();
                }
                result.map_err(CallError::from)
            })
        };
        let result = match run().await {
            Err(CallError::Redis(e, _))
                if e.kind() == redis::ErrorKind::Server(redis::ServerErrorKind::NoScript) =>
            {
                self.load_scripts().await?;
                run().await
            }
            other => other,
        };
        // A lent connection that failed is dropped, not given back: nothing to replace.
        self.after(result, None).await
    }

    /// Remembers the client's name for the connections opened later for one call; the
    /// shared connections are named by the client's registration task.
    pub(crate) fn name_connections(&self, name: &Arc<str>) {
        let _ = self.shared.name.set(Arc::clone(name));
    }

    /// A new connection to the master, for [`ExclusivePool`], named after the client
    /// when it can be (a user without `+client|setname` still gets the connection).
    async fn open_exclusive(&self) -> RedisResult<MultiplexedConnection> {
        let client = match &self.shared.route {
            Route::Direct(node) => read(node).client,
            Route::Sentinel(route) => route.node().client,
            // Refused when the client is built: `WAIT` cannot follow a script in a cluster.
            Route::Cluster(_) => {
                return Err(RedisError::from((
                    redis::ErrorKind::InvalidClientConfig,
                    "blocking calls need one master, not a cluster",
                )))
            }
        };
        let options = self.shared.options;
        let config = redis::AsyncConnectionConfig::new()
            .set_connection_timeout(Some(options.connect_timeout))
            .set_response_timeout(Some(options.command_timeout));
        let mut conn = client
            .get_multiplexed_async_connection_with_config(&config)
            .await?;
        if let Some(name) = self.shared.name.get() {
            let named: RedisResult<()> = redis::cmd("CLIENT")
                .arg("SETNAME")
                .arg(&**name)
                .query_async(&mut conn)
                .await;
            if let Err(error) = named {
                tracing::debug!(%error, "dlock: could not name a connection (CLIENT SETNAME)");
            }
        }
        Ok(conn)
    }

    /// Runs a plain command, bounded by the command timeout.
    pub(crate) async fn query<T: FromRedisValue>(&self, cmd: &Cmd) -> Result<T, CallError> {
        let mut used = None;
        let result = self
            .bounded_call(async {
                let mut conn = self.conn().await?;
                used = conn.serial();
                cmd.query_async(&mut conn).await.map_err(CallError::from)
            })
            .await;
        self.after(result, used).await
    }

    /// Changes whenever the subscriber must be re-established on a new master.
    pub(crate) fn generation(&self) -> watch::Receiver<u64> {
        self.shared.generation.subscribe()
    }

    /// The connection for the next call, reopened first if its runtime has shut down.
    async fn conn(&self) -> Result<Conn, CallError> {
        self.follow_runtime().await?;
        Ok(match &self.shared.route {
            // Only the connection is cloned (a handle), not the node's client and address.
            Route::Direct(node) => {
                let node = node.read().unwrap_or_else(|p| p.into_inner());
                Conn::Node(node.conn.clone(), node.serial)
            }
            Route::Sentinel(route) => {
                let (conn, serial) = route.connection();
                Conn::Node(conn, serial)
            }
            Route::Cluster(route) => Conn::Cluster(read(&route.conn)),
        })
    }

    /// Reopens the connections on the current runtime when the one that drove them has
    /// shut down (see [`RuntimeProbe`]). One atomic load when nothing changed.
    async fn follow_runtime(&self) -> Result<(), CallError> {
        if self.runtime_is_alive() {
            return Ok(());
        }
        // Boxed: every call awaits this, and the reopening would make every call's future
        // as large as its own.
        Box::pin(self.reopen_on_this_runtime()).await
    }

    fn runtime_is_alive(&self) -> bool {
        self.shared
            .probe
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .runtime_is_alive()
    }

    /// [`follow_runtime`](Self::follow_runtime)'s reopening.
    async fn reopen_on_this_runtime(&self) -> Result<(), CallError> {
        let alive = || self.runtime_is_alive();
        let _reopening = self.shared.reopening.lock().await;
        if alive() {
            return Ok(()); // another caller reopened them while we waited
        }
        tracing::info!("dlock: the runtime that drove the client's connections shut down; reopening them on this one");
        let options = self.shared.options;
        match &self.shared.route {
            Route::Direct(node) => {
                let client = read(node).client;
                let fresh = Node::connect(client, options)
                    .await
                    .map_err(CallError::from)?;
                *node.write().unwrap_or_else(|p| p.into_inner()) = fresh;
            }
            Route::Sentinel(route) => {
                let fresh = Node::connect(route.node().client, options)
                    .await
                    .map_err(CallError::from)?;
                route.replace_node(fresh);
            }
            Route::Cluster(route) => {
                let fresh = route
                    .client
                    .get_async_connection()
                    .await
                    .map_err(CallError::from)?;
                *route.conn.write().unwrap_or_else(|p| p.into_inner()) = fresh;
            }
        }
        *self.shared.probe.lock().unwrap_or_else(|p| p.into_inner()) = RuntimeProbe::start();
        // Subscribers and lent connections of the old runtime are stale too.
        self.shared
            .generation
            .send_modify(|generation| *generation += 1);
        Ok(())
    }

    /// After a call that got no answer on connection `used`, has that connection replaced
    /// in the background (see `silent`); after a failed call in Sentinel mode, checks
    /// whether the master moved, so that the caller's retry goes to the new one.
    async fn after<T>(
        &self,
        result: Result<T, CallError>,
        used: Option<u64>,
    ) -> Result<T, CallError> {
        if let (Err(CallError::Timeout(..)), Some(serial)) = (&result, used) {
            self.replace_silent(serial);
        }
        if let (Err(error), Route::Sentinel(route)) = (&result, &self.shared.route)
            && error.is_transient()
        {
            let _ = Box::pin(self.bounded_call(route.resolve(&self.shared))).await;
        }
        result
    }

    async fn bounded<T>(&self, call: impl Future<Output = RedisResult<T>>) -> Result<T, CallError> {
        self.bounded_call(async { call.await.map_err(CallError::from) })
            .await
    }

    /// `call`, bounded by the command timeout; its error names the deployment.
    async fn bounded_call<T>(
        &self,
        call: impl Future<Output = Result<T, CallError>>,
    ) -> Result<T, CallError> {
        let timeout = self.shared.options.command_timeout;
        let result = match tokio::time::timeout(timeout, call).await {
            Ok(Err(CallError::Redis(e, _))) if e.is_timeout() => Err(CallError::timeout(timeout)),
            Ok(result) => result,
            Err(_) => Err(CallError::timeout(timeout)),
        };
        result.map_err(|error| error.at(&self.shared.shown))
    }
}

/// The value behind `lock`, also after a panic elsewhere poisoned it (the value is
/// replaced whole, never left half-written).
fn read<T: Clone>(lock: &RwLock<T>) -> T {
    lock.read().unwrap_or_else(|p| p.into_inner()).clone()
}
