//! The operator's and the read-only rules (the `dlock` tool, inspection, listing), and the
//! check that the documented rules are the tested ones.

use super::*;

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
