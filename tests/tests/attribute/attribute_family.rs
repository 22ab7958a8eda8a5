//! `#[distributed_lock]` with the rest of the family at run time: `keys = [...]` takes a
//! multi-lock (all or none, in canonical order, so opposite transfers never deadlock),
//! `permits = n` one permit of a semaphore, and `client = <RedLockClient>` a RedLock.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use dlock::{distributed_lock, redlock::RedLockClient, LockClient, LockError};
use dlock_tests::RedisServer;
use redis::AsyncCommands;

struct Bank {
    locks: LockClient,
    redis: redis::aio::MultiplexedConnection,
    /// Time between reading and writing the balances: wide enough for a lost update.
    think: Duration,
}

impl Bank {
    /// Moves 1 from one account to the other with a non-atomic read-modify-write of both
    /// balances: exact only if nobody else touches either account meanwhile.
    #[distributed_lock(keys = ["account:<from>", "account:<to>"], client = self.locks)]
    async fn transfer(&self, from: u32, to: u32) -> Result<(), LockError> {
        self.move_one(from, to).await;
        Ok(())
    }

    /// The same without the attribute: the control.
    async fn transfer_unlocked(&self, from: u32, to: u32) {
        self.move_one(from, to).await;
    }

    async fn move_one(&self, from: u32, to: u32) {
        let mut redis = self.redis.clone();
        let (a, b): (i64, i64) = (
            redis.get(balance(from)).await.unwrap(),
            redis.get(balance(to)).await.unwrap(),
        );
        tokio::time::sleep(self.think).await;
        let () = redis.set(balance(from), a - 1).await.unwrap();
        let () = redis.set(balance(to), b + 1).await.unwrap();
    }

    async fn total(&self) -> i64 {
        let mut redis = self.redis.clone();
        let mut total = 0;
        for account in 0..ACCOUNTS {
            let value: i64 = redis.get(balance(account)).await.unwrap();
            total += value;
        }
        total
    }
}

const ACCOUNTS: u32 = 3;
const START: i64 = 100;

fn balance(account: u32) -> String {
    format!("balance:{account}")
}

async fn bank(server: &RedisServer) -> Bank {
    let locks = LockClient::connect(&server.url()).await.unwrap();
    let mut redis = server
        .client()
        .get_multiplexed_async_connection()
        .await
        .unwrap();
    for account in 0..ACCOUNTS {
        let () = redis.set(balance(account), START).await.unwrap();
    }
    Bank {
        locks,
        redis,
        think: Duration::from_millis(2),
    }
}

