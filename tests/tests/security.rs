//! Security: the least-privilege ACL users of `docs/SECURITY.md` (one rule per mode, found
//! by experiment and checked against `ACL LOG`), clear errors for wrong credentials,
//! passwords kept out of logs, `Debug` output and errors, and key prefixes that keep two
//! applications' locks apart. TLS is covered in `tls.rs`.

use std::collections::{HashMap, HashSet};
use std::time::{Duration, Instant};

use dlock::config::{Config, ConfigError};
use dlock::{admin::FunctionLibrary, LockClient, LockError, MultiLock, ScriptMode, Topology};
use dlock_tests::logs::{capture_logs, captured};
use dlock_tests::{RedisCluster, RedisReplicaSet, RedisSentinelGroup, RedisServer};

/// Commands every mode needs: the scripts run with `EVALSHA` (reloaded with
/// `SCRIPT LOAD` after `NOSCRIPT`), `FCALL` (a client built with the default
/// `ScriptMode::Auto` asks whether dlock's function library is loaded, and uses it when it
/// is), the commands the scripts call (a script runs with the caller's permissions: the
/// sorted-set commands and `TIME` are the fair lock's queue and the read-write lock's
/// waiting writers, `HGETALL` the read-write lock's owners), and the reads behind
/// `is_locked`, `hold_count` and `remaining_lease`, and `INCR` (the fencing token minted by
/// every exclusive acquisition). `EVAL` is never sent.
const COMMON_COMMANDS: &[&str] = &[
    "+evalsha",
    "+script|load",
    "+fcall",
    "+exists",
    "+hexists",
    "+hget",
    "+hmget",
    // A force unlock tells each holder's client: it lists the holders.
    "+hkeys",
    // A whole-hash read is preceded by a size check.
    "+hlen",
    "+hset",
    "+hincrby",
    "+hdel",
    "+pttl",
    "+pexpire",
    // A lock given to a waiter of another client expires at the server time it was told.
    "+pexpireat",
    "+type",
    "+get",
    "+set",
    "+del",
    "+hgetall",
    "+time",
    "+zadd",
    "+zcount",
    "+zrange",
    "+zrangebyscore",
    "+zrem",
    "+zpopmin",
    "+zscore",
    // The fenced writes' `incr_by`.
    "+incrby",
    "+incr",
    // Every client names its connections, for `CLIENT LIST` and `dlock inspect`.
    "+client|setname",
];

/// The deployments whose data nodes need different commands.
#[derive(Clone, Copy, Debug)]
enum Mode {
    /// One server, the master of `master_slave` (replicas are never contacted), or the
    /// data nodes of a Sentinel deployment.
    Single,
    Cluster,
}

impl Mode {
    /// Commands on top of [`COMMON_COMMANDS`].
    fn extra_commands(self) -> &'static [&'static str] {
        match self {
            // Unlock messages over classic pub/sub; a release gives the lock only to a
            // waiter whose client listens on the server (its subscriber count).
            Mode::Single => &["+publish", "+subscribe", "+unsubscribe", "+pubsub|numsub"],
            // Sharded pub/sub; the cluster client reads the slot map and pings every
            // node connection it opens.
            Mode::Cluster => &[
                "+spublish",
                "+ssubscribe",
                "+sunsubscribe",
                "+pubsub|shardnumsub",
                "+cluster|slots",
                "+ping",
            ],
        }
    }
}

/// The script-mode least-privilege rule for an application whose key prefix is `prefix`:
/// what follows `ACL SETUSER <user> reset on ><password>`.
///
/// Every helper name is `dlock:<kind>:<prefix>{tag}:...`, the prefix right after the fixed
/// kind, so each pattern is a kind and the prefix: nothing another application's lock
/// names contain can make them match.
fn acl_rule(mode: Mode, prefix: &str) -> Vec<String> {
    let prefix = glob_escape(prefix);
    let mut rule = vec![
        // The lock hashes.
        format!("~{prefix}*"),
        // Release memos: `dlock:release:<prefix>{tag}:<owner>:<op>`.
        format!("~dlock:release:{prefix}*"),
        // The unlock channel is passed to the release scripts as a key (for cluster
        // routing), so it needs a key pattern as well as a channel pattern.
        format!("~dlock:unlock:{prefix}*"),
        format!("&dlock:unlock:{prefix}*"),
        // The fair lock's queue and entry deadlines, and each waiter's wake-up channel:
        // `dlock:fair:<prefix>{tag}:<name>:queue|deadlines|wake:<waiter>`.
        format!("~dlock:fair:{prefix}*"),
        format!("&dlock:fair:{prefix}*"),
        // The read-write lock's waiting writers: `dlock:rwwait:<prefix>{tag}:<name>`.
        format!("~dlock:rwwait:{prefix}*"),
        // The semaphore's grants hash, also the name of its channel (passed as a key
        // for cluster routing), and its capacity: `dlock:sem:<prefix>{tag}:<name>`,
        // `dlock:semcap:<prefix>{tag}:<name>`.
        format!("~dlock:sem:{prefix}*"),
        format!("&dlock:sem:{prefix}*"),
        format!("~dlock:semcap:{prefix}*"),
        // The fenced writes' highest token per application key and `incr_by` memos:
        // `dlock:fenced:<prefix>{tag}:<key>`, `dlock:fencedop:<prefix>{tag}:<client>:<op>`.
        format!("~dlock:fenced:{prefix}*"),
        format!("~dlock:fencedop:{prefix}*"),
        // The fencing-token counters, one per slot anchor: `dlock:fence:<prefix>{tag}`.
        format!("~dlock:fence:{prefix}*"),
        // Each client's expiring description: `dlock:client:<prefix>{tag}:<client id>`.
        format!("~dlock:client:{prefix}*"),
        // The layout version of the prefix, checked on connect: exactly
        // `dlock:layout:<prefix>`.
        format!("~dlock:layout:{prefix}"),
    ];
    rule.extend(
        COMMON_COMMANDS
            .iter()
            .chain(mode.extra_commands())
            .map(|command| (*command).to_owned()),
    );
    rule
}

/// The operator's rule, for the `dlock` command line: [`acl_rule`] (whose subscriber
/// count of a wake channel `dlock inspect` also reads) and what its reads add, `SCAN`
/// (`dlock list`) and `CLIENT TRACKING` (`dlock watch` hears each change), last.
fn operator_rule(mode: Mode, prefix: &str) -> Vec<String> {
    let mut rule = acl_rule(mode, prefix);
    rule.extend(["+scan".to_owned(), "+client|tracking".to_owned()]);
    rule
}

/// The inspector's rule, for `dlock inspect` and `watch` of named locks against
/// applications in function mode: read-only rights (`%R~`) on the names a lock's state
/// lives in, the reads those commands send, and `+fcall` only for the library probe a
/// function-mode client sends on connect (a call of a function with keys needs write
/// rights on them, so no dlock function can change anything for this user). No script
/// loading, no write, no read of a release memo, a fenced write's records or anything
/// outside the prefix; and nothing that tells it another application's key names: no
/// `SCAN` (Redis cannot restrict it to a pattern) and no `CLIENT TRACKING` (its `BCAST`
/// mode reports changes of any key under any prefix the user names), so `watch` reads
/// the lock every `--interval`. `list` needs [`lister_rule`]; `force-unlock` the operator
/// rule above.
fn inspector_rule(mode: Mode, prefix: &str) -> Vec<String> {
    let prefix = glob_escape(prefix);
    let mut rule: Vec<String> = [
        format!("%R~{prefix}*"),
        format!("%R~dlock:unlock:{prefix}*"),
        format!("%R~dlock:fair:{prefix}*"),
        format!("%R~dlock:rwwait:{prefix}*"),
        format!("%R~dlock:sem:{prefix}*"),
        format!("%R~dlock:semcap:{prefix}*"),
        format!("%R~dlock:fence:{prefix}*"),
        format!("%R~dlock:client:{prefix}*"),
        format!("%R~dlock:layout:{prefix}"),
    ]
    .into();
    rule.extend(
        [
            "+fcall",
            "+get",
            "+type",
            "+hgetall",
            "+zrange",
            "+pttl",
            "+time",
            "+client|setname",
        ]
        .map(str::to_owned),
    );
    rule.extend(match mode {
        Mode::Single => vec!["+pubsub|numsub".to_owned()],
        Mode::Cluster => vec![
            "+pubsub|shardnumsub".to_owned(),
            "+cluster|slots".to_owned(),
            "+ping".to_owned(),
        ],
    });
    rule
}

/// The lister's rule, for `dlock list` too: the inspector's and `+scan`, which no ACL can
/// restrict to a pattern: this user sees every key name on the server (not the values).
fn lister_rule(mode: Mode, prefix: &str) -> Vec<String> {
    let mut rule = inspector_rule(mode, prefix);
    rule.push("+scan".to_owned());
    rule
}

/// The rule for an application with the default (empty) key prefix, whose lock names
/// start with one of `names` (e.g. `goods:`): its lock hashes are the names themselves,
/// and its helper names are `dlock:<kind>:{tag}...`, the hash tag right after the kind,
/// where a prefixed application's never have a `{` (a prefix may not contain one). It
/// keeps the application apart from every prefixed one; two applications with the empty
/// prefix share the helper patterns, so a server has at most one.
fn default_prefix_rule(mode: Mode, names: &[&str]) -> Vec<String> {
    acl_rule(mode, "{")
        .into_iter()
        .flat_map(|token| match token.as_str() {
            "~{*" => names
                .iter()
                .map(|name| format!("~{}*", glob_escape(name)))
                .collect(),
            "~dlock:layout:{" => vec!["~dlock:layout:".to_owned()],
            _ => vec![token],
        })
        .collect()
}

/// The function-mode rule: [`acl_rule`] with `+fcall` as the only way to run a script,
/// for clients built with `ScriptMode::Functions` once an administrator loaded dlock's
/// function library. The user can load no script of its own.
fn functions_rule(mode: Mode, prefix: &str) -> Vec<String> {
    acl_rule(mode, prefix)
        .into_iter()
        .filter(|token| token != "+evalsha" && token != "+script|load")
        .collect()
}

/// `text` with the glob characters of ACL patterns escaped.
fn glob_escape(text: &str) -> String {
    let mut escaped = String::with_capacity(text.len());
    for c in text.chars() {
        if matches!(c, '*' | '?' | '[' | ']' | '\\') {
            escaped.push('\\');
        }
        escaped.push(c);
    }
    escaped
}

/// `ACL SETUSER <user> reset on ><password> <rule>` through an admin connection.
///
/// On a server that has `CLIENT SETINFO` (Redis 7.2+, Valkey), `+client|setinfo` is
/// added, as docs/SECURITY.md says: redis-rs sends it on every connection and ignores a
/// refusal, which `ACL LOG` would then show. Redis 7.0 rejects a rule naming it.
fn set_user(admin: &mut redis::Connection, user: &str, password: &str, rule: &[String]) {
    let mut cmd = redis::cmd("ACL");
    cmd.arg("SETUSER")
        .arg(user)
        .arg("reset")
        .arg("on")
        .arg(format!(">{password}"));
    for token in rule {
        cmd.arg(token);
    }
    if has_client_setinfo(admin) {
        cmd.arg("+client|setinfo");
    }
    cmd.query::<()>(admin)
        .unwrap_or_else(|e| panic!("ACL SETUSER {user} {rule:?}: {e}"));
}

/// Whether the server knows `CLIENT SETINFO`.
fn has_client_setinfo(admin: &mut redis::Connection) -> bool {
    let info: Vec<redis::Value> = redis::cmd("COMMAND")
        .arg("INFO")
        .arg("client|setinfo")
        .query(admin)
        .unwrap();
    !matches!(info.as_slice(), [] | [redis::Value::Nil])
}

/// Every `ACL LOG` entry as `user reason object (context, count)`.
fn acl_denials(admin: &mut redis::Connection) -> Vec<String> {
    // Every entry the server keeps (`ACL LOG` alone shows the last 10).
    let entries: Vec<HashMap<String, redis::Value>> =
        redis::cmd("ACL").arg("LOG").arg(1000).query(admin).unwrap();
    entries
        .iter()
        .map(|entry| {
            let field = |name: &str| match entry.get(name) {
                Some(redis::Value::BulkString(bytes)) => {
                    String::from_utf8_lossy(bytes).into_owned()
                }
                Some(redis::Value::Int(n)) => n.to_string(),
                other => format!("{other:?}"),
            };
            format!(
                "{} {} {} ({}, {}x)",
                field("username"),
                field("reason"),
                field("object"),
                field("context"),
                field("count")
            )
        })
        .collect()
}

/// A connection to `url`, as the user it names (the unrestricted `default` user when it
/// names none).
fn connection(url: &str) -> redis::Connection {
    redis::Client::open(url).unwrap().get_connection().unwrap()
}

