//! The `dlock` binary against real Redis deployments while this test's clients hold and
//! wait for locks: its text and its `--json` output.

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use dlock::{LockClient, LockError, LockGuard};
use dlock_tests::{RedisCluster, RedisReplicaSet, RedisSentinelGroup, RedisServer};
use serde_json::Value;

/// A config file (the application's) in a temporary directory.
struct ConfigFile {
    _dir: tempfile::TempDir,
    path: PathBuf,
}

impl ConfigFile {
    /// `redis` (a `[redis.*]` table) with key prefix `shop:`.
    fn new(redis: &str) -> ConfigFile {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("dlock.toml");
        let text = format!("{redis}\n[lock]\nkey_prefix = \"shop:\"\n");
        std::fs::write(&path, text).unwrap();
        ConfigFile { _dir: dir, path }
    }

    fn single(server: &RedisServer) -> ConfigFile {
        ConfigFile::new(&format!("[redis.single]\naddress = \"{}\"", server.url()))
    }

    fn cluster(cluster: &RedisCluster) -> ConfigFile {
        ConfigFile::new(&format!(
            "[redis.cluster]\nnodes = {:?}",
            cluster.node_urls()
        ))
    }

    fn sentinel(group: &RedisSentinelGroup) -> ConfigFile {
        ConfigFile::new(&format!(
            "[redis.sentinel]\nmaster_name = \"{}\"\nsentinels = {:?}",
            group.master_name(),
            group.sentinel_urls()
        ))
    }

    fn master_slave(set: &RedisReplicaSet) -> ConfigFile {
        ConfigFile::new(&format!(
            "[redis.master_slave]\nmaster = \"{}\"\nreplicas = {:?}",
            set.master_url(),
            set.replica_urls()
        ))
    }

    /// An application client of this config, named `name` through `[connection]`.
    async fn client(&self, name: &str) -> LockClient {
        let text = std::fs::read_to_string(&self.path).unwrap();
        let text = format!("{text}\n[connection]\nclient_name = \"{name}\"\n");
        dlock::config::Config::from_toml_str(&text)
            .unwrap()
            .build()
            .await
            .unwrap()
    }

    /// Clients named `alpha` and `beta`, each with its description registered (so the
    /// tool shows their names).
    async fn alpha_and_beta(&self) -> (LockClient, LockClient) {
        let (a, b) = (self.client("alpha").await, self.client("beta").await);
        registered(&a).await;
        registered(&b).await;
        (a, b)
    }
}

/// Runs `dlock --config <file> <args>` with `stdin`, off the test's runtime threads.
async fn dlock(config: &ConfigFile, args: &[&str], stdin: &str) -> Output {
    let path = config.path.clone();
    let args: Vec<String> = args.iter().map(|a| (*a).to_owned()).collect();
    let stdin = stdin.to_owned();
    tokio::task::spawn_blocking(move || run(&path, &args, &stdin))
        .await
        .unwrap()
}

fn run(config: &Path, args: &[String], stdin: &str) -> Output {
    use std::io::Write;
    let mut child = Command::new(env!("CARGO_BIN_EXE_dlock"))
        .arg("--config")
        .arg(config)
        .args(args)
        .env_remove("DLOCK_CONFIG")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(stdin.as_bytes())
        .unwrap();
    child.wait_with_output().unwrap()
}

/// The stdout of a run that must succeed.
fn stdout(output: &Output) -> String {
    assert!(
        output.status.success(),
        "dlock failed: {:?}\nstdout: {}\nstderr: {}",
        output.status,
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8(output.stdout.clone()).unwrap()
}

fn json(output: &Output) -> Value {
    let text = stdout(output);
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("not one JSON document ({e}): {text}"))
}

