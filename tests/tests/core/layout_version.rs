//! The Redis layout is versioned per key prefix: the first client of a prefix records its
//! layout version in `dlock:layout:<prefix>`, and a client of another version refuses to
//! start (fail closed) instead of locking the same names without seeing the other's locks.
//! The other version is a client built with the hidden `__layout_version`, standing for a
//! dlock release that lays out locks differently.

use dlock::{ErrorKind, LockClient, LockError};
use dlock_tests::RedisServer;

fn recorded(server: &RedisServer, key: &str) -> Option<String> {
    redis::cmd("GET")
        .arg(key)
        .query(&mut server.connection())
        .unwrap()
}

async fn connect(
    server: &RedisServer,
    prefix: &str,
    version: Option<u32>,
) -> dlock::Result<LockClient> {
    let builder = LockClient::builder().key_prefix(prefix);
    let builder = match version {
        Some(version) => builder.__layout_version(version),
        None => builder,
    };
    builder.connect(&server.url()).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_layout_versions_never_share_a_key_prefix() {
    let server = RedisServer::start();

    // The first client of a prefix records its version.
    let current = connect(&server, "shop:", None).await.unwrap();
    assert_eq!(
        recorded(&server, "dlock:layout:shop:").as_deref(),
        Some("1")
    );

    // A client of another version refuses to start, naming both versions and the way out.
    let refused = connect(&server, "shop:", Some(2)).await.unwrap_err();
    match &refused {
        LockError::LayoutMismatch {
            key_prefix,
            key,
            ours: 2,
            recorded,
            ..
        } => {
            assert_eq!(key_prefix, "shop:");
            assert_eq!(key, "dlock:layout:shop:");
            assert_eq!(recorded, "1");
        }
        other => panic!("another layout version started: {other:?}"),
    }
    assert_eq!(refused.kind(), ErrorKind::Setup);
    let message = refused.to_string();
    for needed in [
        "version \"1\"",
        "version 2",
        "dlock:layout:shop:",
        "key_prefix",
    ] {
        assert!(
            message.contains(needed),
            "{needed:?} missing from: {message}"
        );
    }
    assert_eq!(
        recorded(&server, "dlock:layout:shop:").as_deref(),
        Some("1"),
        "a refused client changed the record"
    );

    // The running client is unaffected; another prefix is another application.
    current
        .lock("goods:1")
        .lock()
        .await
        .unwrap()
        .unlock()
        .await
        .unwrap();
    let other_app = connect(&server, "ledger:", Some(2)).await.unwrap();
    assert_eq!(
        recorded(&server, "dlock:layout:ledger:").as_deref(),
        Some("2")
    );

    // And the other way round: a prefix recorded by version 2 refuses version 1.
    match connect(&server, "ledger:", None).await {
        Err(LockError::LayoutMismatch {
            ours: 1, recorded, ..
        }) => assert_eq!(recorded, "2"),
        other => panic!("version 1 started on a version-2 prefix: {other:?}"),
    }

    // The documented recovery: every client of the old version stopped, the record
    // deleted, the new version starts and records itself.
    current.shutdown().await.unwrap();
    drop(current);
    let _: () = redis::cmd("DEL")
        .arg("dlock:layout:shop:")
        .query(&mut server.connection())
        .unwrap();
    let upgraded = connect(&server, "shop:", Some(2)).await.unwrap();
    assert_eq!(
        recorded(&server, "dlock:layout:shop:").as_deref(),
        Some("2")
    );
    upgraded.shutdown().await.unwrap();
    other_app.shutdown().await.unwrap();
}