/// `url` (`redis://127.0.0.1:PORT`) with `user:password@`.
/// A fresh server with the user `dlock` under the single-server rule for prefix `shop:`,
/// and an admin connection to it.
fn server_with_shop_user() -> (RedisServer, redis::Connection) {
    let server = RedisServer::start();
    let mut admin = server.connection();
    set_user(
        &mut admin,
        "dlock",
        ACL_PASSWORD,
        &acl_rule(Mode::Single, "shop:"),
    );
    (server, admin)
}

/// A fresh server with dlock's function library loaded and the user `dlock` under the
/// function-mode rule for prefix `shop:`, and an admin connection to it.
async fn server_with_function_user() -> (RedisServer, redis::Connection) {
    let server = RedisServer::start();
    let mut admin = server.connection();
    load_library(&Topology::single(server.url())).await;
    set_user(
        &mut admin,
        "dlock",
        ACL_PASSWORD,
        &functions_rule(Mode::Single, "shop:"),
    );
    (server, admin)
}

/// What `ACL DRYRUN user words...` answers: `OK`, or why the command is refused.
fn dry_run(admin: &mut redis::Connection, user: &str, words: &[impl AsRef<str>]) -> String {
    let mut cmd = redis::cmd("ACL");
    cmd.arg("DRYRUN").arg(user);
    for word in words {
        cmd.arg(word.as_ref());
    }
    cmd.query(admin).unwrap_or_else(|e| e.to_string())
}

fn with_credentials(url: &str, user: &str, password: &str) -> String {
    url.replacen("redis://", &format!("redis://{user}:{password}@"), 1)
}

async fn connect_as(url: &str, prefix: &str) -> LockClient {
    LockClient::builder()
        .key_prefix(prefix)
        .connect(url)
        .await
        .unwrap()
}

fn is_noperm(error: &LockError) -> bool {
    matches!(error, LockError::Redis { source, .. } | LockError::Connect { source: Some(source), .. }
        if source.code() == Some("NOPERM"))
}

/// Three clients of one application: `a` and `b` with the default 30 s watchdog, `fast`
/// with a 1 s watchdog (renewed every ~333 ms).
async fn app_clients(topology: &Topology, prefix: &str) -> [LockClient; 3] {
    let connect = |watchdog: Duration| {
        LockClient::builder()
            .key_prefix(prefix)
            .watchdog_timeout(watchdog)
            .connect_to(topology)
    };
    let a = connect(Duration::from_secs(30)).await.unwrap();
    let b = connect(Duration::from_secs(30)).await.unwrap();
    let fast = connect(Duration::from_secs(1)).await.unwrap();
    [a, b, fast]
}

/// Every lock operation on every name in `names`: lock and the state reads, re-entry, a
/// waiter on `b` woken by the release (within 100 ms), a bounded wait that times out,
/// force unlock, an explicit lease; then 2.5 s under a 1 s watchdog. Returns the wake-up
/// latencies.
async fn exercise(clients: &[LockClient; 3], names: &[String]) -> Vec<Duration> {
    let [a, b, fast] = clients;
    let mut wakeups = Vec::new();
    for name in names {
        let lock = a.lock(name);
        let guard = lock.lock().await.unwrap_or_else(|e| panic!("{name}: {e}"));
        assert!(lock.is_locked().await.unwrap(), "{name}");
        let left = lock.remaining_lease().await.unwrap().expect("a TTL");
        assert!(
            left > Duration::from_secs(25) && left <= Duration::from_secs(30),
            "{name}: {left:?}"
        );
        let inner = guard.scope(lock.lock()).await.unwrap();
        assert_eq!(guard.scope(lock.hold_count()).await.unwrap(), 2, "{name}");
        inner.unlock().await.unwrap();
        assert_eq!(guard.scope(lock.hold_count()).await.unwrap(), 1, "{name}");

        let waiting = b.lock(name);
        let waiter = tokio::spawn(async move {
            let guard = waiting.lock().await;
            (guard, Instant::now())
        });
        tokio::time::sleep(Duration::from_millis(200)).await;
        let released_at = Instant::now();
        guard.unlock().await.unwrap();
        let (held_by_b, acquired_at) = waiter.await.unwrap();
        let held_by_b = held_by_b.unwrap_or_else(|e| panic!("{name}: waiter: {e}"));
        let wakeup = acquired_at.saturating_duration_since(released_at);
        assert!(
            wakeup < Duration::from_millis(100),
            "{name}: the waiter took {wakeup:?} after the release"
        );
        wakeups.push(wakeup);

        let started = Instant::now();
        let err = lock
            .try_lock_for(Duration::from_millis(300))
            .await
            .unwrap_err();
        assert!(err.is_timeout(), "{name}: {err}");
        assert!(started.elapsed() >= Duration::from_millis(300), "{name}");

        assert!(lock.force_unlock().await.unwrap(), "{name}");
        assert!(!lock.is_locked().await.unwrap(), "{name}");
        assert_eq!(lock.remaining_lease().await.unwrap(), None, "{name}");
        let err = held_by_b.unlock().await.unwrap_err();
        assert!(err.is_not_held(), "{name}: {err}");

        let leased = lock.lock_with_lease(Duration::from_secs(5)).await.unwrap();
        let left = lock.remaining_lease().await.unwrap().expect("a TTL");
        assert!(left <= Duration::from_secs(5), "{name}: {left:?}");
        leased.unlock().await.unwrap();
    }

    for name in names {
        wakeups.push(exercise_fair(a, b, name).await);
        exercise_rw(a, b, name).await;
        exercise_semaphore(a, b, name).await;
        exercise_fenced(a, name).await;
    }

    let lock = fast.lock(&names[0]);
    let guard = lock.lock().await.unwrap();
    tokio::time::sleep(Duration::from_millis(2500)).await;
    assert!(!guard.is_lost(), "renewal failed under the ACL user");
    assert!(lock.is_locked().await.unwrap());
    let left = lock.remaining_lease().await.unwrap().expect("a TTL");
    assert!(left <= Duration::from_secs(1), "{left:?}");
    guard.unlock().await.unwrap();
    wakeups
}

/// The fair lock's operations on `name` (with a `fair:` prefix, so that they never meet
/// the plain lock of the same name): a waiter of `b` queued behind `a`'s hold and woken by
/// the release on its client's channel (within 100 ms; returned), `queue_len`, a bounded wait
/// that leaves the queue, force unlock.
async fn exercise_fair(a: &LockClient, b: &LockClient, name: &str) -> Duration {
    let name = format!("fair:{name}");
    let lock = a.fair_lock(&name);
    let guard = lock.lock().await.unwrap_or_else(|e| panic!("{name}: {e}"));
    let waiting = b.fair_lock(&name);
    let waiter = tokio::spawn(async move {
        let guard = waiting.lock().await;
        (guard, Instant::now())
    });
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert_eq!(lock.queue_len().await.unwrap(), 1, "{name}");
    let released_at = Instant::now();
    guard.unlock().await.unwrap();
    let (held_by_b, acquired_at) = waiter.await.unwrap();
    let held_by_b = held_by_b.unwrap_or_else(|e| panic!("{name}: fair waiter: {e}"));
    let wakeup = acquired_at.saturating_duration_since(released_at);
    assert!(
        wakeup < Duration::from_millis(100),
        "{name}: the fair waiter took {wakeup:?} after the release"
    );
    let err = lock
        .try_lock_for(Duration::from_millis(300))
        .await
        .unwrap_err();
    assert!(err.is_timeout(), "{name}: {err}");
    assert_eq!(lock.queue_len().await.unwrap(), 0, "{name}: left its entry");
    assert!(lock.force_unlock().await.unwrap(), "{name}");
    assert!(
        held_by_b.unlock().await.unwrap_err().is_not_held(),
        "{name}"
    );
    wakeup
}

/// The read-write lock's operations on `name` (prefixed `rw:`): two readers of two
/// clients share, a writer waits behind them (a waiting-writer entry) until its bounded
/// wait runs out, then gets in; a read inside the write's scope (a downgrade).
async fn exercise_rw(a: &LockClient, b: &LockClient, name: &str) {
    let name = format!("rw:{name}");
    let (rw_a, rw_b) = (a.rw_lock(&name), b.rw_lock(&name));
    let read_a = rw_a
        .read()
        .lock()
        .await
        .unwrap_or_else(|e| panic!("{name}: {e}"));
    let read_b = rw_b.read().try_lock().await.unwrap();
    let err = rw_b
        .write()
        .try_lock_for(Duration::from_millis(300))
        .await
        .unwrap_err();
    assert!(err.is_timeout(), "{name}: {err}");
    read_a.unlock().await.unwrap();
    read_b.unlock().await.unwrap();
    let write = rw_a.write().lock().await.unwrap();
    let downgraded = write.scope(rw_a.read().lock()).await.unwrap();
    write.unlock().await.unwrap();
    // The downgraded read admits another client's reader.
    let other = rw_b
        .read()
        .try_lock()
        .await
        .unwrap_or_else(|e| panic!("{name}: {e}"));
    other.unlock().await.unwrap();
    downgraded.unlock().await.unwrap();
    assert!(!rw_a.is_locked().await.unwrap(), "{name}");
}

/// The semaphore's operations on `name` (prefixed `sem:`): grants of two clients, a
/// 2-permit waiter woken by two releases (pub/sub), the capacity read and changed.
async fn exercise_semaphore(a: &LockClient, b: &LockClient, name: &str) {
    let name = format!("sem:{name}");
    let (sem_a, sem_b) = (a.semaphore(&name, 2), b.semaphore(&name, 2));
    let one = sem_a
        .acquire(1)
        .await
        .unwrap_or_else(|e| panic!("{name}: {e}"));
    let two = sem_b.try_acquire(1).await.unwrap();
    let waiter = tokio::spawn({
        let sem = sem_b.clone();
        async move { sem.try_acquire_for(2, Duration::from_secs(5)).await }
    });
    tokio::time::sleep(Duration::from_millis(100)).await;
    one.unlock().await.unwrap();
    two.unlock().await.unwrap();
    let both = waiter
        .await
        .unwrap()
        .unwrap_or_else(|e| panic!("{name}: {e}"));
    assert!(both.is_held().await.unwrap(), "{name}");
    assert_eq!(both.permits(), 2, "{name}");
    both.unlock().await.unwrap();
    assert_eq!(sem_a.total_permits().await.unwrap(), 2, "{name}");
    sem_a.set_permits(3).await.unwrap();
    assert_eq!(sem_a.available_permits().await.unwrap(), 3, "{name}");
}

/// The fenced writes on the application key `fenced:<name>` (under the prefix, so the
/// application's own `~PREFIX*` pattern covers it): a set, an increment, a refused stale
/// token, the highest token read back.
async fn exercise_fenced(a: &LockClient, name: &str) {
    let key = format!("{}fenced:{name}", a.key_prefix());
    let fenced = a.fenced();
    let fence = dlock::fencing::Fence::new;
    fenced
        .set(&key, "5", fence(2))
        .await
        .unwrap_or_else(|e| panic!("{key}: {e}"));
    assert_eq!(
        fenced.incr_by(&key, -1, fence(2)).await.unwrap(),
        4,
        "{key}"
    );
    assert!(
        matches!(
            fenced.set(&key, "9", fence(1)).await,
            Err(LockError::StaleToken { .. })
        ),
        "{key}"
    );
    assert_eq!(
        fenced.highest_fence(&key).await.unwrap(),
        Some(fence(2)),
        "{key}"
    );
}

