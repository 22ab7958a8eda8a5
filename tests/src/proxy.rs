//! A TCP proxy between a client and Redis that injects network faults on demand.

use std::io::{ErrorKind, Read, Write};
use std::net::{Ipv4Addr, Shutdown, SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError};
use std::thread::{self, JoinHandle};
use std::time::Duration;

/// How long a connection whose reply is being lost stays open after the request was
/// forwarded, so that Redis has answered (and applied the command) before it is closed.
const LOST_REPLY_GRACE: Duration = Duration::from_millis(100);
/// Timeout for connecting to the upstream server.
const UPSTREAM_CONNECT_TIMEOUT: Duration = Duration::from_secs(5);
/// Safety-net period at which held connections re-check their state.
const HOLD_POLL: Duration = Duration::from_millis(50);
/// Size of the pumps' copy buffer.
const BUFFER_SIZE: usize = 16 * 1024;

/// A TCP proxy on a free `127.0.0.1` port forwarding every connection to an upstream
/// address (usually a [`RedisServer`](crate::RedisServer)), with deterministic fault
/// injection: lost replies, held connections, silenced connections and connection resets.
///
/// Every accepted connection gets its own upstream connection and two pump threads
/// (client to server, server to client). Dropping the proxy stops its listener, closes all
/// connections and joins all its threads.
///
/// Note that a `redis` client sends a setup request (`CLIENT SETINFO`, `HELLO`, ...) right
/// after connecting: arm [`TcpProxy::lose_next_reply`] only once the connection whose
/// request should be lost is established.
#[derive(Debug)]
pub struct TcpProxy {
    addr: SocketAddr,
    shared: Arc<Shared>,
    listener: Option<JoinHandle<()>>,
}

/// State shared by the proxy handle, its listener thread and its connection threads.
#[derive(Debug)]
struct Shared {
    upstream: SocketAddr,
    stopping: AtomicBool,
    /// One-shot: consumed by the next client-to-server pump that reads data.
    lose_next_reply: AtomicBool,
    /// Whether newly accepted connections are held.
    hold: Mutex<bool>,
    hold_changed: Condvar,
    /// Whether replies are held back (read from the server, not yet passed on).
    hold_replies: Mutex<bool>,
    replies_released: Condvar,
    /// Every chunk the server sends waits this long (in microseconds) before it is passed on.
    reply_delay_us: AtomicU64,
    accepted: AtomicUsize,
    /// Open connections, for `reset_all`.
    connections: Mutex<Vec<Arc<Connection>>>,
    /// Connection threads, joined on drop.
    threads: Mutex<Vec<JoinHandle<()>>>,
}

/// One proxied client connection.
#[derive(Debug)]
struct Connection {
    id: usize,
    client: TcpStream,
    /// Set once the upstream connection is established.
    server: Mutex<Option<TcpStream>>,
    /// Replies from Redis are read but not passed to the client.
    discard_replies: AtomicBool,
    closed: AtomicBool,
}

