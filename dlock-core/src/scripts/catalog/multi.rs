//! The multi-lock's script, built once per process.
//!
//! Each script is a `.lua` file of `multi/scripts/` with the shared Lua it names spliced in
//! (see `scripts::lua_script!`); `all` is its line in [`every_script`](super::every_script).

use std::sync::OnceLock;

use crate::scripts::{lua_script, Script};

/// The multi-lock's script (`multi/scripts/`): its same-slot acquisition, with the lock's
/// shared functions. Its holds are renewed and released by the reentrant lock's scripts.
pub(crate) struct MultiScripts {
    pub(crate) acquire: Script,
}

pub(crate) fn multi_scripts() -> &'static MultiScripts {
    static SCRIPTS: OnceLock<MultiScripts> = OnceLock::new();
    SCRIPTS.get_or_init(|| MultiScripts {
        acquire: lua_script!(
            creating,
            "multi_acquire",
            "multi/scripts/acquire.lua",
            "scripts/clock.lua",
            "scripts/naps.lua",
            "lock/scripts/handoff.lua"
        ),
    })
}

/// Every script of this folder, for the client to load and the function library to hold.
pub(crate) fn all() -> Vec<&'static Script> {
    let scripts = multi_scripts();
    vec![&scripts.acquire]
}
