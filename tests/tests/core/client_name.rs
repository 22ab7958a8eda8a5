//! `LockClientBuilder::client_name`: each client names its connections (`CLIENT SETNAME`)
//! and keeps an expiring description of itself in Redis, renewed by a background task and
//! deleted when the client is dropped.
//!
//! The oracles are the server's own views: `CLIENT LIST`, the description key and its
//! `PTTL`.

use std::time::{Duration, Instant};

use dlock::{limits::REGISTRATION_TTL, LockClient, Topology};
use dlock_tests::{RedisCluster, RedisReplicaSet, RedisServer};

/// The names of `server`'s connections (`CLIENT LIST`).
fn connection_names(admin: &mut redis::Connection) -> Vec<String> {
    let list: String = redis::cmd("CLIENT").arg("LIST").query(admin).unwrap();
    list.lines()
        .filter_map(|line| {
            line.split(' ')
                .find_map(|field| field.strip_prefix("name="))
                .map(str::to_owned)
        })
        .collect()
}

/// Waits up to 5 s for `done`.
async fn eventually(what: &str, mut done: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(5);
    while !done() {
        assert!(Instant::now() < deadline, "never: {what}");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// The description keys on `server`.
fn description_keys(admin: &mut redis::Connection) -> Vec<String> {
    redis::cmd("KEYS")
        .arg("dlock:client:*")
        .query(admin)
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_is_named_and_described_until_it_is_dropped() {
    let server = RedisServer::start();
    let mut admin = server.connection();
    let client = LockClient::builder()
        .key_prefix("shop:")
        .client_name("billing")
        .connect(&server.url())
        .await
        .unwrap();
    assert_eq!(client.client_name(), "billing");
    eventually("the connection is named", || {
        connection_names(&mut admin).contains(&"billing".to_owned())
    })
    .await;
    eventually("the description is written", || {
        description_keys(&mut admin).len() == 1
    })
    .await;
    let key = description_keys(&mut admin).remove(0);
    assert!(key.starts_with("dlock:client:shop:{"), "{key}");
    assert!(key.ends_with(&format!("}}:{}", client.id())), "{key}");
    let text: String = redis::cmd("GET").arg(&key).query(&mut admin).unwrap();
    let pid = std::process::id();
    assert!(text.starts_with("name=billing\nhost="), "{text}");
    assert!(
        text.ends_with(&format!(
            "\npid={pid}\nversion={}",
            env!("CARGO_PKG_VERSION")
        )),
        "{text}"
    );
    let ttl: i64 = redis::cmd("PTTL").arg(&key).query(&mut admin).unwrap();
    let most = i64::try_from(REGISTRATION_TTL.as_millis()).unwrap();
    assert!(ttl > 0 && ttl <= most, "{ttl} ms");

    // What inspect shows next to the holder.
    let lock = client.lock("invoice:1");
    let guard = lock.lock().await.unwrap();
    let info = lock.inspect().await.unwrap();
    let description = info.holders[0].owner.client.clone().unwrap();
    assert_eq!(
        (description.name.as_str(), description.pid),
        ("billing", pid)
    );
    assert_eq!(info.holders[0].owner.client_id, client.id().to_string());
    guard.unlock().await.unwrap();

    drop((client, lock));
    eventually("the description is deleted with the client", || {
        description_keys(&mut admin).is_empty()
    })
    .await;
    eventually("the connection is closed", || {
        !connection_names(&mut admin).contains(&"billing".to_owned())
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_default_name_comes_from_the_client_id() {
    let server = RedisServer::start();
    let mut admin = server.connection();
    let client = LockClient::builder()
        .describe_client(false)
        .connect(&server.url())
        .await
        .unwrap();
    let expected = format!("dlock-{}", &client.id().to_string()[..8]);
    assert_eq!(client.client_name(), expected);
    eventually("the connection is named", || {
        connection_names(&mut admin).contains(&expected)
    })
    .await;
    // Without a description, none is written.
    client
        .lock("a")
        .lock()
        .await
        .unwrap()
        .unlock()
        .await
        .unwrap();
    assert_eq!(description_keys(&mut admin), Vec::<String>::new());
}

/// A connection re-opened after a kill starts without a name, and a deleted description
/// is gone: both come back within a third of the registration TTL (10 s).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_name_and_the_description_are_renewed() {
    let server = RedisServer::start();
    let mut admin = server.connection();
    let client = LockClient::builder()
        .client_name("renewed")
        .connect(&server.url())
        .await
        .unwrap();
    eventually("the description is written", || {
        description_keys(&mut admin).len() == 1
    })
    .await;
    let killed: u64 = redis::cmd("CLIENT")
        .arg("KILL")
        .arg("USER")
        .arg("default")
        .arg("SKIPME")
        .arg("yes")
        .query(&mut admin)
        .unwrap();
    assert!(killed >= 1);
    let _: u64 = redis::cmd("DEL")
        .arg(description_keys(&mut admin))
        .query(&mut admin)
        .unwrap();
    // The client reconnects on its next command; the name follows within 10 s.
    client
        .lock("b")
        .lock()
        .await
        .unwrap()
        .unlock()
        .await
        .unwrap();
    let started = Instant::now();
    let deadline = started + REGISTRATION_TTL / 3 + Duration::from_secs(2);
    while !(connection_names(&mut admin).contains(&"renewed".to_owned())
        && description_keys(&mut admin).len() == 1)
    {
        assert!(Instant::now() < deadline, "not renewed");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    eprintln!("renewed after {:?}", started.elapsed());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_cluster_node_sees_the_name() {
    let cluster = RedisCluster::start();
    let client = LockClient::builder()
        .client_name("billing")
        .connect_to(&Topology::cluster(cluster.node_urls()))
        .await
        .unwrap();
    let lock = client.lock("invoice:1");
    let guard = lock.lock().await.unwrap();
    for port in cluster.master_ports() {
        let node = cluster.node_on_port(port).unwrap();
        let mut admin = node.connection();
        eventually("every master's connection is named", || {
            connection_names(&mut admin).contains(&"billing".to_owned())
        })
        .await;
    }
    let deadline = Instant::now() + Duration::from_secs(5);
    while lock.inspect().await.unwrap().holders[0]
        .owner
        .client
        .is_none()
    {
        assert!(Instant::now() < deadline, "never described");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    guard.unlock().await.unwrap();
}

/// With `replica_acks`, the `WAIT` after an acquisition runs on a connection of its own,
/// opened on demand: it carries the name too.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_connection_lent_to_wait_is_named_too() {
    let set = RedisReplicaSet::start(1);
    let mut admin = set.master.connection();
    let client = LockClient::builder()
        .client_name("acked")
        .replica_acks(1, Duration::from_millis(500))
        .connect_to(&Topology::master_replicas(
            set.master_url(),
            set.replica_urls(),
        ))
        .await
        .unwrap();
    let named = |admin: &mut redis::Connection| {
        connection_names(admin)
            .iter()
            .filter(|name| *name == "acked")
            .count()
    };
    eventually("the command connection is named", || named(&mut admin) == 1).await;
    client
        .lock("a")
        .lock()
        .await
        .unwrap()
        .unlock()
        .await
        .unwrap();
    assert_eq!(named(&mut admin), 2, "{:?}", connection_names(&mut admin));
}

#[tokio::test]
async fn a_name_redis_would_refuse_is_a_clear_error() {
    let server = RedisServer::start();
    let error = LockClient::builder()
        .client_name("two words")
        .connect(&server.url())
        .await
        .unwrap_err();
    assert_eq!(
        error.to_string(),
        "invalid client name \"two words\": Redis takes client names of printable ASCII without spaces; found ' ' at byte 3"
    );
}
