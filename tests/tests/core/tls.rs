//! `rediss://` end to end: a TLS-only Redis port with a certificate from a test CA. The
//! client trusting that CA (from `tls_ca_file`) locks; one trusting only the system roots
//! or another CA cannot connect, so the certificate is really checked. TLS combines with
//! an ACL user and password, and talking plain text to the TLS port (or TLS to the plain
//! port) fails within the connect timeout with a clear error.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use dlock::config::{Config, ConfigError};
use dlock::{Lock, LockClient, LockError, LockGuard};
use dlock_tests::{keys, RedisServer, TestCertificates, TlsCluster, TlsSentinelGroup};

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// Lets `waiter` wait for the lock `guard` holds, releases it after `wait`, and returns
/// the waiter's guard and how long after the release it acquired.
async fn hand_over(guard: LockGuard, waiter: Lock, wait: Duration) -> (LockGuard, Duration) {
    let waiting = tokio::spawn(async move {
        let guard = waiter.lock().await;
        (guard, Instant::now())
    });
    tokio::time::sleep(wait).await;
    let released_at = Instant::now();
    guard.unlock().await.unwrap();
    let (guard, acquired_at) = waiting.await.unwrap();
    (
        guard.unwrap(),
        acquired_at.saturating_duration_since(released_at),
    )
}

#[tokio::test]
async fn a_lock_over_tls_with_the_configured_ca() {
    let tls = TlsServer::start(false);
    let address = format!("rediss://127.0.0.1:{}", tls.tls_port);
    let client = tls
        .config(&address, Some("ca.pem"), "")
        .build()
        .await
        .expect("TLS connection with the test CA");
    let guard = client.lock("over-tls").lock().await.unwrap();
    assert!(client.lock("over-tls").is_locked().await.unwrap());
    guard.unlock().await.unwrap();

    // A server that does not ask for a client certificate ignores one.
    let with_certificate = tls
        .config(&address, Some("ca.pem"), CLIENT_CERTIFICATE)
        .build()
        .await
        .expect("a client certificate the server did not ask for");
    let guard = with_certificate.lock("over-tls").lock().await.unwrap();
    guard.unlock().await.unwrap();

    // Without the CA the server's certificate is not trusted.
    let err = tls.config(&address, None, "").build().await.unwrap_err();
    assert_eq!(
        err.to_string(),
        format!("could not connect to Redis at {address}: invalid peer certificate: UnknownIssuer")
    );
}

/// `observer` tracks `name` (a `dlock watch` connection) while `holder` takes it: the
/// change is reported within 2 s, and the tracker then reads one holder.
async fn a_change_is_reported(observer: &LockClient, holder: &LockClient, name: &str) {
    let mut tracker = observer
        .lock(name)
        .track()
        .await
        .unwrap_or_else(|error| panic!("tracking {name}: {error}"));
    assert!(tracker.holders().await.unwrap().is_empty());
    let guard = holder.lock(name).lock().await.unwrap();
    tokio::time::timeout(Duration::from_secs(2), tracker.changed())
        .await
        .expect("the change is reported")
        .unwrap();
    assert_eq!(tracker.holders().await.unwrap().len(), 1);
    guard.unlock().await.unwrap();
}

/// What a client without a certificate is told by a server that checks clients, as
/// rustls reports it.
const NO_CLIENT_CERTIFICATE: &str = "received fatal alert: CertificateRequired";

