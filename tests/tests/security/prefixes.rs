//! Key prefixes keep applications apart: their keys, their locks' channels, and the default
//! prefix's recipe.

use super::*;

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