/// Every lock operation once, ignoring failures, with short timeouts: for the checks that
/// each command of a rule is needed.
async fn touch_everything(topology: &Topology) -> Vec<String> {
    let connect = || {
        LockClient::builder()
            .key_prefix("shop:")
            .connect_timeout(Duration::from_secs(1))
            .command_timeout(Duration::from_secs(1))
            .failover_wait(Duration::ZERO)
            .max_wait_recheck(Duration::from_millis(100))
            .connect_to(topology)
    };
    let (a, b) = match (connect().await, connect().await) {
        (Ok(a), Ok(b)) => (a, b),
        // The client refused to start, naming what its user may not run.
        (Err(LockError::MissingCommands { missing, .. }), _) => return missing,
        _ => return Vec::new(),
    };
    let lock = a.lock("goods:1");
    let _ = lock.is_locked().await;
    let _ = lock.remaining_lease().await;
    if let Ok(guard) = lock.try_lock().await {
        if let Ok(inner) = guard.scope(lock.try_lock()).await {
            let _ = guard.scope(lock.hold_count()).await;
            let _ = inner.unlock().await;
        }
        let waiting = b.lock("goods:1");
        let waiter =
            tokio::spawn(async move { waiting.try_lock_for(Duration::from_millis(500)).await });
        tokio::time::sleep(Duration::from_millis(100)).await;
        let _ = guard.unlock().await;
        if let Ok(Ok(guard)) = waiter.await {
            let _ = guard.unlock().await;
        }
    }
    if let Ok(guard) = b.lock("goods:2").try_lock().await {
        let _ = a.lock("goods:2").force_unlock().await;
        drop(guard);
    }
    // The fair lock: a queued waiter (ZADD, ZSCORE), woken on its client's channel, the queue
    // length (ZCOUNT).
    let fair = a.fair_lock("queue:1");
    if let Ok(guard) = fair.try_lock().await {
        let waiting = b.fair_lock("queue:1");
        let waiter =
            tokio::spawn(async move { waiting.try_lock_for(Duration::from_millis(500)).await });
        tokio::time::sleep(Duration::from_millis(100)).await;
        let _ = fair.queue_len().await;
        let _ = guard.unlock().await;
        if let Ok(Ok(guard)) = waiter.await {
            let _ = guard.unlock().await;
        }
    }
    // The read-write lock: a writer waiting behind a reader (its entry), giving up.
    let rw = a.rw_lock("catalog:1");
    if let Ok(read) = rw.read().try_lock().await {
        let _ = b
            .rw_lock("catalog:1")
            .write()
            .try_lock_for(Duration::from_millis(200))
            .await;
        let _ = read.unlock().await;
    }
    // The semaphore: a grant, a waiter short of permits, the capacity and its change.
    let sem = a.semaphore("slots:1", 1);
    if let Ok(guard) = sem.try_acquire(1).await {
        let _ = b
            .semaphore("slots:1", 1)
            .try_acquire_for(1, Duration::from_millis(200))
            .await;
        let _ = sem.available_permits().await;
        let _ = sem.total_permits().await;
        let _ = guard.unlock().await;
        let _ = sem.set_permits(2).await;
    }
    // The fenced writes: a set, an increment (INCRBY and its memo), the highest token.
    let fenced = a.fenced();
    let _ = fenced
        .set("shop:fenced:1", "5", dlock::fencing::Fence::new(1))
        .await;
    let _ = fenced
        .incr_by("shop:fenced:1", 1, dlock::fencing::Fence::new(1))
        .await;
    let _ = fenced.highest_fence("shop:fenced:1").await;
    // Let the unsubscribe and background releases reach Redis.
    tokio::time::sleep(Duration::from_millis(100)).await;
    Vec::new()
}

/// Whether `user` was refused `command` (`+name` as in a rule): the client refused to
/// start naming it (`named`, from [`touch_everything`]), or `admin`'s ACL LOG shows the
/// refusal (a command the client sends itself, which it does not ask about).
fn refused(admin: &mut redis::Connection, user: &str, command: &str, named: &[String]) -> bool {
    let name = command.trim_start_matches('+');
    named.iter().any(|missing| missing == name)
        || acl_denials(admin)
            .iter()
            .any(|d| d.starts_with(&format!("{user} command {name} ")))
}

/// The rule `mode` for prefix `shop:` without `command`, for user `without-<command>`.
fn rule_without(mode: Mode, command: &str) -> (String, Vec<String>) {
    let user = format!(
        "without-{}",
        command.trim_start_matches('+').replace('|', "-")
    );
    let rule = acl_rule(mode, "shop:")
        .into_iter()
        .filter(|token| token != command)
        .collect();
    (user, rule)
}

/// `holder` takes `name`, `waiter` waits for it; returns how long after the release the
/// waiter had it.
async fn handoff(holder: &LockClient, waiter: &LockClient, name: &str) -> Duration {
    let guard = holder.lock(name).lock().await.unwrap();
    let waiting = waiter.lock(name);
    let waiter = tokio::spawn(async move {
        let guard = waiting.lock().await;
        (guard, Instant::now())
    });
    tokio::time::sleep(Duration::from_millis(200)).await;
    let released_at = Instant::now();
    guard.unlock().await.unwrap();
    let (guard, acquired_at) = waiter.await.unwrap();
    guard.unwrap().unlock().await.unwrap();
    acquired_at.saturating_duration_since(released_at)
}

const ACL_PASSWORD: &str = "acl-user-pw-5d1e";
const WRONG_PASSWORD: &str = "wrong-pw-0c47";
const A_PASSWORD: &str = "app-a-pw-61c0";
const B_PASSWORD: &str = "app-b-pw-e94d";
const LEAK_PASSWORD: &str = "leak-canary-7f3a9e";
const LEAK_WRONG_PASSWORD: &str = "leak-canary-wrong-2b8d";
/// Every password this file uses: none may show in a log line, `Debug` output or error.
const PASSWORDS: &[&str] = &[
    ACL_PASSWORD,
    WRONG_PASSWORD,
    A_PASSWORD,
    B_PASSWORD,
    LEAK_PASSWORD,
    LEAK_WRONG_PASSWORD,
];

