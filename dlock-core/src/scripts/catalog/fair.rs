//! The fair lock's scripts, built once per process.
//!
//! Each script is a `.lua` file of `fair/scripts/` with the shared Lua it names spliced in
//! (see `scripts::lua_script!`); `all` is its line in [`every_script`](super::every_script).

use std::sync::OnceLock;

use crate::scripts::{lua_script, Script};

/// The fair lock's scripts (`fair/scripts/`), each with `scripts/clock.lua` and the fair
/// lock's `queue.lua` (the acquisition also with `scripts/naps.lua`).
pub(crate) struct FairScripts {
    pub(crate) acquire: Script,
    pub(crate) release: Script,
    pub(crate) force_unlock: Script,
    pub(crate) queue_len: Script,
}

pub(crate) fn fair_scripts() -> &'static FairScripts {
    static SCRIPTS: OnceLock<FairScripts> = OnceLock::new();
    SCRIPTS.get_or_init(|| FairScripts {
        acquire: lua_script!(
            creating,
            "fair_acquire",
            "fair/scripts/acquire.lua",
            "scripts/clock.lua",
            "scripts/naps.lua",
            "fair/scripts/queue.lua"
        ),
        release: lua_script!(
            new,
            "fair_release",
            "fair/scripts/release.lua",
            "scripts/clock.lua",
            "fair/scripts/queue.lua"
        ),
        force_unlock: lua_script!(
            new,
            "fair_force_unlock",
            "fair/scripts/force_unlock.lua",
            "scripts/clock.lua",
            "fair/scripts/queue.lua"
        ),
        queue_len: lua_script!(
            new,
            "fair_queue_len",
            "fair/scripts/queue_len.lua",
            "scripts/clock.lua",
            "fair/scripts/queue.lua"
        ),
    })
}

/// Every script of this folder, for the client to load and the function library to hold.
pub(crate) fn all() -> Vec<&'static Script> {
    let scripts = fair_scripts();
    vec![
        &scripts.acquire,
        &scripts.release,
        &scripts.force_unlock,
        &scripts.queue_len,
    ]
}