/// Transfers in both directions between every pair of accounts, concurrently.
async fn run_transfers(bank: &Arc<Bank>, locked: bool) {
    let mut tasks = Vec::new();
    for task in 0..8u32 {
        let bank = Arc::clone(bank);
        tasks.push(tokio::spawn(async move {
            for round in 0..15u32 {
                let from = (task + round) % ACCOUNTS;
                let to = (from + 1 + task % 2) % ACCOUNTS;
                if locked {
                    bank.transfer(from, to).await.unwrap();
                } else {
                    bank.transfer_unlocked(from, to).await;
                }
            }
        }));
    }
    for task in tasks {
        tokio::time::timeout(Duration::from_secs(30), task)
            .await
            .expect("transfers deadlocked")
            .unwrap();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn keys_take_every_lock_and_opposite_transfers_never_deadlock() {
    let server = RedisServer::start();
    let bank = Arc::new(bank(&server).await);

    run_transfers(&bank, false).await;
    let unlocked_total = bank.total().await;
    assert_ne!(
        unlocked_total,
        START * ACCOUNTS as i64,
        "the control run lost no update: the oracle cannot fire"
    );

    let bank = Arc::new(self::bank(&server).await);
    run_transfers(&bank, true).await;
    assert_eq!(bank.total().await, START * ACCOUNTS as i64);
    for account in 0..ACCOUNTS {
        let key = format!("account:{account}");
        assert!(
            !bank.locks.lock(&key).is_locked().await.unwrap(),
            "{key} left locked"
        );
    }
    println!("transfers: total {unlocked_total} without the lock, exact with it");
}

/// Both locks are held while the body runs, and re-entering one inside does not wait.
#[distributed_lock(keys = ["account:<from>", "account:<to>"], client = client)]
async fn audit(client: &LockClient, from: u32, to: u32) -> Result<(bool, bool, u32), LockError> {
    let (a, b) = (
        client.lock(&format!("account:{from}")),
        client.lock(&format!("account:{to}")),
    );
    let inner = a.try_lock().await?;
    let depth = a.hold_count().await?;
    inner.unlock().await?;
    Ok((a.is_locked().await?, b.is_locked().await?, depth))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn keys_hold_all_locks_in_the_body_and_its_scope_re_enters() {
    let server = RedisServer::start();
    let client = LockClient::connect(&server.url()).await.unwrap();
    assert_eq!(audit(&client, 4, 9).await.unwrap(), (true, true, 2));

    // One of the locks busy: the attribute fails as a whole and takes nothing.
    let busy = client.lock("account:9").lock().await.unwrap();
    #[distributed_lock(keys = ["account:<from>", "account:<to>"], wait = "100ms", client = client)]
    async fn quick(client: &LockClient, from: u32, to: u32) -> Result<(), LockError> {
        let _ = (from, to);
        Ok(())
    }
    let refused = quick(&client, 4, 9).await.unwrap_err();
    assert!(matches!(refused, LockError::Timeout { .. }), "{refused}");
    assert!(!client.lock("account:4").is_locked().await.unwrap());
    busy.unlock().await.unwrap();
}

/// How many bodies run at once, and the most ever seen.
#[derive(Default)]
struct Inside {
    now: AtomicUsize,
    most: AtomicUsize,
}

#[distributed_lock(key = "pool:<name>", permits = 2, client = client)]
async fn pooled(client: &LockClient, name: &str, inside: &Inside) -> Result<(), LockError> {
    let now = inside.now.fetch_add(1, Ordering::SeqCst) + 1;
    inside.most.fetch_max(now, Ordering::SeqCst);
    tokio::time::sleep(Duration::from_millis(40)).await;
    inside.now.fetch_sub(1, Ordering::SeqCst);
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn permits_let_that_many_bodies_in_at_once() {
    let server = RedisServer::start();
    let client = LockClient::connect(&server.url()).await.unwrap();
    let inside = Arc::new(Inside::default());
    let mut tasks = Vec::new();
    for _ in 0..6 {
        let (client, inside) = (client.clone(), Arc::clone(&inside));
        tasks.push(tokio::spawn(async move {
            for _ in 0..3 {
                pooled(&client, "db", &inside).await.unwrap();
            }
        }));
    }
    for task in tasks {
        task.await.unwrap();
    }
    // At most 2 (the semaphore), and 2 reached (not a mutex).
    assert_eq!(inside.most.load(Ordering::SeqCst), 2);
    assert_eq!(
        client
            .semaphore("pool:db", 2)
            .available_permits()
            .await
            .unwrap(),
        2
    );
}

#[distributed_lock(key = "invoice:<id>", client = redlock)]
async fn bill(redlock: &RedLockClient, id: u32) -> Result<bool, LockError> {
    // Inside the body the lock is held on a majority of the servers.
    redlock.lock(&format!("invoice:{id}")).is_locked().await
}

#[distributed_lock(key = "invoice:<id>", kind = "fair", client = redlock)]
async fn bill_fairly(redlock: &RedLockClient, id: u32) -> Result<(), LockError> {
    let _ = id;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_redlock_client_takes_a_redlock() {
    let servers: Vec<RedisServer> = (0..3).map(|_| RedisServer::start()).collect();
    let urls: Vec<String> = servers.iter().map(RedisServer::url).collect();
    let redlock = RedLockClient::connect(LockClient::builder(), &urls)
        .await
        .unwrap();
    assert!(bill(&redlock, 7).await.unwrap());
    assert!(!redlock.lock("invoice:7").is_locked().await.unwrap());

    // A RedLock has no kinds: said at the call, nothing taken.
    let refused = bill_fairly(&redlock, 7).await.unwrap_err();
    assert!(
        matches!(&refused, LockError::Config(m) if m.contains("RedLockClient")),
        "{refused}"
    );
}