/// A server that checks clients (`tls-auth-clients yes`, Redis's default once TLS is on)
/// serves a client presenting the configured certificate on every connection it opens:
/// commands, the subscriber that carries wake-ups, and a tracking connection. Without a
/// certificate, with a key that is not the certificate's, or with a file that is not a
/// certificate, connecting fails and says why.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_that_checks_clients_gets_the_configured_client_certificate() {
    let tls = TlsServer::start(true);
    let address = format!("rediss://127.0.0.1:{}", tls.tls_port);
    let config = tls.config(&address, Some("ca.pem"), CLIENT_CERTIFICATE);
    let holder = config.build().await.expect("TLS with a client certificate");
    let waiter = config.build().await.unwrap();

    let guard = holder.lock("checked").lock().await.unwrap();
    let (guard, wakeup) =
        hand_over(guard, waiter.lock("checked"), Duration::from_millis(200)).await;
    // The waiter rechecks only every 30 s: a wake-up within 2 s came by its message.
    assert!(wakeup < Duration::from_secs(2), "{wakeup:?}");
    guard.unlock().await.unwrap();

    a_change_is_reported(&holder, &waiter, "checked:2").await;

    let refused = |extra: &'static str| {
        let config = tls.config(&address, Some("ca.pem"), extra);
        async move { config.build().await.unwrap_err().to_string() }
    };
    let err = refused("").await;
    assert!(
        err.contains(&address) && err.contains(NO_CLIENT_CERTIFICATE),
        "{err}"
    );
    eprintln!("without a client certificate: {err}");
    let err = refused("tls_cert_file = \"client.pem\"\ntls_key_file = \"server.key\"\n").await;
    assert!(
        err.contains(&address) && err.contains("KeyMismatch"),
        "{err}"
    );
    std::fs::write(tls.certs.path("garbage.pem"), "not a certificate\n").unwrap();
    let err = refused("tls_cert_file = \"garbage.pem\"\ntls_key_file = \"client.key\"\n").await;
    assert!(
        err.contains("the TLS client certificate (`tls_cert_file`, `Topology::tls_client_certificate`) holds no PEM certificate"),
        "{err}"
    );
    let err = refused("tls_cert_file = \"client.pem\"\ntls_key_file = \"client.pem\"\n").await;
    assert!(
        err.contains("the TLS client key (`tls_key_file`, `Topology::tls_client_certificate`) holds no PEM private key"),
        "{err}"
    );
}

/// A Redis server with a TLS port (certificate from a fresh test CA) beside the plain port
/// the harness uses for administration.
struct TlsServer {
    server: RedisServer,
    tls_port: u16,
    certs: TestCertificates,
}

impl TlsServer {
    /// `check_clients`: the TLS port asks clients for a certificate the test CA signed.
    fn start(check_clients: bool) -> TlsServer {
        let certs = TestCertificates::new();
        let tls_port = free_port();
        let args = certs.server_args(tls_port, check_clients);
        let server = RedisServer::start_with(&args.iter().map(String::as_str).collect::<Vec<_>>());
        TlsServer {
            server,
            tls_port,
            certs,
        }
    }

    /// `dlock.toml` beside the certificates: `address`, `tls_ca_file = "<ca>"` unless
    /// `None`, a 2 s connect timeout and `extra` lines for `[connection]`.
    fn config(&self, address: &str, ca: Option<&str>, extra: &str) -> Config {
        let ca = ca.map_or(String::new(), |ca| format!("tls_ca_file = \"{ca}\"\n"));
        let path = self.certs.path("dlock.toml");
        std::fs::write(
            &path,
            format!("[redis.single]\naddress = \"{address}\"\n\n[connection]\n{ca}connect_timeout = \"2s\"\n{extra}\n[lock]\nkey_prefix = \"tls:\"\nmax_wait_recheck = \"30s\"\n"),
        )
        .unwrap();
        Config::from_file(&path).unwrap()
    }
}

