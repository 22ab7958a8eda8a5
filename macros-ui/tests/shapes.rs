//! Function shapes the attribute must accept: this file compiling is most of the test,
//! and the test checks that the futures are `Send` (no Redis needed: the functions are
//! only type-checked and referenced). A test of its own, not a trybuild pass case: with
//! pass cases trybuild builds the facade and its dependencies in full, for compile errors
//! alone it only checks them.
#![allow(dead_code)]
// The public items are shapes to expand (visibility must survive the attribute), not an
// API to document; the `?` inside `Ok` is a body shape the attribute must keep as written.
#![allow(missing_docs, clippy::needless_question_mark)]

use std::fmt::Display;
use std::sync::Arc;

use dlock::{distributed_lock, LockClient, LockError};

#[derive(Debug)]
pub struct AppError;

impl From<LockError> for AppError {
    fn from(_: LockError) -> Self {
        AppError
    }
}

pub type AppResult<T> = Result<T, AppError>;

/// Doc comments and other attributes stay on the function.
#[distributed_lock(key = "goods:<id>", lease = "5s", wait = "250ms")]
#[inline]
pub async fn free_function(id: u64, qty: u32) -> Result<u32, AppError> {
    #![allow(unused_variables)]
    let unused = qty;
    if id == 0 {
        return Err(AppError);
    }
    Ok(u32::try_from(id).map_err(|_| AppError)?)
}

/// Braces and `#` that do not name a parameter are literal text: a hash tag of constant
/// text, one made of a parameter, and a `#` in the name.
#[distributed_lock(key = "{goods}:{<id>}:#1:{qty")]
async fn hash_tags(id: u64, qty: u32) -> AppResult<u64> {
    Ok(id + u64::from(qty))
}

#[distributed_lock(key = "any")]
async fn alias_result() -> AppResult<()> {
    Ok(())
}

#[distributed_lock(key = "io")]
async fn io_result() -> std::io::Result<()> {
    Ok(())
}

// With `-> impl Trait` the handler must return the same concrete type as the body.
fn busy(error: LockError) -> String {
    error.to_string()
}

#[distributed_lock(key = "report:<name>", on_fail = busy)]
async fn impl_trait_return(name: impl Display + Send) -> impl Display {
    format!("report for {name}")
}

#[distributed_lock(key = "generic:<item>", wait = "0s")]
async fn generic<T: Display + Send + Sync>(item: &T) -> Result<String, AppError> {
    Ok(item.to_string())
}

pub struct Path<T>(pub T);
pub struct Order {
    pub user: (u64, String),
}

#[distributed_lock(key = "order:<id>:<order.user.0>")]
async fn destructured(Path(id): Path<u64>, order: Order) -> Result<u64, AppError> {
    Ok(id + order.user.0)
}

fn unit_on_fail(_: LockError) {}

#[distributed_lock(key = "unit", on_fail = unit_on_fail)]
async fn returns_unit() {}

pub struct Shop {
    locks: LockClient,
    shared: Arc<LockClient>,
    id: u64,
}

impl Shop {
    #[distributed_lock(key = "shop:<self.id>", client = self.locks)]
    async fn by_ref(&self) -> Result<u64, AppError> {
        Ok(self.id)
    }

    #[distributed_lock(key = "shop:<self.id>:<n>", client = self.shared)]
    async fn by_mut(&mut self, n: u64) -> Result<(), AppError> {
        self.id += n;
        Ok(())
    }

    #[distributed_lock(key = "shop:<self.id>", client = &self.locks)]
    async fn by_value(self) -> Result<u64, AppError> {
        Ok(self.id)
    }
}

// An application's own trait: the attribute on its implementation is what is tested.
#[allow(async_fn_in_trait)]
pub trait Inventory {
    async fn restock(&self, id: u64) -> Result<(), AppError>;
}

impl Inventory for Shop {
    #[distributed_lock(key = "restock:<id>", client = self.locks)]
    async fn restock(&self, id: u64) -> Result<(), AppError> {
        Ok(())
    }
}

/// Every kind of lock, with the options that apply to each.
#[distributed_lock(key = "queue:<id>", kind = "fair", wait = "2s")]
async fn fair(id: u64) -> AppResult<()> {
    let _ = id;
    Ok(())
}

#[distributed_lock(key = "catalog:<shop>", kind = "read")]
async fn read(shop: u32) -> AppResult<u32> {
    Ok(shop)
}

#[distributed_lock(key = "catalog:<shop>", kind = "write", lease = "10s")]
async fn write(shop: u32) -> AppResult<()> {
    let _ = shop;
    Ok(())
}

