//! The fenced writes' scripts, built once per process.
//!
//! Each script is a `.lua` file of `fenced/scripts/` with the shared Lua it names spliced in
//! (see `scripts::lua_script!`); `all` is its line in [`every_script`](super::every_script).

use std::sync::OnceLock;

use crate::scripts::{lua_script, Script};

/// The fenced writes' scripts (`fenced/scripts/`).
pub(crate) struct FencedScripts {
    pub(crate) write: Script,
    pub(crate) highest: Script,
}

pub(crate) fn fenced_scripts() -> &'static FencedScripts {
    static SCRIPTS: OnceLock<FencedScripts> = OnceLock::new();
    SCRIPTS.get_or_init(|| FencedScripts {
        write: lua_script!(creating, "fenced_write", "fenced/scripts/write.lua"),
        highest: lua_script!(new, "fenced_highest", "fenced/scripts/highest.lua"),
    })
}

/// Every script of this folder, for the client to load and the function library to hold.
pub(crate) fn all() -> Vec<&'static Script> {
    let scripts = fenced_scripts();
    vec![&scripts.write, &scripts.highest]
}
