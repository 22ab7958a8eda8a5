//! Opening connections: addresses with the topology's credentials and database applied,
//! TLS with a configured root certificate and client certificate, and connect errors that name the address but
//! never the password.

use redis::cluster::ClusterClient;
use redis::cluster_async::ClusterConnection;
use redis::{PushInfo, RedisResult};
use tokio::sync::mpsc;

use super::topology::{Auth, TlsFiles};
use super::{CallError, ConnectOptions, Node};
use crate::error::LockError;
use crate::redact::redact;

/// `url` with the topology's credentials and database applied; errors name the address
/// but never the password.
pub(super) fn connection_info(url: &str, auth: &Auth) -> Result<redis::ConnectionInfo, LockError> {
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

/// Opens `url` as a client (see [`connection_info`]), with the topology's `tls` files.
pub(super) fn open(url: &str, auth: &Auth, tls: &TlsFiles) -> Result<redis::Client, LockError> {
    let info = connection_info(url, auth)?;
    client_with(info, tls)
        .map_err(|e| LockError::Config(format!("invalid Redis address {:?}: {e}", redact(url))))
}

/// A client for `info`, trusting and presenting `tls` when it is more than the defaults.
pub(super) fn client_with(
    info: redis::ConnectionInfo,
    tls: &TlsFiles,
) -> RedisResult<redis::Client> {
    if tls.is_default() {
        redis::Client::open(info)
    } else {
        tls_client(info, tls)
    }
}

#[cfg(feature = "tls")]
fn tls_client(info: redis::ConnectionInfo, tls: &TlsFiles) -> RedisResult<redis::Client> {
    redis::Client::build_with_tls(info, certificates(tls))
}

#[cfg(not(feature = "tls"))]
fn tls_client(_: redis::ConnectionInfo, _: &TlsFiles) -> RedisResult<redis::Client> {
    Err(no_tls())
}

#[cfg(feature = "tls")]
fn certificates(tls: &TlsFiles) -> redis::TlsCertificates {
    redis::TlsCertificates {
        client_tls: tls.client.as_ref().map(|client| redis::ClientTlsConfig {
            client_cert: client.certificate.clone(),
            client_key: client.key.clone(),
        }),
        root_cert: tls.root_ca.clone(),
    }
}

#[cfg(feature = "tls")]
fn cluster_tls(
    builder: redis::cluster::ClusterClientBuilder,
    tls: &TlsFiles,
) -> Result<redis::cluster::ClusterClientBuilder, CallError> {
    Ok(builder.certs(certificates(tls)))
}

#[cfg(not(feature = "tls"))]
fn cluster_tls(
    _: redis::cluster::ClusterClientBuilder,
    _: &TlsFiles,
) -> Result<redis::cluster::ClusterClientBuilder, CallError> {
    Err(CallError::from(no_tls()))
}

#[cfg(not(feature = "tls"))]
fn no_tls() -> redis::RedisError {
    redis::RedisError::from((
        redis::ErrorKind::InvalidClientConfig,
        "TLS needs dlock's `tls` feature",
    ))
}

/// rustls needs a process-wide crypto provider; install ring's unless the application
/// chose one already.
pub(super) fn install_tls_provider() {
    #[cfg(feature = "tls")]
    {
        let _ = rustls::crypto::ring::default_provider().install_default();
    }
}

pub(super) fn connect_error(address: String, error: CallError) -> LockError {
    match error {
        CallError::Redis(source, _) => LockError::Connect {
            address,
            source: Some(source),
        },
        // Connecting sends no acquisition, so it cannot miss replica acknowledgements.
        CallError::Timeout(..) | CallError::NotReplicated { .. } => LockError::Connect {
            address,
            source: None,
        },
    }
}

pub(super) async fn connect_node(
    client: redis::Client,
    address: &str,
    options: ConnectOptions,
) -> Result<Node, LockError> {
    let shown = redact(address);
    match tokio::time::timeout(options.connect_timeout, Node::connect(client, options)).await {
        Ok(Ok(node)) => Ok(node),
        // The connection's own bound is the connect timeout too: whichever fires first,
        // the error says the same.
        Ok(Err(source)) if source.is_timeout() => Err(LockError::Connect {
            address: shown,
            source: None,
        }),
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

pub(super) async fn connect_cluster(
    nodes: Vec<redis::ConnectionInfo>,
    tls: &TlsFiles,
    options: ConnectOptions,
) -> Result<ClusterClients, CallError> {
    let builder = |pushes: Option<mpsc::UnboundedSender<PushInfo>>| {
        let builder = redis::cluster::ClusterClientBuilder::new(nodes.clone())
            .use_protocol(redis::ProtocolVersion::RESP3)
            .connection_timeout(options.connect_timeout)
            .response_timeout(options.command_timeout);
        let builder = match pushes {
            Some(sender) => builder.push_sender(sender),
            None => builder,
        };
        let builder = if tls.is_default() {
            builder
        } else {
            cluster_tls(builder, tls)?
        };
        builder.build().map_err(CallError::from)
    };
    let commands = builder(None)?;
    let (sender, pushes) = mpsc::unbounded_channel();
    let subscriber = builder(Some(sender))?;
    let connecting = commands.get_async_connection();
    match tokio::time::timeout(options.connect_timeout, connecting).await {
        Ok(Ok(conn)) => Ok(ClusterClients {
            commands,
            conn,
            subscriber,
            pushes,
        }),
        Ok(Err(e)) => Err(CallError::from(e)),
        Err(_) => Err(CallError::timeout(options.connect_timeout)),
    }
}

/// What connecting to a cluster yields. Commands and sharded subscriptions use separate
/// connections: the client library takes any `sunsubscribe` push for the reply to the
/// oldest request in flight, and the server sends one unasked when a slot moves — on a
/// shared connection that request (say, an acquire script) got the push as its answer
/// and every later request the answer of the one before it.
pub(super) struct ClusterClients {
    /// Opens the command connection (again on a new runtime).
    pub(super) commands: ClusterClient,
    /// The command connection.
    pub(super) conn: ClusterConnection,
    /// Opens the subscriber's connections; their pushes go to `pushes`.
    pub(super) subscriber: ClusterClient,
    pub(super) pushes: mpsc::UnboundedReceiver<PushInfo>,
}

/// How the master of a Sentinel deployment is reached: over TLS exactly when the
/// sentinels are (`rediss://`), with their certificate check, trusted root and client
/// certificate, since the sentinels report only a host and a port.
#[derive(Clone)]
pub(super) enum Transport {
    Plain,
    Tls {
        /// The sentinel URLs' `#insecure`: no certificate check (honoured only when the
        /// application turns on redis' `tls-rustls-insecure` feature; refused otherwise).
        insecure: bool,
        /// The topology's root certificate (else the system's roots) and client
        /// certificate.
        tls: TlsFiles,
    },
}

impl Transport {
    /// The transport every one of `sentinels` uses; an error when they mix plain and TLS
    /// addresses, since the master's transport could not follow both.
    pub(super) fn of_sentinels(
        sentinels: &[redis::Client],
        tls: &TlsFiles,
    ) -> Result<Transport, LockError> {
        let mut transports =
            sentinels
                .iter()
                .map(|sentinel| match sentinel.get_connection_info().addr() {
                    redis::ConnectionAddr::TcpTls { insecure, .. } => Some(*insecure),
                    _ => None,
                });
        let first = transports.next().flatten();
        if transports.any(|other| other != first) {
            return Err(LockError::Config(
                "the sentinel addresses mix redis:// and rediss:// (or #insecure): the master is \
                 reached over TLS exactly when the sentinels are, so give them all one scheme"
                    .to_owned(),
            ));
        }
        Ok(match first {
            None => Transport::Plain,
            Some(insecure) => Transport::Tls {
                insecure,
                tls: tls.clone(),
            },
        })
    }
}

/// A client for the master at `host:port` with the topology's credentials and database,
/// over `transport`.
pub(super) fn master_client(
    host: &str,
    port: u16,
    settings: &redis::RedisConnectionInfo,
    transport: &Transport,
) -> Result<redis::Client, CallError> {
    use redis::IntoConnectionInfo;
    let address = match transport {
        Transport::Plain => redis::ConnectionAddr::Tcp(host.to_owned(), port),
        Transport::Tls { insecure, .. } => redis::ConnectionAddr::TcpTls {
            host: host.to_owned(),
            port,
            insecure: *insecure,
            tls_params: None,
        },
    };
    let info = address
        .into_connection_info()
        .map_err(CallError::from)?
        .set_redis_settings(settings.clone());
    let client = match transport {
        Transport::Tls { tls, .. } => client_with(info, tls),
        Transport::Plain => redis::Client::open(info),
    };
    client.map_err(CallError::from)
}
