//! Distributed locks for async Rust on Redis.
//!
//! dlock implements Redisson's locks in async Rust: a reentrant lock stored as a Redis
//! hash and changed only by Lua scripts, a watchdog that renews leases while a guard lives,
//! waiting by pub/sub instead of polling, and releases that never touch another owner's
//! lock; around it the rest of the family (fair, read-write, semaphore, multi-lock,
//! RedLock), fencing tokens, and the [`#[distributed_lock]`](distributed_lock) attribute.
//!
//! ```
//! # #[tokio::main]
//! # async fn main() -> dlock::Result<()> {
//! # let server = dlock_tests::RedisServer::start();
//! # let redis_url = server.url();
//! use std::time::Duration;
//! use dlock::LockClient;
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
//! match lock.try_lock_with_lease(Duration::from_secs(3), Duration::from_secs(10)).await {
//!     Ok(guard) => guard.unlock().await?,
//!     Err(e) if e.is_timeout() => println!("busy: {e}"),
//!     Err(e) => return Err(e),
//! }
//! client.shutdown().await?;
//! # Ok(())
//! # }
//! ```
//!
//! # The primitives
//!
//! Every primitive comes from a [`LockClient`] (a RedLock from its own
//! [`RedLockClient`](redlock::RedLockClient)) and offers the same acquisition verbs:
//! `lock`, `lock_with_lease`, `try_lock`, `try_lock_for`, `try_lock_with_lease` (the
//! semaphore's are `acquire…`, taking a number of permits).
//!
//! | primitive | what it is | from | guard | when to use it |
//! |---|---|---|---|---|
//! | [`Lock`] | reentrant exclusive lock | [`client.lock(name)`](LockClient::lock) | [`LockGuard`] | one owner at a time: the default |
//! | [`FairLock`] | exclusive, granted in arrival order across processes | [`client.fair_lock(name)`](LockClient::fair_lock) | [`LockGuard`] | waiters must not overtake each other |
//! | [`ReadWriteLock`] | many readers or one writer | [`client.rw_lock(name)`](LockClient::rw_lock)`.read()` / `.write()` | [`LockGuard`] | reads far outnumber writes |
//! | [`Semaphore`] | up to N permits out at once, given back by crashed holders' leases | [`client.semaphore(name, permits)`](LockClient::semaphore) | [`SemaphorePermit`] | bounding concurrency (N calls to a rate-limited API) |
//! | [`MultiLock`] | several locks, all or none | [`client.multi_lock(names)`](LockClient::multi_lock) | [`MultiGuard`] | one operation over several resources (a transfer between two accounts) |
//! | [`RedLock`](redlock::RedLock) | an exclusive lock held on a majority of independent servers | [`RedLockClient::lock`](redlock::RedLockClient::lock) | [`RedLockGuard`](redlock::RedLockGuard) | no single Redis may be trusted to stay up |
//! | [`FencedWrites`](fencing::FencedWrites) | writes that Redis refuses from a holder that lost its lock | [`client.fenced()`](LockClient::fenced) | — | a lock's loss must not let a stale holder write |
//!
//! Every guard gives its hold back with `unlock().await` (`Err(`[`LockError::NotHeld`]`)`
//! when the hold was already gone: its lease ran out or it was force-unlocked), or in the
//! background when dropped; `scope(body)` runs a body so that nested acquisitions of the
//! same lock re-enter (a RedLock is not reentrant: its `scope` runs the body as is); the
//! locks that mint fencing tokens give them with `fencing_token()`.
//!
//! What holds under faults (killed holders, paused or restarted Redis, failovers) and what
//! Redis' asynchronous replication does not allow is measured in the repository's
//! `docs/RELIABILITY.md`; [`LockClientBuilder::replica_acks`] narrows the failover window.
//!
//! # Feature flags
//!
//! | feature | default | what it adds |
//! |---|---|---|
//! | `macros` | yes | the [`#[distributed_lock]`](distributed_lock) attribute (a proc-macro crate: `syn`, `quote`) |
//! | `tls` | yes | `rediss://` addresses, through rustls with the ring provider: about 10 more crates, and `ring` needs a C compiler to build |
//! | `config` | no | [`config`]: a client built from one TOML file (single, master-slave, Sentinel or cluster Redis) |
//! | `metrics` | no | counters, gauges and histograms through the `metrics` facade (see [Metrics](#metrics)) |
//!
//! `default-features = false` leaves a plain-TCP client without the attribute.
//!
//! # Supported Rust versions
//!
//! dlock is built and tested with Rust 1.95, its `rust-version` (minimum supported Rust
//! version). A newer minimum comes with a minor release (0.x → 0.x+1) and is named in
//! the changelog.
//!
//! # Cancel safety
//!
//! Every acquisition future may be dropped at any `.await` (a `select!`, a timeout, an
//! aborted task): a lock the acquisition may have taken is released in the background,
//! and its registration as a waiter is withdrawn, so nothing is left behind for another
//! process to wait out. Dropping a guard releases its hold in the background too;
//! [`LockClient::shutdown`] waits for those releases before a process exits.
//!
//! # Tracing
//!
//! Every acquisition, by any primitive, runs in an INFO span `dlock.acquire` with the
//! fields `lock` (the name; a multi-lock's names joined by `", "`), `kind` (see below),
//! `key_template` (only for [`distributed_lock`]: the key as written, `goods:<id>`),
//! `wait` (the budget: `2s`, or `unbounded`), and, recorded when it ends, `outcome`
//! (`acquired`, `timeout`, `error`, or `cancelled` when its future was dropped) and
//! `waited_ms`. The attribute runs its body in an INFO span `dlock.hold` (`lock`, `kind`,
//! `key_template`), open exactly as long as the body holds the lock, so lock waits and
//! hold times show up in traces. dlock's log events are unchanged, and now sit inside
//! these spans.
//!
//! # Metrics
//!
//! With the `metrics` feature (off by default), dlock records through the `metrics`
//! facade crate to whatever recorder the application installed (a
//! Prometheus exporter, StatsD, ...); without a recorder nothing is kept. Every series has
//! two labels, both bounded:
//!
//! - `kind`: `lock`, `fair_lock`, `read`, `write`, `semaphore`, `multi_lock`, `redlock`;
//! - `key_template`: for [`distributed_lock`], the key as written (`goods:<id>`; a
//!   `keys = [...]` multi-lock's templates joined by `", "`); for the manual API, which has
//!   no template, `*` (one series per kind). Never the lock's name: names grow with the
//!   data (one per item), and a label per name would make a series per item.
//!
//! | metric | type | counts |
//! |---|---|---|
//! | `dlock_acquisitions_total` | counter | acquisitions that got the lock (re-entries included) |
//! | `dlock_timeouts_total` | counter | acquisitions whose wait ran out |
//! | `dlock_acquire_errors_total` | counter | acquisitions that failed otherwise (Redis, bad input) |
//! | `dlock_skips_total` | counter | attribute bodies skipped because the lock was busy (that acquisition is a timeout too) |
//! | `dlock_losses_total` | counter | held locks found lost (lease ran out, key gone) |
//! | `dlock_release_errors_total` | counter | releases that found the lock not held or failed (per lock, in the background too) |
//! | `dlock_wait_seconds` | histogram | from the call to the acquired lock |
//! | `dlock_hold_seconds` | histogram | from the acquired lock to its guard's release or drop |
//! | `dlock_waiters` | gauge | acquisitions of this process in progress |
//! | `dlock_locks_held` | gauge | guards of this process alive |
//!
//! A multi-lock is one acquisition and one hold (not one per lock). [`LockClient::stats`]
//! keeps its own per-client counters with or without the feature. Scraped from a
//! Prometheus exporter after five sales through `#[distributed_lock(key = "goods:<id>")]`:
//!
//! ```text
//! dlock_acquisitions_total{kind="lock",key_template="goods:<id>"} 5
//! dlock_hold_seconds_count{kind="lock",key_template="goods:<id>"} 5
//! dlock_locks_held{kind="lock",key_template="goods:<id>"} 0
//! ```
//!
//! The repository's stock demo serves them on `/metrics` (`examples/stock-demo`).

