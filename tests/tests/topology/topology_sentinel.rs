//! Sentinel mode from `examples/config/sentinel.toml`: every lock operation, then a
//! failover while clients keep locking, with waiters blocked across it.

use dlock_tests::failover;
use dlock_tests::topology as common;

use std::sync::Arc;
use std::time::{Duration, Instant};

use dlock_tests::RedisSentinelGroup;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sentinel_mode_from_its_sample_file_and_through_a_failover() {
    let group = Arc::new(RedisSentinelGroup::start());
    let sentinels = group.sentinel_addrs();
    let ports: Vec<(u16, u16)> = [26379, 26380, 26381]
        .into_iter()
        .zip(sentinels.iter().map(|a| a.port()))
        .collect();
    let config = common::sample("sentinel", &ports, "30s");
    let fast = common::sample("sentinel", &ports, "1s");
    let counter = group
        .master_server()
        .client()
        .get_multiplexed_async_connection()
        .await
        .unwrap();
    common::lock_suite(&config, &fast, counter, "suite:value").await;

    failover_while_locking(&group, &config).await;
}

async fn failover_while_locking(group: &Arc<RedisSentinelGroup>, config: &dlock::config::Config) {
    let client = config.build().await.unwrap();

    // Waiters blocked on a held lock across the failover.
    let holder = client.lock("failover:held").lock().await.unwrap();
    // On the replicas before the failover, so the release below happens on the new master.
    {
        let group = Arc::clone(group);
        tokio::task::spawn_blocking(move || group.wait_replicated())
            .await
            .unwrap();
    }
    let mut waiters = Vec::new();
    for _ in 0..3 {
        let lock = config.build().await.unwrap().lock("failover:held");
        waiters.push(tokio::spawn(async move {
            let guard = lock
                .lock()
                .await
                .expect("a waiter blocked during the failover acquires afterwards");
            guard.unlock().await.unwrap();
            Instant::now()
        }));
    }

    // Workers take and release locks in a loop and record when each cycle succeeded.
    let names: Vec<String> = (0..4).map(|i| format!("failover:cycle:{i}")).collect();
    let load = failover::CycleLoad::start(&client, &names);
    tokio::time::sleep(Duration::from_millis(500)).await;

    let old_master = group.current_master_port();
    let failover_started = Instant::now();
    let new_master = {
        let group = Arc::clone(group);
        tokio::task::spawn_blocking(move || group.failover())
            .await
            .unwrap()
    };
    let announced = failover_started.elapsed();
    assert_ne!(old_master, new_master);

    // The client follows: within a second of the announcement a lock is written on the
    // new master (the old one can stay writable for seconds after a manual failover).
    let returned = Instant::now();
    let mut new_conn = group.server_on_port(new_master).unwrap().connection();
    loop {
        let probe = client.lock("failover:probe").lock().await.unwrap();
        let on_new: bool = redis::Commands::exists(&mut new_conn, "shop:failover:probe").unwrap();
        // A lock taken on the old master just before the switch is gone on the new one.
        let _ = probe.unlock().await;
        if on_new {
            break;
        }
        assert!(
            returned.elapsed() < Duration::from_secs(1),
            "locks still written on the old master {old_master} 1 s after the failover"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    eprintln!(
        "sentinel failover: locks on the new master {:?} after the sentinels agreed",
        returned.elapsed()
    );

    // Operations must resume on the new master.
    load.wait_for_success_after(failover_started + announced)
        .await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    let (cycles, window) = load.stop(failover_started).await;
    eprintln!(
        "sentinel failover: new master announced after {announced:?}; longest gap between successful lock cycles around it: {window:?} ({cycles} cycles)"
    );

    // The holder releases on the new master (the lock was replicated); waiters acquire.
    let released = Instant::now();
    let replicated = match holder.unlock().await {
        Ok(()) => true,
        // Asynchronous replication may lose the lock in a failover: then it is gone.
        Err(e) => {
            assert!(e.is_not_held(), "{e}");
            false
        }
    };
    let mut acquired = Vec::new();
    for waiter in waiters {
        acquired.push(
            tokio::time::timeout(Duration::from_secs(10), waiter)
                .await
                .expect("waiters acquire after the failover")
                .unwrap(),
        );
    }
    acquired.sort();
    // Each waiter is woken by the release before it (the holder's, then the previous
    // waiter's), all on the new master: the subscriber followed it. A missed message
    // would cost the 1 s recheck; 200 ms leaves room for a loaded machine.
    let mut previous = released;
    for at in acquired {
        let woken = at.saturating_duration_since(previous);
        eprintln!("sentinel failover: waiter acquired {woken:?} after the release before it");
        if replicated {
            assert!(
                woken <= Duration::from_millis(200),
                "a waiter acquired {woken:?} after the release before it on the new master"
            );
        }
        previous = at;
    }
    assert!(
        replicated,
        "the replicated lock was lost in the failover; the wake-ups were not measured"
    );
}

/// The sentinels and the data nodes have users of their own: `[redis.sentinel]
/// sentinel_username` / `sentinel_password` reach the sentinels, `[connection] username` /
/// `password` the master, and neither stands in for the other.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sentinels_and_data_nodes_take_separate_credentials() {
    const SENTINEL_PW: &str = "sentinel-pw-3e1a";
    const DATA_PW: &str = "data-pw-94bc";
    let group = RedisSentinelGroup::start();
    for sentinel in group.sentinels() {
        let mut conn = sentinel.connection();
        for rule in [
            vec![
                "watcher",
                "on",
                &format!(">{SENTINEL_PW}"),
                "allcommands",
                "allkeys",
                "allchannels",
            ],
            // Only `watcher` may use the sentinels now (they talk to each other as
            // `default` only for failovers, which this test does not make).
            vec!["default", "off"],
        ] {
            redis::cmd("ACL")
                .arg("SETUSER")
                .arg(&rule)
                .query::<()>(&mut conn)
                .unwrap();
        }
    }
    for server in group.servers() {
        redis::cmd("ACL")
            .arg("SETUSER")
            .arg(
                &[
                    "app",
                    "on",
                    &format!(">{DATA_PW}"),
                    "allcommands",
                    "allkeys",
                    "allchannels",
                ][..],
            )
            .query::<()>(&mut server.connection())
            .unwrap();
    }
    let toml = |sentinel: (&str, &str), data: (&str, &str)| {
        let sentinels: Vec<String> = group
            .sentinel_urls()
            .iter()
            .map(|u| format!("{u:?}"))
            .collect();
        format!(
            "[redis.sentinel]\nmaster_name = \"{}\"\nsentinels = [{}]\nsentinel_username = \"{}\"\nsentinel_password = \"{}\"\n[connection]\nusername = \"{}\"\npassword = \"{}\"\nconnect_timeout = \"2s\"\n",
            group.master_name(),
            sentinels.join(", "),
            sentinel.0,
            sentinel.1,
            data.0,
            data.1
        )
    };

    let config =
        dlock::config::Config::from_toml_str(&toml(("watcher", SENTINEL_PW), ("app", DATA_PW)))
            .unwrap();
    assert!(!format!("{config:?}").contains(SENTINEL_PW), "{config:?}");
    let client = config.build().await.unwrap();
    client
        .lock("goods:1")
        .lock()
        .await
        .unwrap()
        .unlock()
        .await
        .unwrap();

    // Swapped, or the data node's credentials for both: the sentinels refuse.
    for (sentinel, data) in [
        (("app", DATA_PW), ("watcher", SENTINEL_PW)),
        (("app", DATA_PW), ("app", DATA_PW)),
    ] {
        let error = dlock::config::Config::from_toml_str(&toml(sentinel, data))
            .unwrap()
            .build()
            .await
            .unwrap_err()
            .to_string();
        assert!(
            error.contains("WRONGPASS")
                || error.contains("NOAUTH")
                || error.contains("AuthenticationFailed"),
            "{error}"
        );
        assert!(
            !error.contains(DATA_PW) && !error.contains(SENTINEL_PW),
            "{error}"
        );
    }
    // The sentinels' credentials, but the wrong ones for the master: the master refuses.
    let error = dlock::config::Config::from_toml_str(&toml(
        ("watcher", SENTINEL_PW),
        ("watcher", SENTINEL_PW),
    ))
    .unwrap()
    .build()
    .await
    .unwrap_err()
    .to_string();
    assert!(
        error.contains("WRONGPASS") || error.contains("AuthenticationFailed"),
        "{error}"
    );
}
