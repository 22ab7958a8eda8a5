//! Fenced writes to Redis (`client.fenced()`): a lower token is refused and writes
//! nothing, an equal one writes again, tokens compare exactly beyond 2^53, keys of another
//! type are refused untouched, a retried increment counts once, and the bookkeeping lives
//! in the application key's slot on a cluster (tagged and untagged keys).

use std::time::{Duration, Instant};

use dlock::{fencing::Fence, LockClient, LockError, Topology};
use dlock_tests::{RedisCluster, RedisServer, TcpProxy};
use redis::Commands;

fn stale(result: Result<impl std::fmt::Debug, LockError>) -> (u64, u64) {
    match result {
        Err(LockError::StaleToken {
            seen, presented, ..
        }) => (seen, presented),
        other => panic!("expected StaleToken, got {other:?}"),
    }
}

#[tokio::test]
async fn a_lower_token_is_refused_and_writes_nothing() {
    let server = RedisServer::start();
    let client = LockClient::connect(&server.url()).await.unwrap();
    let mut admin = server.connection();
    let fenced = client.fenced();

    assert_eq!(fenced.highest_fence("stock:1").await.unwrap(), None);
    fenced.set("stock:1", "10", Fence::new(5)).await.unwrap();
    // The same holder writes again in its section: "at least", not "greater".
    assert_eq!(
        fenced.incr_by("stock:1", -1, Fence::new(5)).await.unwrap(),
        9
    );
    fenced.set("stock:1", "20", Fence::new(6)).await.unwrap();
    assert_eq!(
        fenced.highest_fence("stock:1").await.unwrap(),
        Some(Fence::new(6))
    );

    assert_eq!(
        stale(fenced.set("stock:1", "9", Fence::new(5)).await),
        (6, 5)
    );
    assert_eq!(
        stale(fenced.incr_by("stock:1", -1, Fence::new(5)).await),
        (6, 5)
    );
    let value: String = admin.get("stock:1").unwrap();
    assert_eq!(value, "20", "a refused write left the value alone");
    assert_eq!(
        fenced.highest_fence("stock:1").await.unwrap(),
        Some(Fence::new(6)),
        "a refused write left the highest token alone"
    );
    // The message says what happened and what to do.
    let message = fenced
        .set("stock:1", "9", Fence::new(1))
        .await
        .unwrap_err()
        .to_string();
    assert!(message.contains("token 6 has already written"), "{message}");

    // The bookkeeping is where the module says, without a TTL.
    let bookkeeping = format!(
        "dlock:fenced:{{{}}}:stock:1",
        anchor_of(&mut admin, "stock:1")
    );
    let fence: String = admin.hget(&bookkeeping, "fence").unwrap();
    let ttl: i64 = admin.pttl(&bookkeeping).unwrap();
    assert_eq!(
        (fence.as_str(), ttl),
        ("6", -1),
        "the bookkeeping hash, without a TTL"
    );

    // Bad keys are refused before anything is sent.
    for key in ["", "a\nb"] {
        assert!(
            matches!(
                fenced.set(key, "x", Fence::new(9)).await,
                Err(LockError::InvalidName { .. })
            ),
            "{key:?}"
        );
    }
}

/// The `{anchor}` the bookkeeping of `key` uses: found by listing the keys.
fn anchor_of(admin: &mut redis::Connection, key: &str) -> String {
    let keys: Vec<String> = admin.keys(format!("dlock:fenced:{{*}}:{key}")).unwrap();
    assert_eq!(keys.len(), 1, "{keys:?}");
    let tag = &keys[0]["dlock:fenced:{".len()..];
    tag[..tag.find('}').unwrap()].to_owned()
}

#[tokio::test]
async fn tokens_beyond_2_pow_53_compare_exactly() {
    let server = RedisServer::start();
    let client = LockClient::connect(&server.url()).await.unwrap();
    let fenced = client.fenced();
    let big = 1u64 << 53; // 2^53 and 2^53 + 1 are the same Lua number
    fenced.set("big", "new", Fence::new(big + 1)).await.unwrap();
    assert_eq!(
        stale(fenced.set("big", "old", Fence::new(big)).await),
        (big + 1, big)
    );
    fenced
        .set("big", "max", Fence::new(u64::MAX))
        .await
        .unwrap();
    assert_eq!(
        fenced.highest_fence("big").await.unwrap(),
        Some(Fence::new(u64::MAX))
    );
    assert_eq!(
        stale(fenced.set("big", "x", Fence::new(u64::MAX - 1)).await),
        (u64::MAX, u64::MAX - 1)
    );
    // A shorter number is smaller whatever its digits.
    fenced.set("digits", "a", Fence::new(10)).await.unwrap();
    assert_eq!(
        stale(fenced.set("digits", "b", Fence::new(9)).await),
        (10, 9)
    );
}

