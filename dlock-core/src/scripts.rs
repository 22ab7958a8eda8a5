//! The registry of Lua scripts: every primitive's scripts, built once per process and
//! loaded into each server when a client connects (see `Backend::connect`). A primitive's
//! `.lua` files live in its own folder; adding a primitive adds its scripts here.
//!
//! `redis::Script` sends `EVALSHA` and falls back to loading the script on `NOSCRIPT`
//! (after a server restart or failover the script cache is empty).

use std::sync::OnceLock;

use redis::Script;

/// Every primitive's scripts: the reentrant lock's (`lock/scripts/`), then the read-write
/// lock's (`rw/scripts/`, each prefixed with `rw/scripts/common.lua`).
pub(crate) struct Scripts {
    pub(crate) acquire: Script,
    pub(crate) release: Script,
    pub(crate) renew: Script,
    pub(crate) force_unlock: Script,
    pub(crate) rw_acquire: Script,
    pub(crate) rw_release: Script,
    pub(crate) rw_renew_read: Script,
    pub(crate) rw_renew_write: Script,
}

/// A read-write lock script: the shared functions, then its own body.
macro_rules! rw_script {
    ($file:literal) => {
        Script::new(concat!(
            include_str!("rw/scripts/common.lua"),
            include_str!(concat!("rw/scripts/", $file))
        ))
    };
}

/// Every script of every primitive: what a client loads into each server.
pub(crate) fn every_script() -> impl Iterator<Item = &'static Script> {
    let lock = scripts();
    [
        &lock.acquire,
        &lock.release,
        &lock.renew,
        &lock.force_unlock,
        &lock.rw_acquire,
        &lock.rw_release,
        &lock.rw_renew_read,
        &lock.rw_renew_write,
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
        rw_acquire: rw_script!("acquire.lua"),
        rw_release: rw_script!("release.lua"),
        rw_renew_read: rw_script!("renew_read.lua"),
        rw_renew_write: rw_script!("renew_write.lua"),
    })
}
