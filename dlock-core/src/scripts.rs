//! The registry of Lua scripts: every primitive's scripts, built once per process and
//! loaded into each server when a client connects (see `Backend::connect`). A primitive's
//! `.lua` files live in its own folder; adding a primitive adds its scripts here.
//!
//! `redis::Script` sends `EVALSHA` and falls back to loading the script on `NOSCRIPT`
//! (after a server restart or failover the script cache is empty).

use std::sync::OnceLock;

use redis::Script;

/// The reentrant lock's scripts (`lock/scripts/`).
pub(crate) struct Scripts {
    pub(crate) acquire: Script,
    pub(crate) release: Script,
    pub(crate) renew: Script,
    pub(crate) force_unlock: Script,
}

/// Every script of every primitive: what a client loads into each server.
pub(crate) fn every_script() -> impl Iterator<Item = &'static Script> {
    let lock = scripts();
    [
        &lock.acquire,
        &lock.release,
        &lock.renew,
        &lock.force_unlock,
    ]
    .into_iter()
}

pub(crate) fn scripts() -> &'static Scripts {
    static SCRIPTS: OnceLock<Scripts> = OnceLock::new();
    SCRIPTS.get_or_init(|| Scripts {
        acquire: Script::new(include_str!("lock/scripts/acquire.lua")),
        release: Script::new(include_str!("lock/scripts/release.lua")),
        renew: Script::new(include_str!("lock/scripts/renew.lua")),
        force_unlock: Script::new(include_str!("lock/scripts/force_unlock.lua")),
    })
}
