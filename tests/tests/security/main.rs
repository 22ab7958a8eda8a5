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

/// Loads dlock's function library into `topology` with the admin's rights.
async fn load_library(topology: &Topology) {
    let name = LockClient::builder()
        .load_functions(topology)
        .await
        .unwrap();
    assert_eq!(name, FunctionLibrary::current().name());
}

mod acl_operators;
mod acl_rules;
mod acl_topologies;
mod credentials;
mod missing_commands;
mod prefixes;
