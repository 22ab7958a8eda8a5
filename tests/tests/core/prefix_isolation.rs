//! A key prefix cannot reach another application's dlock names: the least-privilege rule
//! gives an application `~<prefix>*`, and from a prefix that starts like dlock's own names
//! that pattern matches other applications' waiter registries, fencing counters, memos or
//! descriptions (ACL DRYRUN below shows which). Such prefixes are refused when the client is
//! built, before anything reaches Redis.

use dlock::{LockClient, LockError};
use dlock_tests::RedisServer;

/// Another application's (`shop:`) dlock names, one per kind of helper.
const OTHER_APPLICATIONS_NAMES: [&str; 5] = [
    "dlock:fence:shop:{x}",
    "dlock:unlock:shop:{x}:goods:1",
    "dlock:release:shop:{x}:c:1:7",
    "dlock:client:shop:{x}:c",
    "dlock:semcap:shop:{x}:pool",
];

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn prefixes_that_reach_dlocks_own_names_are_refused() {
    let server = RedisServer::start();
    let mut admin = server.connection();
    for prefix in ["dlock:", "dlock", "dlock:unlock:", "d"] {
        // Why: the rule's lock-hash pattern built from this prefix writes the other
        // application's names.
        redis::cmd("ACL")
            .arg("SETUSER")
            .arg("probe")
            .arg("reset")
            .arg("on")
            .arg("nopass")
            .arg(format!("~{prefix}*"))
            .arg("+set")
            .query::<()>(&mut admin)
            .unwrap();
        let reached: Vec<&str> = OTHER_APPLICATIONS_NAMES
            .into_iter()
            .filter(|name| {
                redis::cmd("ACL")
                    .arg("DRYRUN")
                    .arg("probe")
                    .arg("SET")
                    .arg(*name)
                    .arg("0")
                    .query::<String>(&mut admin)
                    .is_ok_and(|verdict| verdict == "OK")
            })
            .collect();
        eprintln!("prefix {prefix:?} reaches {reached:?}");
        assert!(
            !reached.is_empty(),
            "{prefix:?} reaches none: no reason to refuse it"
        );
        // So no client is built with it.
        match LockClient::builder()
            .key_prefix(prefix)
            .connect(&server.url())
            .await
        {
            Err(LockError::InvalidName {
                what: "key prefix",
                reason,
                ..
            }) => {
                assert!(
                    reason.contains("must not start like dlock's own names"),
                    "{reason}"
                )
            }
            other => panic!("a client with prefix {prefix:?} was built: {other:?}"),
        }
    }
    // Nothing was written by the refused clients (no layout record, no description).
    let keys: Vec<String> = redis::cmd("KEYS").arg("*").query(&mut admin).unwrap();
    assert_eq!(keys, Vec::<String>::new());
    // An application's own prefix is fine.
    LockClient::builder()
        .key_prefix("shop:")
        .connect(&server.url())
        .await
        .unwrap()
        .shutdown()
        .await
        .unwrap();
}
