//! `#[distributed_lock]` at run time, against real Redis.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use dlock::{distributed_lock, LockClient, LockError};
use dlock_tests::{keys, RedisServer};
use redis::Commands;

#[derive(Debug)]
enum AppError {
    Lock(LockError),
    Refused,
}

impl From<LockError> for AppError {
    fn from(error: LockError) -> Self {
        AppError::Lock(error)
    }
}

/// A service holding its lock client in a field, as applications do.
#[derive(Clone)]
struct Shop {
    locks: LockClient,
    redis: redis::Client,
    inside: Arc<AtomicBool>,
    entries: Arc<AtomicUsize>,
    /// Entries that found another caller inside.
    overlaps: Arc<AtomicUsize>,
}

impl Shop {
    async fn open(server: &RedisServer) -> Shop {
        Shop::with_client(server, LockClient::connect(&server.url()).await.unwrap())
    }

    fn with_client(server: &RedisServer, locks: LockClient) -> Shop {
        Shop {
            locks,
            redis: server.client(),
            inside: Arc::new(AtomicBool::new(false)),
            entries: Arc::new(AtomicUsize::new(0)),
            overlaps: Arc::new(AtomicUsize::new(0)),
        }
    }

    /// The owners' hold counts (without their fencing tokens, `<owner>:f`).
    fn holds(&self, key: &str) -> HashMap<String, u32> {
        dlock_tests::keys::holders(&mut self.redis.get_connection().unwrap(), key)
    }

    fn ttl(&self, key: &str) -> i64 {
        self.redis.get_connection().unwrap().pttl(key).unwrap()
    }

    /// Marks the critical section occupied for `hold`; counts entries and overlaps.
    async fn occupy(&self, hold: Duration) {
        if self.inside.swap(true, Ordering::SeqCst) {
            self.overlaps.fetch_add(1, Ordering::SeqCst);
        }
        self.entries.fetch_add(1, Ordering::SeqCst);
        tokio::time::sleep(hold).await;
        self.inside.store(false, Ordering::SeqCst);
    }

    #[distributed_lock(key = "goods:<id>", client = self.locks)]
    async fn sell(&self, id: u64, hold: Duration) -> Result<(), AppError> {
        self.occupy(hold).await;
        Ok(())
    }

    #[distributed_lock(key = "goods:<id>", client = self.locks)]
    async fn restock(&self, id: u64) -> Result<HashMap<String, u32>, AppError> {
        // Re-enters the lock `restock` already holds.
        self.count_holds(id).await
    }

    #[distributed_lock(key = "goods:<id>", client = self.locks)]
    async fn count_holds(&self, id: u64) -> Result<HashMap<String, u32>, AppError> {
        Ok(self.holds(&format!("goods:{id}")))
    }

    #[distributed_lock(key = "exit:<path>", client = self.locks)]
    async fn exit_by(&self, path: &str) -> Result<&'static str, AppError> {
        // Held here, so that "gone afterwards" is about a lock that was taken.
        let holds = self.holds(&format!("exit:{path}"));
        assert_eq!(
            holds.values().sum::<u32>(),
            1,
            "not held in the body: {holds:?}"
        );
        self.entries.fetch_add(1, Ordering::SeqCst);
        match path {
            "err" => return Err(AppError::Refused),
            "question-mark" => Err(AppError::Refused)?,
            "panic" => panic!("boom in the body"),
            "hang" => std::future::pending::<()>().await,
            _ => {}
        }
        Ok("ok")
    }

    #[distributed_lock(key = "goods:<id>", wait = "0s", client = self.locks)]
    async fn sell_now(&self, id: u64) -> Result<(), AppError> {
        self.entries.fetch_add(1, Ordering::SeqCst);
        Ok(())
    }

    #[distributed_lock(key = "leased:<id>", lease = "5s", client = self.locks)]
    async fn ttl_with_lease(&self, id: u64) -> Result<i64, AppError> {
        Ok(self.ttl(&format!("leased:{id}")))
    }

    #[distributed_lock(key = "leased:<id>", lease = "500ms", client = self.locks)]
    async fn leased_outer(&self, id: u64) -> Result<i64, AppError> {
        self.watched_inner(id).await
    }

    /// No lease of its own: inside `leased_outer` it lives on the outer 500 ms lease.
    #[distributed_lock(key = "leased:<id>", client = self.locks)]
    async fn watched_inner(&self, id: u64) -> Result<i64, AppError> {
        Ok(self.ttl(&format!("leased:{id}")))
    }

    /// `on_lost = "ignore"` lets the body run past its lease, to see the key gone (the
    /// default, `cancel`, would stop it: attribute_on_lost.rs).
    #[distributed_lock(key = "short:<id>", lease = "300ms", on_lost = "ignore", client = self.locks)]
    async fn outlive_lease(&self, id: u64) -> Result<bool, AppError> {
        tokio::time::sleep(Duration::from_millis(500)).await;
        Ok(self
            .redis
            .get_connection()
            .unwrap()
            .exists(format!("short:{id}"))
            .unwrap())
    }

    #[distributed_lock(key = "watched:<id>", client = self.locks)]
    async fn outlive_watchdog(&self, id: u64) -> Result<i64, AppError> {
        tokio::time::sleep(Duration::from_millis(1500)).await;
        Ok(self.ttl(&format!("watched:{id}")))
    }
}

