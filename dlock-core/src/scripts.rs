//! The Lua scripts behind every state change, loaded once per process.
//!
//! `redis::Script` sends `EVALSHA` and falls back to loading the script on `NOSCRIPT`
//! (after a server restart or failover the script cache is empty).

use std::sync::OnceLock;

use redis::Script;

pub(crate) struct Scripts {
    pub(crate) acquire: Script,
    pub(crate) release: Script,
    pub(crate) renew: Script,
    pub(crate) force_unlock: Script,
}

pub(crate) fn scripts() -> &'static Scripts {
    static SCRIPTS: OnceLock<Scripts> = OnceLock::new();
    SCRIPTS.get_or_init(|| Scripts {
        acquire: Script::new(include_str!("scripts/acquire.lua")),
        release: Script::new(include_str!("scripts/release.lua")),
        renew: Script::new(include_str!("scripts/renew.lua")),
        force_unlock: Script::new(include_str!("scripts/force_unlock.lua")),
    })
}
