//! The connection seam: every command dlock sends to Redis goes through [`Backend`], which
//! hides the deployment (one server, a Sentinel-managed master, a Cluster) from the lock
//! logic above it.

use std::future::Future;
use std::sync::{Arc, Mutex, RwLock, Weak};
use std::time::Duration;

use futures_util::StreamExt;
use redis::aio::{
    ConnectionLike, ConnectionManager, ConnectionManagerConfig, MultiplexedConnection, PubSubSink,
    PubSubStream,
};
use redis::cluster::ClusterClient;
use redis::cluster_async::ClusterConnection;
use redis::{
    Cmd, FromRedisValue, Pipeline, PushInfo, PushKind, RedisError, RedisFuture, RedisResult,
    RetryMethod, ScriptInvocation, Value,
};
use tokio::sync::{mpsc, watch};

use crate::background::Background;
use crate::error::LockError;
use crate::exclusive::ExclusivePool;
use crate::runtime_probe::RuntimeProbe;
use crate::scripts::scripts;
use crate::sentinel;
use crate::topology::{Auth, Topology, TopologyKind};

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
}

enum Route {
    /// One server (also the master of a master/replicas deployment).
    Direct(Box<RwLock<Node>>),
    Sentinel(Box<SentinelRoute>),
    Cluster(Box<ClusterRoute>),
}

struct ClusterRoute {
    /// Opens the connection again on a new runtime.
    client: ClusterClient,
    conn: RwLock<ClusterConnection>,
    /// Sharded pub/sub messages; taken by the subscriber task.
    pushes: Mutex<Option<mpsc::UnboundedReceiver<PushInfo>>>,
}

/// A connection to one server.
#[derive(Clone)]
struct Node {
    client: redis::Client,
    conn: ConnectionManager,
}

impl Node {
    async fn connect(client: redis::Client, options: ConnectOptions) -> RedisResult<Node> {
        let config = ConnectionManagerConfig::new()
            .set_connection_timeout(Some(options.connect_timeout))
            .set_response_timeout(Some(options.command_timeout))
            .set_number_of_retries(2);
        let conn = ConnectionManager::new_with_config(client.clone(), config).await?;
        Ok(Node { client, conn })
    }

    fn address(&self) -> String {
        self.client.get_connection_info().addr().to_string()
    }
}

struct SentinelRoute {
    /// One client per configured sentinel.
    sentinels: Vec<redis::Client>,
    /// Held while asking the sentinels, so that concurrent failures resolve once.
    resolving: tokio::sync::Mutex<()>,
    master_name: String,
    /// Credentials and database for the master, whichever server it is.
    settings: redis::RedisConnectionInfo,
    current: RwLock<Node>,
}

/// A connection for one call.
enum Conn {
    Node(ConnectionManager),
    Cluster(ClusterConnection),
}

impl ConnectionLike for Conn {
    fn req_packed_command<'a>(&'a mut self, cmd: &'a Cmd) -> RedisFuture<'a, Value> {
        match self {
            Conn::Node(conn) => conn.req_packed_command(cmd),
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
            Conn::Node(conn) => conn.req_packed_commands(pipeline, offset, count),
            Conn::Cluster(conn) => conn.req_packed_commands(pipeline, offset, count),
        }
    }

    fn get_db(&self) -> i64 {
        match self {
            Conn::Node(conn) => conn.get_db(),
            Conn::Cluster(conn) => conn.get_db(),
        }
    }
}

/// `url` with the topology's credentials and database applied; errors name the address
/// but never the password.
fn connection_info(url: &str, auth: &Auth) -> Result<redis::ConnectionInfo, LockError> {
    use redis::IntoConnectionInfo;
    let info = url
        .into_connection_info()
        .map_err(|e| LockError::Config(format!("invalid Redis address {:?}: {e}", redact(url))))?;
    let mut settings = info.redis_settings().clone();
    if let Some(username) = &auth.username {
        settings = settings.set_username(username);
    }
    if let Some(password) = &auth.password {
        settings = settings.set_password(password);
    }
    if let Some(database) = auth.database {
        settings = settings.set_db(database);
    }
    Ok(info.set_redis_settings(settings))
}