impl TcpProxy {
    /// Listens on a free 127.0.0.1 port and forwards every accepted connection to `upstream`.
    ///
    /// # Panics
    ///
    /// If no port can be bound or the listener thread cannot be spawned.
    pub fn start(upstream: SocketAddr) -> TcpProxy {
        let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, 0))
            .expect("cannot bind the proxy listener on 127.0.0.1");
        let addr = listener
            .local_addr()
            .expect("cannot read the proxy listener address");
        let shared = Arc::new(Shared {
            upstream,
            stopping: AtomicBool::new(false),
            lose_next_reply: AtomicBool::new(false),
            hold: Mutex::new(false),
            hold_changed: Condvar::new(),
            hold_replies: Mutex::new(false),
            reply_delay_us: AtomicU64::new(0),
            replies_released: Condvar::new(),
            accepted: AtomicUsize::new(0),
            connections: Mutex::new(Vec::new()),
            threads: Mutex::new(Vec::new()),
        });
        let listener_shared = Arc::clone(&shared);
        let listener = thread::Builder::new()
            .name(format!("proxy-{}-accept", addr.port()))
            .spawn(move || accept_loop(&listener, &listener_shared))
            .expect("cannot spawn the proxy listener thread");
        TcpProxy {
            addr,
            shared,
            listener: Some(listener),
        }
    }

    /// The proxy's listening address, `127.0.0.1:PORT`.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// The URL to connect through the proxy, `redis://127.0.0.1:PORT`.
    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.addr.port())
    }

    /// The next chunk the client sends (on any current connection) is forwarded to Redis, but its reply is
    /// discarded and that connection is then closed on both sides (~100 ms later, after Redis has answered):
    /// the client sees its request fail although Redis applied it. One-shot.
    ///
    /// A connection opened after this call also counts: its first chunk is the client's
    /// connection setup request.
    pub fn lose_next_reply(&self) {
        self.shared.lose_next_reply.store(true, Ordering::SeqCst);
    }

    /// New connections are accepted but not forwarded (bytes neither read nor sent) until
    /// [`TcpProxy::release_held`]. Connections already forwarded are not affected.
    pub fn hold_new_connections(&self) {
        *lock(&self.shared.hold) = true;
    }

    /// Stops holding new connections and starts forwarding the held ones.
    pub fn release_held(&self) {
        *lock(&self.shared.hold) = false;
        self.shared.hold_changed.notify_all();
    }

    /// Holds back everything the server sends on every connection (replies, pub/sub
    /// messages) until [`TcpProxy::release_replies`], which delivers it in order: a client
    /// that does not hear, for a while, what it is told. Requests still go through.
    pub fn hold_replies(&self) {
        *lock(&self.shared.hold_replies) = true;
    }

    /// Delivers the replies held back by [`TcpProxy::hold_replies`] and stops holding.
    pub fn release_replies(&self) {
        *lock(&self.shared.hold_replies) = false;
        self.shared.replies_released.notify_all();
    }

    /// From now on every chunk the server sends (replies, pub/sub messages) is passed on
    /// `delay` after the proxy read it, on every connection: a slow network in the reply
    /// direction. Requests still reach Redis at once, so commands are applied on time and
    /// only their answers are late. Chunks stay in order, so back-to-back replies queue up.
    /// `Duration::ZERO` turns the delay off.
    pub fn delay_replies(&self, delay: Duration) {
        let micros = u64::try_from(delay.as_micros()).unwrap_or(u64::MAX);
        self.shared.reply_delay_us.store(micros, Ordering::SeqCst);
    }

    /// From now on, connection `number` (1 for the first accepted, as counted by
    /// [`TcpProxy::accepted`]) still passes requests to Redis, but Redis' replies on it
    /// are dropped: a half-open connection whose peer never answers, while every other
    /// connection works. Returns `false` when no such connection is open.
    pub fn silence(&self, number: usize) -> bool {
        let connections = lock(&self.shared.connections);
        let found = connections
            .iter()
            .find(|connection| connection.id == number);
        if let Some(connection) = found {
            connection.discard_replies.store(true, Ordering::SeqCst);
        }
        found.is_some()
    }

    /// Closes every open connection now (both sides), held ones included; new connections
    /// still work.
    ///
    /// "Open" means accepted by the proxy (see [`TcpProxy::accepted`]): a client whose
    /// connect returned a moment ago may still sit in the kernel's accept queue and then
    /// escapes the reset.
    pub fn reset_all(&self) {
        self.shared.reset_all();
    }

    /// Number of client connections accepted so far (a connection is counted once it is
    /// registered, before it is held or forwarded).
    pub fn accepted(&self) -> usize {
        self.shared.accepted.load(Ordering::SeqCst)
    }
}

impl Drop for TcpProxy {
    fn drop(&mut self) {
        self.shared.stopping.store(true, Ordering::SeqCst);
        // Wake up the blocking `accept` with a connection of our own; the listener sees
        // the stop flag and exits without counting it.
        let _ = TcpStream::connect_timeout(&self.addr, Duration::from_secs(1));
        if let Some(listener) = self.listener.take() {
            let _ = listener.join();
        }
        // No new connections from here on: close the existing ones and wait for them.
        self.shared.reset_all();
        self.shared.hold_changed.notify_all();
        let threads = std::mem::take(&mut *lock(&self.shared.threads));
        for handle in threads {
            let _ = handle.join();
        }
    }
}

impl Shared {
    fn reset_all(&self) {
        let connections = lock(&self.connections).clone();
        for connection in connections {
            connection.close();
        }
        // Held connections are waiting on the condition variable: let them see `closed`.
        let _guard = lock(&self.hold);
        self.hold_changed.notify_all();
        drop(_guard);
        let _guard = lock(&self.hold_replies);
        self.replies_released.notify_all();
    }

    fn stopping(&self) -> bool {
        self.stopping.load(Ordering::SeqCst)
    }
}

impl Connection {
    /// Shuts down both sockets (which also wakes up pumps blocked on them). Idempotent.
    fn close(&self) {
        self.closed.store(true, Ordering::SeqCst);
        let _ = self.client.shutdown(Shutdown::Both);
        if let Some(server) = lock(&self.server).as_ref() {
            let _ = server.shutdown(Shutdown::Both);
        }
    }

