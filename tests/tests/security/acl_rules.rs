//! The single-server and function-mode ACL rules of docs/SECURITY.md: each is enough for
//! every lock operation, refuses everything else, and needs every command it grants.

use super::*;

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
        // The error names the server, its password hidden.
        let shown = err.to_string();
        let server = url.replace(ACL_PASSWORD, "***");
        assert!(
            shown.starts_with(&format!(
                "Redis at {server} failed while trying to acquire lock \"goods:1\": NoPerm: "
            )) && shown.to_lowercase().contains("no permissions to access"),
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