#[distributed_lock(key = "goods:<id>", kind = "reentrant")]
async fn reentrant(id: u64) -> AppResult<u64> {
    Ok(id)
}

/// Every `on_lost` mode, with the `Result` path and with `on_fail`.
#[distributed_lock(key = "report:<day>", on_lost = "cancel", lease = "1s")]
async fn on_lost_cancel(day: u32) -> AppResult<u32> {
    Ok(day)
}

#[distributed_lock(key = "report:<day>", on_lost = "error")]
async fn on_lost_error(day: u32) -> std::io::Result<u32> {
    Ok(day)
}

#[distributed_lock(key = "report:<day>", on_lost = "error", on_fail = unit_on_fail)]
async fn on_lost_error_on_fail(day: u32) {
    let _ = day;
}

#[distributed_lock(keys = ["a:<day>", "b:<day>"], on_lost = "ignore")]
async fn on_lost_ignore(day: u32) -> AppResult<u32> {
    Ok(day)
}

/// Every `on_busy` mode: "skip" on each return type that can say "skipped", alone and
/// with `keys`, `permits`, `on_fail` and `lease`.
#[distributed_lock(key = "tick:<job>", on_busy = "skip")]
async fn skip_option(job: u32) -> Option<u32> {
    Some(job)
}

#[distributed_lock(key = "tick:<job>", on_busy = "skip", lease = "5s")]
async fn skip_result_option(job: u32) -> AppResult<Option<u32>> {
    Ok(Some(job))
}

#[distributed_lock(keys = ["a:<job>", "b:<job>"], on_busy = "skip")]
async fn skip_unit(job: u32) {
    let _ = job;
}

#[distributed_lock(key = "pool:<job>", permits = 2, on_busy = "skip", on_fail = unit_on_fail)]
async fn skip_unit_on_fail(job: u32) -> () {
    let _ = job;
}

/// `min_hold` with `on_busy = "skip"`: the scheduled job run once per tick across nodes.
#[distributed_lock(key = "job:<name>", on_busy = "skip", min_hold = "50s")]
async fn scheduled(name: &str) {
    let _ = name;
}

#[distributed_lock(key = "job:<name>", min_hold = "5s", lease = "5s", on_lost = "ignore")]
async fn min_hold_within_lease(name: &str) -> AppResult<()> {
    let _ = name;
    Ok(())
}

#[distributed_lock(key = "report:<day>", on_busy = "fail")]
async fn busy_fails(day: u32) -> AppResult<u32> {
    Ok(day)
}

#[distributed_lock(key = "report:<day>", on_busy = "wait", wait = "1s")]
async fn busy_waits(day: u32) -> AppResult<u32> {
    Ok(day)
}

/// A foreign error type (no `From<LockError>` possible) works through `on_fail`.
pub struct StatusCode(pub u16);

fn conflict(_: LockError) -> Result<u64, StatusCode> {
    Err(StatusCode(409))
}

#[distributed_lock(key = "goods:<id>", on_fail = conflict)]
async fn foreign_error(id: u64) -> Result<u64, StatusCode> {
    Ok(id)
}

/// `crate = ...` names the dlock crate by another name (as a dependency renamed in
/// Cargo.toml does), as a path or (like serde and tokio) a string.
extern crate dlock as locks;

#[distributed_lock(key = "goods:<id>", crate = locks)]
async fn renamed(id: u64) -> AppResult<u64> {
    Ok(id)
}

#[distributed_lock(key = "goods:<id>", crate = "::locks")]
async fn renamed_as_string(id: u64) -> AppResult<u64> {
    Ok(id)
}

/// The expansion keeps a `Send` body's future `Send` in every mode (spawnable).
fn assert_send<F: std::future::Future + Send>(_: F) {}

#[test]
fn the_shapes_compile_and_their_futures_are_send() {
    assert_send(on_lost_cancel(1));
    assert_send(on_lost_error(1));
    assert_send(on_lost_ignore(1));
    assert_send(free_function(1, 1));
    assert_send(skip_option(1));
    assert_send(skip_unit(1));
    assert_send(scheduled("report"));
    // Referencing the futures' types is enough: this suite checks that the shapes compile.
    let _ = free_function;
    let _ = alias_result;
    let _ = io_result;
    let _ = generic::<u8>;
    let _ = destructured;
    let _ = returns_unit;
    let _ = (fair, read, write, reentrant);
    let _ = (
        skip_result_option,
        skip_unit_on_fail,
        busy_fails,
        busy_waits,
    );
    let _ = (foreign_error, renamed, renamed_as_string);
    let _ = (scheduled, min_hold_within_lease);
}