    fn is_closed(&self) -> bool {
        self.closed.load(Ordering::SeqCst)
    }
}

fn accept_loop(listener: &TcpListener, shared: &Arc<Shared>) {
    let mut next_id = 0;
    loop {
        let accepted = listener.accept();
        if shared.stopping() {
            return;
        }
        let client = match accepted {
            Ok((client, _)) => client,
            Err(_) => {
                // E.g. too many open files: back off instead of spinning.
                thread::sleep(Duration::from_millis(10));
                continue;
            }
        };
        let held = *lock(&shared.hold);
        let _ = client.set_nodelay(true);
        next_id += 1;
        let connection = Arc::new(Connection {
            id: next_id,
            client,
            server: Mutex::new(None),
            discard_replies: AtomicBool::new(false),
            closed: AtomicBool::new(false),
        });
        lock(&shared.connections).push(Arc::clone(&connection));
        // Counted only once registered: a caller that saw the count go up can rely on
        // `reset_all` reaching this connection.
        shared.accepted.fetch_add(1, Ordering::SeqCst);

        let thread_shared = Arc::clone(shared);
        let thread_connection = Arc::clone(&connection);
        let spawned = thread::Builder::new()
            .name(format!("proxy-conn-{next_id}"))
            .spawn(move || serve(&thread_shared, &thread_connection, held));
        let mut threads = lock(&shared.threads);
        threads.retain(|handle| !handle.is_finished());
        match spawned {
            Ok(handle) => threads.push(handle),
            Err(_) => {
                drop(threads);
                connection.close();
                forget(shared, &connection);
            }
        }
    }
}

/// Runs one connection: waits while held, connects upstream, then pumps both ways until
/// either side closes or the connection is reset.
fn serve(shared: &Arc<Shared>, connection: &Arc<Connection>, held: bool) {
    if held {
        let mut hold = lock(&shared.hold);
        while *hold && !shared.stopping() && !connection.is_closed() {
            hold = shared
                .hold_changed
                .wait_timeout(hold, HOLD_POLL)
                .unwrap_or_else(PoisonError::into_inner)
                .0;
        }
    }
    if !connection.is_closed()
        && !shared.stopping()
        && let Some(server) = connect_upstream(shared, connection)
    {
        pump_both_ways(shared, connection, server);
    }
    connection.close();
    forget(shared, connection);
}

/// Connects to the upstream server and registers the socket with the connection.
fn connect_upstream(shared: &Shared, connection: &Connection) -> Option<TcpStream> {
    let server = TcpStream::connect_timeout(&shared.upstream, UPSTREAM_CONNECT_TIMEOUT).ok()?;
    let _ = server.set_nodelay(true);
    let handle = server.try_clone().ok()?;
    *lock(&connection.server) = Some(handle);
    // `close` may have run while we were connecting, before the socket was registered.
    if connection.is_closed() {
        let _ = server.shutdown(Shutdown::Both);
        return None;
    }
    Some(server)
}

fn pump_both_ways(shared: &Arc<Shared>, connection: &Arc<Connection>, server: TcpStream) {
    let (Ok(client_reader), Ok(server_writer)) =
        (connection.client.try_clone(), server.try_clone())
    else {
        return;
    };
    let replies_connection = Arc::clone(connection);
    let replies_shared = Arc::clone(shared);
    let replies = thread::Builder::new()
        .name(format!("proxy-conn-{}-replies", connection.id))
        .spawn(move || pump_replies(&replies_shared, &replies_connection, server));
    let Ok(replies) = replies else {
        return;
    };
    pump_requests(shared, connection, client_reader, server_writer);
    connection.close();
    let _ = replies.join();
}

/// Client to server. Consumes the proxy-wide "lose next reply" flag.
fn pump_requests(
    shared: &Shared,
    connection: &Connection,
    mut client: TcpStream,
    mut server: TcpStream,
) {
    let mut buffer = vec![0; BUFFER_SIZE];
    loop {
        let read = match client.read(&mut buffer) {
            Ok(0) => return,
            Ok(read) => read,
            Err(err) if err.kind() == ErrorKind::Interrupted => continue,
            Err(_) => return,
        };
        if shared.lose_next_reply.swap(false, Ordering::SeqCst) {
            // Discard before forwarding, so that no byte of the reply reaches the client.
            connection.discard_replies.store(true, Ordering::SeqCst);
            let _ = server.write_all(&buffer[..read]);
            thread::sleep(LOST_REPLY_GRACE);
            return;
        }
        if server.write_all(&buffer[..read]).is_err() {
            return;
        }
    }
}