/// Waits until `client` has registered its description (its first write follows the
/// connect by one round trip).
async fn registered(client: &LockClient) {
    let lock = client.lock("registration-probe");
    let guard = lock.try_lock().await.unwrap();
    let deadline = Instant::now() + Duration::from_secs(5);
    while lock.inspect().await.unwrap().holders[0]
        .owner
        .client
        .is_none()
    {
        assert!(
            Instant::now() < deadline,
            "{} never registered",
            client.client_name()
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    guard.unlock().await.unwrap();
}

/// `waiter` waits for `name` in the background until it gets it; returns its guard then.
fn wait_for(waiter: &LockClient, name: &str) -> tokio::task::JoinHandle<LockGuard> {
    let lock = waiter.lock(name);
    tokio::spawn(async move { lock.lock().await.unwrap() })
}

/// Waits until `count` clients are registered as waiting for `name`.
async fn until_waiting(client: &LockClient, name: &str, count: usize) {
    let deadline = Instant::now() + Duration::from_secs(5);
    while client
        .lock(name)
        .inspect()
        .await
        .unwrap()
        .waiting_clients
        .len()
        < count
    {
        assert!(Instant::now() < deadline, "nobody waits for {name}");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

/// Holder `billing` holds `invoice:7` twice (a re-entry), `worker` waits for it, and a
/// second task of `billing` waits in its client's local line: what `inspect` prints, as
/// text and as JSON.
async fn inspect_shows_holder_and_waiter(config: &ConfigFile) {
    let billing = config.client("billing").await;
    let worker = config.client("worker").await;
    registered(&billing).await;
    registered(&worker).await;
    let lock = billing.lock("invoice:7");
    let outer = lock.lock().await.unwrap();
    let inner = outer.scope(lock.lock()).await.unwrap();
    let waiter = wait_for(&worker, "invoice:7");
    until_waiting(&billing, "invoice:7", 1).await;
    let lined = {
        let lock = billing.lock("invoice:7");
        tokio::spawn(async move { lock.lock().await.unwrap().unlock().await.unwrap() })
    };
    let deadline = Instant::now() + Duration::from_secs(5);
    while billing
        .lock("invoice:7")
        .inspect()
        .await
        .unwrap()
        .local_lines
        .is_empty()
    {
        assert!(Instant::now() < deadline, "the local line was not reported");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }

    let text = stdout(&dlock(config, &["inspect", "invoice:7"], "").await);
    let pid = std::process::id();
    let version = env!("CARGO_PKG_VERSION");
    assert!(
        text.starts_with("lock invoice:7 (key shop:invoice:7)\n"),
        "{text}"
    );
    let holder = text.lines().find(|l| l.starts_with("holder: ")).unwrap();
    assert!(
        holder.starts_with(&format!("holder: {}:", billing.id())),
        "{holder}"
    );
    assert!(
        holder.contains("(billing on ")
            && holder.contains(&format!(", pid {pid}, dlock {version}), 2 holds, fence ")),
        "{holder}"
    );
    assert!(text.contains("waiters: 1\n"), "{text}");
    assert!(
        text.contains(&format!(
            "waiting in their clients' local lines: 1\n  1 of {} (billing on ",
            billing.id()
        )),
        "{text}"
    );
    assert!(
        text.contains(&format!("  {}:", worker.id())) && text.contains(" (worker on "),
        "{text}"
    );
    // The worker's client, and the holder's, whose lined task watches the holder.
    assert!(text.contains("subscribers: 2\n"), "{text}");

    let doc = json(&dlock(config, &["--json", "inspect", "invoice:7"], "").await);
    assert_eq!(doc["name"], "invoice:7");
    assert_eq!(doc["key"], "shop:invoice:7");
    let holders = doc["holders"].as_array().unwrap();
    assert_eq!(holders.len(), 1, "{doc}");
    assert_eq!(holders[0]["holds"], 2);
    assert_eq!(holders[0]["client_id"], billing.id().to_string());
    assert_eq!(holders[0]["client"]["name"], "billing");
    assert_eq!(holders[0]["client"]["pid"], pid);
    assert_eq!(holders[0]["client"]["version"], version);
    assert_eq!(holders[0]["fence"], doc["fencing_counter"]);
    assert!(doc["fencing_counter"].as_u64().unwrap() >= 1, "{doc}");
    let lease = doc["remaining_lease_ms"].as_u64().unwrap();
    assert!(lease > 0 && lease <= 30_000, "{lease}");
    assert_eq!(doc["waiting_clients"][0]["client"]["name"], "worker");
    assert_eq!(doc["local_lines"][0]["tasks"], 1, "{doc}");
    assert_eq!(doc["local_lines"][0]["client"]["name"], "billing");
    assert_eq!(doc["subscribers"], 2);
    assert_eq!(doc["fair_queue"], Value::Array(Vec::new()));

    inner.unlock().await.unwrap();
    outer.unlock().await.unwrap();
    waiter.await.unwrap().unlock().await.unwrap();
    lined.await.unwrap();
    let text = stdout(&dlock(config, &["inspect", "invoice:7"], "").await);
    assert!(text.contains("holder: none (the lock is free)\n"), "{text}");
    let doc = json(&dlock(config, &["--json", "inspect", "invoice:7"], "").await);
    assert_eq!(doc["holders"], Value::Array(Vec::new()));
    assert_eq!(doc["remaining_lease_ms"], Value::Null);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn inspect_on_a_single_server() {
    let server = RedisServer::start();
    inspect_shows_holder_and_waiter(&ConfigFile::single(&server)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn inspect_and_list_on_a_cluster() {
    let cluster = RedisCluster::start();
    let config = ConfigFile::cluster(&cluster);
    inspect_shows_holder_and_waiter(&config).await;

    // Locks on every master: the listing scans each.
    let client = config.client("billing").await;
    let names: Vec<String> = (0..12).map(|i| format!("job:{i}")).collect();
    let mut guards = Vec::new();
    for name in &names {
        guards.push(client.lock(name).lock().await.unwrap());
    }
    let masters: std::collections::BTreeSet<u16> = names
        .iter()
        .map(|n| cluster.slot_owner_port(cluster.key_slot(&format!("shop:{n}"))))
        .collect();
    assert!(masters.len() >= 2, "all on one master: {masters:?}");
    let doc = json(&dlock(&config, &["--json", "list", "--prefix", "job:"], "").await);
    let listed: Vec<&str> = doc["locks"]
        .as_array()
        .unwrap()
        .iter()
        .map(|l| l["name"].as_str().unwrap())
        .collect();
    let mut expected: Vec<&str> = names.iter().map(String::as_str).collect();
    expected.sort();
    assert_eq!(listed, expected);
    for guard in guards {
        guard.unlock().await.unwrap();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn list_filters_by_prefix() {
    let server = RedisServer::start();
    let config = ConfigFile::single(&server);
    let client = config.client("billing").await;
    registered(&client).await;
    let a = client.lock("invoice:1").lock().await.unwrap();
    let b = client.lock("invoice:2").lock().await.unwrap();
    let other = client.lock("stock:1").lock().await.unwrap();
    // Not locks: a hash of the application's, and another prefix's lock.
    let mut admin = server.connection();
    redis::cmd("HSET")
        .arg("shop:invoice:data")
        .arg("total")
        .arg("12")
        .query::<()>(&mut admin)
        .unwrap();
    let foreign = LockClient::builder()
        .key_prefix("other:")
        .connect(&server.url())
        .await
        .unwrap();
    let _foreign = foreign.lock("invoice:3").lock().await.unwrap();

    let text = stdout(&dlock(&config, &["list", "--prefix", "invoice:"], "").await);
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.len(), 2, "{text}");
    assert!(
        lines[0].starts_with(&format!("invoice:1  held by {}:", client.id())),
        "{text}"
    );
    assert!(lines[0].contains("(billing on "), "{text}");
    assert!(lines[1].starts_with("invoice:2  held by "), "{text}");

    let doc = json(&dlock(&config, &["--json", "list", "--prefix", "invoice:"], "").await);
    assert_eq!(doc["prefix"], "invoice:");
    let names: Vec<&str> = doc["locks"]
        .as_array()
        .unwrap()
        .iter()
        .map(|l| l["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["invoice:1", "invoice:2"]);
    assert_eq!(doc["locks"][0]["holders"][0]["holds"], 1);

    let all = json(&dlock(&config, &["--json", "list"], "").await);
    assert_eq!(all["locks"].as_array().unwrap().len(), 3, "{all}");
    let none = stdout(&dlock(&config, &["list", "--prefix", "nothing:"], "").await);
    assert_eq!(none, "no locks whose name starts with \"nothing:\"\n");
    for guard in [a, b, other] {
        guard.unlock().await.unwrap();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn force_unlock_asks_unless_yes() {
    let server = RedisServer::start();
    let config = ConfigFile::single(&server);
    let client = config.client("billing").await;
    let lock = client.lock("report:1");
    let guard = lock.lock().await.unwrap();

    let refused = dlock(&config, &["force-unlock", "report:1"], "n\n").await;
    assert_eq!(
        String::from_utf8_lossy(&refused.stdout),
        "not confirmed: report:1 left as it is\n"
    );
    // A script tells a refusal from a done force-unlock by the exit status.
    assert_eq!(refused.status.code(), Some(3), "{refused:?}");
    let asked = String::from_utf8_lossy(&refused.stderr);
    assert!(asked.ends_with("force-unlock report:1? [y/N] "), "{asked}");
    assert!(asked.contains("holder: "), "{asked}");
    assert!(lock.is_locked().await.unwrap(), "a refusal unlocked it");
    // No answer at all (stdin closed) is a refusal too.
    let silent = dlock(&config, &["force-unlock", "report:1"], "").await;
    assert_eq!(
        String::from_utf8_lossy(&silent.stdout),
        "not confirmed: report:1 left as it is\n"
    );
    assert_eq!(silent.status.code(), Some(3), "{silent:?}");
    assert!(lock.is_locked().await.unwrap());

    let confirmed = dlock(&config, &["force-unlock", "report:1"], "y\n").await;
    assert_eq!(stdout(&confirmed), "force-unlocked report:1\n");
    assert!(confirmed.status.success(), "{confirmed:?}");
    assert!(!lock.is_locked().await.unwrap());
    tokio::time::timeout(Duration::from_secs(15), guard.lost())
        .await
        .expect("the holder never learned of the force-unlock");

    let guard = lock.lock().await.unwrap();
    let doc = json(
        &dlock(
            &config,
            &["--json", "force-unlock", "--yes", "report:1"],
            "",
        )
        .await,
    );
    assert_eq!(doc["confirmed"], true);
    assert_eq!(doc["unlocked"], true);
    assert_eq!(doc["lock"]["holders"][0]["client"]["name"], "billing");
    assert!(!lock.is_locked().await.unwrap());
    drop(guard);
    let free = json(
        &dlock(
            &config,
            &["--json", "force-unlock", "--yes", "report:1"],
            "",
        )
        .await,
    );
    assert_eq!(free["unlocked"], false);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn watch_sees_a_hand_off() {
    let server = RedisServer::start();
    let config = ConfigFile::single(&server);
    let (a, b) = config.alpha_and_beta().await;
    let guard = a.lock("job").lock().await.unwrap();
    let watching = {
        let path = config.path.clone();
        tokio::task::spawn_blocking(move || {
            let args = ["--json", "watch", "job", "--for", "1500ms"].map(str::to_owned);
            run(&path, &args, "")
        })
    };
    let text_watch = {
        let path = config.path.clone();
        tokio::task::spawn_blocking(move || {
            let args = ["watch", "job", "--for", "1500ms"].map(str::to_owned);
            run(&path, &args, "")
        })
    };
    tokio::time::sleep(Duration::from_millis(500)).await;
    let waiter = wait_for(&b, "job");
    until_waiting(&a, "job", 1).await;
    guard.unlock().await.unwrap();
    let guard = waiter.await.unwrap();
    tokio::time::sleep(Duration::from_millis(300)).await;
    guard.unlock().await.unwrap();

    let doc = json(&watching.await.unwrap());
    assert_eq!(doc["lock"], "job");
    let seen: Vec<&str> = doc["changes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| match c["holders"].as_array().unwrap().as_slice() {
            [] => "free",
            [holder] => holder["client"]["name"].as_str().unwrap(),
            more => panic!("two holders of one lock: {more:?}"),
        })
        .collect();
    // Between the two holders a free moment may show (when the release finds beta's
    // client not listening yet, it tells beta to try instead of granting it the lock).
    let holders: Vec<&str> = seen.iter().copied().filter(|s| *s != "free").collect();
    assert_eq!(holders, ["alpha", "beta"], "{seen:?}");
    assert_eq!(seen.first(), Some(&"alpha"), "{seen:?}");
    assert_eq!(seen.last(), Some(&"free"), "{seen:?}");

    let text = stdout(&text_watch.await.unwrap());
    let lines: Vec<&str> = text.lines().collect();
    assert!(
        lines[0].starts_with("+") && lines[0].contains(" job: held by "),
        "{text}"
    );
    assert!(lines[0].contains("(alpha on "), "{text}");
    assert!(text.contains("(beta on "), "{text}");
    assert!(lines.last().unwrap().ends_with(" job: free"), "{text}");
}

/// `watch` on a semaphore shows its grants as holders (permits as holds), heard through
/// the change reports alone (the poll is set to an hour); `Lock::holders` reads them too.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn watch_shows_a_semaphores_grants() {
    let server = RedisServer::start();
    let config = ConfigFile::single(&server);
    let (a, b) = config.alpha_and_beta().await;
    let watching = watch_by_reports(&config, "pool", "2s");
    tokio::time::sleep(Duration::from_millis(600)).await;
    let one = a.semaphore("pool", 3).acquire(1).await.unwrap();
    let holders = b.lock("pool").holders().await.unwrap();
    assert_eq!(holders.len(), 1, "{holders:?}");
    assert_eq!(holders[0].holds, 1);
    tokio::time::sleep(Duration::from_millis(200)).await;
    one.unlock().await.unwrap();
    tokio::time::sleep(Duration::from_millis(200)).await;
    let two = b.semaphore("pool", 3).acquire(2).await.unwrap();
    tokio::time::sleep(Duration::from_millis(200)).await;
    two.unlock().await.unwrap();

    let (seen, shown) = first_holders(&watching.await.unwrap());
    assert_eq!(
        seen,
        [("alpha".to_owned(), 1), ("beta".to_owned(), 2)],
        "{shown}"
    );
}

/// `watch` through a Sentinel failover: the hold taken on the promoted master must show
/// too. The poll is set to an hour, so only the change reports can show it: the tool must
/// track again on the master its client follows.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn watch_tracks_the_new_master_after_a_sentinel_failover() {
    let group = RedisSentinelGroup::start();
    let config = ConfigFile::sentinel(&group);
    let (a, b) = config.alpha_and_beta().await;
    let watching = watch_by_reports(&config, "job", "10s");
    tokio::time::sleep(Duration::from_millis(700)).await;
    let guard = a.lock("job").lock().await.unwrap();
    tokio::time::sleep(Duration::from_millis(300)).await;
    guard.unlock().await.unwrap();

    let old_master = group.current_master_port();
    let new_master = group.failover();
    assert_ne!(old_master, new_master);
    // Locked on the promoted master, once the client has followed it.
    let started = Instant::now();
    let guard = loop {
        let guard = b.lock("job").lock().await.unwrap();
        if group.master_server().port() == new_master
            && redis::cmd("EXISTS")
                .arg("shop:job")
                .query::<bool>(&mut group.master_server().connection())
                .unwrap()
        {
            break guard;
        }
        guard.unlock().await.unwrap();
        assert!(
            started.elapsed() < Duration::from_secs(5),
            "beta never locked on the new master"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    tokio::time::sleep(Duration::from_millis(300)).await;
    guard.unlock().await.unwrap();

    let (seen, shown) = first_holders(&watching.await.unwrap());
    let names: Vec<&str> = seen.iter().map(|(name, _)| name.as_str()).collect();
    assert_eq!(names, ["alpha", "beta"], "{shown}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn inspect_list_and_force_unlock_through_sentinel() {
    let group = RedisSentinelGroup::start();
    let config = ConfigFile::sentinel(&group);
    let client = config.client("billing").await;
    registered(&client).await;
    let lock = client.lock("invoice:9");
    let _guard = lock.lock().await.unwrap();
    let doc = json(&dlock(&config, &["--json", "inspect", "invoice:9"], "").await);
    assert_eq!(doc["holders"][0]["client"]["name"], "billing");
    let listed = json(&dlock(&config, &["--json", "list", "--prefix", "invoice:"], "").await);
    assert_eq!(listed["locks"][0]["name"], "invoice:9");
    let text = stdout(&dlock(&config, &["force-unlock", "--yes", "invoice:9"], "").await);
    assert_eq!(text, "force-unlocked invoice:9\n");
    assert!(!lock.is_locked().await.unwrap());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_input_is_a_clear_error() {
    let server = RedisServer::start();
    let config = ConfigFile::single(&server);
    let mut admin = server.connection();
    redis::cmd("SET")
        .arg("shop:greeting")
        .arg("hello")
        .query::<()>(&mut admin)
        .unwrap();
    let wrong = dlock(&config, &["inspect", "greeting"], "").await;
    assert_eq!(wrong.status.code(), Some(1));
    let error = String::from_utf8_lossy(&wrong.stderr);
    assert!(
        error.starts_with("dlock: ") && error.contains("greeting"),
        "{error}"
    );
    assert!(error.contains("string"), "{error}");

    let missing = tokio::task::spawn_blocking(|| {
        Command::new(env!("CARGO_BIN_EXE_dlock"))
            .args(["inspect", "x"])
            .env_remove("DLOCK_CONFIG")
            .output()
            .unwrap()
    })
    .await
    .unwrap();
    assert_eq!(missing.status.code(), Some(1));
    let error = String::from_utf8_lossy(&missing.stderr);
    assert!(
        error.contains("--config") && error.contains("DLOCK_CONFIG"),
        "{error}"
    );

    let bad_config = ConfigFile::new("[redis.single]\naddres = \"redis://127.0.0.1:1\"");
    let invalid = dlock(&bad_config, &["list"], "").await;
    let error = String::from_utf8_lossy(&invalid.stderr);
    assert!(
        error.contains("dlock.toml:1:") || error.contains("dlock.toml:2:"),
        "{error}"
    );
    assert!(error.contains("addres"), "{error}");

    let usage = dlock(&config, &["watch", "job", "--for", "soon"], "").await;
    assert_eq!(usage.status.code(), Some(2));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fair_locks_queue_is_shown_and_its_head_gets_the_lock_after_force_unlock() {
    let server = RedisServer::start();
    let config = ConfigFile::single(&server);
    let billing = config.client("billing").await;
    // A waiter that re-checks only every 10 s: only the fair lock's own wake-up (on the
    // head's client's channel) gets it the lock within the 2 s below.
    let worker = LockClient::builder()
        .key_prefix("shop:")
        .client_name("worker")
        .max_wait_recheck(Duration::from_secs(10))
        .connect(&server.url())
        .await
        .unwrap();
    registered(&billing).await;
    registered(&worker).await;
    let _held = billing.fair_lock("report:fair").lock().await.unwrap();
    let waiting = worker
        .fair_lock("report:fair")
        .with_entry_timeout(Duration::from_secs(60));
    let waiter = tokio::spawn(async move { waiting.lock().await.unwrap() });
    let deadline = Instant::now() + Duration::from_secs(5);
    while billing
        .lock("report:fair")
        .inspect()
        .await
        .unwrap()
        .fair_queue
        .is_empty()
    {
        assert!(Instant::now() < deadline, "the waiter never queued");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }

    let doc = json(&dlock(&config, &["--json", "inspect", "report:fair"], "").await);
    assert_eq!(doc["holders"][0]["client"]["name"], "billing");
    let queue = doc["fair_queue"].as_array().unwrap();
    assert_eq!(queue.len(), 1, "{doc}");
    assert_eq!(queue[0]["client"]["name"], "worker");
    assert_eq!(queue[0]["client_id"], worker.id().to_string());
    let text = stdout(&dlock(&config, &["inspect", "report:fair"], "").await);
    assert!(text.contains("fair queue: 1\n"), "{text}");
    assert!(text.contains(&format!("  {}:", worker.id())), "{text}");

    let unlocked = stdout(&dlock(&config, &["force-unlock", "--yes", "report:fair"], "").await);
    assert_eq!(unlocked, "force-unlocked report:fair\n");
    let guard = tokio::time::timeout(Duration::from_secs(2), waiter)
        .await
        .expect("the queue's head was not woken")
        .unwrap();
    guard.unlock().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn watch_and_list_on_a_master_with_replicas() {
    let set = RedisReplicaSet::start(1);
    let config = ConfigFile::master_slave(&set);
    let client = config.client("billing").await;
    registered(&client).await;
    let guard = client.lock("invoice:5").lock().await.unwrap();
    let watching = {
        let path = config.path.clone();
        tokio::task::spawn_blocking(move || {
            let args = ["--json", "watch", "invoice:5", "--for", "1500ms"].map(str::to_owned);
            run(&path, &args, "")
        })
    };
    let listed = json(&dlock(&config, &["--json", "list"], "").await);
    assert_eq!(listed["locks"][0]["name"], "invoice:5", "{listed}");
    // The watch has seen the holder by now (it starts in about 100 ms).
    tokio::time::sleep(Duration::from_millis(500)).await;
    guard.unlock().await.unwrap();
    let doc = json(&watching.await.unwrap());
    let changes = doc["changes"].as_array().unwrap();
    assert_eq!(changes.len(), 2, "{doc}");
    assert_eq!(changes[0]["holders"][0]["client"]["name"], "billing");
    assert_eq!(changes[1]["holders"], Value::Array(Vec::new()));
    assert!(changes[1]["at_ms"].as_u64().unwrap() > changes[0]["at_ms"].as_u64().unwrap());
}

/// The exit status and stderr of a run that must fail.
fn failure(output: &Output) -> String {
    assert_eq!(output.status.code(), Some(1), "{output:?}");
    String::from_utf8_lossy(&output.stderr).into_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn inspect_and_list_show_read_write_locks_and_semaphores() {
    let server = RedisServer::start();
    let config = ConfigFile::single(&server);
    let billing = config.client("billing").await;
    let worker = config.client("worker").await;
    registered(&billing).await;
    registered(&worker).await;

    // Two readers.
    let r1 = billing.rw_lock("prices").read().lock().await.unwrap();
    let r2 = worker.rw_lock("prices").read().lock().await.unwrap();
    let doc = json(&dlock(&config, &["--json", "inspect", "prices"], "").await);
    assert_eq!(doc["kind"], "read_write", "{doc}");
    assert_eq!(doc["key"], "shop:prices");
    assert_eq!(doc["read_write"]["mode"], "read");
    assert_eq!(doc["read_write"]["writer"], Value::Null);
    let readers = doc["read_write"]["readers"].as_array().unwrap();
    let mut names: Vec<&str> = readers
        .iter()
        .map(|r| r["client"]["name"].as_str().unwrap())
        .collect();
    names.sort();
    assert_eq!(names, ["billing", "worker"], "{doc}");
    assert!(readers.iter().all(|r| r["holds"] == 1), "{doc}");
    let lease = readers[0]["remaining_lease_ms"].as_u64().unwrap();
    assert!(lease > 0 && lease <= 30_000, "{doc}");
    assert_eq!(doc["holders"].as_array().unwrap().len(), 2, "{doc}");
    assert_eq!(doc["semaphore"], Value::Null);
    let text = stdout(&dlock(&config, &["inspect", "prices"], "").await);
    assert!(
        text.starts_with("read-write lock prices (key shop:prices)\nmode: read\n"),
        "{text}"
    );
    assert_eq!(text.matches("\nreader: ").count(), 2, "{text}");
    assert!(
        text.contains("(billing on ") && text.contains("(worker on "),
        "{text}"
    );
    assert!(text.contains("writer: none\n"), "{text}");
    assert!(text.contains("waiting writers: 0\n"), "{text}");

    // Refused, not deleted.
    let refused = failure(&dlock(&config, &["force-unlock", "--yes", "prices"], "").await);
    assert!(
        refused.contains("\"prices\" is a read-write lock, which has no force-unlock"),
        "{refused}"
    );
    assert!(billing.rw_lock("prices").is_locked().await.unwrap());
    r1.unlock().await.unwrap();
    r2.unlock().await.unwrap();

    // Then a writer.
    let w = billing.rw_lock("prices").write().lock().await.unwrap();
    let doc = json(&dlock(&config, &["--json", "inspect", "prices"], "").await);
    assert_eq!(doc["read_write"]["mode"], "write", "{doc}");
    assert_eq!(doc["read_write"]["readers"], Value::Array(Vec::new()));
    let writer = &doc["read_write"]["writer"];
    assert_eq!(writer["client"]["name"], "billing", "{doc}");
    assert_eq!(writer["holds"], 1);
    assert!(writer["fence"].as_u64().is_some(), "{doc}");
    assert_eq!(doc["holders"][0]["fence"], writer["fence"]);
    let text = stdout(&dlock(&config, &["inspect", "prices"], "").await);
    assert!(text.contains("mode: write\n"), "{text}");
    let line = text.lines().find(|l| l.starts_with("writer: ")).unwrap();
    assert!(
        line.starts_with(&format!("writer: {}:", billing.id()))
            && line.contains("(billing on ")
            && line.contains(", 1 write hold, "),
        "{line}"
    );

    // A semaphore with 2 of 3 permits taken.
    let g1 = billing.semaphore("uploads", 3).acquire(1).await.unwrap();
    let g2 = worker.semaphore("uploads", 3).acquire(1).await.unwrap();
    let doc = json(&dlock(&config, &["--json", "inspect", "uploads"], "").await);
    assert_eq!(doc["kind"], "semaphore", "{doc}");
    let sem = &doc["semaphore"];
    assert_eq!(sem["capacity"], 3);
    assert_eq!(sem["taken"], 2);
    assert_eq!(sem["available"], 1);
    let grants = sem["grants"].as_array().unwrap();
    assert_eq!(grants.len(), 2, "{doc}");
    assert!(grants.iter().all(|g| g["holds"] == 1), "{doc}");
    assert!(doc["key"].as_str().unwrap().starts_with("dlock:sem:shop:{"));
    let text = stdout(&dlock(&config, &["inspect", "uploads"], "").await);
    assert!(
        text.starts_with("semaphore uploads (key dlock:sem:shop:{"),
        "{text}"
    );
    assert!(
        text.contains("permits: 2 of 3 taken, 1 available\n"),
        "{text}"
    );
    assert_eq!(text.matches("\ngrant: ").count(), 2, "{text}");
    assert!(text.contains(", 1 permit, "), "{text}");
    let refused = failure(&dlock(&config, &["force-unlock", "--yes", "uploads"], "").await);
    assert!(
        refused.contains("is a semaphore, which has no force-unlock"),
        "{refused}"
    );
    assert_eq!(
        billing
            .semaphore("uploads", 3)
            .available_permits()
            .await
            .unwrap(),
        1
    );

    // Both are listed, next to a plain lock.
    let lock = billing.lock("report").lock().await.unwrap();
    let doc = json(&dlock(&config, &["--json", "list"], "").await);
    let kinds: Vec<(&str, &str)> = doc["locks"]
        .as_array()
        .unwrap()
        .iter()
        .map(|l| (l["name"].as_str().unwrap(), l["kind"].as_str().unwrap()))
        .collect();
    assert_eq!(
        kinds,
        [
            ("prices", "read_write"),
            ("report", "lock"),
            ("uploads", "semaphore")
        ],
        "{doc}"
    );
    let text = stdout(&dlock(&config, &["list"], "").await);
    let lines: Vec<&str> = text.lines().collect();
    assert!(
        lines[0].starts_with("prices  [read-write, write] held by "),
        "{text}"
    );
    assert!(lines[1].starts_with("report  held by "), "{text}");
    assert!(
        lines[2].starts_with("uploads  [semaphore, 2 of 3 permits taken] held by "),
        "{text}"
    );
    for guard in [w, lock] {
        guard.unlock().await.unwrap();
    }
    for permit in [g1, g2] {
        permit.unlock().await.unwrap();
    }
}

/// A `[redlock]`-only config over `servers`, key prefix `shop:`.
fn redlock_config(servers: &[RedisServer]) -> ConfigFile {
    let urls: Vec<String> = servers.iter().map(RedisServer::url).collect();
    ConfigFile::new(&format!("[redlock]\nservers = {urls:?}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redlock_inspect_list_and_force_unlock_on_every_server() {
    let servers: Vec<RedisServer> = (0..3).map(|_| RedisServer::start()).collect();
    let config = redlock_config(&servers);
    let text = std::fs::read_to_string(&config.path).unwrap();
    let redlock = dlock::config::Config::from_toml_str(&text)
        .unwrap()
        .build_redlock()
        .await
        .unwrap();
    // The acquisition returns once a majority granted it, and cancels the call still on
    // its way to the third server (which may or may not land, most often it does): the
    // test wants the lock on all three, so it takes it again until it is.
    let held_everywhere = || {
        servers.iter().all(|server| {
            redis::cmd("EXISTS")
                .arg("shop:invoice:7")
                .query::<bool>(&mut server.connection())
                .unwrap()
        })
    };
    let mut rounds = 0;
    let guard = loop {
        rounds += 1;
        let guard = redlock.lock("invoice:7").lock().await.unwrap();
        let taken = Instant::now();
        while !held_everywhere() && taken.elapsed() < Duration::from_millis(500) {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        if held_everywhere() {
            break guard;
        }
        assert!(rounds < 20, "the RedLock never landed on all three servers");
        guard.unlock().await.unwrap();
    };

    let doc = json(&dlock(&config, &["--json", "inspect", "invoice:7"], "").await);
    assert_eq!(
        (doc["nodes"].as_u64(), doc["quorum"].as_u64()),
        (Some(3), Some(2))
    );
    let on = doc["servers"].as_array().unwrap();
    assert_eq!(on.len(), 3, "{doc}");
    let owner = on[0]["lock"]["holders"][0]["id"]
        .as_str()
        .unwrap()
        .to_owned();
    for (server, view) in servers.iter().zip(on) {
        assert_eq!(view["server"], server.url());
        assert_eq!(view["lock"]["holders"][0]["id"], owner.as_str(), "{doc}");
    }
    assert_eq!(doc["held_by"], owner.as_str());
    assert_eq!(doc["owners"][0]["servers"], 3);
    let text = stdout(&dlock(&config, &["inspect", "invoice:7"], "").await);
    assert!(
        text.starts_with("redlock invoice:7 over 3 servers (quorum 2)\n"),
        "{text}"
    );
    assert_eq!(text.matches("\nserver redis://").count(), 3, "{text}");
    assert!(
        text.ends_with(&format!("held on 3 of 3 servers (quorum 2) by {owner}\n")),
        "{text}"
    );

    // One server loses the lock (deleted by hand): still held by a quorum.
    redis::cmd("DEL")
        .arg("shop:invoice:7")
        .query::<()>(&mut servers[0].connection())
        .unwrap();
    let text = stdout(&dlock(&config, &["inspect", "invoice:7"], "").await);
    assert!(
        text.ends_with(&format!("held on 2 of 3 servers (quorum 2) by {owner}\n")),
        "{text}"
    );
    let doc = json(&dlock(&config, &["--json", "inspect", "invoice:7"], "").await);
    assert_eq!(
        doc["servers"][0]["lock"]["holders"],
        Value::Array(Vec::new())
    );
    assert_eq!(doc["held_by"], owner.as_str());
    let listed = json(&dlock(&config, &["--json", "list"], "").await);
    assert_eq!(listed["locks"][0]["name"], "invoice:7", "{listed}");
    assert_eq!(listed["locks"][0]["owners"][0]["servers"], 2, "{listed}");

    let done = stdout(&dlock(&config, &["force-unlock", "--yes", "invoice:7"], "").await);
    assert_eq!(done, "force-unlocked invoice:7 on 2 of 3 servers\n");
    assert!(!redlock.lock("invoice:7").is_locked().await.unwrap());
    drop(guard);
}

/// `dlock --json watch <name> --for <duration> --interval 1h` in the background: with
/// the poll set to an hour, only Redis' change reports can show a change.
fn watch_by_reports(
    config: &ConfigFile,
    name: &str,
    duration: &str,
) -> tokio::task::JoinHandle<Output> {
    let path = config.path.clone();
    let args: Vec<String> = [
        "--json",
        "watch",
        name,
        "--for",
        duration,
        "--interval",
        "1h",
    ]
    .map(str::to_owned)
    .into();
    tokio::task::spawn_blocking(move || run(&path, &args, ""))
}

/// The first holder of each held state that `watch --json` printed: its client's name
/// and its holds; and the document with the tool's stderr, for a failure message.
fn first_holders(output: &Output) -> (Vec<(String, u64)>, String) {
    let doc = json(output);
    let shown = format!("{doc}\nstderr: {}", String::from_utf8_lossy(&output.stderr));
    let seen = doc["changes"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|change| change["holders"].as_array().unwrap().first())
        .map(|holder| {
            (
                holder["client"]["name"].as_str().unwrap().to_owned(),
                holder["holds"].as_u64().unwrap(),
            )
        })
        .collect();
    (seen, shown)
}

/// Five holds of `name` lasting `hold` each, 20 ms apart, taken while `dlock watch --json`
/// runs with `args`: the distinct holders the watch saw, and its stderr. With `tracked_on`
/// (the port of the master the watch tracks the lock on), the holds start once the watch
/// is armed there.
async fn watch_a_burst(
    config: &ConfigFile,
    holder: &LockClient,
    name: &str,
    args: &[&str],
    tracked_on: Option<u16>,
    hold: Duration,
) -> (usize, String) {
    let watching = {
        let path = config.path.clone();
        let mut all = vec!["--json", "watch", name, "--for", "4s"];
        all.extend_from_slice(args);
        let all: Vec<String> = all.into_iter().map(str::to_owned).collect();
        tokio::task::spawn_blocking(move || run(&path, &all, ""))
    };
    match tracked_on {
        Some(port) => until_tracked(port).await,
        // Nothing to wait for: the poll alone, whose misses are the point.
        None => tokio::time::sleep(Duration::from_millis(600)).await,
    }
    let lock = holder.lock(name);
    for _ in 0..5 {
        let guard = lock.lock().await.unwrap();
        tokio::time::sleep(hold).await;
        guard.unlock().await.unwrap();
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let output = watching.await.unwrap();
    let doc = json(&output);
    let mut seen: Vec<String> = doc["changes"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|c| c["holders"].as_array().unwrap().clone())
        .map(|h| h["id"].as_str().unwrap().to_owned())
        .collect();
    seen.sort();
    seen.dedup();
    (
        seen.len(),
        String::from_utf8_lossy(&output.stderr).into_owned(),
    )
}

/// Waits until a connection to the server on `port` tracks keys and has read since: the
/// watch's first read of the lock, which arms Redis' first report. (A fixed 600 ms
/// assumed the watch had started by then; on a loaded machine it sometimes had not, and
/// missed the first hold.)
async fn until_tracked(port: u16) {
    let mut conn = redis::Client::open(format!("redis://127.0.0.1:{port}"))
        .unwrap()
        .get_connection()
        .unwrap();
    let started = Instant::now();
    loop {
        let clients: String = redis::cmd("CLIENT").arg("LIST").query(&mut conn).unwrap();
        let armed = clients.lines().any(|client| {
            let field = |name: &str| client.split(' ').find_map(|f| f.strip_prefix(name));
            field("flags=").is_some_and(|flags| flags.contains('t'))
                && field("cmd=").is_some_and(|cmd| cmd != "client|tracking" && cmd != "hello")
        });
        if armed {
            return;
        }
        assert!(
            started.elapsed() < Duration::from_secs(10),
            "no connection tracked the lock within 10 s:\n{clients}"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// How long each hold of a burst the watch tracks lasts: 50 times shorter than the poll's
/// 10 s, long enough for the watch's read to land inside it on a loaded machine.
const TRACKED_HOLD: Duration = Duration::from_millis(200);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn watch_sees_every_short_hold() {
    let server = RedisServer::start();
    let config = ConfigFile::single(&server);
    let holder = config.client("alpha").await;
    // Holds far shorter than the poll's interval, each seen because Redis reported it: a
    // hold is seen when the watch reads the lock before it ends, so they last long enough
    // for a loaded machine to run the watch in time (5 ms holds were missed beside a busy
    // loop).
    let (seen, stderr) = watch_a_burst(
        &config,
        &holder,
        "burst",
        &["--interval", "10s"],
        Some(server.port()),
        TRACKED_HOLD,
    )
    .await;
    assert_eq!(seen, 5, "{stderr}");
    assert_eq!(stderr, "");

    // A user without +client|tracking: a warning, and only the poll, which misses holds.
    let mut admin = server.connection();
    redis::cmd("ACL")
        .arg("SETUSER")
        .arg("untracked")
        .arg("on")
        .arg(">secret")
        .arg("~*")
        .arg("&*")
        .arg("+@all")
        .arg("-client|tracking")
        .query::<()>(&mut admin)
        .unwrap();
    let untracked = ConfigFile::new(&format!(
        "[redis.single]\naddress = \"{}\"\n[connection]\nusername = \"untracked\"\npassword = \"secret\"",
        server.url()
    ));
    let (seen, stderr) = watch_a_burst(
        &untracked,
        &holder,
        "burst",
        &["--interval", "50ms"],
        None,
        Duration::from_millis(5),
    )
    .await;
    assert!(
        stderr.contains("dlock: warning: Redis will not report changes of \"burst\"")
            && stderr.contains("+client|tracking"),
        "{stderr}"
    );
    assert!(seen < 5, "a 50 ms poll saw all {seen} holds of 5 ms");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn watch_in_a_cluster_tracks_at_the_master_of_the_locks_slot() {
    let cluster = RedisCluster::start();
    let config = ConfigFile::cluster(&cluster);
    let holder = config.client("alpha").await;
    // A lock whose slot is not served by the first configured node (the one the tool
    // connects to first), so only a tracking connection to the slot's master hears it.
    let first: u16 = cluster.node_urls()[0]
        .rsplit(':')
        .next()
        .unwrap()
        .parse()
        .unwrap();
    let name = (0..100)
        .map(|i| format!("burst:{i}"))
        .find(|n| cluster.slot_owner_port(cluster.key_slot(&format!("shop:{n}"))) != first)
        .unwrap();
    let owner = cluster.slot_owner_port(cluster.key_slot(&format!("shop:{name}")));
    let (seen, stderr) = watch_a_burst(
        &config,
        &holder,
        &name,
        &["--interval", "10s"],
        Some(owner),
        TRACKED_HOLD,
    )
    .await;
    assert_eq!(seen, 5, "{stderr}");
    assert_eq!(stderr, "");
}

/// Text an application wrote into Redis (a forged owner field, a lock name) reaches the
/// operator's terminal with its control characters written out: no screen clearing, no
/// window title, no faked line, no hidden `[y/N]` prompt. `--json` keeps the exact text.
/// A key no lock name can have made is counted and skipped by `list`, not fatal.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn application_text_is_shown_escaped() {
    let server = RedisServer::start();
    let config = ConfigFile::single(&server);
    let hostile_owner = "\u{1b}]0;pwned\u{7}\u{1b}[2J:1";
    // Valid lock names may hold C1 controls and bidi overrides; ASCII controls are not.
    let c1_name = "goods:\u{9b}31mred\u{202e}";
    let no_lock_name = "goods:\u{1b}[31mred\nholder: forged";
    let mut admin = server.connection();
    for name in ["plain", c1_name, no_lock_name] {
        redis::cmd("HSET")
            .arg(format!("shop:{name}"))
            .arg(hostile_owner)
            .arg(1)
            .query::<()>(&mut admin)
            .unwrap();
    }
    let list = dlock(&config, &["list"], "").await;
    let outputs = [
        stdout(&dlock(&config, &["inspect", "plain"], "").await),
        stdout(&list),
        String::from_utf8_lossy(
            &dlock(&config, &["force-unlock", "plain"], "n\n")
                .await
                .stderr,
        )
        .into_owned(),
    ];
    for text in &outputs {
        for raw in ['\u{1b}', '\u{7}', '\u{9b}', '\u{202e}'] {
            assert!(!text.contains(raw), "{raw:?} in {text:?}");
        }
        assert!(
            text.contains("\\u{1b}]0;pwned\\u{7}\\u{1b}[2J:1"),
            "{text:?}"
        );
    }
    assert!(
        outputs[1].contains("goods:\\u{9b}31mred\\u{202e}  held by "),
        "{}",
        outputs[1]
    );
    assert_eq!(outputs[1].lines().count(), 2, "{}", outputs[1]);
    assert_eq!(
        String::from_utf8_lossy(&list.stderr),
        "dlock: skipped 1 key(s) under the prefix that no lock can have written\n"
    );
    let doc = json(&dlock(&config, &["--json", "list"], "").await);
    assert_eq!(doc["skipped"], 1);
    let doc = json(&dlock(&config, &["--json", "inspect", "plain"], "").await);
    assert_eq!(doc["holders"][0]["id"], hostile_owner);
}

/// One hash an application wrote under the prefix with a value that is not UTF-8 (and a
/// key whose name is not UTF-8) must not stop the operator from listing the locks: `list`
/// skips and counts them. Before the fix it failed with "Cannot convert from UTF-8".
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn keys_that_are_not_text_are_skipped_and_counted_by_list() {
    let server = RedisServer::start();
    let config = ConfigFile::single(&server);
    let client = dlock::LockClient::builder()
        .key_prefix("shop:")
        .connect(&server.url())
        .await
        .unwrap();
    let guard = client.lock("goods:1").lock().await.unwrap();
    let mut admin = server.connection();
    redis::cmd("HSET")
        .arg("shop:goods:binary")
        .arg("c:1")
        .arg(&b"\xff\xfe"[..])
        .query::<()>(&mut admin)
        .unwrap();
    redis::cmd("HSET")
        .arg(&b"shop:goods:\xff"[..])
        .arg("c:1")
        .arg(1)
        .query::<()>(&mut admin)
        .unwrap();
    let list = dlock(&config, &["list"], "").await;
    assert!(list.status.success(), "{list:?}");
    let listed = stdout(&list);
    assert!(listed.starts_with("goods:1  held by "), "{listed}");
    assert_eq!(listed.lines().count(), 1, "{listed}");
    assert_eq!(
        String::from_utf8_lossy(&list.stderr),
        "dlock: skipped 2 key(s) under the prefix that no lock can have written\n"
    );
    let doc = json(&dlock(&config, &["--json", "list"], "").await);
    assert_eq!(doc["skipped"], 2);
    guard.unlock().await.unwrap();
}

/// A semaphore's capacity outlives its holders: `list` tells the idle semaphore apart
/// from a free lock, and `set-permits` changes the stored capacity (after a confirmation)
/// so that handles of the new size work. Fails when a handle of the new size still meets
/// `CapacityMismatch`, when a refusal changes anything, or when a held lock's name is
/// given a capacity.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn set_permits_changes_an_idle_semaphores_stored_capacity() {
    let server = RedisServer::start();
    let config = ConfigFile::single(&server);
    let client = config.client("pool").await;
    client
        .semaphore("pool:db", 2)
        .acquire(1)
        .await
        .unwrap()
        .unlock()
        .await
        .unwrap();
    let resized = client.semaphore("pool:db", 3);
    assert!(
        matches!(
            resized.acquire(1).await,
            Err(LockError::CapacityMismatch {
                handle: 3,
                stored: 2,
                ..
            })
        ),
        "the stored capacity stays"
    );
    let listed = stdout(&dlock(&config, &["list"], "").await);
    assert!(
        listed.contains("pool:db  [semaphore, 0 of 2 permits taken] idle"),
        "{listed}"
    );

    let refused = dlock(&config, &["set-permits", "pool:db", "3"], "n\n").await;
    assert_eq!(refused.status.code(), Some(3), "{refused:?}");
    assert!(
        String::from_utf8_lossy(&refused.stderr)
            .ends_with("set the capacity of pool:db to 3? [y/N] "),
        "{refused:?}"
    );
    assert!(resized.acquire(1).await.is_err(), "a refusal changed it");

    let set = dlock(&config, &["set-permits", "pool:db", "3"], "y\n").await;
    assert_eq!(stdout(&set), "capacity of pool:db: 2 -> 3\n");
    resized.acquire(1).await.unwrap().unlock().await.unwrap();

    let doc = json(
        &dlock(
            &config,
            &["--json", "set-permits", "--yes", "pool:db", "4"],
            "",
        )
        .await,
    );
    assert_eq!(doc["before"], 3);
    assert_eq!(doc["after"], 4);

    let _held = client.lock("report:2").lock().await.unwrap();
    let other_kind = dlock(&config, &["set-permits", "--yes", "report:2", "2"], "").await;
    assert_eq!(other_kind.status.code(), Some(1), "{other_kind:?}");
    assert!(
        failure(&other_kind).contains("not a semaphore"),
        "{other_kind:?}"
    );
    let zero = dlock(&config, &["set-permits", "--yes", "pool:db", "0"], "").await;
    assert_eq!(zero.status.code(), Some(2), "{zero:?}");
}