#[tokio::test]
async fn a_key_of_another_type_is_refused_untouched() {
    let server = RedisServer::start();
    let client = LockClient::connect(&server.url()).await.unwrap();
    let mut admin = server.connection();
    let fenced = client.fenced();

    let _: () = admin.hset("profile:1", "name", "Ada").unwrap();
    for result in [
        fenced.set("profile:1", "x", Fence::new(1)).await,
        fenced
            .incr_by("profile:1", 1, Fence::new(1))
            .await
            .map(drop),
    ] {
        match result {
            Err(LockError::FencedWrongType { key, at, found }) => {
                assert_eq!(
                    (key.as_str(), at.as_str(), found.as_str()),
                    ("profile:1", "profile:1", "hash")
                );
            }
            other => panic!("{other:?}"),
        }
    }
    let name: String = admin.hget("profile:1", "name").unwrap();
    assert_eq!(name, "Ada");
    let bookkeeping: Vec<String> = admin.keys("dlock:fenced*").unwrap();
    assert!(bookkeeping.is_empty(), "nothing recorded: {bookkeeping:?}");

    // A non-integer under incr_by: INCRBY's own error, nothing recorded.
    let _: () = admin.set("label:1", "red").unwrap();
    let error = fenced
        .incr_by("label:1", 1, Fence::new(1))
        .await
        .unwrap_err();
    assert!(error.to_string().contains("not an integer"), "{error}");
    assert_eq!(fenced.highest_fence("label:1").await.unwrap(), None);

    // The bookkeeping key overwritten by something else: refused, the value untouched.
    fenced.set("stock:2", "5", Fence::new(1)).await.unwrap();
    let anchor = anchor_of(&mut admin, "stock:2");
    let bookkeeping = format!("dlock:fenced:{{{anchor}}}:stock:2");
    let _: () = admin.del(&bookkeeping).unwrap();
    let _: () = admin.set(&bookkeeping, "junk").unwrap();
    match fenced.set("stock:2", "6", Fence::new(2)).await {
        Err(LockError::FencedWrongType { at, found, .. }) => {
            assert_eq!((at, found.as_str()), (bookkeeping, "string"));
        }
        other => panic!("{other:?}"),
    }
    let value: String = admin.get("stock:2").unwrap();
    assert_eq!(value, "5");
}

