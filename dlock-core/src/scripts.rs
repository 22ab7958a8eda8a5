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

/// The fair lock's scripts (`fair/scripts/`), each prefixed with the shared `queue.lua`.
pub(crate) struct FairScripts {
    pub(crate) acquire: Script,
    pub(crate) release: Script,
    pub(crate) force_unlock: Script,
    pub(crate) queue_len: Script,
}

/// Every script of every primitive: what a client loads into each server.
pub(crate) fn every_script() -> impl Iterator<Item = &'static Script> {
    let (lock, fair) = (scripts(), fair_scripts());
    [
        &lock.acquire,
        &lock.release,
        &lock.renew,
        &lock.force_unlock,
        &fair.acquire,
        &fair.release,
        &fair.force_unlock,
        &fair.queue_len,
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

/// A fair-lock script: the shared functions of `queue.lua`, then the script itself.
macro_rules! fair_script {
    ($file:literal) => {
        Script::new(concat!(
            include_str!("fair/scripts/queue.lua"),
            include_str!(concat!("fair/scripts/", $file))
        ))
    };
}

pub(crate) fn fair_scripts() -> &'static FairScripts {
    static SCRIPTS: OnceLock<FairScripts> = OnceLock::new();
    SCRIPTS.get_or_init(|| FairScripts {
        acquire: fair_script!("acquire.lua"),
        release: fair_script!("release.lua"),
        force_unlock: fair_script!("force_unlock.lua"),
        queue_len: fair_script!("queue_len.lua"),
    })
}
