//! Every primitive, the attribute, fencing, inspection and the configuration, written as an
//! application writes them against `dlock` alone. Run it with `DLOCK_CONFIG` naming a
//! dlock TOML file; scripts/test.sh only compiles it.

#![deny(warnings)]

use std::time::Duration;

use dlock::config::Config;
use dlock::fencing::current_fence;
use dlock::inspect::LockKind;
use dlock::redlock::RedLockClient;
use dlock::{distributed_lock, ErrorKind, LockClient, LockError};

#[derive(Debug)]
enum AppError {
    Lock(LockError),
    SoldOut,
}

impl From<LockError> for AppError {
    fn from(error: LockError) -> Self {
        AppError::Lock(error)
    }
}

#[distributed_lock(key = "goods:<id>", lease = "5s", wait = "2s")]
async fn buy(id: u64, stock: &mut u32) -> Result<u32, AppError> {
    if *stock == 0 {
        return Err(AppError::SoldOut);
    }
    *stock -= 1;
    Ok(*stock)
}

#[distributed_lock(keys = ["account:<from>", "account:<to>"])]
async fn transfer(from: u64, to: u64) -> Result<Option<u64>, LockError> {
    Ok(current_fence().map(|fence| fence.get() + from + to))
}

#[distributed_lock(key = "pool:<name>", permits = 4, on_busy = "skip")]
async fn query(name: &str) -> Option<usize> {
    Some(name.len())
}

async fn every_primitive(client: &LockClient) -> Result<(), LockError> {
    let guard = client.lock("report").lock().await?;
    let token = guard.fencing_token();
    guard.scope(async { client.lock("report").try_lock().await?.unlock().await }).await?;
    if let Some(fence) = token {
        client.fenced().set("report:total", b"42", fence).await?;
    }
    guard.unlock().await?;

    let fair = client.fair_lock("queue").try_lock_for(Duration::from_secs(1)).await?;
    fair.unlock().await?;

    let rw = client.rw_lock("catalog");
    rw.read().lock().await?.unlock().await?;
    rw.write()
        .try_lock_with_lease(Duration::from_secs(1), Duration::from_secs(5))
        .await?
        .unlock()
        .await?;

    let pool = client.semaphore("uploads", 3);
    let permit = pool.acquire(2).await?;
    assert_eq!(permit.permits(), 2);
    let _free = pool.available_permits().await? + pool.total_permits().await?;
    permit.unlock().await?;

    let pair = client.multi_lock(["account:{bank}:1", "account:{bank}:2"])?;
    pair.lock_with_lease(Duration::from_secs(5)).await?.unlock().await?;

    let info = client.lock("report").inspect().await?;
    if info.kind == LockKind::Lock {
        println!("report is held by {} owner(s)", info.holders.len());
    }
    println!("stats: {:?}", client.stats());
    Ok(())
}

async fn redlock(config: &Config) -> Result<(), LockError> {
    let redlock: RedLockClient = match config.build_redlock().await {
        Ok(redlock) => redlock,
        Err(error) => {
            println!("no RedLock configured: {error}");
            return Ok(());
        }
    };
    let guard = redlock.lock("invoice:7").lock().await?;
    guard.scope(async {}).await;
    match guard.unlock().await {
        Err(error) if error.kind() == ErrorKind::NotHeld => println!("expired meanwhile"),
        other => other?,
    }
    Ok(())
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let config = Config::from_env()?;
    let client = config.build().await?;
    dlock::set_global(client.clone()).ok();
    dlock::global_client()?;

    let mut stock = 1;
    match buy(42, &mut stock).await {
        Ok(left) => println!("left: {left}"),
        Err(AppError::SoldOut) => println!("sold out"),
        Err(AppError::Lock(error)) => println!("not sold: {error} ({})", error.kind()),
    }
    println!("transfer: {:?}", transfer(1, 2).await);
    println!("query: {:?}", query("db").await);
    every_primitive(&client).await?;
    redlock(&config).await?;
    client.shutdown().await?;
    Ok(())
}