#[tokio::test]
async fn an_increment_whose_reply_was_lost_counts_once() {
    let server = RedisServer::start();
    let proxy = TcpProxy::start(server.addr());
    let client = LockClient::builder()
        .command_timeout(Duration::from_secs(2))
        .connect(&proxy.url())
        .await
        .unwrap();
    let fenced = client.fenced();
    assert_eq!(
        fenced.incr_by("seats", 100, Fence::new(1)).await.unwrap(),
        100
    );
    let deadline = Instant::now() + Duration::from_secs(2);
    while proxy.accepted() < 1 {
        assert!(
            Instant::now() < deadline,
            "the client did not open its command connection"
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    tokio::time::sleep(Duration::from_millis(50)).await;
    let connections = proxy.accepted();

    proxy.lose_next_reply();
    assert_eq!(
        fenced.incr_by("seats", -1, Fence::new(1)).await.unwrap(),
        99,
        "the retry reports the first attempt's result"
    );
    assert!(
        proxy.accepted() > connections,
        "the reply was lost and the client reconnected"
    );
    let value: i64 = server.connection().get("seats").unwrap();
    assert_eq!(value, 99, "the decrement was applied once");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_a_cluster_the_bookkeeping_shares_the_key_slot() {
    let cluster = RedisCluster::start();
    let client = LockClient::builder()
        .key_prefix("shop:")
        .connect_to(&Topology::cluster(cluster.node_urls()))
        .await
        .unwrap();
    let fenced = client.fenced();
    let keys: Vec<String> = (0..30)
        .map(|i| match i % 3 {
            0 => format!("stock:{i}"),
            1 => format!("{{order:{i}}}:total"),
            _ => format!("{{}}odd:{i}"),
        })
        .collect();
    let mut masters = std::collections::HashSet::new();
    for key in &keys {
        masters.insert(cluster.slot_owner_port(cluster.key_slot(key)));
        fenced
            .set(key, "10", Fence::new(3))
            .await
            .unwrap_or_else(|e| panic!("{key}: {e}"));
        assert_eq!(
            fenced.incr_by(key, -2, Fence::new(3)).await.unwrap(),
            8,
            "{key}"
        );
        assert_eq!(
            stale(fenced.incr_by(key, -2, Fence::new(2)).await),
            (3, 2),
            "{key}"
        );
        assert_eq!(
            fenced.highest_fence(key).await.unwrap(),
            Some(Fence::new(3)),
            "{key}"
        );
    }
    assert_eq!(masters.len(), 3, "the keys reach every master");
}

/// docs/FENCING.md, "When the counter goes back": a counter that lost its value (here
/// `DEL`, as `FLUSHALL` or a layout change would) makes the next holder's token lower than
/// one the record has seen, and its write is refused, not applied; raising the counter as
/// the document shows (every `dlock:fence:<prefix>*` key, `SET` above the highest token)
/// lets the next holder write again.
#[tokio::test]
async fn a_counter_that_went_back_refuses_writes_until_raised_as_documented() {
    let server = RedisServer::start();
    let client = LockClient::builder()
        .key_prefix("shop:")
        .connect(&server.url())
        .await
        .unwrap();
    let mut admin = server.connection();
    let fenced = client.fenced();
    let lock = client.lock("goods:1");

    let mut highest = 0;
    for _ in 0..3 {
        let guard = lock.lock().await.unwrap();
        let token = guard.fencing_token().unwrap();
        fenced.set("stock:1", "x", token).await.unwrap();
        highest = token.get();
        guard.unlock().await.unwrap();
    }

    let counters: Vec<String> = admin.keys("dlock:fence:shop:*").unwrap();
    assert_eq!(counters.len(), 1, "{counters:?}");
    let _: () = admin.del(&counters).unwrap();
    let guard = lock.lock().await.unwrap();
    let token = guard.fencing_token().unwrap();
    assert!(token.get() < highest, "{token:?} after {highest}");
    assert_eq!(
        stale(fenced.set("stock:1", "lost", token).await),
        (highest, token.get())
    );
    guard.unlock().await.unwrap();

    for counter in admin.keys::<_, Vec<String>>("dlock:fence:shop:*").unwrap() {
        let _: () = admin.set(counter, highest + 1000).unwrap();
    }
    let guard = lock.lock().await.unwrap();
    let token = guard.fencing_token().unwrap();
    assert!(token.get() > highest, "{token:?}");
    fenced.set("stock:1", "back", token).await.unwrap();
    let value: String = admin.get("stock:1").unwrap();
    assert_eq!(value, "back");
    guard.unlock().await.unwrap();
}

/// A bookkeeping hash someone else wrote: a `fence` that is no token is reported as
/// `FencedRecordCorrupt`, naming the hash and the recovery, and nothing is written (before,
/// a Redis "unexpected reply" error); a poisoned record (the largest token, written by
/// anyone with the rights to write the hash) refuses every write as stale, which dlock
/// cannot tell from a real later holder: the lock's token counter lives in another cluster
/// slot, so no script can compare the two. The documented recovery, deleting the hash once
/// no older holder can write, makes the key writable again.
#[tokio::test]
async fn corrupted_and_poisoned_bookkeeping_is_refused_with_its_recovery() {
    let server = RedisServer::start();
    let client = LockClient::connect(&server.url()).await.unwrap();
    let fenced = client.fenced();
    let mut admin = server.connection();
    fenced.set("stock:9", "1", Fence::new(3)).await.unwrap();
    let bookkeeping = format!(
        "dlock:fenced:{{{}}}:stock:9",
        anchor_of(&mut admin, "stock:9")
    );

    let _: () = admin.hset(&bookkeeping, "fence", "not-a-token").unwrap();
    for error in [
        fenced.set("stock:9", "2", Fence::new(4)).await.unwrap_err(),
        fenced.highest_fence("stock:9").await.unwrap_err(),
    ] {
        match &error {
            LockError::FencedRecordCorrupt { key, at, found } => {
                assert_eq!(
                    (key.as_str(), at, found.as_str()),
                    ("stock:9", &bookkeeping, "not-a-token")
                );
            }
            other => panic!("{other:?}"),
        }
        assert!(
            error
                .to_string()
                .contains(&format!("delete {bookkeeping:?}")),
            "{error}"
        );
    }
    let value: String = admin.get("stock:9").unwrap();
    assert_eq!(value, "1", "nothing was written");

    let _: () = admin
        .hset(&bookkeeping, "fence", u64::MAX.to_string())
        .unwrap();
    assert_eq!(
        stale(fenced.set("stock:9", "2", Fence::new(4)).await),
        (u64::MAX, 4)
    );
    let _: () = admin.del(&bookkeeping).unwrap();
    fenced.set("stock:9", "2", Fence::new(4)).await.unwrap();
    let value: String = admin.get("stock:9").unwrap();
    assert_eq!(value, "2");
}
