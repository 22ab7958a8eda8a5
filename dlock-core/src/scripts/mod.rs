//! The machinery of dlock's Lua scripts: a primitive's `.lua` files live in its own folder
//! (`<folder>/scripts/`); here are the generated prelude and the shared Lua (`clock.lua`:
//! server time; `naps.lua`: what each waiter was told), the splice that assembles a
//! script ([`lua_script!`]), and the catalog that builds every folder's scripts.
//!
//! - `script`: one script and one call of it;
//! - `catalog`: every script, by folder, and `every_script()`, the one list of them all,
//!   which each client loads (`SCRIPT LOAD`, see `redis::scripting`);
//! - `library`: every script as one Redis 7 function library.

pub(crate) mod catalog;
mod library;
mod script;

pub use library::FunctionLibrary;
pub(crate) use script::{Oom, Script, ScriptCall};

use std::time::Duration;

use crate::lease::{MAX_COMMAND_TIMEOUT, MAX_LEASE};
use crate::names::MAX_NAME_LEN;

/// The most holders a semaphore or a read-write lock has at once: its grants or its
/// owners (readers, or the writer) across every client. One more is refused with
/// [`LockError::TooManyHolders`](crate::LockError::TooManyHolders). The bound keeps
/// every script call short: a semaphore's permits in use and a read-write lock's
/// live readers are counted over all of its holders in one call, which Redis runs
/// while every other client waits (about 1 µs per holder).
pub const MAX_HOLDERS: usize = 1024;

/// A script: its body `$body` with the shared functions of the `$shared` files (paths
/// under `src/`, wherever the macro is used) spliced in at its [`SHARED_MARK`] line, or
/// before it when it has none.
macro_rules! lua_script {
    ($make:ident, $name:literal, $body:literal $(, $shared:literal)* $(,)?) => {
        $crate::scripts::Script::$make(
            $name,
            $crate::scripts::splice(
                include_str!(concat!(env!("CARGO_MANIFEST_DIR"), "/src/", $body)),
                &[$(include_str!(concat!(env!("CARGO_MANIFEST_DIR"), "/src/", $shared))),*],
            ),
        )
    };
}
pub(crate) use lua_script;

/// Where a script's body takes its shared functions. Its common case runs above this line
/// and returns before the functions are defined: each definition costs Redis a closure
/// per call (measured: ten of them halve the calls per second of an empty script).
const SHARED_MARK: &str = "-- @shared\n";

/// The generated Lua every script starts with: the limits the Rust side owns, written
/// once. `MAX_LEASE_MS` is [`MAX_LEASE`] in milliseconds, the longest lease a script
/// accepts; `MAX_MEMO_MS` and `MAX_MEMO_NAME` bound the one key a release may create;
/// `MAX_HOLDERS` and `MAX_BATCH` bound the work of one call (see [`MAX_BATCH`]). A
/// constant costs a script nothing measurable, unlike a function definition.
fn prelude() -> String {
    format!(
        "local MAX_LEASE_MS = {}\nlocal MAX_MEMO_MS = {}\nlocal MAX_MEMO_NAME = {}\n\
         local MAX_HOLDERS = {}\nlocal MAX_BATCH = {}\n",
        MAX_LEASE.as_millis(),
        MAX_MEMO_LIFETIME.as_millis(),
        MAX_MEMO_NAME,
        MAX_HOLDERS,
        MAX_BATCH,
    )
}

/// The most entries one script call takes from a sorted set by score: dead queue entries
/// and lapsed waiting writers purged, waiters told to try again. A script never reads a
/// range without this bound, so no call's work grows with what a set holds; what is left
/// is taken by the next call (a dead entry at a queue's head makes its waiters try again
/// at once, so the purge goes on). A set written only by dlock holds one entry per
/// waiting owner: with more than this many owners told to try again by one call (a new
/// holder with a much shorter lease than the last one, under a crowd of waiters), the
/// rest sleep until the time they were promised, or until the next holder's call tells
/// them.
const MAX_BATCH: usize = 512;

/// The longest a release memo lives: the memo lifetime of a client with the longest
/// command timeout (3 × [`MAX_COMMAND_TIMEOUT`] + 1 s, see `client::Settings::memo_ttl`).
const MAX_MEMO_LIFETIME: Duration = Duration::from_secs(3 * MAX_COMMAND_TIMEOUT.as_secs() + 1);

/// The longest release memo name: `dlock:release:`, a key prefix and a hash tag of at most
/// [`MAX_NAME_LEN`] bytes each, an owner field and an operation number.
const MAX_MEMO_NAME: usize = 2 * MAX_NAME_LEN + 256;

/// `body` after the [`prelude`], with `shared` (concatenated) spliced in at its
/// [`SHARED_MARK`], or before it.
pub(crate) fn splice(body: &str, shared: &[&str]) -> String {
    let (prelude, shared) = (prelude(), shared.concat());
    match body.split_once(SHARED_MARK) {
        Some((above, below)) => format!("{prelude}{above}{shared}{below}"),
        None => format!("{prelude}{shared}{body}"),
    }
}