/// Server to client, dropping everything once the connection discards replies, and
/// waiting while replies are held.
fn pump_replies(shared: &Shared, connection: &Connection, mut server: TcpStream) {
    let mut client = &connection.client;
    let mut buffer = vec![0; BUFFER_SIZE];
    loop {
        let read = match server.read(&mut buffer) {
            Ok(0) => break,
            Ok(read) => read,
            Err(err) if err.kind() == ErrorKind::Interrupted => continue,
            Err(_) => break,
        };
        if connection.discard_replies.load(Ordering::SeqCst) {
            continue;
        }
        let mut held = lock(&shared.hold_replies);
        while *held && !shared.stopping() && !connection.is_closed() {
            held = shared
                .replies_released
                .wait_timeout(held, HOLD_POLL)
                .unwrap_or_else(PoisonError::into_inner)
                .0;
        }
        drop(held);
        let delay = shared.reply_delay_us.load(Ordering::SeqCst);
        if delay > 0 {
            thread::sleep(Duration::from_micros(delay));
        }
        if client.write_all(&buffer[..read]).is_err() {
            break;
        }
    }
    connection.close();
}

/// Removes a finished connection from the open-connection list.
fn forget(shared: &Shared, connection: &Connection) {
    lock(&shared.connections).retain(|open| open.id != connection.id);
}

