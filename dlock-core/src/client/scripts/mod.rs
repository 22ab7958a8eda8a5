//! The client's own script: the layout version of its key prefix, checked on connect.
//!
//! Each script is this folder's `.lua` file with the shared Lua it names spliced in (see
//! `scripts::lua_script!`); `all` is this folder's line in `scripts::every_script`.

use std::sync::OnceLock;

use crate::scripts::{lua_script, Script};

/// The client's own script (`client/scripts/`): the layout version of its key prefix,
/// checked on connect.
pub(crate) struct ClientScripts {
    pub(crate) layout: Script,
}

pub(crate) fn client_scripts() -> &'static ClientScripts {
    static SCRIPTS: OnceLock<ClientScripts> = OnceLock::new();
    SCRIPTS.get_or_init(|| ClientScripts {
        layout: lua_script!(creating, "client_layout", "client/scripts/layout.lua"),
    })
}

/// Every script of this folder, for the client to load and the function library to hold.
pub(crate) fn all() -> Vec<&'static Script> {
    let scripts = client_scripts();
    vec![&scripts.layout]
}