/// Free function with the client passed as a parameter.
#[distributed_lock(key = "free:<id>", client = client)]
async fn free_sell(client: &LockClient, id: u64, shop: &Shop) -> Result<(), AppError> {
    shop.occupy(Duration::from_millis(30)).await;
    Ok(())
}

async fn gone_within(shop: &Shop, key: &str, limit: Duration) {
    let mut conn = shop.redis.get_connection().unwrap();
    let gone = keys::gone_within(&mut conn, key, limit).await;
    assert!(gone.is_some(), "{key} still locked after {limit:?}");
}

#[tokio::test]
async fn nested_annotated_calls_with_the_same_key_re_enter() {
    let server = RedisServer::start();
    let shop = Shop::open(&server).await;
    let holds = tokio::time::timeout(Duration::from_secs(5), shop.restock(7))
        .await
        .expect("a nested call must not deadlock")
        .unwrap();
    assert_eq!(holds.len(), 1, "{holds:?}");
    assert_eq!(
        holds.values().next(),
        Some(&2),
        "inner call re-entered: hold count 2"
    );
    assert!(shop.holds("goods:7").is_empty(), "both holds released");
}

#[tokio::test(flavor = "current_thread")]
async fn calls_joined_in_one_task_exclude_each_other() {
    let server = RedisServer::start();
    let shop = Shop::open(&server).await;
    let hold = Duration::from_millis(40);
    let (a, b, c) = tokio::join!(shop.sell(1, hold), shop.sell(1, hold), shop.sell(1, hold));
    a.unwrap();
    b.unwrap();
    c.unwrap();
    assert_eq!(shop.entries.load(Ordering::SeqCst), 3);
    assert_eq!(
        shop.overlaps.load(Ordering::SeqCst),
        0,
        "two callers inside at once"
    );

    // Also for a free function taking its client as a parameter.
    let client = shop.locks.clone();
    let (a, b) = tokio::join!(free_sell(&client, 2, &shop), free_sell(&client, 2, &shop));
    a.unwrap();
    b.unwrap();
    assert_eq!(shop.entries.load(Ordering::SeqCst), 5);
    assert_eq!(
        shop.overlaps.load(Ordering::SeqCst),
        0,
        "two callers inside at once"
    );

    // Control: the same joined calls on distinct keys do overlap, so the flag would have
    // caught the lock letting them in together.
    let (a, b, c) = tokio::join!(shop.sell(4, hold), shop.sell(5, hold), shop.sell(6, hold));
    a.unwrap();
    b.unwrap();
    c.unwrap();
    let method_overlaps = shop.overlaps.load(Ordering::SeqCst);
    assert!(
        method_overlaps > 0,
        "joined calls on distinct keys never overlapped"
    );
    let (a, b) = tokio::join!(free_sell(&client, 7, &shop), free_sell(&client, 8, &shop));
    a.unwrap();
    b.unwrap();
    assert!(
        shop.overlaps.load(Ordering::SeqCst) > method_overlaps,
        "joined free-function calls on distinct keys never overlapped"
    );
    assert_eq!(shop.entries.load(Ordering::SeqCst), 10);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn calls_from_two_clients_exclude_each_other() {
    let server = RedisServer::start();
    let first = Shop::open(&server).await;
    let mut second = Shop::open(&server).await;
    second.inside = first.inside.clone();
    second.entries = first.entries.clone();
    second.overlaps = first.overlaps.clone();
    let mut tasks = Vec::new();
    for shop in [first.clone(), second.clone(), first.clone(), second] {
        tasks.push(tokio::spawn(async move {
            for _ in 0..5 {
                shop.sell(3, Duration::from_millis(5)).await.unwrap();
            }
        }));
    }
    for task in tasks {
        task.await.unwrap();
    }
    assert_eq!(first.entries.load(Ordering::SeqCst), 20);
    assert_eq!(
        first.overlaps.load(Ordering::SeqCst),
        0,
        "two callers inside at once"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn different_keys_never_block_each_other() {
    let server = RedisServer::start();
    let shop = Shop::open(&server).await;
    let other = Shop::with_client(&server, shop.locks.clone());
    let slow = tokio::spawn(async move { other.sell(10, Duration::from_secs(2)).await });
    tokio::time::sleep(Duration::from_millis(100)).await;
    shop.sell(11, Duration::ZERO).await.unwrap();
    assert!(
        !slow.is_finished(),
        "key 11 had to wait until key 10 was released"
    );
    slow.await.unwrap().unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_lock_is_released_on_every_exit_path() {
    let server = RedisServer::start();
    let shop = Shop::open(&server).await;

    let entered = || shop.entries.load(Ordering::SeqCst);
    assert_eq!(shop.exit_by("ok").await.unwrap(), "ok");
    assert_eq!(entered(), 1);
    gone_within(&shop, "exit:ok", Duration::from_millis(100)).await;

    assert!(matches!(shop.exit_by("err").await, Err(AppError::Refused)));
    assert_eq!(entered(), 2);
    gone_within(&shop, "exit:err", Duration::from_millis(100)).await;

    assert!(matches!(
        shop.exit_by("question-mark").await,
        Err(AppError::Refused)
    ));
    assert_eq!(entered(), 3);
    gone_within(&shop, "exit:question-mark", Duration::from_millis(100)).await;

    let panicking = shop.clone();
    let outcome = tokio::spawn(async move { panicking.exit_by("panic").await }).await;
    // The body's own panic, not the "held in the body" check or a failed acquisition.
    let payload = outcome.unwrap_err().into_panic();
    let message = payload
        .downcast_ref::<&str>()
        .copied()
        .or_else(|| payload.downcast_ref::<String>().map(String::as_str));
    assert_eq!(message, Some("boom in the body"));
    assert_eq!(entered(), 4);
    gone_within(&shop, "exit:panic", Duration::from_millis(100)).await;

    let cancelled = tokio::time::timeout(Duration::from_millis(500), shop.exit_by("hang")).await;
    assert!(cancelled.is_err());
    assert_eq!(entered(), 5, "cancelled before the body held the lock");
    gone_within(&shop, "exit:hang", Duration::from_millis(100)).await;
}

#[tokio::test]
async fn wait_zero_fails_fast_without_running_the_body() {
    let server = RedisServer::start();
    let shop = Shop::open(&server).await;
    let rival = LockClient::connect(&server.url()).await.unwrap();
    let held = rival.lock("goods:5").lock().await.unwrap();

    // One busy try, a few milliseconds on a quiet machine: the bound is one second so
    // that a loaded machine passes too, while a wait that was not cut short (the rival
    // holds the lock under its watchdog) would last until the test's end.
    let started = Instant::now();
    let result = shop.sell_now(5).await;
    assert!(
        started.elapsed() < Duration::from_secs(1),
        "took {:?}",
        started.elapsed()
    );
    assert!(
        matches!(result, Err(AppError::Lock(ref e)) if e.is_timeout()),
        "{result:?}"
    );
    assert_eq!(
        shop.entries.load(Ordering::SeqCst),
        0,
        "the body must not run"
    );

    held.unlock().await.unwrap();
    shop.sell_now(5).await.unwrap();
    assert_eq!(shop.entries.load(Ordering::SeqCst), 1);
}

#[tokio::test]
async fn an_explicit_lease_sets_the_ttl_and_is_not_renewed() {
    let server = RedisServer::start();
    let shop = Shop::open(&server).await;
    let ttl = shop.ttl_with_lease(1).await.unwrap();
    assert!(
        (4_000..=5_000).contains(&ttl),
        "PTTL {ttl} for lease = \"5s\""
    );

    // The lease is not renewed: a body let run past it finds the key expired.
    assert!(!shop.outlive_lease(1).await.unwrap());
}

#[tokio::test]
async fn a_nested_call_without_a_lease_does_not_stretch_the_outer_lease() {
    let server = RedisServer::start();
    let shop = Shop::open(&server).await;
    let ttl = shop.leased_outer(2).await.unwrap();
    assert!(
        (1..=500).contains(&ttl),
        "the nested call raised the 500 ms lease to {ttl} ms"
    );
    assert!(shop.holds("leased:2").is_empty(), "both holds released");
}

#[tokio::test]
async fn without_a_lease_the_watchdog_keeps_the_lock_alive() {
    let server = RedisServer::start();
    let locks = LockClient::builder()
        .watchdog_timeout(Duration::from_secs(1))
        .connect(&server.url())
        .await
        .unwrap();
    let shop = Shop::with_client(&server, locks);
    let ttl = shop.outlive_watchdog(1).await.unwrap();
    assert!(
        (1..=1_000).contains(&ttl),
        "renewed to at most the watchdog timeout, PTTL {ttl}"
    );
    gone_within(&shop, "watched:1", Duration::from_millis(100)).await;
}
