//! The same rules on master-slave, Sentinel and cluster deployments, through a failover,
//! and for users without the naming or subscribing rights.

use super::*;

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