/// Opens `url` as a client (see [`connection_info`]), trusting `root_ca` for TLS.
fn open(url: &str, auth: &Auth, root_ca: Option<&[u8]>) -> Result<redis::Client, LockError> {
    let info = connection_info(url, auth)?;
    let client = match root_ca {
        Some(pem) => tls_client(info, pem),
        None => redis::Client::open(info),
    };
    client.map_err(|e| LockError::Config(format!("invalid Redis address {:?}: {e}", redact(url))))
}

#[cfg(feature = "tls")]
fn tls_client(info: redis::ConnectionInfo, pem: &[u8]) -> RedisResult<redis::Client> {
    redis::Client::build_with_tls(info, certificates(pem))
}

#[cfg(not(feature = "tls"))]
fn tls_client(_: redis::ConnectionInfo, _: &[u8]) -> RedisResult<redis::Client> {
    Err(no_tls())
}

#[cfg(feature = "tls")]
fn certificates(pem: &[u8]) -> redis::TlsCertificates {
    redis::TlsCertificates {
        client_tls: None,
        root_cert: Some(pem.to_vec()),
    }
}

#[cfg(feature = "tls")]
fn cluster_root_ca(
    builder: redis::cluster::ClusterClientBuilder,
    pem: &[u8],
) -> Result<redis::cluster::ClusterClientBuilder, CallError> {
    Ok(builder.certs(certificates(pem)))
}

#[cfg(not(feature = "tls"))]
fn cluster_root_ca(
    _: redis::cluster::ClusterClientBuilder,
    _: &[u8],
) -> Result<redis::cluster::ClusterClientBuilder, CallError> {
    Err(CallError::Redis(no_tls()))
}

#[cfg(not(feature = "tls"))]
fn no_tls() -> RedisError {
    RedisError::from((
        redis::ErrorKind::InvalidClientConfig,
        "TLS needs dlock-core's `tls` feature",
    ))
}

/// rustls needs a process-wide crypto provider; install ring's unless the application
/// chose one already.
fn install_tls_provider() {
    #[cfg(feature = "tls")]
    {
        let _ = rustls::crypto::ring::default_provider().install_default();
    }
}

fn connect_error(address: String, error: CallError) -> LockError {
    match error {
        CallError::Redis(source) => LockError::Connect {
            address,
            source: Some(source),
        },
        // Connecting sends no acquisition, so it cannot miss replica acknowledgements.
        CallError::Timeout(_) | CallError::NotReplicated { .. } => LockError::Connect {
            address,
            source: None,
        },
    }
}