#![warn(missing_debug_implementations, unreachable_pub)]
#![cfg_attr(docsrs, feature(doc_cfg))]

#[doc(inline)]
pub use dlock_core::*;

#[doc(hidden)]
pub use dlock_core::__private;

/// A [`LockClient`] built from one TOML file: which Redis deployment (single,
/// master-slave, Sentinel or cluster), the connection, the lock settings.
///
/// This is the `dlock-config` crate; [`Config`](config::Config) reads the file.
#[cfg(feature = "config")]
#[cfg_attr(docsrs, doc(cfg(feature = "config")))]
#[doc(inline)]
pub use dlock_config as config;

/// The repository README's code blocks, compiled as doc tests so that the quick start
/// cannot drift from the API: Rust blocks that need a Redis server are `no_run` (compiled,
/// not run), output is `text`.
#[cfg(doctest)]
#[doc = include_str!("../../README.md")]
mod readme {}

/// Runs an async function's body while holding a distributed lock.
///
/// ```
/// use dlock::{distributed_lock, LockClient, LockError};
///
/// #[derive(Debug)]
/// enum AppError {
///     Lock(LockError),
///     SoldOut,
/// }
///
/// impl From<LockError> for AppError {
///     fn from(e: LockError) -> Self {
///         AppError::Lock(e)
///     }
/// }
///
/// #[distributed_lock(key = "goods:<id>", lease = "5s")]
/// async fn buy(id: u64, stock: &mut u32) -> Result<u32, AppError> {
///     if *stock == 0 {
///         return Err(AppError::SoldOut); // the lock is released on this path too
///     }
///     *stock -= 1;
///     Ok(*stock)
/// }
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), AppError> {
/// # let server = dlock_tests::RedisServer::start();
/// # let redis_url = server.url();
/// // At start-up, once:
/// dlock::set_global(LockClient::connect(&redis_url).await?).ok();
///
/// let mut stock = 1;
/// assert_eq!(buy(42, &mut stock).await?, 0);
/// assert!(matches!(buy(42, &mut stock).await, Err(AppError::SoldOut)));
/// # Ok(())
/// # }
/// ```
///
/// is the same as writing
///
/// ```
/// # use dlock::{LockClient, LockError};
/// # #[derive(Debug)] enum AppError { Lock(LockError), SoldOut }
/// # impl From<LockError> for AppError { fn from(e: LockError) -> Self { AppError::Lock(e) } }
/// async fn buy(id: u64, stock: &mut u32) -> Result<u32, AppError> {
///     let client = dlock::global_client()?;
///     let guard = client
///         .lock(&format!("goods:{}", id))
///         .lock_with_lease(std::time::Duration::from_secs(5))
///         .await?;
///     let result = guard
///         .scope(async move {
///             if *stock == 0 {
///                 return Err(AppError::SoldOut);
///             }
///             *stock -= 1;
///             Ok(*stock)
///         })
///         .await;
///     if let Err(e) = guard.unlock().await {
///         tracing::warn!("release failed: {e}");
///     }
///     result
/// }
/// ```
///
/// The function keeps its signature, visibility, generics and attributes. The body runs
/// only while the lock is held, inside the guard's [`scope`](LockGuard::scope), so a
/// nested call that takes the same key re-enters instead of deadlocking, while concurrent
/// calls (also ones `join!`ed in one task) exclude each other. The lock is released on
/// every exit: `Ok`, `Err`, `return`, `?`, a panic (in the background, as the guard drops)
/// and cancellation of the returned future.
///
/// # Options
///
/// | option | value | default |
/// |---|---|---|
/// | `key` | template, e.g. `"goods:<id>"` (this or `keys` is required) | — |
/// | `keys` | array of templates, e.g. `["account:<from>", "account:<to>"]`: a multi-lock | — |
/// | `kind` | `"reentrant"`, `"fair"`, `"read"` or `"write"` | `"reentrant"` |
/// | `permits` | `4`: one permit of the semaphore `key` with this capacity | — |
/// | `lease` | duration string: `"500ms"`, `"5s"`, `"2m"`, `"1h"` | watchdog renewal |
/// | `wait` | duration string; `"0s"` tries once | the client's `default_wait` (until acquired unless set) |
/// | `on_busy` | `"wait"`, `"skip"` or `"fail"`: what a call does when another owner holds the lock | `"wait"` |
/// | `min_hold` | duration string: the lock stays taken at least this long after acquisition | released at the body's end |
/// | `client` | expression giving a [`LockClient`] or a [`RedLockClient`](redlock::RedLockClient) (or a reference or `Arc` of one) | the client registered with [`set_global`] |
/// | `on_fail` | path of a fn taking the [`LockError`] and returning the function's type | `return Err(error.into())` |
/// | `on_lost` | `"cancel"`, `"error"` or `"ignore"`: what a lock lost while the body runs does | `"cancel"` |
/// | `crate` | path of the `dlock` crate as this crate names it, e.g. `crate = locks` (or `"locks"`) | `::dlock` |
///
/// - **`key`**: literal text with placeholders. `<param>` inserts a parameter with
///   `Display`; `<param.field.sub>` (or `<self.field>` in methods, `<pair.0>`) inserts a
///   field. A parameter destructured in the signature, such as `Path(id): Path<u64>` in an
///   axum handler, is named by its binding: `<id>`. Braces are literal text, so Redis Cluster
///   hash tags like `"{goods}:<id>"` work. The client's key prefix is applied. The template is
///   parsed at compile time; at run time the key is one `format!`. A key without any
///   placeholder on a function that has parameters is legal and means what it says: one
///   lock for every call, whatever the arguments (a global lock, e.g. `key = "nightly-report"`
///   on `async fn report(day: Date)`); write `<param>` where calls for different values
///   should run concurrently.
/// - **`kind`**: which lock guards the body. `"reentrant"` is [`LockClient::lock`];
///   `"fair"` is [`LockClient::fair_lock`] (granted in arrival order across processes);
///   `"read"` and `"write"` are the two sides of [`LockClient::rw_lock`] on the same key:
///   any number of `"read"` bodies run together, a `"write"` body runs alone. Nested
///   attribute functions follow the primitive's rules: a `"read"` function called from a
///   `"write"` one on the same key reads under the write (a downgrade), a `"write"`
///   function called from a `"read"` one fails at once with
///   [`LockError::UpgradeNotSupported`] instead of waiting for itself.
/// - **`keys`** (instead of `key`): every lock of the list or none, as a
///   [`MultiLock`]: in one script when the keys share a cluster slot, else one after
///   another in the canonical order, so `transfer(a, b)` and `transfer(b, a)` can run
///   concurrently without deadlock. Each lock is re-entered inside the body like a `key`
///   lock. Not combined with `kind` or `permits`.
/// - **`permits`**: the body holds one permit of [`LockClient::semaphore`]`(key, permits)`,
///   so up to `permits` calls run at once across processes. Every process must give the
///   same number ([`LockError::CapacityMismatch`] otherwise). Not combined with `kind`.
/// - **`lease`**: the lock expires after it and is never renewed; without it the watchdog
///   renews the lease while the body runs. Checked at compile time (1 ms to 366 days).
/// - **`wait`**: how long to wait for the lock; when it passes the function fails with
///   [`LockError::Timeout`] without running the body. Without `wait` the call waits as the
///   client's [`default_wait`](LockClientBuilder::default_wait) says: until the lock is
///   acquired, unless the client was built with a default wait.
/// - **`on_busy`**: what a call does when another owner holds the lock (the intents of
///   ShedLock and lock4j):
///   - `"wait"` (the default): wait as `wait` says, as above.
///   - `"skip"`: try once; when busy, run nothing and return at once `None` (for an
///     `Option<T>` function), `Ok(None)` (for `Result<Option<T>, E>`) or `()` (no return
///     type); any other return type is a compile error. A skip is counted in
///     [`Stats::skipped`](inspect::Stats::skipped) of the client ([`LockClient::stats`]; a [`RedLockClient`](redlock::RedLockClient) keeps
///     no statistics) and traced as a `tracing` debug event naming the lock. Other failures
///     (Redis down, a lost lock) are not skips: they go to `on_fail` or the `Result`'s
///     error as usual; an `Option<T>` or `()` function without `on_fail` has nowhere to put
///     them, so it returns `None` / `()` too and logs a `tracing` warning naming the
///     function. This is the "run once per tick across nodes" scheduled job: every node
///     fires the tick, one runs the body, the others skip.
///   - `"fail"`: try once (like `wait = "0s"`, whatever the client's `default_wait`);
///     when busy fail with [`LockError::Timeout`] without running the body.
///
///   `"skip"` and `"fail"` try once, so they take no `wait` (a compile error).
/// - **`min_hold`** (ShedLock's `lockAtLeastFor`): when the body ends before
///   acquisition + `min_hold`, the lock is not deleted: the owner's hold is dropped and the
///   key is left to expire at acquisition + `min_hold`, so every caller meanwhile finds it
///   busy and waiters are woken by that expiry, not before. One script does it, and only if
///   the lock is still this owner's (held once): another owner's lock is never touched. A
///   body that ran longer releases normally. With `on_busy = "skip"` this is the scheduled
///   job run once per tick across nodes even when their clocks or ticks drift apart (a
///   node whose tick comes a little late finds the lock still taken and skips); the
///   repository's `examples/scheduled-job` runs it in three processes. Only on the
///   reentrant lock of one `key` of a [`LockClient`] (not with `keys`, `permits`, another
///   `kind` or a [`RedLockClient`](redlock::RedLockClient): compile errors), at most `lease` when a `lease` is
///   given (checked at compile time). If Redis fails at that moment the lock is left to
///   its lease rather than freed early.
/// - **`client`**: e.g. `client = state.locks` or `client = self.locks`. With a
///   [`RedLockClient`](redlock::RedLockClient) the body runs under a RedLock (not reentrant; `kind` and `permits`
///   are then refused with [`LockError::Config`] at the call).
/// - **`on_fail`**: `on_fail = busy` calls `busy(error)` and returns what it returns. This
///   is the way for an error type that cannot have `From<LockError>` (one of another
///   crate, such as axum's `StatusCode`: the orphan rule forbids the impl), and for axum
///   handlers returning `impl IntoResponse`. Two recipes work there: return
///   `Result<impl IntoResponse, AppError>` where your `AppError` implements
///   `From<LockError>` and `IntoResponse`, or keep `-> impl IntoResponse` (or `Response`)
///   and give `on_fail = locked_out` with `fn locked_out(e: LockError) -> Response`, the
///   body returning a `Response` too (an `impl Trait` return is one concrete type).
/// - **`crate`**: for a renamed dependency (`locks = { package = "dlock", ... }` in
///   Cargo.toml) write `crate = locks`: every path the expansion generates then starts
///   there instead of at `::dlock`, as serde's and tokio's `crate` options do.
/// - **`on_lost`**: the body has no guard in scope, so the attribute watches for the lock
///   being lost ([`LockError::Lost`]: a lease running out, a renewal finding the key gone,
///   Redis unreachable past the lease) and acts on it:
///   - `"cancel"` (the default): the body's future is dropped as soon as the guard learns
///     of the loss, so the body stops at the `.await` it is suspended in, and the function
///     fails with the loss like any lock error (`Err(error.into())`, or `on_fail`).
///   - `"error"`: the body runs to its end, then the function fails with the loss, unless
///     the body already returned `Err` (that first error is kept).
///   - `"ignore"`: the body's value is returned as before the option existed; the loss is
///     logged as a `tracing` warning naming the lock.
///
///   Why `"cancel"` by default: once the lock is lost another holder may be inside, and
///   every write the body makes after that is exactly the oversell the lock exists to
///   prevent. Stopping the body at its next `.await` is the closest a library can get; the
///   writes between the loss and that `.await` (and any the body makes before the guard can
///   know, e.g. between a renewal and the next) are what fencing tokens cover. `"error"` is
///   for bodies that must not be interrupted halfway (they then need fenced writes to be
///   safe), like klock's `FAIL_FAST`, which reports a lease that ran out when the method
///   exits; `"ignore"` keeps the old behaviour and only logs, as lock4j does with a failed
///   release. In every mode a body that finished before any loss returns normally: a
///   released lock is never reported lost. The loss is what the guard knows when the body
///   ends: an explicit `lease` counts as lost once it has run out, a watchdog lock once a
///   renewal found it gone (so a key deleted behind a watchdog lock is noticed within a
///   third of `watchdog_timeout`).
///
///   With `on_fail`, a loss in `"cancel"` or `"error"` mode also goes to the handler, and
///   its value is returned instead of the body's (in `"error"` mode even if the body
///   returned an error of its own: the handler decides).
///
/// # Failure
///
/// When the lock cannot be acquired (timeout, Redis error, no registered client) the body
/// does not run: there is no mode that runs the body without the lock, neither by default
/// nor on a Redis outage (unlike klock's default, which runs it unlocked). The function
/// returns `Err(From::from(error))`, so its return type must be a `Result` (any type named
/// `…Result`) whose error implements `From<LockError>`, or it calls `on_fail`. A function
/// that can do neither is a compile error saying so, and an error type without
/// `From<LockError>` is a compile error on the return type that points to `on_fail`. A
/// failed release after the body cannot change the body's result; it is logged with
/// `tracing`. A lock lost while the body runs is a failure too, by default (see `on_lost`).
///
/// The process-wide client is looked up at each call, so a service that never called
/// [`set_global`] would find out at its first request ([`LockError::NoClient`], which names
/// the function that needed the client). Check it at start-up instead, right after
/// registering: `dlock::global_client()?;` fails the boot when nothing was
/// registered.
///
/// # Tracing and metrics
///
/// The acquisition's `dlock.acquire` span and its metrics carry the key template as
/// written (`key_template = "goods:<id>"`), and the body runs in a `dlock.hold` span (see
/// the crate's `# Tracing` and `# Metrics`).
///
/// # Compile errors
///
/// Spanned on the offending token: unknown or duplicate option, unknown `kind`, missing
/// `key`, both `key` and `keys`, `keys` that is not a non-empty array of strings, `kind`
/// with `keys` or `permits`, `permits` that is not a whole number from 1, empty key,
/// unterminated `<`, a placeholder naming no parameter (the message lists the parameters),
/// a bad duration, an `on_lost` that is not `"cancel"`, `"error"` or `"ignore"`, an
/// `on_busy` that is not `"wait"`, `"skip"` or `"fail"`, `"skip"` or `"fail"` with `wait`,
/// `"skip"` on a function returning neither `Option<T>`, `Result<Option<T>, E>` nor `()`, a
/// `min_hold` longer than `lease` or with `keys`, `permits`, another `kind` or a
/// [`RedLockClient`](redlock::RedLockClient), a
/// non-async function, a function that cannot report failure, and an error type without
/// `From<LockError>` (pointing to `on_fail`).
#[cfg(feature = "macros")]
#[cfg_attr(docsrs, doc(cfg(feature = "macros")))]
#[doc(inline)]
pub use dlock_macros::distributed_lock;
