//! The client's own scripts: the layout version of its key prefix, and the commands its
//! Redis user may not run, both checked on connect.
//!
//! Each script is a `.lua` file of `client/scripts/` with the shared Lua it names spliced in
//! (see `scripts::lua_script!`); `all` is its line in [`every_script`](super::every_script).

use std::sync::OnceLock;

use crate::scripts::{lua_script, Script};

/// The client's own scripts (`client/scripts/`), run on connect.
pub(crate) struct ClientScripts {
    /// The layout version of the key prefix (see `client::layout`).
    pub(crate) layout: Script,
    /// The commands dlock needs that the user may not run (see `client::permissions`).
    pub(crate) probe: Script,
}

pub(crate) fn client_scripts() -> &'static ClientScripts {
    static SCRIPTS: OnceLock<ClientScripts> = OnceLock::new();
    SCRIPTS.get_or_init(|| ClientScripts {
        layout: lua_script!(creating, "client_layout", "client/scripts/layout.lua"),
        probe: lua_script!(new, "client_probe", "client/scripts/probe.lua"),
    })
}

/// Every script of this folder, for the client to load and the function library to hold.
pub(crate) fn all() -> Vec<&'static Script> {
    let scripts = client_scripts();
    vec![&scripts.layout, &scripts.probe]
}