/// Panics, quoting the line, if any of `texts` contains a password of [`PASSWORDS`].
fn assert_no_password_in(texts: &[&str]) {
    for text in texts {
        for password in PASSWORDS {
            if let Some(at) = text.find(password) {
                let start = text[..at].rfind('\n').map_or(0, |n| n + 1);
                let line = text[start..].lines().next().unwrap_or("");
                panic!("password {password:?} shows in: {line}");
            }
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_single_rule_is_enough_for_every_lock_operation() {
    capture_logs(tracing::Level::TRACE);
    let (server, mut admin) = server_with_shop_user();
    let url = with_credentials(&server.url(), "dlock", ACL_PASSWORD);
    let clients = app_clients(&Topology::single(url), "shop:").await;

    let wakeups = exercise(
        &clients,
        &["goods:1".to_owned(), "{order:7}:line:1".to_owned()],
    )
    .await;

    // With the script cache flushed, NOSCRIPT makes the client reload with SCRIPT LOAD.
    redis::cmd("SCRIPT")
        .arg("FLUSH")
        .query::<()>(&mut admin)
        .unwrap();
    let guard = clients[0].lock("goods:2").lock().await.unwrap();
    guard.unlock().await.unwrap();

    assert_eq!(acl_denials(&mut admin), Vec::<String>::new());
    eprintln!("single: wake-ups under the ACL user {wakeups:?}");
}

/// Loads dlock's function library into `topology` with the admin's rights.
async fn load_library(topology: &Topology) {
    let name = LockClient::builder()
        .load_functions(topology)
        .await
        .unwrap();
    assert_eq!(name, FunctionLibrary::current().name());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_function_rule_is_enough_for_every_lock_operation() {
    capture_logs(tracing::Level::TRACE);
    let (server, mut admin) = server_with_function_user().await;
    redis::cmd("CONFIG")
        .arg("RESETSTAT")
        .query::<()>(&mut admin)
        .unwrap();
    let topology = Topology::single(with_credentials(&server.url(), "dlock", ACL_PASSWORD));
    let [a, b, fast] = app_clients(&topology, "shop:").await;
    // Told to use functions, the client checks for the library when it connects.
    let told = LockClient::builder()
        .key_prefix("shop:")
        .script_mode(ScriptMode::Functions)
        .connect_to(&topology)
        .await
        .unwrap();

    let mut wakeups = exercise(&[a.clone(), told.clone(), fast], &["goods:1".to_owned()]).await;
    wakeups.push(exercise_fair(&a, &b, "1").await);
    exercise_rw(&told, &b, "1").await;
    exercise_semaphore(&a, &told, "1").await;
    exercise_fenced(&told, "1").await;
    let pair = MultiLock::same_slot(&a, ["{t}:1", "{t}:2"]).unwrap();
    pair.lock().await.unwrap().unlock().await.unwrap();

    assert_eq!(acl_denials(&mut admin), Vec::<String>::new());
    let calls = dlock_tests::commandstats::command_calls(&mut admin);
    let count = |command: &str| calls.get(command).copied().unwrap_or(0);
    let (fcall, evalsha, script) = (count("fcall"), count("evalsha"), count("script|load"));
    assert!(fcall > 50, "{fcall} FCALLs");
    assert_eq!((evalsha, script), (0, 0), "EVALSHA and SCRIPT LOAD calls");
    eprintln!("functions: {fcall} FCALLs, wake-ups under the ACL user {wakeups:?}");
}

/// The least-privilege rule of the script mode lets its user stall the server for every
/// client: it may load a script (`SCRIPT LOAD`) and run it (`EVALSHA`), and a script that
/// never ends answers everyone else `BUSY`. The function rule refuses every way of
/// loading or running code of the user's own.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_function_rule_lets_no_user_script_stall_the_server() {
    let server = RedisServer::start();
    let mut admin = server.connection();
    redis::cmd("CONFIG")
        .arg("SET")
        .arg("busy-reply-threshold")
        .arg(100)
        .query::<()>(&mut admin)
        .unwrap();
    set_user(
        &mut admin,
        "scripts",
        ACL_PASSWORD,
        &acl_rule(Mode::Single, "shop:"),
    );
    set_user(
        &mut admin,
        "functions",
        ACL_PASSWORD,
        &functions_rule(Mode::Single, "shop:"),
    );
    let user = |name: &str| connection(&with_credentials(&server.url(), name, ACL_PASSWORD));
    const ENDLESS: &str = "while true do end";

    // The control: the script-mode user loads an endless script and runs it.
    let mut scripts = user("scripts");
    let sha: String = redis::cmd("SCRIPT")
        .arg("LOAD")
        .arg(ENDLESS)
        .query(&mut scripts)
        .unwrap();
    let running = std::thread::spawn(move || {
        redis::cmd("EVALSHA")
            .arg(&sha)
            .arg(0)
            .query::<redis::Value>(&mut scripts)
            .unwrap_err()
    });
    std::thread::sleep(Duration::from_millis(400));
    let busy = redis::cmd("PING").query::<String>(&mut admin).unwrap_err();
    assert_eq!(busy.code(), Some("BUSY"), "{busy}");
    redis::cmd("SCRIPT")
        .arg("KILL")
        .query::<()>(&mut admin)
        .unwrap();
    let killed = running.join().unwrap();
    eprintln!("script mode: the admin's PING got {busy}; the script ended with {killed}");

    // The function-mode user can load and run nothing of its own.
    let sha = redis::Script::new(ENDLESS).get_hash().to_owned();
    let library =
        format!("#!lua name=stall\nredis.register_function('stall', function() {ENDLESS} end)");
    let mut functions = user("functions");
    let attempts = [
        (
            "SCRIPT LOAD",
            redis::cmd("SCRIPT").arg("LOAD").arg(ENDLESS).clone(),
        ),
        ("EVALSHA", redis::cmd("EVALSHA").arg(&sha).arg(0).clone()),
        ("EVAL", redis::cmd("EVAL").arg(ENDLESS).arg(0).clone()),
        ("EVAL_RO", redis::cmd("EVAL_RO").arg(ENDLESS).arg(0).clone()),
        (
            "FUNCTION LOAD",
            redis::cmd("FUNCTION").arg("LOAD").arg(&library).clone(),
        ),
        (
            "FUNCTION DELETE",
            redis::cmd("FUNCTION")
                .arg("DELETE")
                .arg(FunctionLibrary::current().name())
                .clone(),
        ),
        (
            "FUNCTION FLUSH",
            redis::cmd("FUNCTION").arg("FLUSH").clone(),
        ),
        (
            "FUNCTION RESTORE",
            redis::cmd("FUNCTION").arg("RESTORE").arg("x").clone(),
        ),
        ("SCRIPT FLUSH", redis::cmd("SCRIPT").arg("FLUSH").clone()),
        ("SCRIPT KILL", redis::cmd("SCRIPT").arg("KILL").clone()),
    ];
    for (what, cmd) in &attempts {
        let error = cmd.query::<redis::Value>(&mut functions).unwrap_err();
        assert_eq!(error.code(), Some("NOPERM"), "{what}: {error}");
    }
    // Nor through dlock's own set-up step.
    let refused = LockClient::builder()
        .load_functions(&Topology::single(with_credentials(
            &server.url(),
            "functions",
            ACL_PASSWORD,
        )))
        .await
        .unwrap_err();
    assert!(
        refused
            .to_string()
            .contains("no permissions to run the 'function|load'"),
        "{refused}"
    );
    assert_eq!(
        redis::cmd("PING").query::<String>(&mut admin).unwrap(),
        "PONG"
    );
    eprintln!(
        "function mode: all {} attempts refused with NOPERM",
        attempts.len()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_missing_or_older_function_library_is_a_clear_error_at_connect() {
    let server = RedisServer::start();
    let mut admin = server.connection();
    set_user(
        &mut admin,
        "functions",
        ACL_PASSWORD,
        &functions_rule(Mode::Single, "shop:"),
    );
    let current = FunctionLibrary::current().name();
    let connect = |url: String, mode: ScriptMode| async move {
        LockClient::builder()
            .key_prefix("shop:")
            .script_mode(mode)
            .connect(&url)
            .await
    };
    let missing = |error: LockError, why: &str| match &error {
        LockError::FunctionLibraryMissing { library, .. } => {
            assert_eq!(library, current);
            let message = error.to_string();
            assert!(message.contains(why), "{message}");
            assert!(message.contains("load_functions"), "{message}");
            message
        }
        other => panic!("not a missing library: {other:?}"),
    };

    // Nothing loaded: a client told to use functions stops at connect.
    let error = connect(server.url(), ScriptMode::Functions)
        .await
        .unwrap_err();
    let nothing = missing(error, "Function not found");
    // An older dlock's library is there (another version, so other function names).
    let older = "dlock_0123456789abcdef";
    let library = format!(
        "#!lua name={older}\nredis.register_function{{function_name='{older}_library', callback=function() return '{older}' end, flags={{'no-writes'}}}}"
    );
    redis::cmd("FUNCTION")
        .arg("LOAD")
        .arg(&library)
        .query::<String>(&mut admin)
        .unwrap();
    let error = connect(server.url(), ScriptMode::Functions)
        .await
        .unwrap_err();
    let old = missing(error, "Function not found");
    // A user that may not load scripts either: the automatic mode has no way left.
    let user_url = with_credentials(&server.url(), "functions", ACL_PASSWORD);
    let error = connect(user_url.clone(), ScriptMode::Auto)
        .await
        .unwrap_err();
    let neither = missing(error, "may not load scripts either");
    assert!(!neither.contains(ACL_PASSWORD), "{neither}");

    // A script-mode user without `+fcall`: the automatic mode takes scripts; told to use
    // functions, the client says which command it may not run.
    let (user, rule) = rule_without(Mode::Single, "+fcall");
    set_user(&mut admin, &user, ACL_PASSWORD, &rule);
    let no_fcall = with_credentials(&server.url(), &user, ACL_PASSWORD);
    let client = connect(no_fcall.clone(), ScriptMode::Auto).await.unwrap();
    client
        .lock("goods:1")
        .lock()
        .await
        .unwrap()
        .unlock()
        .await
        .unwrap();
    let error = connect(no_fcall, ScriptMode::Functions).await.unwrap_err();
    assert!(
        is_noperm(&error) && error.to_string().contains("'fcall' command"),
        "{error:?}"
    );

    // Once the current library is loaded, the same user connects and locks.
    load_library(&Topology::single(server.url())).await;
    let client = connect(user_url, ScriptMode::Functions).await.unwrap();
    client
        .lock("goods:1")
        .lock()
        .await
        .unwrap()
        .unlock()
        .await
        .unwrap();
    // Both versions stay loaded side by side, for a rolling upgrade.
    let libraries: Vec<HashMap<String, redis::Value>> = redis::cmd("FUNCTION")
        .arg("LIST")
        .query(&mut admin)
        .unwrap();
    assert_eq!(libraries.len(), 2, "{libraries:?}");
    eprintln!("no library: {nothing}\nolder library: {old}\nuser without SCRIPT LOAD: {neither}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_single_rule_refuses_everything_else() {
    capture_logs(tracing::Level::TRACE);
    let (server, mut admin) = server_with_shop_user();
    let url = with_credentials(&server.url(), "dlock", ACL_PASSWORD);
    redis::cmd("SET")
        .arg("other:goods:1")
        .arg("x")
        .query::<()>(&mut admin)
        .unwrap();

    let mut user = redis::Client::open(url.as_str())
        .unwrap()
        .get_connection()
        .unwrap();
    let refused = [
        (
            "GET outside the prefix",
            redis::cmd("GET").arg("other:goods:1").clone(),
        ),
        (
            "DEL outside the prefix",
            redis::cmd("DEL").arg("other:goods:1").clone(),
        ),
        ("FLUSHALL", redis::cmd("FLUSHALL")),
        (
            "CONFIG GET *",
            redis::cmd("CONFIG").arg("GET").arg("*").clone(),
        ),
        ("KEYS *", redis::cmd("KEYS").arg("*").clone()),
        ("SCAN", redis::cmd("SCAN").arg(0).clone()),
        ("EVAL", redis::cmd("EVAL").arg("return 1").arg(0).clone()),
        ("SCRIPT FLUSH", redis::cmd("SCRIPT").arg("FLUSH").clone()),
        (
            "PUBLISH on another application's channel",
            redis::cmd("PUBLISH")
                .arg("dlock:unlock:other:{x}:goods:1")
                .arg("unlocked")
                .clone(),
        ),
    ];
    for (what, cmd) in &refused {
        let err = cmd.query::<redis::Value>(&mut user).unwrap_err();
        assert_eq!(err.code(), Some("NOPERM"), "{what}: {err}");
    }

    // A client whose key prefix is not the rule's cannot start: the layout version of its
    // prefix is out of reach, and it says so at once.
    for prefix in ["", "other:"] {
        let started = Instant::now();
        let err = LockClient::builder()
            .key_prefix(prefix)
            .connect(&url)
            .await
            .unwrap_err();
        assert!(is_noperm(&err), "prefix {prefix:?}: {err:?}");
        assert!(
            err.to_string().contains(&format!("dlock:layout:{prefix}")),
            "prefix {prefix:?}: {err}"
        );
        assert!(started.elapsed() < Duration::from_secs(1));
    }

    // Given the layout key alone, such a client refuses to start, naming the commands its
    // user may not run on its keys; built without that check, it starts, and each of its
    // lock operations gets a clear error at once.
    for prefix in ["", "other:"] {
        redis::cmd("ACL")
            .arg("SETUSER")
            .arg("dlock")
            .arg(format!("~dlock:layout:{prefix}"))
            .query::<()>(&mut admin)
            .unwrap();
        let refused = LockClient::builder()
            .key_prefix(prefix)
            .connect(&url)
            .await
            .unwrap_err();
        assert!(
            refused
                .to_string()
                .contains("may not run del, exists, get, hdel"),
            "{refused}"
        );
        let outsider = LockClient::builder()
            .key_prefix(prefix)
            .check_permissions(false)
            .connect(&url)
            .await
            .expect("connecting needs only the layout key");
        let lock = outsider.lock("goods:1");
        let started = Instant::now();
        let err = tokio::time::timeout(Duration::from_secs(5), lock.lock())
            .await
            .expect("a refused acquire must not hang")
            .unwrap_err();
        assert!(is_noperm(&err), "prefix {prefix:?}: {err:?}");
        // The server's own words follow (Redis: "this user has no permissions to access
        // one of the keys used as arguments"; Valkey: "No permissions to access a key").
        let shown = err.to_string();
        assert!(
            shown.starts_with("Redis failed while trying to acquire lock \"goods:1\": NoPerm: ")
                && shown.to_lowercase().contains("no permissions to access"),
            "{shown}"
        );
        assert!(
            started.elapsed() < Duration::from_secs(1),
            "{:?}",
            started.elapsed()
        );
        for err in [
            lock.try_lock().await.unwrap_err(),
            lock.try_lock_for(Duration::from_secs(2)).await.unwrap_err(),
            lock.is_locked().await.unwrap_err(),
            lock.remaining_lease().await.unwrap_err(),
            lock.force_unlock().await.unwrap_err(),
        ] {
            assert!(is_noperm(&err), "prefix {prefix:?}: {err:?}");
        }
        assert!(
            started.elapsed() < Duration::from_secs(1),
            "{:?}",
            started.elapsed()
        );
    }

    // What the rule cannot prevent: with these credentials, anyone can delete a held lock.
    let holder = LockClient::builder()
        .key_prefix("shop:")
        .connect(&url)
        .await
        .unwrap();
    let _guard = holder.lock("goods:1").lock().await.unwrap();
    let deleted: i64 = redis::cmd("DEL")
        .arg("shop:goods:1")
        .query(&mut user)
        .unwrap();
    assert_eq!(deleted, 1);
    assert!(!holder.lock("goods:1").is_locked().await.unwrap());

    let denials = acl_denials(&mut admin);
    for expected in [
        "flushall",
        "config|get",
        "keys",
        "scan",
        "eval",
        "script|flush",
    ] {
        assert!(
            denials
                .iter()
                .any(|d| d.contains(&format!("command {expected} "))),
            "{expected} missing from {denials:#?}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_command_of_the_single_rule_is_needed() {
    capture_logs(tracing::Level::TRACE);
    let server = RedisServer::start();
    let mut admin = server.connection();
    let started = Instant::now();
    for command in COMMON_COMMANDS.iter().chain(Mode::Single.extra_commands()) {
        let (user, rule) = rule_without(Mode::Single, command);
        set_user(&mut admin, &user, ACL_PASSWORD, &rule);
        let url = with_credentials(&server.url(), &user, ACL_PASSWORD);
        let named = touch_everything(&Topology::single(url)).await;
        assert!(
            refused(&mut admin, &user, command, &named),
            "nothing needed {command}: {:#?}",
            acl_denials(&mut admin)
        );
        redis::cmd("FLUSHALL").query::<()>(&mut admin).unwrap();
    }
    eprintln!(
        "single: each of the {} commands is needed ({:?})",
        COMMON_COMMANDS.len() + Mode::Single.extra_commands().len(),
        started.elapsed()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn master_slave_mode_needs_only_the_single_rule() {
    capture_logs(tracing::Level::TRACE);
    let set = RedisReplicaSet::start(1);
    let mut admins: Vec<redis::Connection> = std::iter::once(set.master_url())
        .chain(set.replica_urls())
        .map(|url| connection(&url))
        .collect();
    for admin in &mut admins {
        set_user(
            admin,
            "dlock",
            ACL_PASSWORD,
            &acl_rule(Mode::Single, "shop:"),
        );
    }
    let topology = Topology::master_replicas(set.master_url(), set.replica_urls())
        .credentials(Some("dlock".to_owned()), Some(ACL_PASSWORD.to_owned()));
    let clients = app_clients(&topology, "shop:").await;
    let wakeups = exercise(&clients, &["goods:1".to_owned()]).await;
    for admin in &mut admins {
        assert_eq!(acl_denials(admin), Vec::<String>::new());
    }
    eprintln!("master_slave: wake-ups under the ACL user {wakeups:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sentinel_mode_needs_only_the_single_rule() {
    capture_logs(tracing::Level::TRACE);
    let group = RedisSentinelGroup::start();
    let mut admins: Vec<redis::Connection> = group
        .servers()
        .iter()
        .map(RedisServer::connection)
        .collect();
    let topology = Topology::sentinel(group.master_name(), group.sentinel_urls())
        .credentials(Some("dlock".to_owned()), Some(ACL_PASSWORD.to_owned()));

    // The data nodes need nothing more than a single server: the master is found by
    // asking the sentinels, not checked with ROLE. (The sentinels are reached as their
    // URLs say, here without credentials.)
    for admin in &mut admins {
        set_user(
            admin,
            "dlock",
            ACL_PASSWORD,
            &acl_rule(Mode::Single, "shop:"),
        );
    }
    let clients = app_clients(&topology, "shop:").await;
    let mut wakeups = exercise(&clients, &["goods:1".to_owned()]).await;

    // After a failover the clients follow the new master as the same user.
    let started = Instant::now();
    group.failover();
    wakeups.push(handoff(&clients[0], &clients[1], "goods:2").await);
    eprintln!(
        "sentinel: failover and hand-off on the new master in {:?}",
        started.elapsed()
    );
    // The role changes closed the admin connections.
    for server in group.servers() {
        assert_eq!(acl_denials(&mut server.connection()), Vec::<String>::new());
    }
    eprintln!("sentinel: wake-ups under the ACL user {wakeups:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cluster_mode_needs_sharded_pubsub_and_the_slot_map() {
    capture_logs(tracing::Level::TRACE);
    let cluster = RedisCluster::start();
    let mut admins: Vec<redis::Connection> = cluster
        .nodes()
        .iter()
        .map(RedisServer::connection)
        .collect();
    let topology = Topology::cluster(cluster.node_urls())
        .credentials(Some("dlock".to_owned()), Some(ACL_PASSWORD.to_owned()));

    // A wrong password: a clear error, and no password in it or in redis-rs' log.
    let wrong = Topology::cluster(cluster.node_urls())
        .credentials(Some("dlock".to_owned()), Some(WRONG_PASSWORD.to_owned()));
    let err = LockClient::builder()
        .connect_timeout(Duration::from_secs(2))
        .connect_to(&wrong)
        .await
        .unwrap_err();
    eprintln!("cluster, wrong password: {err}");
    assert!(
        matches!(&err, LockError::Connect { .. })
            && err
                .to_string()
                .contains("\"WRONGPASS\": invalid username-password pair"),
        "{err:?}"
    );
    assert_no_password_in(&[&err.to_string(), &format!("{err:?}"), &captured()]);

    // The single rule is not enough: the client reads the slot map first.
    for admin in &mut admins {
        set_user(
            admin,
            "dlock",
            ACL_PASSWORD,
            &acl_rule(Mode::Single, "shop:"),
        );
    }
    let err = LockClient::builder()
        .connect_timeout(Duration::from_secs(2))
        .connect_to(&topology)
        .await
        .unwrap_err();
    assert!(is_noperm(&err), "{err:?}");
    assert!(err.to_string().contains("'cluster|slots' command"), "{err}");

    for admin in &mut admins {
        set_user(
            admin,
            "dlock",
            ACL_PASSWORD,
            &acl_rule(Mode::Cluster, "shop:"),
        );
        redis::cmd("ACL")
            .arg("LOG")
            .arg("RESET")
            .query::<()>(admin)
            .unwrap();
    }
    let names = one_name_per_master(&cluster);
    let clients = app_clients(&topology, "shop:").await;
    let mut wakeups = exercise(&clients, &names).await;

    // After a failover of the first name's slot, the slot map is read again and the
    // sharded subscription re-established on the new master, as the same user.
    let started = Instant::now();
    cluster.failover_slot(cluster.key_slot(&format!("shop:{}", names[0])));
    wakeups.push(handoff(&clients[0], &clients[1], &names[0]).await);
    eprintln!(
        "cluster: failover and hand-off on the new master in {:?}",
        started.elapsed()
    );
    for admin in &mut admins {
        assert_eq!(acl_denials(admin), Vec::<String>::new());
    }
    eprintln!("cluster: wake-ups under the ACL user on {names:?}: {wakeups:?}");

    // Each command the cluster adds is needed.
    for command in Mode::Cluster.extra_commands() {
        let (user, rule) = rule_without(Mode::Cluster, command);
        for admin in &mut admins {
            set_user(admin, &user, ACL_PASSWORD, &rule);
        }
        let topology = Topology::cluster(cluster.node_urls())
            .credentials(Some(user.clone()), Some(ACL_PASSWORD.to_owned()));
        let named = touch_everything(&topology).await;
        assert!(
            admins
                .iter_mut()
                .any(|admin| refused(admin, &user, command, &named)),
            "nothing needed {command}"
        );
    }
    assert_no_password_in(&[&captured()]);
}

/// Three lock names (`goods:<i>`, under the prefix `shop:`), one on each master of
/// `cluster`.
fn one_name_per_master(cluster: &RedisCluster) -> Vec<String> {
    let mut masters = HashSet::new();
    (0..)
        .map(|i| format!("goods:{i}"))
        .filter(|name| {
            masters.insert(cluster.slot_owner_port(cluster.key_slot(&format!("shop:{name}"))))
        })
        .take(3)
        .collect()
}

/// Whether `admin`'s server has this version's function library, waiting up to 5 s for
/// it: a replica gets it by replication, after the master.
fn has_library(admin: &mut redis::Connection) -> bool {
    let started = Instant::now();
    loop {
        let libraries: Vec<HashMap<String, redis::Value>> = redis::cmd("FUNCTION")
            .arg("LIST")
            .arg("LIBRARYNAME")
            .arg(FunctionLibrary::current().name())
            .query(admin)
            .unwrap();
        if libraries.len() == 1 {
            return true;
        }
        if started.elapsed() > Duration::from_secs(5) {
            return false;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Function-mode clients of a Sentinel deployment and of a cluster: the library, loaded
/// once through the administrator's topology, is on every data node (replicas included,
/// by replication), and after a failover the promoted replica runs it for the same user.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_function_rule_works_on_sentinel_and_cluster_through_a_failover() {
    let functions_client = |topology: Topology| async move {
        let connect = |watchdog: Duration| {
            LockClient::builder()
                .key_prefix("shop:")
                .watchdog_timeout(watchdog)
                .script_mode(ScriptMode::Functions)
                .connect_to(&topology)
        };
        [
            connect(Duration::from_secs(30)).await.unwrap(),
            connect(Duration::from_secs(30)).await.unwrap(),
            connect(Duration::from_secs(1)).await.unwrap(),
        ]
    };

    let group = RedisSentinelGroup::start();
    load_library(&Topology::sentinel(
        group.master_name(),
        group.sentinel_urls(),
    ))
    .await;
    for server in group.servers() {
        let mut admin = server.connection();
        assert!(has_library(&mut admin), "replicated to every data node");
        set_user(
            &mut admin,
            "dlock",
            ACL_PASSWORD,
            &functions_rule(Mode::Single, "shop:"),
        );
    }
    let topology = Topology::sentinel(group.master_name(), group.sentinel_urls())
        .credentials(Some("dlock".to_owned()), Some(ACL_PASSWORD.to_owned()));
    let clients = functions_client(topology).await;
    let mut wakeups = exercise(&clients, &["goods:1".to_owned()]).await;
    group.failover();
    wakeups.push(handoff(&clients[0], &clients[1], "goods:2").await);
    for server in group.servers() {
        assert_eq!(acl_denials(&mut server.connection()), Vec::<String>::new());
    }
    eprintln!("sentinel, function mode: wake-ups {wakeups:?}, the last after a failover");
    drop(clients);
    drop(group);

    let cluster = RedisCluster::start();
    load_library(&Topology::cluster(cluster.node_urls())).await;
    let mut admins: Vec<redis::Connection> = cluster
        .nodes()
        .iter()
        .map(RedisServer::connection)
        .collect();
    for admin in &mut admins {
        assert!(has_library(admin), "on every master and replica");
        set_user(
            admin,
            "dlock",
            ACL_PASSWORD,
            &functions_rule(Mode::Cluster, "shop:"),
        );
    }
    let topology = Topology::cluster(cluster.node_urls())
        .credentials(Some("dlock".to_owned()), Some(ACL_PASSWORD.to_owned()));
    let clients = functions_client(topology).await;
    let names = one_name_per_master(&cluster);
    let mut wakeups = exercise(&clients, &names).await;
    cluster.failover_slot(cluster.key_slot(&format!("shop:{}", names[0])));
    wakeups.push(handoff(&clients[0], &clients[1], &names[0]).await);
    for admin in &mut admins {
        assert_eq!(acl_denials(admin), Vec::<String>::new());
    }
    eprintln!("cluster, function mode: wake-ups {wakeups:?}, the last after a failover");
}

/// A user without the channel permission: SUBSCRIBE is refused. Waiters fall back to
/// polling every `max_wait_recheck`, which is fine, but the subscriber must not retry
/// the refused subscription in a tight loop of new connections.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refused_subscribe_is_retried_with_back_off() {
    capture_logs(tracing::Level::TRACE);
    let server = RedisServer::start();
    let mut admin = server.connection();
    let rule: Vec<String> = acl_rule(Mode::Single, "shop:")
        .into_iter()
        .filter(|token| !token.starts_with('&'))
        .collect();
    set_user(&mut admin, "dlock", ACL_PASSWORD, &rule);
    let url = with_credentials(&server.url(), "dlock", ACL_PASSWORD);
    // Such a client refuses to start by default: its scripts could not tell a waiter.
    let refused = LockClient::builder()
        .key_prefix("shop:")
        .connect(&url)
        .await
        .unwrap_err();
    assert!(
        matches!(&refused, LockError::MissingCommands { missing, .. } if missing == &["publish"]),
        "{refused:?}"
    );
    let unchecked = || {
        LockClient::builder()
            .key_prefix("shop:")
            .check_permissions(false)
            .connect(&url)
    };
    let holder = unchecked().await.unwrap();
    let waiter = unchecked().await.unwrap();
    let _guard = holder.lock("goods:1").lock().await.unwrap();
    let err = waiter
        .lock("goods:1")
        .try_lock_for(Duration::from_secs(2))
        .await
        .unwrap_err();
    assert!(err.is_timeout(), "{err}");
    let denials: Vec<String> = acl_denials(&mut admin);
    // Only the subscriber's refusals: the channel, for user dlock.
    let attempts: u64 = denials
        .iter()
        .filter(|d| d.starts_with("dlock channel "))
        .filter_map(|d| {
            d.split(", ")
                .nth(1)?
                .strip_suffix("x)")?
                .parse::<u64>()
                .ok()
        })
        .sum();
    eprintln!("refused SUBSCRIBE attempts in 2 s: {attempts} ({denials:?})");
    // Else the back-off bound below holds for a subscription that was never refused.
    assert!(
        attempts >= 1,
        "no refused SUBSCRIBE in the ACL LOG: {denials:?}"
    );
    assert!(attempts <= 20, "{attempts} refused subscriptions in 2 s");
}

/// `+client|setname` and `~dlock:client:PREFIX*` only serve operators: a user without
/// them locks as well (the refusals only show in `ACL LOG`), and with them the client is
/// named and described.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_user_without_the_naming_rights_still_locks() {
    capture_logs(tracing::Level::TRACE);
    let (server, mut admin) = server_with_shop_user();
    let rule: Vec<String> = acl_rule(Mode::Single, "shop:")
        .into_iter()
        .filter(|token| token != "+client|setname" && !token.starts_with("~dlock:client:"))
        .collect();
    set_user(&mut admin, "unnamed", ACL_PASSWORD, &rule);
    let unnamed = connect_as(
        &with_credentials(&server.url(), "unnamed", ACL_PASSWORD),
        "shop:",
    )
    .await;
    let guard = unnamed.lock("goods:1").lock().await.unwrap();
    guard.unlock().await.unwrap();
    let deadline = Instant::now() + Duration::from_secs(5);
    let key_refused = |admin: &mut redis::Connection| {
        acl_denials(admin)
            .iter()
            .any(|d| d.starts_with("unnamed key dlock:client:shop:{"))
    };
    while !(refused(&mut admin, "unnamed", "+client|setname", &[]) && key_refused(&mut admin)) {
        assert!(Instant::now() < deadline, "{:#?}", acl_denials(&mut admin));
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    redis::cmd("ACL")
        .arg("LOG")
        .arg("RESET")
        .query::<()>(&mut admin)
        .unwrap();

    let named = LockClient::builder()
        .key_prefix("shop:")
        .client_name("billing")
        .connect(&with_credentials(&server.url(), "dlock", ACL_PASSWORD))
        .await
        .unwrap();
    let guard = named.lock("goods:1").lock().await.unwrap();
    let key = format!("}}:{}", named.id());
    loop {
        let described: Vec<String> = redis::cmd("KEYS")
            .arg("dlock:client:shop:*")
            .query(&mut admin)
            .unwrap();
        if described.iter().any(|k| k.ends_with(&key)) {
            break;
        }
        assert!(
            Instant::now() < deadline + Duration::from_secs(5),
            "never described"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let list: String = redis::cmd("CLIENT").arg("LIST").query(&mut admin).unwrap();
    assert!(list.contains(" name=billing "), "{list}");
    guard.unlock().await.unwrap();
    assert_eq!(acl_denials(&mut admin), Vec::<String>::new());
}

/// The operator's reads (`Lock::inspect`, `LockClient::list_locks`, `Lock::track`: what
/// `dlock inspect`, `list` and `watch` run) and `force_unlock` under [`operator_rule`],
/// with an empty `ACL LOG`; and each command it adds to the application's rule is needed.
async fn operator_reads(topology: &Topology, admins: &mut [redis::Connection], mode: Mode) {
    let app = LockClient::builder()
        .key_prefix("shop:")
        .client_name("billing")
        .connect_to(topology)
        .await
        .unwrap();
    let guard = app.lock("goods:1").lock().await.unwrap();
    let connect = |user: &str| {
        let topology = topology
            .clone()
            .credentials(Some(user.to_owned()), Some(ACL_PASSWORD.to_owned()));
        async move {
            LockClient::builder()
                .key_prefix("shop:")
                .client_name("dlock-cli")
                .describe_client(false)
                .connect_to(&topology)
                .await
                .unwrap()
        }
    };
    let operator = connect("dlock-operator").await;
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let info = operator.lock("goods:1").inspect().await.unwrap();
        if info.holders[0]
            .owner
            .client
            .as_ref()
            .map(|c| c.name.as_str())
            == Some("billing")
        {
            break;
        }
        assert!(Instant::now() < deadline, "{info:?}");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert_eq!(operator.list_locks("goods:").await.unwrap(), ["goods:1"]);
    let mut tracker = operator.lock("goods:1").track().await.unwrap();
    assert_eq!(tracker.holders().await.unwrap().len(), 1);
    assert!(operator.lock("goods:1").force_unlock().await.unwrap());
    tokio::time::timeout(Duration::from_secs(5), tracker.changed())
        .await
        .expect("no change reported")
        .unwrap();
    for admin in admins.iter_mut() {
        assert_eq!(acl_denials(admin), Vec::<String>::new());
    }
    drop(guard);

    let numsub = operator_rule(mode, "shop:").pop().unwrap();
    for (command, user) in [
        ("+scan", "operator-without-scan"),
        ("+client|tracking", "operator-without-tracking"),
        (numsub.as_str(), "operator-without-numsub"),
    ] {
        let rule: Vec<String> = operator_rule(mode, "shop:")
            .into_iter()
            .filter(|token| token != command)
            .collect();
        for admin in admins.iter_mut() {
            set_user(admin, user, ACL_PASSWORD, &rule);
        }
        let without = connect(user).await;
        let refused = if command == "+scan" {
            without.list_locks("").await.unwrap_err()
        } else if command == "+client|tracking" {
            without.lock("goods:1").track().await.unwrap_err()
        } else {
            without.lock("goods:1").inspect().await.unwrap_err()
        };
        assert!(is_noperm(&refused), "{command}: {refused:?}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_operator_rule_is_enough_for_the_command_line() {
    capture_logs(tracing::Level::TRACE);
    let (server, admin) = server_with_shop_user();
    let mut admins = [admin];
    set_user(
        &mut admins[0],
        "dlock-operator",
        ACL_PASSWORD,
        &operator_rule(Mode::Single, "shop:"),
    );
    let topology = Topology::single(with_credentials(&server.url(), "dlock", ACL_PASSWORD));
    operator_reads(&topology, &mut admins, Mode::Single).await;

    let cluster = RedisCluster::start();
    let mut admins: Vec<redis::Connection> = cluster
        .nodes()
        .iter()
        .map(RedisServer::connection)
        .collect();
    for admin in &mut admins {
        set_user(
            admin,
            "dlock",
            ACL_PASSWORD,
            &acl_rule(Mode::Cluster, "shop:"),
        );
        set_user(
            admin,
            "dlock-operator",
            ACL_PASSWORD,
            &operator_rule(Mode::Cluster, "shop:"),
        );
    }
    let topology = Topology::cluster(cluster.node_urls())
        .credentials(Some("dlock".to_owned()), Some(ACL_PASSWORD.to_owned()));
    operator_reads(&topology, &mut admins, Mode::Cluster).await;
}

/// The inspector's rule is enough for what `dlock inspect` and `watch` (by reading the
/// lock, as it does without tracking) do against an application in function mode (no
/// `ACL LOG` entry), and refuses every write, every script of its own, every dlock
/// function that writes, every read outside the lock state of its prefix, and every way
/// to learn another application's key names: `SCAN`, and `CLIENT TRACKING` (whose
/// `BCAST` mode, tried before the fix, reported another application's key names) (each
/// checked with `ACL DRYRUN`, and for the lock operations through dlock itself). The
/// lister's rule adds `SCAN` for `list`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_read_only_rules_read_lock_state_and_nothing_else() {
    let (server, mut admin) = server_with_function_user().await;
    set_user(
        &mut admin,
        "dlock-inspector",
        ACL_PASSWORD,
        &inspector_rule(Mode::Single, "shop:"),
    );
    set_user(
        &mut admin,
        "dlock-lister",
        ACL_PASSWORD,
        &lister_rule(Mode::Single, "shop:"),
    );
    let as_user =
        |user: &str| Topology::single(with_credentials(&server.url(), user, ACL_PASSWORD));
    let app = LockClient::builder()
        .key_prefix("shop:")
        .client_name("billing")
        .script_mode(ScriptMode::Functions)
        .connect_to(&as_user("dlock"))
        .await
        .unwrap();
    let held = app.lock("goods:1").lock().await.unwrap();
    let permit = app.semaphore("pool", 2).acquire(1).await.unwrap();
    let fenced_write = app.lock("goods:2").lock().await.unwrap();
    let token = fenced_write.fencing_token().unwrap();
    app.fenced().set("shop:stock:2", "7", token).await.unwrap();
    fenced_write.unlock().await.unwrap();

    let reader = LockClient::builder()
        .key_prefix("shop:")
        .client_name("dlock-cli")
        .describe_client(false)
        .check_permissions(false)
        .script_mode(ScriptMode::Functions)
        .connect_to(&as_user("dlock-inspector"))
        .await
        .expect("the read-only operator connects");
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let info = reader.lock("goods:1").inspect().await.unwrap();
        let holder = info.holders[0]
            .owner
            .client
            .as_ref()
            .map(|c| c.name.clone());
        if holder.as_deref() == Some("billing") {
            break;
        }
        assert!(Instant::now() < deadline, "{info:?}");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    reader
        .lock("pool")
        .inspect()
        .await
        .expect("a semaphore is inspected");
    // `watch` reads the lock: its holders, and the release seen by reading again.
    assert_eq!(reader.lock("goods:1").holders().await.unwrap().len(), 1);
    held.unlock().await.unwrap();
    assert_eq!(reader.lock("goods:1").holders().await.unwrap().len(), 0);
    assert_eq!(acl_denials(&mut admin), Vec::<String>::new());
    // The lister lists.
    let lister = LockClient::builder()
        .key_prefix("shop:")
        .client_name("dlock-cli")
        .describe_client(false)
        .check_permissions(false)
        .script_mode(ScriptMode::Functions)
        .connect_to(&as_user("dlock-lister"))
        .await
        .expect("the lister connects");
    let _again = app.lock("goods:1").lock().await.unwrap();
    assert_eq!(lister.list_locks("goods:").await.unwrap(), ["goods:1"]);
    assert_eq!(acl_denials(&mut admin), Vec::<String>::new());

    // The inspector learns no key name it cannot read: it may not list, track, or scan.
    let refused = reader.list_locks("goods:").await.unwrap_err();
    assert!(is_noperm(&refused), "{refused:?}");
    let refused = reader.lock("goods:1").track().await.unwrap_err();
    assert!(is_noperm(&refused), "{refused:?}");

    // Through dlock: every operation that writes is refused.
    let refused = reader.lock("goods:1").try_lock().await.unwrap_err();
    assert!(is_noperm(&refused), "{refused:?}");
    let refused = reader.lock("goods:1").force_unlock().await.unwrap_err();
    assert!(is_noperm(&refused), "{refused:?}");
    let refused = reader
        .semaphore("pool", 2)
        .available_permits()
        .await
        .unwrap_err();
    assert!(is_noperm(&refused), "{refused:?}");
    drop(permit);

    // Command by command.
    let library = FunctionLibrary::current().name();
    let release_memo = "dlock:release:shop:{x}:c:1:1";
    let attempts: Vec<Vec<String>> = [
        vec!["SET", "shop:goods:1", "x"],
        vec!["HSET", "shop:goods:1", "c:1", "1"],
        vec!["DEL", "shop:goods:1"],
        vec!["PEXPIRE", "shop:goods:1", "1"],
        vec!["ZADD", "dlock:fair:shop:{x}:q:queue", "1", "c:1"],
        vec!["INCR", "dlock:fence:shop:{x}"],
        vec!["SET", "dlock:layout:shop:", "9"],
        vec!["PUBLISH", "dlock:unlock:shop:{x}:goods:1", "pass:c:1"],
        vec!["EVAL", "return 1", "0"],
        vec!["EVALSHA", "e0e1f9fabfc9d4800c877a703b823ac0578ff8db", "0"],
        vec!["SCRIPT", "LOAD", "return 1"],
        vec![
            "FUNCTION",
            "LOAD",
            "#!lua name=mine\nredis.register_function('f', function() return 1 end)",
        ],
        vec!["FUNCTION", "DELETE", library],
        vec!["GET", release_memo],
        vec!["HGETALL", "dlock:fenced:shop:{x}:stock:2"],
        vec!["GET", "shop-data:secret"],
        vec!["HGETALL", "billing:customer:1"],
        vec!["GET", "dlock:layout:other:"],
        vec!["HGETALL", "other:goods:1"],
        vec!["KEYS", "*"],
        vec!["FLUSHALL"],
        vec!["CONFIG", "SET", "maxmemory", "1"],
        vec!["SUBSCRIBE", "dlock:unlock:shop:{x}:goods:1"],
        vec!["SCAN", "0"],
        vec!["CLIENT", "TRACKING", "on", "BCAST", "PREFIX", "billing:"],
    ]
    .into_iter()
    .map(|words| words.into_iter().map(str::to_owned).collect())
    .chain(
        // dlock's own functions that write, on the reader's own prefix.
        [
            (
                "lock_force_unlock",
                [
                    "shop:goods:1",
                    "dlock:unlock:shop:{x}:goods:1",
                    "dlock:unlock:shop:{x}!goods:1",
                ],
            ),
            (
                "lock_release",
                [
                    "shop:goods:1",
                    "dlock:unlock:shop:{x}:goods:1",
                    release_memo,
                ],
            ),
        ]
        .into_iter()
        .map(|(function, keys)| {
            let mut words = vec![
                "FCALL".to_owned(),
                format!("{library}_{function}"),
                "3".to_owned(),
            ];
            words.extend(keys.map(str::to_owned));
            words.extend(["publish", "100"].map(str::to_owned));
            words
        }),
    )
    .collect();
    for words in attempts {
        let answer = dry_run(&mut admin, "dlock-inspector", &words);
        assert_ne!(answer, "OK", "the read-only operator may run {words:?}");
    }
}

#[test]
fn the_documented_rules_are_the_tested_ones() {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../docs/SECURITY.md");
    let doc = std::fs::read_to_string(path).unwrap();
    for mode in [Mode::Single, Mode::Cluster] {
        for (scripts, rule) in [
            ("script", acl_rule(mode, "PREFIX")),
            ("function", functions_rule(mode, "PREFIX")),
        ] {
            let line = format!("ACL SETUSER dlock reset on >PASSWORD {}", rule.join(" "));
            assert!(
                doc.contains(&line),
                "{path} lacks the {mode:?} {scripts}-mode rule:\n{line}"
            );
        }
        let operator = operator_rule(mode, "PREFIX").join(" ");
        let line = format!("ACL SETUSER dlock-operator reset on >PASSWORD {operator}");
        assert!(
            doc.contains(&line),
            "{path} lacks the {mode:?} operator rule:\n{line}"
        );
        for (user, rule) in [
            ("dlock-inspector", inspector_rule(mode, "PREFIX")),
            ("dlock-lister", lister_rule(mode, "PREFIX")),
        ] {
            let line = format!("ACL SETUSER {user} reset on >PASSWORD {}", rule.join(" "));
            assert!(
                doc.contains(&line),
                "{path} lacks the {mode:?} read-only rule of {user}:\n{line}"
            );
        }
    }
    let plain = default_prefix_rule(Mode::Single, &["NAMES"]).join(" ");
    let line = format!("ACL SETUSER dlock reset on >PASSWORD {plain}");
    assert!(
        doc.contains(&line),
        "{path} lacks the default-prefix rule:\n{line}"
    );
    assert_eq!(glob_escape("a*b?[c]\\"), "a\\*b\\?\\[c\\]\\\\");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn wrong_credentials_are_clear_errors_without_the_password() {
    capture_logs(tracing::Level::TRACE);
    let (server, mut admin) = server_with_shop_user();
    let connect = |url: String| async move {
        let started = Instant::now();
        let result = LockClient::builder()
            .connect_timeout(Duration::from_secs(2))
            .connect(&url)
            .await;
        (result, started.elapsed())
    };
    let check = |what: &str, err: &dyn std::error::Error, shown: String, elapsed: Duration| {
        eprintln!("{what}: {shown} (after {elapsed:?})");
        let debug = format!("{err:?}");
        for secret in [ACL_PASSWORD, WRONG_PASSWORD] {
            assert!(!shown.contains(secret), "{what}: {shown}");
            assert!(!debug.contains(secret), "{what}: {debug}");
        }
        assert!(elapsed < Duration::from_secs(2), "{what}: {elapsed:?}");
    };

    let port = server.port();
    for (what, user) in [("wrong password", "dlock"), ("unknown user", "nobody")] {
        let (result, elapsed) =
            connect(format!("redis://{user}:{WRONG_PASSWORD}@127.0.0.1:{port}")).await;
        let err = result.unwrap_err();
        assert!(
            matches!(&err, LockError::Connect { source: Some(source), .. }
                if source.kind() == redis::ErrorKind::AuthenticationFailed),
            "{what}: {err:?}"
        );
        assert_eq!(
            err.to_string(),
            format!("could not connect to Redis at redis://{user}:***@127.0.0.1:{port}: Password authentication failed - AuthenticationFailed"),
            "{what}"
        );
        check(what, &err, err.to_string(), elapsed);
    }

    // The same through a configuration file's [connection] section.
    let config = Config::from_toml_str(&format!(
        "[redis.single]\naddress = \"redis://127.0.0.1:{port}\"\n[connection]\nusername = \"dlock\"\npassword = \"{WRONG_PASSWORD}\"\nconnect_timeout = \"2s\"\n"
    ))
    .unwrap();
    let started = Instant::now();
    let err = config.build().await.unwrap_err();
    assert!(
        matches!(&err, ConfigError::Lock(LockError::Connect { source: Some(source), .. })
            if source.kind() == redis::ErrorKind::AuthenticationFailed),
        "{err:?}"
    );
    assert!(err.to_string().contains("authentication failed"), "{err}");
    check("config", &err, err.to_string(), started.elapsed());

    // A server with a password for the default user (`requirepass`; set after start, as
    // the harness' readiness probe does not authenticate), reached without one.
    redis::cmd("CONFIG")
        .arg("SET")
        .arg("requirepass")
        .arg(ACL_PASSWORD)
        .query::<()>(&mut admin)
        .unwrap();
    let (result, elapsed) = connect(server.url()).await;
    let err = result.unwrap_err();
    assert!(
        matches!(&err, LockError::Connect { source: Some(source), .. }
            if source.code() == Some("NOAUTH")),
        "{err:?}"
    );
    assert!(err.to_string().contains("Authentication required"), "{err}");
    check("no password", &err, err.to_string(), elapsed);
    let (result, _) = connect(format!("redis://:{ACL_PASSWORD}@127.0.0.1:{port}")).await;
    result.expect("the default user with the requirepass password");
}

// ---------- secrets in logs, Debug and errors

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn passwords_never_reach_logs_debug_output_or_errors() {
    capture_logs(tracing::Level::TRACE);
    let server = RedisServer::start();
    let port = server.port();
    let mut admin = server.connection();
    set_user(
        &mut admin,
        "app",
        LEAK_PASSWORD,
        &acl_rule(Mode::Single, "leak:"),
    );

    // URL form.
    let url = format!("redis://app:{LEAK_PASSWORD}@127.0.0.1:{port}");
    let topology = Topology::single(url.as_str());
    let a = LockClient::builder()
        .key_prefix("leak:")
        .connect_to(&topology)
        .await
        .unwrap();
    // Config form, with the password in [connection] and with DLOCK_PASSWORD.
    let text = format!(
        "[redis.single]\naddress = \"redis://127.0.0.1:{port}\"\n[connection]\nusername = \"app\"\npassword = \"{LEAK_PASSWORD}\"\n[lock]\nkey_prefix = \"leak:\"\n"
    );
    let config = Config::from_toml_str(&text).unwrap();
    let b = config.build().await.unwrap();
    let from_env =
        Config::from_toml_str(&text.replace(&format!("password = \"{LEAK_PASSWORD}\"\n"), ""))
            .unwrap()
            .with_overrides(|name| {
                (name == dlock::config::PASSWORD_ENV).then(|| LEAK_PASSWORD.to_owned())
            })
            .unwrap();
    let c = from_env.build().await.unwrap();

    handoff(&a, &b, "goods:1").await;

    // Force every connection to reconnect and authenticate again: the subscriber while
    // a waiter is subscribed, then the command connections; the waiter still gets the
    // lock, and locking works afterwards.
    let guard = b.lock("goods:1").lock().await.unwrap();
    let waiting = c.lock("goods:1");
    let waiter = tokio::spawn(async move { waiting.lock().await });
    tokio::time::sleep(Duration::from_millis(200)).await;
    let kill = |kind: &str, admin: &mut redis::Connection| -> i64 {
        redis::cmd("CLIENT")
            .arg("KILL")
            .arg("TYPE")
            .arg(kind)
            .query(admin)
            .unwrap()
    };
    let killed_pubsub = kill("pubsub", &mut admin);
    let killed = kill("normal", &mut admin);
    assert!(
        killed_pubsub >= 1 && killed >= 3,
        "{killed_pubsub} {killed}"
    );
    tokio::time::sleep(Duration::from_millis(300)).await;
    guard.unlock().await.unwrap();
    waiter.await.unwrap().unwrap().unlock().await.unwrap();
    let after_reconnect = handoff(&b, &c, "goods:1").await;
    handoff(&c, &a, "goods:1").await;
    eprintln!("hand-off after the reconnects: {after_reconnect:?}");

    // Failed connections, in both forms.
    let wrong_url = format!("redis://app:{LEAK_WRONG_PASSWORD}@127.0.0.1:{port}");
    let url_error = LockClient::connect(&wrong_url).await.unwrap_err();
    let wrong_config =
        Config::from_toml_str(&text.replace(LEAK_PASSWORD, LEAK_WRONG_PASSWORD)).unwrap();
    let config_error = wrong_config.build().await.unwrap_err();

    let in_address =
        Config::from_toml_str(&format!("[redis.single]\naddress = \"{url}\"\n")).unwrap();
    let with_credentials = Topology::single(format!("redis://127.0.0.1:{port}"))
        .credentials(Some("app".to_owned()), Some(LEAK_PASSWORD.to_owned()));
    let shown = [
        format!("{in_address:?}"),
        format!("{in_address}"),
        format!("{a:?}"),
        format!("{b:?}"),
        format!("{c:?}"),
        format!("{topology:?}"),
        format!("{with_credentials:?}"),
        format!("{config:?}"),
        format!("{config}"),
        format!("{from_env:?}"),
        format!("{:?}", config.topology().unwrap()),
        format!("{wrong_config:?}"),
        format!("{url_error}"),
        format!("{url_error:?}"),
        format!("{config_error}"),
        format!("{config_error:?}"),
        dlock::admin::redact_url(&url),
    ];
    assert_no_password_in(&shown.iter().map(String::as_str).collect::<Vec<_>>());
    // Not vacuous: the places that could show a password show its mask.
    assert!(format!("{topology:?}").contains("app:***@"), "{topology:?}");
    assert!(
        format!("{with_credentials:?}").contains("password: Some(\"***\")"),
        "{with_credentials:?}"
    );
    assert!(format!("{in_address}").contains("app:***@"), "{in_address}");
    assert!(
        format!("{in_address:?}").contains("app:***@"),
        "{in_address:?}"
    );
    assert!(
        format!("{config:?}").contains("password: Some(***)"),
        "{config:?}"
    );
    assert!(url_error.to_string().contains("app:***@"), "{url_error}");

    let log = captured();
    assert_no_password_in(&[&log]);
    // Not vacuous: the log saw the clients, the lost connections and the failed one.
    for expected in [
        "dlock: client started",
        "dlock: subscriber connection lost; reconnecting",
        "dlock: acquired",
    ] {
        assert!(log.contains(expected), "{expected:?} not logged:\n{log}");
    }
    eprintln!(
        "captured {} log lines, {} bytes; none holds a password",
        log.lines().count(),
        log.len()
    );
}

// ---------- key prefixes

/// The recipe for the default prefix: an application without a key prefix does every
/// lock operation under it with no `ACL LOG` entry, beside a prefixed application, and
/// neither can touch the other's names (`ACL DRYRUN`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_default_prefix_recipe_keeps_its_application_apart() {
    let server = RedisServer::start();
    let mut admin = server.connection();
    set_user(
        &mut admin,
        "plain",
        A_PASSWORD,
        &default_prefix_rule(Mode::Single, &["goods:", "fair:", "rw:", "fenced:", "{t}"]),
    );
    set_user(
        &mut admin,
        "shop",
        B_PASSWORD,
        &acl_rule(Mode::Single, "shop:"),
    );
    let plain = Topology::single(with_credentials(&server.url(), "plain", A_PASSWORD));
    let shop = connect_as(
        &with_credentials(&server.url(), "shop", B_PASSWORD),
        "shop:",
    )
    .await;
    let [a, b, fast] = app_clients(&plain, "").await;
    let held_by_shop = shop.lock("goods:1").lock().await.unwrap();

    exercise(&[a.clone(), b.clone(), fast], &["goods:1".to_owned()]).await;
    exercise_fair(&a, &b, "1").await;
    exercise_rw(&a, &b, "1").await;
    exercise_semaphore(&a, &b, "1").await;
    exercise_fenced(&a, "1").await;
    let pair = MultiLock::same_slot(&a, ["{t}:1", "{t}:2"]).unwrap();
    pair.lock().await.unwrap().unlock().await.unwrap();
    assert_eq!(acl_denials(&mut admin), Vec::<String>::new());
    held_by_shop.unlock().await.unwrap();

    for words in [
        &["HSET", "shop:goods:1", "c:1", "1"][..],
        &["ZADD", "dlock:unlock:shop:{x}:goods:1", "1", "c:1"],
        &["SET", "dlock:release:shop:{x}:c:1:1", "0"],
        &["INCR", "dlock:fence:shop:{x}"],
        &["SET", "dlock:semcap:shop:{x}:sem:1", "9"],
        &["SET", "dlock:layout:shop:", "9"],
        &["SET", "dlock:client:shop:{x}:c", "forged"],
        &["HSET", "billing:customer:1", "name", "x"],
    ] {
        assert_ne!(
            dry_run(&mut admin, "plain", words),
            "OK",
            "plain may run {words:?}"
        );
    }
    for words in [
        &["HSET", "goods:1", "c:1", "1"][..],
        &["ZADD", "dlock:unlock:{x}:goods:1", "1", "c:1"],
        &["SET", "dlock:release:{x}:c:1:1", "0"],
        &["INCR", "dlock:fence:{x}"],
        &["SET", "dlock:semcap:{x}:sem:1", "9"],
        &["SET", "dlock:layout:", "9"],
        &["SET", "dlock:client:{x}:c", "forged"],
    ] {
        assert_ne!(
            dry_run(&mut admin, "shop", words),
            "OK",
            "shop may run {words:?}"
        );
    }
    // And each may run what its own locks need.
    assert_eq!(
        dry_run(
            &mut admin,
            "plain",
            &["ZADD", "dlock:unlock:{x}:goods:1", "1", "c:1"]
        ),
        "OK"
    );
    assert_eq!(
        dry_run(
            &mut admin,
            "shop",
            &["ZADD", "dlock:unlock:shop:{x}:goods:1", "1", "c:1"]
        ),
        "OK"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn key_prefixes_keep_two_applications_apart() {
    capture_logs(tracing::Level::TRACE);
    let server = RedisServer::start();
    let mut admin = server.connection();
    set_user(
        &mut admin,
        "app-a",
        A_PASSWORD,
        &acl_rule(Mode::Single, "app-a:"),
    );
    set_user(
        &mut admin,
        "app-b",
        B_PASSWORD,
        &acl_rule(Mode::Single, "app-b:"),
    );
    let a_url = with_credentials(&server.url(), "app-a", A_PASSWORD);
    let b_url = with_credentials(&server.url(), "app-b", B_PASSWORD);
    let a1 = connect_as(&a_url, "app-a:").await;
    let a2 = connect_as(&a_url, "app-a:").await;
    let b1 = connect_as(&b_url, "app-b:").await;

    // Both applications hold "goods:1" at once.
    let held_by_a = a1.lock("goods:1").try_lock().await.unwrap();
    let held_by_b = b1.lock("goods:1").try_lock().await.unwrap();
    // The three clients' descriptions follow their connects by a round trip or two.
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let described: Vec<String> = redis::cmd("KEYS")
            .arg("dlock:client:*")
            .query(&mut admin)
            .unwrap();
        if described.len() == 3 {
            break;
        }
        assert!(Instant::now() < deadline, "{described:?}");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let mut keys: Vec<String> = redis::cmd("KEYS").arg("*").query(&mut admin).unwrap();
    keys.sort();
    // Each application's fencing-token counter is under its own prefix too.
    // Each client's description is under its application's prefix (one per client).
    let (descriptions, keys): (Vec<String>, Vec<String>) = keys
        .into_iter()
        .partition(|key| key.starts_with("dlock:client:"));
    let described = |prefix: &str| {
        descriptions
            .iter()
            .filter(|key| key.starts_with(&format!("dlock:client:{prefix}{{")))
            .count()
    };
    assert_eq!(
        (described("app-a:"), described("app-b:")),
        (2, 1),
        "{descriptions:?}"
    );
    // Each application's layout version is recorded under its own prefix.
    let (layouts, keys): (Vec<String>, Vec<String>) = keys
        .into_iter()
        .partition(|key| key.starts_with("dlock:layout:"));
    assert_eq!(layouts, ["dlock:layout:app-a:", "dlock:layout:app-b:"]);
    let (counters, locks): (Vec<String>, Vec<String>) = keys
        .into_iter()
        .partition(|key| key.starts_with("dlock:fence:"));
    assert_eq!(locks, ["app-a:goods:1", "app-b:goods:1"]);
    assert_eq!(counters.len(), 2, "{counters:?}");
    assert!(
        counters
            .iter()
            .any(|key| key.starts_with("dlock:fence:app-a:{")),
        "{counters:?}"
    );
    assert!(
        counters
            .iter()
            .any(|key| key.starts_with("dlock:fence:app-b:{")),
        "{counters:?}"
    );
    let hash = |admin: &mut redis::Connection| -> HashMap<String, u32> {
        redis::cmd("HGETALL")
            .arg("app-a:goods:1")
            .query(admin)
            .unwrap()
    };
    let a_hash = hash(&mut admin);
    assert_eq!(
        a_hash.len(),
        2,
        "the hold and its fencing token: {a_hash:?}"
    );

    // Within one application they exclude each other, and a release in the other
    // application wakes no one here: app-a's waiter times out while app-b unlocks. Nor
    // does a forged unlock message on app-a's channel hand the lock over.
    let waiting = a2.lock("goods:1");
    let waiter =
        tokio::spawn(async move { waiting.try_lock_for(Duration::from_millis(800)).await });
    tokio::time::sleep(Duration::from_millis(100)).await;
    let channels: Vec<String> = redis::cmd("PUBSUB")
        .arg("CHANNELS")
        .query(&mut admin)
        .unwrap();
    // The waiter listens on its client's wake channel of the lock.
    assert!(
        channels.len() == 1
            && channels[0].starts_with("dlock:unlock:app-a:{")
            && channels[0].ends_with(&format!("}}#{}:goods:1", a2.id())),
        "{channels:?}"
    );
    for _ in 0..3 {
        redis::cmd("PUBLISH")
            .arg(&channels[0])
            .arg("unlocked")
            .query::<i64>(&mut admin)
            .unwrap();
    }
    held_by_b.unlock().await.unwrap();
    assert!(b1
        .lock("goods:1")
        .try_lock()
        .await
        .unwrap()
        .unlock()
        .await
        .is_ok());
    assert!(!b1.lock("goods:1").force_unlock().await.unwrap());
    let err = waiter.await.unwrap().unwrap_err();
    assert!(err.is_timeout(), "{err}");

    // app-b's unlock and force unlock never touched app-a's lock.
    assert_eq!(hash(&mut admin), a_hash);
    assert!(!held_by_a.is_lost());
    assert!(a2.lock("goods:1").is_locked().await.unwrap());
    assert!(!b1.lock("goods:1").is_locked().await.unwrap());

    // And with per-application ACL users, app-b cannot reach app-a's keys even when it
    // tries: a client of app-b configured with app-a's prefix cannot start (the layout
    // version under app-a's prefix is out of its reach) ...
    let err = LockClient::builder()
        .key_prefix("app-a:")
        .connect(&b_url)
        .await
        .unwrap_err();
    assert!(is_noperm(&err), "{err:?}");
    // ... and given that one key, its every lock operation is refused.
    set_user(
        &mut admin,
        "app-b",
        B_PASSWORD,
        &[
            acl_rule(Mode::Single, "app-b:"),
            vec!["~dlock:layout:app-a:".to_owned()],
        ]
        .concat(),
    );
    // Its client refuses to start: its user may not touch app-a's keys.
    match LockClient::builder()
        .key_prefix("app-a:")
        .connect(&b_url)
        .await
    {
        Err(LockError::MissingCommands { missing, .. }) => {
            assert!(missing.iter().any(|c| c == "hset"), "{missing:?}");
        }
        other => panic!("a client outside its user's keys started: {other:?}"),
    }
    // Built without that check, each of its operations is refused at once.
    let intruder = LockClient::builder()
        .key_prefix("app-a:")
        .check_permissions(false)
        .connect(&b_url)
        .await
        .unwrap();
    let err = intruder.lock("goods:1").force_unlock().await.unwrap_err();
    assert!(is_noperm(&err), "{err:?}");
    let err = intruder.lock("goods:1").try_lock().await.unwrap_err();
    assert!(is_noperm(&err), "{err:?}");
    assert_eq!(hash(&mut admin), a_hash);

    held_by_a.unlock().await.unwrap();
    // The only denials: app-b's attempts on app-a's key, the intruder's description under
    // app-a's prefix, and its first start on app-a's layout version.
    let denials = acl_denials(&mut admin);
    assert!(
        !denials.is_empty()
            && denials.iter().all(|d| {
                d.starts_with("app-b key app-a:goods:1 ")
                    || d.starts_with("app-b key dlock:client:app-a:{")
                    || d.starts_with("app-b key dlock:layout:app-a: ")
            }),
        "{denials:#?}"
    );
    assert!(
        denials
            .iter()
            .any(|d| d.starts_with("app-b key dlock:layout:app-a: ")),
        "{denials:#?}"
    );
}

/// In cluster mode a failed SSUBSCRIBE (here refused by the ACL, equally a timeout during
/// a failover) must not end sharded pub/sub for the client's life: once SSUBSCRIBE is
/// allowed again, waiters are woken by messages, not by `max_wait_recheck`. (The
/// subscriber used to drop the cluster connection's only push receiver.)
/// Lock names built to make one application's channels match the other's patterns:
/// every character a glob or a hash tag cares about, and the other application's prefix
/// after a closing brace (with a pattern `dlock:unlock:{*}:app-a:*`, a `*` before the
/// prefix, `x}:app-a:y` of app-b matched app-a's rule).
const HOSTILE_NAMES: &[&str] = &[
    "x}:{OTHER}y",
    "}:{OTHER}",
    "{x}:{OTHER}",
    "{OTHER}x",
    "*}:{OTHER}*",
    "?}{:{OTHER}?",
    "[a]}:{OTHER}",
    "{}",
    "}{",
];

/// The channels (and the keys named like them) that `owner`'s waiters use for `name`:
/// found by making a waiter of each primitive subscribe, then asking the server.
async fn channels_of(
    holder: &LockClient,
    waiter: &LockClient,
    name: &str,
    admin: &mut redis::Connection,
) -> Vec<String> {
    let before: HashSet<String> = pubsub_channels(admin).into_iter().collect();
    // A fair lock shares the lock's hash, so it gets a name of its own.
    let fair_name = format!("{name}~fair");
    let lock = holder.lock(name).lock().await.unwrap();
    let fair = holder.fair_lock(&fair_name).lock().await.unwrap();
    let permit = holder.semaphore(name, 1).acquire(1).await.unwrap();
    let (l, f, p) = (
        waiter.lock(name),
        waiter.fair_lock(&fair_name),
        waiter.semaphore(name, 1),
    );
    let wait = Duration::from_millis(400);
    let waits = tokio::spawn(async move {
        let _ = tokio::join!(
            l.try_lock_for(wait),
            f.try_lock_for(wait),
            p.try_acquire_for(1, wait)
        );
    });
    tokio::time::sleep(Duration::from_millis(200)).await;
    let channels: Vec<String> = pubsub_channels(admin)
        .into_iter()
        .filter(|channel| !before.contains(channel))
        .collect();
    waits.await.unwrap();
    lock.unlock().await.unwrap();
    fair.unlock().await.unwrap();
    permit.unlock().await.unwrap();
    assert_eq!(
        channels.len(),
        3,
        "a channel per primitive for {name:?}: {channels:?}"
    );
    channels
}

fn pubsub_channels(admin: &mut redis::Connection) -> Vec<String> {
    redis::cmd("PUBSUB").arg("CHANNELS").query(admin).unwrap()
}

/// The server's answer to `cmd` from a fresh connection of `url`'s user.
fn answer(url: &str, cmd: &redis::Cmd) -> Result<redis::Value, redis::RedisError> {
    cmd.query(&mut connection(url))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_lock_name_opens_one_applications_channels_to_another() {
    let server = RedisServer::start();
    let mut admin = server.connection();
    let apps = [
        ("app-a", A_PASSWORD, "app-a:"),
        ("app-b", B_PASSWORD, "app-b:"),
    ];
    let mut urls = Vec::new();
    for (user, password, prefix) in apps {
        set_user(&mut admin, user, password, &acl_rule(Mode::Single, prefix));
        urls.push(with_credentials(&server.url(), user, password));
    }
    let mut tried = 0;
    for (me, other) in [(0, 1), (1, 0)] {
        let (my_prefix, other_prefix) = (apps[me].2, apps[other].2);
        let holder = connect_as(&urls[me], my_prefix).await;
        let waiter = connect_as(&urls[me], my_prefix).await;
        for template in HOSTILE_NAMES {
            let name = template.replace("{OTHER}", other_prefix);
            for channel in channels_of(&holder, &waiter, &name, &mut admin).await {
                // The owner's own user may use its channel...
                let mine = answer(&urls[me], redis::cmd("PUBLISH").arg(&channel).arg("x"));
                assert!(mine.is_ok(), "{channel}: {mine:?}");
                // ...the other application's may not publish, subscribe or touch the
                // registry stored under the channel's name.
                for cmd in [
                    redis::cmd("PUBLISH").arg(&channel).arg("forged").clone(),
                    redis::cmd("SUBSCRIBE").arg(&channel).clone(),
                    redis::cmd("EXISTS").arg(&channel).clone(),
                ] {
                    let error = answer(&urls[other], &cmd).unwrap_err();
                    assert_eq!(
                        error.code(),
                        Some("NOPERM"),
                        "{channel} as {}: {error}",
                        apps[other].0
                    );
                    tried += 1;
                }
            }
        }
    }
    eprintln!("{tried} cross-application PUBLISH / SUBSCRIBE / key accesses refused");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sharded_pubsub_recovers_after_a_refused_ssubscribe() {
    capture_logs(tracing::Level::TRACE);
    let cluster = RedisCluster::start();
    let mut admins: Vec<redis::Connection> = cluster
        .nodes()
        .iter()
        .map(RedisServer::connection)
        .collect();
    let without_ssubscribe: Vec<String> = acl_rule(Mode::Cluster, "shop:")
        .into_iter()
        .filter(|token| token != "+ssubscribe")
        .collect();
    for admin in &mut admins {
        set_user(admin, "dlock", ACL_PASSWORD, &without_ssubscribe);
    }
    let topology = Topology::cluster(cluster.node_urls())
        .credentials(Some("dlock".to_owned()), Some(ACL_PASSWORD.to_owned()));
    let [a, b, _] = app_clients(&topology, "shop:").await;
    let while_refused = handoff(&a, &b, "goods:1").await;
    // The recovery below is only worth checking after a refusal that did happen.
    assert!(
        admins
            .iter_mut()
            .any(|admin| refused(admin, "dlock", "+ssubscribe", &[])),
        "no SSUBSCRIBE was refused"
    );
    for admin in &mut admins {
        set_user(
            admin,
            "dlock",
            ACL_PASSWORD,
            &acl_rule(Mode::Cluster, "shop:"),
        );
    }
    // Twice the subscriber's longest reconnect pause (1 s).
    tokio::time::sleep(Duration::from_secs(2)).await;
    let allowed = handoff(&a, &b, "goods:1").await;
    eprintln!("hand-off with SSUBSCRIBE refused: {while_refused:?}; allowed again: {allowed:?}");
    assert!(allowed < Duration::from_millis(100), "{allowed:?}");
}

/// A password written without quotes is a TOML type error; the message must not quote
/// the value.
#[test]
fn a_password_mistyped_as_a_number_is_not_quoted_in_the_error() {
    let text = "[redis.single]\naddress = \"redis://127.0.0.1:6379\"\n[connection]\npassword = 31415926535\n";
    let err = Config::from_toml_str(text).unwrap_err();
    assert!(!err.to_string().contains("31415926535"), "{err}");
    assert!(!format!("{err:?}").contains("31415926535"), "{err:?}");
}

/// A rule without a command dlock's scripts need makes a script fail half-way, keeping
/// what it wrote: without `+pexpireat` a release writes the next waiter's hold and then
/// cannot give it an expiry (a hold nobody was told of, stuck until force-unlocked);
/// without `+pubsub|numsub` it pops the oldest waiter and never tells it. So a client
/// whose user lacks one refuses to start, in script mode and in function mode, with an
/// error naming each command and the documented rule. Before the fix such a client
/// started, and failed at its first hand-off.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_user_without_a_command_the_scripts_need_is_refused_at_start() {
    let (server, mut admin) = server_with_function_user().await;
    for (mode, base) in [
        (ScriptMode::Eval, acl_rule(Mode::Single, "shop:")),
        (ScriptMode::Functions, functions_rule(Mode::Single, "shop:")),
    ] {
        let rule: Vec<String> = base
            .into_iter()
            .filter(|token| token != "+pexpireat" && token != "+pubsub|numsub")
            .collect();
        set_user(&mut admin, "lacking", ACL_PASSWORD, &rule);
        let url = with_credentials(&server.url(), "lacking", ACL_PASSWORD);
        let refused = LockClient::builder()
            .key_prefix("shop:")
            .script_mode(mode)
            .connect(&url)
            .await
            .unwrap_err();
        match &refused {
            LockError::MissingCommands { missing, .. } => {
                assert_eq!(missing, &["pexpireat", "pubsub|numsub"], "{mode:?}");
            }
            other => panic!("{mode:?}: {other:?}"),
        }
        let shown = refused.to_string();
        assert!(
            shown.contains("may not run pexpireat, pubsub|numsub")
                && shown.contains("docs/SECURITY.md")
                && !shown.contains(ACL_PASSWORD),
            "{shown}"
        );
        assert_eq!(refused.kind(), dlock::ErrorKind::Setup);
    }
}