/// The lock's key patterns of the least-privilege rule of docs/SECURITY.md for single
/// mode and key prefix `tls:` (fencing-token counters and the client's name and
/// description included), with every command of the rule: a client refuses to start
/// without one its scripts call (the `security` tests check the whole document against its
/// own copy).
const TLS_USER_RULE: &str = "~tls:* ~dlock:release:tls:* ~dlock:unlock:tls:* &dlock:unlock:tls:* ~dlock:fence:tls:* ~dlock:client:tls:* ~dlock:layout:tls: +incr +client|setname +fcall +evalsha +script|load +exists +hexists +hget +hmget +hkeys +hlen +hset +hincrby +hdel +pttl +pexpire +pexpireat +type +get +set +del +hgetall +time +zadd +zcount +zrange +zrangebyscore +zrem +zpopmin +zscore +incrby +publish +subscribe +unsubscribe +pubsub|numsub";
const TLS_USER_PASSWORD: &str = "tls-user-pw-a13f";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tls_with_an_acl_user_and_password() {
    let tls = TlsServer::start(false);
    let mut admin = tls.server.connection();
    let mut setuser = redis::cmd("ACL");
    setuser
        .arg("SETUSER")
        .arg("dlock")
        .arg("reset")
        .arg("on")
        .arg(format!(">{TLS_USER_PASSWORD}"))
        .arg(TLS_USER_RULE.split(' ').collect::<Vec<_>>());
    setuser.query::<()>(&mut admin).unwrap();

    let address = format!(
        "rediss://dlock:{TLS_USER_PASSWORD}@127.0.0.1:{}",
        tls.tls_port
    );
    let config = tls.config(&address, Some("ca.pem"), "");
    let holder = config.build().await.expect("TLS, ACL user and password");
    let waiter = config.build().await.unwrap();

    let guard = holder.lock("goods:1").lock().await.unwrap();
    assert_eq!(holder.lock("goods:1").key(), "tls:goods:1");
    let (guard, wakeup) =
        hand_over(guard, waiter.lock("goods:1"), Duration::from_millis(200)).await;
    // The waiter rechecks only every 30 s: a wake-up within 2 s came by its message.
    assert!(wakeup < Duration::from_secs(2), "{wakeup:?}");
    assert!(waiter.lock("goods:1").force_unlock().await.unwrap());
    assert!(guard.unlock().await.unwrap_err().is_not_held());
    eprintln!("TLS + ACL user: wake-up {wakeup:?}");

    let denials: Vec<HashMap<String, redis::Value>> =
        redis::cmd("ACL").arg("LOG").query(&mut admin).unwrap();
    assert!(denials.is_empty(), "{denials:?}");

    // A wrong password over TLS: authentication fails, the password stays out of it.
    let wrong = tls.config(
        &format!(
            "rediss://dlock:not-{TLS_USER_PASSWORD}@127.0.0.1:{}",
            tls.tls_port
        ),
        Some("ca.pem"),
        "",
    );
    let err = wrong.build().await.unwrap_err();
    assert!(
        matches!(&err, ConfigError::Lock(LockError::Connect { source: Some(source), .. })
            if source.kind() == redis::ErrorKind::AuthenticationFailed),
        "{err:?}"
    );
    for shown in [
        err.to_string(),
        format!("{err:?}"),
        format!("{config:?}"),
        format!("{holder:?}"),
    ] {
        assert!(!shown.contains(TLS_USER_PASSWORD), "{shown}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wrong_ca_or_a_protocol_mismatch_fails_fast_with_a_clear_error() {
    let tls = TlsServer::start(false);
    tls.certs.make_ca("other-ca");
    // (what, address, CA file, expected end of the message: `None` for any I/O error). The
    // connect timeout is 2 s.
    let cases = [
        (
            "a CA that did not sign the server's certificate",
            format!("rediss://127.0.0.1:{}", tls.tls_port),
            Some("other-ca.pem"),
            Some("invalid peer certificate: UnknownIssuer"),
        ),
        (
            "plain text to the TLS port",
            format!("redis://127.0.0.1:{}", tls.tls_port),
            None,
            // The server drops the connection: usually "Connection reset by peer".
            None,
        ),
        // The plain port waits for the end of a command line that never comes: only the
        // connect timeout ends it.
        (
            "TLS to the plain port",
            format!("rediss://127.0.0.1:{}", tls.server.port()),
            Some("ca.pem"),
            Some("no answer within the connect timeout"),
        ),
    ];
    for (what, address, ca, reason) in cases {
        let started = Instant::now();
        let err = tls.config(&address, ca, "").build().await.unwrap_err();
        let elapsed = started.elapsed();
        eprintln!("{what}: {err} (after {elapsed:?})");
        let ConfigError::Lock(LockError::Connect { source, .. }) = &err else {
            panic!("{what}: {err:?}");
        };
        let prefix = format!("could not connect to Redis at {address}: ");
        match reason {
            Some(reason) => assert_eq!(err.to_string(), format!("{prefix}{reason}"), "{what}"),
            None => {
                assert!(err.to_string().starts_with(&prefix), "{what}: {err}");
                assert!(
                    source.as_ref().is_some_and(redis::RedisError::is_io_error),
                    "{what}: {err:?}"
                );
            }
        }
        assert!(elapsed < Duration::from_millis(2500), "{what}: {elapsed:?}");
    }
}

/// The `[connection]` lines presenting the test client certificate (files relative to the
/// config file, beside the certificates).
const CLIENT_CERTIFICATE: &str = "tls_cert_file = \"client.pem\"\ntls_key_file = \"client.key\"\n";

/// `[redis.sentinel]` over `rediss://` sentinels, trusting the test CA from `tls_ca_file`
/// (relative to the file) and presenting the test client certificate, key prefix `tls:`.
fn sentinel_config(group: &TlsSentinelGroup, ca: Option<&str>) -> Config {
    sentinel_config_at(group, &group.sentinel_tls_url(), ca)
}

/// [`sentinel_config`] with the sentinel at `url`.
fn sentinel_config_at(group: &TlsSentinelGroup, url: &str, ca: Option<&str>) -> Config {
    sentinel_config_with(group, url, ca, CLIENT_CERTIFICATE)
}

/// [`sentinel_config_at`] with `client` as the `[connection]` lines of the client
/// certificate (empty: none).
fn sentinel_config_with(
    group: &TlsSentinelGroup,
    url: &str,
    ca: Option<&str>,
    client: &str,
) -> Config {
    let ca = ca.map_or(String::new(), |ca| format!("tls_ca_file = \"{ca}\"\n"));
    let text = format!(
        "[redis.sentinel]\nmaster_name = \"{}\"\nsentinels = [\"{url}\"]\n\n[connection]\n{ca}{client}connect_timeout = \"2s\"\n\n[lock]\nkey_prefix = \"tls:\"\nmax_wait_recheck = \"30s\"\n",
        group.master_name(),
    );
    let path = group.certificates().path("sentinel.toml");
    std::fs::write(&path, text).unwrap();
    Config::from_file(&path).unwrap()
}

/// Whether the key `key` exists on `server` (asked on its plain port).
fn exists(server: &RedisServer, key: &str) -> bool {
    keys::exists(&mut server.connection(), key)
}

/// The sentinel and the master it reports speak only TLS to clients, with the test CA:
/// the client must trust the CA for the sentinel's connection too, and reach the master
/// (and, after a failover, the promoted replica) by TLS at the reported address. A wake-up
/// over the TLS subscriber connection, a change report on a tracking connection, and the
/// move to the new master are checked on the servers themselves; a tracker of the old
/// master says its reports stopped, and tracking again hears the new master. An
/// `#insecure` sentinel URL is refused with the reason.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sentinel_deployment_over_tls_locks_wakes_and_follows_a_failover() {
    let group = TlsSentinelGroup::start();
    let config = sentinel_config(&group, Some("ca.pem"));
    let holder = config.build().await.expect("TLS sentinel and master");
    let waiter = config.build().await.unwrap();

    let guard = holder.lock("goods:1").lock().await.unwrap();
    assert!(exists(group.master_server(), "tls:goods:1"));
    let (guard, wakeup) =
        hand_over(guard, waiter.lock("goods:1"), Duration::from_millis(200)).await;
    // The waiter rechecks only every 30 s: a wake-up within 2 s came by its message.
    assert!(wakeup < Duration::from_secs(2), "{wakeup:?}");
    guard.unlock().await.unwrap();

    // An operator's change reports (`dlock watch`) come over TLS to the master too.
    a_change_is_reported(&holder, &waiter, "goods:3").await;

    // A tracker of the old master must say that its reports stopped when the client
    // follows the failover: the old master keeps running and would report nothing more.
    let mut stale_tracker = holder.lock("goods:4").track().await.unwrap();
    assert!(stale_tracker.holders().await.unwrap().is_empty());

    let old_master = group.master_tls_port();
    let new_master = group.failover();
    assert_ne!(old_master, new_master);
    let stopped = tokio::time::timeout(Duration::from_secs(10), stale_tracker.changed())
        .await
        .expect("the tracker notices that the master moved");
    assert!(
        stopped.unwrap_err().to_string().contains("master moved"),
        "a tracker of the old master reported a change"
    );
    let started = Instant::now();
    let guard = loop {
        match holder.lock("goods:2").try_lock().await {
            Ok(guard) if exists(group.master_server(), "tls:goods:2") => break guard,
            // Taken on the old master before the client followed: let it go, try again.
            Ok(guard) => drop(guard.unlock().await),
            Err(error) => eprintln!("while following the failover: {error}"),
        }
        assert!(
            started.elapsed() < Duration::from_secs(10),
            "the client did not follow the failover to TLS port {new_master}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    eprintln!(
        "TLS sentinel: wake-up {wakeup:?}, locking on the new master {:?} after the failover",
        started.elapsed()
    );
    guard.unlock().await.unwrap();

    // Tracking again reaches the new master: its reports arrive.
    let mut tracker = holder.lock("goods:4").track().await.unwrap();
    assert!(tracker.holders().await.unwrap().is_empty());
    let guard = waiter.lock("goods:4").lock().await.unwrap();
    assert!(exists(group.master_server(), "tls:goods:4"));
    tokio::time::timeout(Duration::from_secs(2), tracker.changed())
        .await
        .expect("the new master reports the change")
        .unwrap();
    assert_eq!(tracker.holders().await.unwrap().len(), 1);
    guard.unlock().await.unwrap();

    // Without the CA the sentinel's certificate is not trusted: the error names the
    // sentinel deployment and the reason.
    let err = sentinel_config(&group, None).build().await.unwrap_err();
    let shown = err.to_string();
    assert!(
        shown.contains("sentinel master \"mymaster\"") && shown.contains("UnknownIssuer"),
        "{shown}"
    );

    // Every TLS port here checks clients: without the client certificate the sentinel
    // turns the client away, and the error names the deployment.
    let err = sentinel_config_with(&group, &group.sentinel_tls_url(), Some("ca.pem"), "")
        .build()
        .await
        .unwrap_err();
    let shown = err.to_string();
    assert!(
        shown.contains("sentinel master \"mymaster\"") && shown.contains(NO_CLIENT_CERTIFICATE),
        "{shown}"
    );

    // `#insecure` (no certificate check) needs redis' `tls-rustls-insecure` feature,
    // which dlock does not turn on: such a sentinel URL is refused at connect, saying so,
    // rather than trusted silently.
    let url = format!("{}/#insecure", group.sentinel_tls_url());
    let err = sentinel_config_at(&group, &url, None)
        .build()
        .await
        .unwrap_err()
        .to_string();
    assert!(err.contains("tls-rustls-insecure"), "{err}");
}

#[tokio::test]
async fn sentinels_mixing_plain_and_tls_addresses_are_refused() {
    let text = "[redis.sentinel]\nmaster_name = \"mymaster\"\nsentinels = [\"redis://127.0.0.1:1\", \"rediss://127.0.0.1:2\"]\n";
    let err = Config::from_toml_str(text)
        .unwrap()
        .build()
        .await
        .unwrap_err();
    assert!(
        matches!(&err, ConfigError::Lock(LockError::Config(message))
            if message.contains("mix redis:// and rediss://")),
        "{err:?}"
    );
}

/// A cluster whose nodes answer clients only over TLS (and announce their TLS ports), with
/// the test CA: locks on every master, a wake-up through sharded pub/sub, change reports
/// from the master of a lock's slot (`dlock watch`), and the operators' `inspect` and
/// `list_locks`, which scan every master.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cluster_over_tls_locks_wakes_tracks_and_lists() {
    let cluster = TlsCluster::start();
    let nodes = cluster.node_tls_urls();
    let text = format!(
        "[redis.cluster]\nnodes = [\"{}\"]\n\n[connection]\ntls_ca_file = \"ca.pem\"\n{CLIENT_CERTIFICATE}connect_timeout = \"2s\"\n\n[lock]\nkey_prefix = \"tls:\"\nmax_wait_recheck = \"30s\"\n",
        nodes[0]
    );
    let path = cluster.certificates().path("cluster.toml");
    std::fs::write(&path, &text).unwrap();
    let config = Config::from_file(&path).unwrap();
    let holder = config.build().await.expect("TLS cluster");
    let waiter = config.build().await.unwrap();

    // Enough names to land on every master, each held, seen, and released.
    let names: Vec<String> = (0..12).map(|i| format!("goods:{i}")).collect();
    let mut guards = Vec::new();
    for name in &names {
        guards.push(holder.lock(name).lock().await.unwrap());
    }
    let mut masters = std::collections::BTreeSet::new();
    for name in &names {
        let key = format!("tls:{name}");
        let on: Vec<u16> = nodes
            .iter()
            .map(|url| url.rsplit(':').next().unwrap().parse().unwrap())
            .filter(|port| {
                // A node that does not serve the key's slot answers MOVED.
                redis::cmd("EXISTS")
                    .arg(&key)
                    .query::<bool>(&mut cluster.node_with_tls_port(*port).unwrap().connection())
                    .unwrap_or(false)
            })
            .collect();
        assert_eq!(on.len(), 1, "{key} on {on:?}");
        masters.insert(on[0]);
        let info = waiter.lock(name).inspect().await.unwrap();
        assert_eq!(info.holders.len(), 1, "{info:?}");
    }
    assert_eq!(masters.len(), 3, "the names landed on {masters:?} only");
    let listed = waiter.list_locks("goods:").await.unwrap();
    assert_eq!(listed.len(), names.len(), "{listed:?}");
    for guard in guards {
        guard.unlock().await.unwrap();
    }

    // A wake-up and a change report for a lock on each master.
    let mut wakeups = Vec::new();
    for name in &names {
        let mut tracker = waiter.lock(name).track().await.expect("tracking over TLS");
        assert!(tracker.holders().await.unwrap().is_empty());
        let guard = holder.lock(name).lock().await.unwrap();
        tokio::time::timeout(Duration::from_secs(2), tracker.changed())
            .await
            .expect("the slot's master reports the change")
            .unwrap();
        let (guard, wakeup) = hand_over(guard, waiter.lock(name), Duration::from_millis(100)).await;
        wakeups.push(wakeup);
        guard.unlock().await.unwrap();
    }
    // Each waiter rechecks only every 30 s: a wake-up within 2 s came by its message (a
    // first one may wait for its sharded subscription's confirmation on a loaded machine).
    let slowest = wakeups.iter().max().unwrap();
    assert!(*slowest < Duration::from_secs(2), "{wakeups:?}");
    eprintln!("TLS cluster: 12 locks over 3 masters, slowest wake-up {slowest:?}");
}