impl Backend {
    /// Connects to `topology` and loads the scripts.
    pub(crate) async fn connect(
        topology: &Topology,
        options: ConnectOptions,
        background: &Background,
    ) -> Result<Backend, LockError> {
        install_tls_provider();
        let root_ca = topology.root_ca.as_deref();
        let (route, shown) = match &topology.kind {
            TopologyKind::Single { address } => {
                let client = open(address, &topology.auth, root_ca)?;
                (
                    Route::Direct(Box::new(RwLock::new(
                        connect_node(client, address, options).await?,
                    ))),
                    redact(address),
                )
            }
            TopologyKind::MasterReplicas { master, replicas } => {
                for replica in replicas {
                    open(replica, &topology.auth, root_ca)?;
                }
                let client = open(master, &topology.auth, root_ca)?;
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
                    .map(|sentinel| open(sentinel, &Auth::default(), None))
                    .collect::<Result<Vec<_>, _>>()?;
                let route = SentinelRoute::connect(master_name, sentinels, &topology.auth, options)
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
                let (client, conn, pushes) = connect_cluster(infos, root_ca, options)
                    .await
                    .map_err(|e| match e {
                        CallError::Redis(source)
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
                    client,
                    conn: RwLock::new(conn),
                    pushes: Mutex::new(Some(pushes)),
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
            }),
        };
        backend
            .load_scripts()
            .await
            .map_err(|e| connect_error(shown.clone(), e))?;
        if let Route::Sentinel(route) = &backend.shared.route {
            backend
                .watch_sentinels(&route.sentinels, &shown, background)
                .await;
        }
        Ok(backend)
    }

    /// Starts one failover watcher per sentinel and waits (at most the connect timeout)
    /// until each has tried to subscribe: a failover in the first moments of the client's
    /// life would otherwise go unnoticed, and the client would keep writing to the old
    /// master, which stays writable for seconds.
    async fn watch_sentinels(
        &self,
        sentinels: &[redis::Client],
        shown: &str,
        background: &Background,
    ) {
        let (attempted, mut attempts) = mpsc::channel(sentinels.len().max(1));
        for sentinel in sentinels {
            let shared = Arc::downgrade(&self.shared);
            let sentinel = sentinel.clone();
            // Only the first start reports its first attempt.
            let first_attempt = Mutex::new(Some(attempted.clone()));
            background.start_until_dropped("sentinel watcher", move || {
                let attempted = first_attempt
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .take();
                watch_switch_master(shared.clone(), sentinel.clone(), attempted)
            });
        }
        drop(attempted);
        let all_tried = async { while attempts.recv().await.is_some() {} };
        if tokio::time::timeout(self.shared.options.connect_timeout, all_tried)
            .await
            .is_err()
        {
            tracing::warn!(master = %shown, "dlock: some sentinels did not answer the failover subscription yet; relying on the others and on errors to notice a failover");
        }
    }

    /// Loads every script up front, so the first lock operation is one `EVALSHA` round
    /// trip. (After a restart or failover `NOSCRIPT` makes `invoke` reload them.)
    async fn load_scripts(&self) -> Result<(), CallError> {
        let all = scripts();
        for script in [&all.acquire, &all.release, &all.renew, &all.force_unlock] {
            self.bounded_call(async {
                let mut conn = self.conn().await?;
                script.load_async(&mut conn).await.map_err(CallError::Redis)
            })
            .await?;
        }
        Ok(())
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

    /// Whether renewals must be grouped by cluster slot (one multi-key script per slot).
    pub(crate) fn is_cluster(&self) -> bool {
        matches!(self.shared.route, Route::Cluster(_))
    }

    /// Runs a script, bounded by the command timeout.
    pub(crate) async fn invoke<T: FromRedisValue>(
        &self,
        invocation: &ScriptInvocation<'_>,
    ) -> Result<T, CallError> {
        let result = self
            .bounded_call(async {
                let mut conn = self.conn().await?;
                invocation
                    .invoke_async(&mut conn)
                    .await
                    .map_err(CallError::Redis)
            })
            .await;
        self.after(result).await
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
                    .map_err(CallError::Redis)?;
                let result = pipeline.query_async(lent.conn()).await;
                if result.is_ok() {
                    lent.give_back();
                }
                result.map_err(CallError::Redis)
            })
        };
        let result = match run().await {
            Err(CallError::Redis(e))
                if e.kind() == redis::ErrorKind::Server(redis::ServerErrorKind::NoScript) =>
            {
                self.load_scripts().await?;
                run().await
            }
            other => other,
        };
        self.after(result).await
    }

    /// A new connection to the master, for [`ExclusivePool`].
    async fn open_exclusive(&self) -> RedisResult<MultiplexedConnection> {
        let client = match &self.shared.route {
            Route::Direct(node) => read(node).client.clone(),
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
        client
            .get_multiplexed_async_connection_with_config(&config)
            .await
    }

    /// Runs a plain command, bounded by the command timeout.
    pub(crate) async fn query<T: FromRedisValue>(&self, cmd: &Cmd) -> Result<T, CallError> {
        let result = self
            .bounded_call(async {
                let mut conn = self.conn().await?;
                cmd.query_async(&mut conn).await.map_err(CallError::Redis)
            })
            .await;
        self.after(result).await
    }

    /// A subscriber on the current deployment, and the generation it belongs to: when
    /// [`generation`](Backend::generation) moves on, the subscriber is stale.
    pub(crate) async fn subscriber(&self) -> Result<Subscriber, CallError> {
        match &self.shared.route {
            Route::Direct(node) => {
                let client = read(node).client.clone();
                self.dedicated(client).await
            }
            Route::Sentinel(route) => {
                let client = route.node().client;
                self.dedicated(client).await
            }
            Route::Cluster(route) => {
                self.follow_runtime().await?;
                let conn = read(&route.conn);
                let taken = route
                    .pushes
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .take();
                match taken {
                    Some(receiver) => Ok(Subscriber::Sharded {
                        conn,
                        pushes: PushLease {
                            receiver: Some(receiver),
                            shared: Arc::clone(&self.shared),
                        },
                    }),
                    // The receiver ended with the cluster connection: nothing to reconnect.
                    None => Err(CallError::Redis(RedisError::from((
                        redis::ErrorKind::Io,
                        "the cluster connection's message channel is closed",
                    )))),
                }
            }
        }
    }

    async fn dedicated(&self, client: redis::Client) -> Result<Subscriber, CallError> {
        let pubsub = self.bounded(client.get_async_pubsub()).await?;
        let (sink, stream) = pubsub.split();
        Ok(Subscriber::Dedicated { sink, stream })
    }

    /// Changes whenever the subscriber must be re-established on a new master.
    pub(crate) fn generation(&self) -> watch::Receiver<u64> {
        self.shared.generation.subscribe()
    }

    /// The connection for the next call, reopened first if its runtime has shut down.
    async fn conn(&self) -> Result<Conn, CallError> {
        self.follow_runtime().await?;
        Ok(match &self.shared.route {
            Route::Direct(node) => Conn::Node(read(node).conn),
            Route::Sentinel(route) => Conn::Node(route.node().conn),
            Route::Cluster(route) => Conn::Cluster(read(&route.conn)),
        })
    }

    /// Reopens the connections on the current runtime when the one that drove them has
    /// shut down (see [`RuntimeProbe`]). One atomic load when nothing changed.
    async fn follow_runtime(&self) -> Result<(), CallError> {
        let alive = || {
            self.shared
                .probe
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .runtime_is_alive()
        };
        if alive() {
            return Ok(());
        }
        let _reopening = self.shared.reopening.lock().await;
        if alive() {
            return Ok(()); // another caller reopened them while we waited
        }
        tracing::info!("dlock: the runtime that drove the client's connections shut down; reopening them on this one");
        let options = self.shared.options;
        match &self.shared.route {
            Route::Direct(node) => {
                let client = read(node).client.clone();
                let fresh = Node::connect(client, options)
                    .await
                    .map_err(CallError::Redis)?;
                *node.write().unwrap_or_else(|p| p.into_inner()) = fresh;
            }
            Route::Sentinel(route) => {
                let fresh = Node::connect(route.node().client, options)
                    .await
                    .map_err(CallError::Redis)?;
                *route.current.write().unwrap_or_else(|p| p.into_inner()) = fresh;
            }
            Route::Cluster(route) => {
                let fresh = route
                    .client
                    .get_async_connection()
                    .await
                    .map_err(CallError::Redis)?;
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

    /// After a failed call in Sentinel mode, checks whether the master moved, so that the
    /// caller's retry goes to the new one.
    async fn after<T>(&self, result: Result<T, CallError>) -> Result<T, CallError> {
        if let (Err(error), Route::Sentinel(route)) = (&result, &self.shared.route) {
            if error.is_transient() {
                let _ = self.bounded_call(route.resolve(&self.shared)).await;
            }
        }
        result
    }

    async fn bounded<T>(&self, call: impl Future<Output = RedisResult<T>>) -> Result<T, CallError> {
        self.bounded_call(async { call.await.map_err(CallError::Redis) })
            .await
    }

    async fn bounded_call<T>(
        &self,
        call: impl Future<Output = Result<T, CallError>>,
    ) -> Result<T, CallError> {
        let timeout = self.shared.options.command_timeout;
        match tokio::time::timeout(timeout, call).await {
            Ok(Err(CallError::Redis(e))) if e.is_timeout() => Err(CallError::Timeout(timeout)),
            Ok(result) => result,
            Err(_) => Err(CallError::Timeout(timeout)),
        }
    }
}

async fn connect_node(
    client: redis::Client,
    address: &str,
    options: ConnectOptions,
) -> Result<Node, LockError> {
    let shown = redact(address);
    match tokio::time::timeout(options.connect_timeout, Node::connect(client, options)).await {
        Ok(Ok(node)) => Ok(node),
        Ok(Err(source)) => Err(LockError::Connect {
            address: shown,
            source: Some(source),
        }),
        Err(_) => Err(LockError::Connect {
            address: shown,
            source: None,
        }),
    }
}

/// The value behind `lock`, also after a panic elsewhere poisoned it (the value is
/// replaced whole, never left half-written).
fn read<T: Clone>(lock: &RwLock<T>) -> T {
    lock.read().unwrap_or_else(|p| p.into_inner()).clone()
}

async fn connect_cluster(
    nodes: Vec<redis::ConnectionInfo>,
    root_ca: Option<&[u8]>,
    options: ConnectOptions,
) -> Result<
    (
        ClusterClient,
        ClusterConnection,
        mpsc::UnboundedReceiver<PushInfo>,
    ),
    CallError,
> {
    let (sender, pushes) = mpsc::unbounded_channel();
    let builder = redis::cluster::ClusterClientBuilder::new(nodes)
        .use_protocol(redis::ProtocolVersion::RESP3)
        .push_sender(sender)
        .connection_timeout(options.connect_timeout)
        .response_timeout(options.command_timeout);
    let builder = match root_ca {
        Some(pem) => cluster_root_ca(builder, pem)?,
        None => builder,
    };
    let client = builder.build().map_err(CallError::Redis)?;
    let connecting = client.get_async_connection();
    match tokio::time::timeout(options.connect_timeout, connecting).await {
        Ok(Ok(conn)) => Ok((client, conn, pushes)),
        Ok(Err(e)) => Err(CallError::Redis(e)),
        Err(_) => Err(CallError::Timeout(options.connect_timeout)),
    }
}

impl SentinelRoute {
    async fn connect(
        master_name: &str,
        sentinels: Vec<redis::Client>,
        auth: &Auth,
        options: ConnectOptions,
    ) -> Result<SentinelRoute, CallError> {
        let mut settings = redis::RedisConnectionInfo::default().set_db(auth.database.unwrap_or(0));
        if let Some(username) = &auth.username {
            settings = settings.set_username(username);
        }
        if let Some(password) = &auth.password {
            settings = settings.set_password(password);
        }
        let (host, port) =
            sentinel::current_master(&sentinels, master_name, options.connect_timeout).await?;
        let client = master_client(&host, port, &settings)?;
        let node = tokio::time::timeout(options.connect_timeout, Node::connect(client, options))
            .await
            .map_err(|_| CallError::Timeout(options.connect_timeout))?
            .map_err(CallError::Redis)?;
        tracing::info!(master = %master_name, address = %node.address(), "dlock: sentinel master resolved");
        Ok(SentinelRoute {
            sentinels,
            resolving: tokio::sync::Mutex::new(()),
            master_name: master_name.to_owned(),
            settings,
            current: RwLock::new(node),
        })
    }

    fn node(&self) -> Node {
        self.current
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    /// Asks the sentinels for the master; switches the connection when it moved.
    async fn resolve(&self, shared: &Shared) -> Result<(), CallError> {
        let before = *shared.generation.borrow();
        let resolving = self.resolving.lock().await;
        if *shared.generation.borrow() != before {
            return Ok(()); // another caller switched while we waited
        }
        let (host, port) = sentinel::current_master(
            &self.sentinels,
            &self.master_name,
            shared.options.command_timeout,
        )
        .await?;
        drop(resolving);
        self.follow(shared, &host, port).await
    }

    /// Switches to the master a sentinel announced with `+switch-master`. The announcement
    /// is authoritative; asking the sentinels again could reach one that has not switched
    /// yet and still names the old master, which keeps accepting writes for a while.
    async fn follow(&self, shared: &Shared, host: &str, port: u16) -> Result<(), CallError> {
        self.switch(shared, master_client(host, port, &self.settings)?)
            .await
    }

    async fn switch(&self, shared: &Shared, client: redis::Client) -> Result<(), CallError> {
        let address = client.get_connection_info().addr().to_string();
        if address == self.node().address() {
            return Ok(());
        }
        let node = Node::connect(client, shared.options)
            .await
            .map_err(CallError::Redis)?;
        tracing::warn!(master = %self.master_name, %address, "dlock: sentinel failover: following the new master");
        *self.current.write().unwrap_or_else(|p| p.into_inner()) = node;
        shared.generation.send_modify(|generation| *generation += 1);
        Ok(())
    }
}

/// A client for the master at `host:port` with the topology's credentials and database.
fn master_client(
    host: &str,
    port: u16,
    settings: &redis::RedisConnectionInfo,
) -> Result<redis::Client, CallError> {
    use redis::IntoConnectionInfo;
    let info = redis::ConnectionAddr::Tcp(host.to_owned(), port)
        .into_connection_info()
        .map_err(CallError::Redis)?
        .set_redis_settings(settings.clone());
    redis::Client::open(info).map_err(CallError::Redis)
}

/// The master a sentinel event announces: `(master name, host, port)`.
///
/// - `+promoted-slave`: `slave <ip>:<port> <ip> <port> @ <master-name> <old-ip> <old-port>`,
///   sent as soon as the replica is promoted;
/// - `+switch-master`: `<master-name> <old-ip> <old-port> <new-ip> <new-port>`, sent when
///   the failover is complete (about a second later).
fn announced_master<'a>(channel: &str, payload: &'a str) -> Option<(&'a str, &'a str, u16)> {
    let fields: Vec<&str> = payload.split(' ').collect();
    let (name, host, port) = match (channel, &fields[..]) {
        ("+switch-master", [name, _, _, host, port]) => (*name, *host, *port),
        ("+promoted-slave", ["slave", _, host, port, "@", name, ..]) => (*name, *host, *port),
        _ => return None,
    };
    Some((name, host, port.parse().ok()?))
}

/// Listens for `+promoted-slave` / `+switch-master` on one sentinel and moves to the new
/// master at once, so the client stops writing to a demoted master (which can stay
/// writable for seconds after a manual failover) without waiting for an error.
///
/// One runs per sentinel: only the sentinel leading a failover announces
/// `+promoted-slave`, as soon as the replica is promoted; the others announce
/// `+switch-master` only once they hear of the new configuration, up to seconds later.
/// Until the client follows, its renewals go to the old master, so a lease shorter than
/// that delay could run out on the new one.
///
/// `attempted` receives one message after the first subscription attempt, successful or
/// not. After a lost subscription, the master is asked for again: an announcement may have
/// been missed meanwhile.
async fn watch_switch_master(
    shared: Weak<Shared>,
    sentinel: redis::Client,
    mut attempted: Option<mpsc::Sender<()>>,
) {
    let mut failures: u32 = 0;
    let mut subscribed_before = false;
    loop {
        if shared.strong_count() == 0 {
            return;
        }
        let pubsub = match sentinel.get_async_pubsub().await {
            Ok(mut pubsub) => pubsub
                .subscribe(&["+switch-master", "+promoted-slave"])
                .await
                .map(|()| pubsub),
            Err(error) => Err(error),
        };
        if let Some(attempted) = attempted.take() {
            let _ = attempted.try_send(());
        }
        let mut pubsub = match pubsub {
            Ok(pubsub) => pubsub,
            Err(error) => {
                failures += 1;
                let address = sentinel.get_connection_info().addr().to_string();
                tracing::warn!(%error, sentinel = %address, "dlock: cannot subscribe to a sentinel's failover events; retrying");
                tokio::time::sleep(Duration::from_millis(100) * failures.min(20)).await;
                continue;
            }
        };
        failures = 0;
        if std::mem::replace(&mut subscribed_before, true) {
            let Some(strong) = shared.upgrade() else {
                return;
            };
            if let Route::Sentinel(route) = &strong.route {
                if let Err(error) = route.resolve(&strong).await {
                    tracing::warn!(%error, "dlock: cannot ask the sentinels for the master after resubscribing");
                }
            }
        }
        let mut messages = pubsub.on_message();
        while let Some(message) = messages.next().await {
            let payload: String = message.get_payload().unwrap_or_default();
            let Some((name, host, port)) = announced_master(message.get_channel_name(), &payload)
            else {
                continue;
            };
            let Some(strong) = shared.upgrade() else {
                return;
            };
            if let Route::Sentinel(route) = &strong.route {
                if name != route.master_name {
                    continue;
                }
                if let Err(error) = route.follow(&strong, host, port).await {
                    tracing::warn!(%error, "dlock: switching to the announced master failed; asking the sentinels");
                    let _ = route.resolve(&strong).await;
                }
            }
        }
    }
}

/// A connection that receives unlock messages.
pub(crate) enum Subscriber {
    /// A dedicated pub/sub connection to one server.
    Dedicated {
        sink: PubSubSink,
        stream: PubSubStream,
    },
    /// Sharded subscriptions through the cluster connection; messages arrive as pushes.
    Sharded {
        conn: ClusterConnection,
        pushes: PushLease,
    },
}

/// The cluster connection's push receiver, lent to one subscriber at a time. The cluster
/// connection outlives any subscriber, so a subscriber dropped after a failed
/// `SSUBSCRIBE` hands the receiver back for the next one.
pub(crate) struct PushLease {
    receiver: Option<mpsc::UnboundedReceiver<PushInfo>>,
    shared: Arc<Shared>,
}

impl Drop for PushLease {
    fn drop(&mut self) {
        if let (Some(receiver), Route::Cluster(route)) = (self.receiver.take(), &self.shared.route)
        {
            *route.pushes.lock().unwrap_or_else(|p| p.into_inner()) = Some(receiver);
        }
    }
}

/// What a subscriber reports.
pub(crate) enum SubscriberEvent {
    /// An unlock message on this channel.
    Message(String),
    /// The server dropped the subscription to this channel (a slot moved).
    Dropped(String),
    /// A connection behind the subscriber was lost and restored: messages may be missing.
    Interrupted,
}

impl Subscriber {
    pub(crate) async fn subscribe(&mut self, channel: &str) -> RedisResult<()> {
        match self {
            Subscriber::Dedicated { sink, .. } => sink.subscribe(channel).await,
            Subscriber::Sharded { conn, .. } => conn.ssubscribe(channel).await,
        }
    }

    pub(crate) async fn unsubscribe(&mut self, channel: &str) -> RedisResult<()> {
        match self {
            Subscriber::Dedicated { sink, .. } => sink.unsubscribe(channel).await,
            Subscriber::Sharded { conn, .. } => conn.sunsubscribe(channel).await,
        }
    }

    /// The next event; `None` when the subscriber is gone and must be replaced.
    pub(crate) async fn next(&mut self) -> Option<SubscriberEvent> {
        match self {
            Subscriber::Dedicated { stream, .. } => {
                let message = stream.next().await?;
                Some(SubscriberEvent::Message(
                    message.get_channel_name().to_owned(),
                ))
            }
            Subscriber::Sharded { pushes, .. } => loop {
                let push = pushes.receiver.as_mut()?.recv().await?;
                let channel = push
                    .data
                    .first()
                    .and_then(|value| String::from_redis_value(value.clone()).ok());
                match (push.kind, channel) {
                    (PushKind::SMessage | PushKind::Message, Some(channel)) => {
                        return Some(SubscriberEvent::Message(channel))
                    }
                    (PushKind::SUnsubscribe, Some(channel)) => {
                        return Some(SubscriberEvent::Dropped(channel))
                    }
                    (PushKind::Disconnection, _) => return Some(SubscriberEvent::Interrupted),
                    _ => {}
                }
            },
        }
    }
}

fn list(urls: &[String]) -> String {
    let shown: Vec<String> = urls.iter().map(|u| redact(u)).collect();
    shown.join(", ")
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
    use super::{announced_master, redact};

    #[test]
    fn sentinel_announcements_name_the_new_master() {
        assert_eq!(
            announced_master("+switch-master", "mymaster 127.0.0.1 6379 127.0.0.1 6380"),
            Some(("mymaster", "127.0.0.1", 6380))
        );
        assert_eq!(
            announced_master(
                "+promoted-slave",
                "slave 127.0.0.1:6380 127.0.0.1 6380 @ mymaster 127.0.0.1 6379"
            ),
            Some(("mymaster", "127.0.0.1", 6380))
        );
        assert_eq!(announced_master("+switch-master", "garbage"), None);
        assert_eq!(
            announced_master("+sdown", "master mymaster 127.0.0.1 6379"),
            None
        );
    }

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