/// Locks a mutex, ignoring poisoning (a panicking proxy thread must not wedge the others).
fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::RedisServer;
    use std::time::Instant;

    const SHORT: Duration = Duration::from_millis(300);

    fn connect(url: &str) -> redis::Connection {
        let connection = redis::Client::open(url)
            .unwrap()
            .get_connection_with_timeout(Duration::from_secs(5))
            .unwrap();
        connection
            .set_read_timeout(Some(Duration::from_secs(5)))
            .unwrap();
        connection
    }

    fn ping(connection: &mut redis::Connection) -> redis::RedisResult<String> {
        redis::cmd("PING").query(connection)
    }

    /// PING written by hand, so that nothing is sent before it (unlike a `redis` client).
    fn raw_ping(addr: SocketAddr) -> TcpStream {
        let mut stream = TcpStream::connect(addr).unwrap();
        stream.write_all(b"*1\r\n$4\r\nPING\r\n").unwrap();
        stream
    }

    fn read_reply(stream: &mut TcpStream, timeout: Duration) -> std::io::Result<String> {
        stream.set_read_timeout(Some(timeout))?;
        let mut buffer = [0; 64];
        let read = stream.read(&mut buffer)?;
        Ok(String::from_utf8_lossy(&buffer[..read]).into_owned())
    }

    #[test]
    fn pass_through() {
        let server = RedisServer::start();
        let proxy = TcpProxy::start(server.addr());
        assert_eq!(
            proxy.url(),
            format!("redis://127.0.0.1:{}", proxy.addr().port())
        );
        assert_ne!(proxy.addr(), server.addr());
        assert_eq!(proxy.accepted(), 0);

        let mut via_proxy = connect(&proxy.url());
        redis::cmd("SET")
            .arg("k")
            .arg("v")
            .exec(&mut via_proxy)
            .unwrap();
        let value: String = redis::cmd("GET").arg("k").query(&mut via_proxy).unwrap();
        assert_eq!(value, "v");
        // The proxy really forwards to this server.
        let direct: String = redis::cmd("GET")
            .arg("k")
            .query(&mut server.connection())
            .unwrap();
        assert_eq!(direct, "v");
        // Larger than one pump buffer, in both directions.
        let big = "x".repeat(3 * BUFFER_SIZE + 17);
        redis::cmd("SET")
            .arg("big")
            .arg(&big)
            .exec(&mut via_proxy)
            .unwrap();
        let value: String = redis::cmd("GET").arg("big").query(&mut via_proxy).unwrap();
        assert_eq!(value, big);
        assert_eq!(proxy.accepted(), 1);
    }

    #[test]
    fn held_replies_arrive_in_order_once_released() {
        let server = RedisServer::start();
        let proxy = TcpProxy::start(server.addr());
        let mut stream = raw_ping(proxy.addr());
        assert_eq!(read_reply(&mut stream, SHORT).unwrap(), "+PONG\r\n");

        proxy.hold_replies();
        stream
            .write_all(b"*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$1\r\nv\r\n")
            .unwrap();
        let held = read_reply(&mut stream, SHORT);
        assert!(held.is_err(), "a reply passed while held: {held:?}");
        // The request itself went through.
        let value: String = redis::cmd("GET")
            .arg("k")
            .query(&mut server.connection())
            .unwrap();
        assert_eq!(value, "v");

        proxy.release_replies();
        assert_eq!(read_reply(&mut stream, SHORT).unwrap(), "+OK\r\n");
    }

    #[test]
    fn lose_next_reply() {
        let server = RedisServer::start();
        let proxy = TcpProxy::start(server.addr());
        let mut via_proxy = connect(&proxy.url());
        assert_eq!(ping(&mut via_proxy).unwrap(), "PONG");

        proxy.lose_next_reply();
        let result: redis::RedisResult<i64> = redis::cmd("INCR").arg("k").query(&mut via_proxy);
        assert!(
            result.is_err(),
            "INCR answered through a lost reply: {result:?}"
        );

        let direct: i64 = redis::cmd("GET")
            .arg("k")
            .query(&mut server.connection())
            .unwrap();
        assert_eq!(direct, 1, "Redis did not apply the request");

        // One-shot: a new connection through the proxy works normally.
        let mut again = connect(&proxy.url());
        let value: i64 = redis::cmd("INCR").arg("k").query(&mut again).unwrap();
        assert_eq!(value, 2);
        assert_eq!(proxy.accepted(), 2);
    }

    #[test]
    fn hold_and_release() {
        let server = RedisServer::start();
        let proxy = TcpProxy::start(server.addr());
        proxy.hold_new_connections();

        let mut held = raw_ping(proxy.addr());
        let started = Instant::now();
        let result = read_reply(&mut held, SHORT);
        assert!(result.is_err(), "held connection answered: {result:?}");
        assert!(
            started.elapsed() >= SHORT - Duration::from_millis(50),
            "held connection failed early: {result:?}"
        );
        // A redis client cannot even finish its connection setup.
        let client = redis::Client::open(proxy.url()).unwrap();
        assert!(client.get_connection_with_timeout(SHORT).is_err());
        assert_eq!(server_clients(&server), 1, "held connections reached Redis");

        proxy.release_held();
        let mut connection = connect(&proxy.url());
        assert_eq!(ping(&mut connection).unwrap(), "PONG");
        // The held connection is forwarded now, with the request it sent while held.
        assert_eq!(
            read_reply(&mut held, Duration::from_secs(5)).unwrap(),
            "+PONG\r\n"
        );
        assert_eq!(proxy.accepted(), 3);
    }

    #[test]
    fn reset_all_closes_connections() {
        let server = RedisServer::start();
        let proxy = TcpProxy::start(server.addr());
        let mut first = connect(&proxy.url());
        assert_eq!(ping(&mut first).unwrap(), "PONG");
        proxy.hold_new_connections();
        let mut held = raw_ping(proxy.addr());
        // Make sure the proxy has accepted the held connection before resetting.
        let deadline = Instant::now() + Duration::from_secs(5);
        while proxy.accepted() < 2 && Instant::now() < deadline {
            thread::sleep(Duration::from_millis(5));
        }

        proxy.reset_all();
        assert!(ping(&mut first).is_err(), "connection survived reset_all");
        // Closed: end of stream, or a reset because the proxy never read the PING.
        match read_reply(&mut held, Duration::from_secs(5)) {
            Ok(reply) => assert_eq!(reply, "", "held connection answered after reset_all"),
            Err(err) => assert!(
                !matches!(err.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut),
                "held connection still open after reset_all"
            ),
        }

        proxy.release_held();
        let mut second = connect(&proxy.url());
        assert_eq!(ping(&mut second).unwrap(), "PONG");
        assert_eq!(proxy.accepted(), 3);
    }

    #[test]
    fn drop_closes_connections() {
        let server = RedisServer::start();
        let proxy = TcpProxy::start(server.addr());
        let mut connection = connect(&proxy.url());
        assert_eq!(ping(&mut connection).unwrap(), "PONG");
        proxy.hold_new_connections();
        let _held = raw_ping(proxy.addr());
        let shared = Arc::downgrade(&proxy.shared);
        drop(proxy);
        assert!(
            ping(&mut connection).is_err(),
            "connection survived the proxy"
        );
        // Every thread (listener, connections, pumps) holds the shared state: all are gone,
        // and with the listener thread its socket.
        assert!(
            shared.upgrade().is_none(),
            "proxy threads outlive the proxy"
        );
    }

    /// Number of clients connected to Redis, this query's connection included.
    fn server_clients(server: &RedisServer) -> usize {
        let list: String = redis::cmd("CLIENT")
            .arg("LIST")
            .query(&mut server.connection())
            .unwrap();
        list.lines().count()
    }
}
