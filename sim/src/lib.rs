//! A deterministic simulator of dlock's hand-off protocol (docs/PROTOCOL.md): dlock's own
//! Lua scripts, unchanged, on an in-memory Redis whose clock the simulator moves, driven
//! by simulated clients through every order of the events that real ones meet: scripts
//! run in any order between connections, replies and messages arrive late, owners give up,
//! processes die, leases run out. A test crate, not a dependency of `dlock`.
//!
//! - [`redis`]: the in-memory Redis, with the commands the lock's scripts call.
//! - [`lua`]: the scripts, run by Lua 5.1 as Redis runs them.
//! - [`model`]: the world: the lock in Redis, clients deciding as dlock's client does,
//!   the network between them, the faults left to inject, and the invariants.
//! - [`explore`]: every order of events (or seeded random walks), and a counterexample's
//!   trace.
//! - `fingerprint`: the key a world is remembered by.

pub mod explore;
mod fingerprint;
pub mod lua;
pub mod model;
pub mod redis;
