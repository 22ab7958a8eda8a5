//! The read-write lock's scripts, built once per process.
//!
//! Each script is a `.lua` file of `rw/scripts/` with the shared Lua it names spliced in
//! (see `scripts::lua_script!`); `all` is its line in [`every_script`](super::every_script).

use std::sync::OnceLock;

use crate::scripts::{lua_script, Script};

/// The read-write lock's scripts (`rw/scripts/`), each with `scripts/clock.lua` and the
/// read-write lock's `common.lua` (the acquisition also with `scripts/naps.lua`).
pub(crate) struct RwScripts {
    pub(crate) acquire: Script,
    pub(crate) release: Script,
    pub(crate) renew_read: Script,
    pub(crate) renew_write: Script,
}

pub(crate) fn rw_scripts() -> &'static RwScripts {
    static SCRIPTS: OnceLock<RwScripts> = OnceLock::new();
    SCRIPTS.get_or_init(|| RwScripts {
        acquire: lua_script!(
            creating,
            "rw_acquire",
            "rw/scripts/acquire.lua",
            "scripts/clock.lua",
            "scripts/naps.lua",
            "rw/scripts/common.lua"
        ),
        release: lua_script!(
            new,
            "rw_release",
            "rw/scripts/release.lua",
            "scripts/clock.lua",
            "scripts/naps.lua",
            "rw/scripts/common.lua"
        ),
        renew_read: lua_script!(
            new,
            "rw_renew_read",
            "rw/scripts/renew_read.lua",
            "scripts/clock.lua",
            "rw/scripts/common.lua"
        ),
        renew_write: lua_script!(
            new,
            "rw_renew_write",
            "rw/scripts/renew_write.lua",
            "scripts/clock.lua",
            "rw/scripts/common.lua"
        ),
    })
}

/// Every script of this folder, for the client to load and the function library to hold.
pub(crate) fn all() -> Vec<&'static Script> {
    let scripts = rw_scripts();
    vec![
        &scripts.acquire,
        &scripts.release,
        &scripts.renew_read,
        &scripts.renew_write,
    ]
}
