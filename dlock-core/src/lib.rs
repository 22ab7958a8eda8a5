//! Reentrant distributed locks for async Rust on Redis.
//!
//! dlock-core implements Redisson's lock in async Rust: a reentrant lock stored as a Redis
//! hash and changed only by Lua scripts, a watchdog that renews leases while a guard lives,
//! waiting by pub/sub instead of polling, and releases that never touch another owner's
//! lock.
//!
//! ```
//! # #[tokio::main]
//! # async fn main() -> dlock_core::Result<()> {
//! # let server = dlock_tests::RedisServer::start();
//! # let redis_url = server.url();
//! use std::time::Duration;
//! use dlock_core::LockClient;
//!
//! let client = LockClient::connect(&redis_url).await?; // e.g. "redis://127.0.0.1:6379"
//! let lock = client.lock("goods:42");
//!
//! // Wait as long as it takes; the watchdog keeps the lease alive.
//! let guard = lock.lock().await?;
//! // ... read and write the stock of goods 42 ...
//! guard.unlock().await?;
//!
//! // Or wait at most 3 s and let the lock expire after 10 s whatever happens.
//! match lock.try_lock_with(Duration::from_secs(3), Duration::from_secs(10)).await {
//!     Ok(guard) => guard.unlock().await?,
//!     Err(e) if e.is_timeout() => println!("busy: {e}"),
//!     Err(e) => return Err(e),
//! }
//! # Ok(())
//! # }
//! ```
//!
//! See [`LockClient`] for the behaviour in detail (reentrancy, leases, watchdog,
//! connection loss) and [`LockGuard`] for release, loss notification and dropping.

mod backend;
mod client;
mod error;
mod guard;
mod held;
mod keys;
mod lease;
mod lock;
mod owner;
mod pubsub;
mod release;
mod scripts;
mod watchdog;

pub use client::{LockClient, LockClientBuilder};
pub use error::{LockError, LossReason, Result};
pub use guard::LockGuard;
pub use lease::MAX_LEASE;
pub use lock::Lock;
