//! The semaphore's scripts, built once per process.
//!
//! Each script is a `.lua` file of `semaphore/scripts/` with the shared Lua it names spliced in
//! (see `scripts::lua_script!`); `all` is its line in [`every_script`](super::every_script).

use std::sync::OnceLock;

use crate::scripts::{lua_script, Script};

/// The semaphore's scripts (`semaphore/scripts/`), each with `scripts/clock.lua` and the
/// semaphore's `common.lua`.
pub(crate) struct SemScripts {
    pub(crate) acquire: Script,
    pub(crate) release: Script,
    pub(crate) renew: Script,
    pub(crate) available: Script,
    pub(crate) set_permits: Script,
}

pub(crate) fn sem_scripts() -> &'static SemScripts {
    static SCRIPTS: OnceLock<SemScripts> = OnceLock::new();
    SCRIPTS.get_or_init(|| SemScripts {
        acquire: lua_script!(
            creating,
            "sem_acquire",
            "semaphore/scripts/acquire.lua",
            "scripts/clock.lua",
            "semaphore/scripts/common.lua"
        ),
        release: lua_script!(
            new,
            "sem_release",
            "semaphore/scripts/release.lua",
            "scripts/clock.lua",
            "semaphore/scripts/common.lua"
        ),
        renew: lua_script!(
            new,
            "sem_renew",
            "semaphore/scripts/renew.lua",
            "scripts/clock.lua",
            "semaphore/scripts/common.lua"
        ),
        available: lua_script!(
            new,
            "sem_available",
            "semaphore/scripts/available.lua",
            "scripts/clock.lua",
            "semaphore/scripts/common.lua"
        ),
        set_permits: lua_script!(
            creating,
            "sem_set_permits",
            "semaphore/scripts/set_permits.lua",
            "scripts/clock.lua",
            "semaphore/scripts/common.lua"
        ),
    })
}

/// Every script of this folder, for the client to load and the function library to hold.
pub(crate) fn all() -> Vec<&'static Script> {
    let scripts = sem_scripts();
    vec![
        &scripts.acquire,
        &scripts.release,
        &scripts.renew,
        &scripts.available,
        &scripts.set_permits,
    ]
}
