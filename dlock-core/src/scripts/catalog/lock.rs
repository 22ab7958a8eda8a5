//! The reentrant lock's scripts, built once per process; the multi-lock and RedLock run
//! them too.
//!
//! Each script is a `.lua` file of `lock/scripts/` with the shared Lua it names spliced in
//! (see `scripts::lua_script!`); `all` is its line in [`every_script`](super::every_script).

use std::sync::OnceLock;

use crate::scripts::{lua_script, Script};

/// The reentrant lock's scripts (`lock/scripts/`); each but `renew` takes the shared
/// `scripts/clock.lua`, `scripts/naps.lua` (what waiters were told) and the lock's
/// `handoff.lua` (the waiter registry and the hand-off).
pub(crate) struct LockScripts {
    pub(crate) acquire: Script,
    pub(crate) release: Script,
    pub(crate) renew: Script,
    /// A granted hold extended to its owner's lease (see `sync::grant`).
    pub(crate) extend: Script,
    pub(crate) force_unlock: Script,
    /// The last hold is given back but the lock stays taken until its minimum hold ends
    /// (`#[distributed_lock(min_hold = "...")]`).
    pub(crate) hold_until: Script,
}

pub(crate) fn scripts() -> &'static LockScripts {
    static SCRIPTS: OnceLock<LockScripts> = OnceLock::new();
    SCRIPTS.get_or_init(|| LockScripts {
        acquire: lua_script!(
            creating,
            "lock_acquire",
            "lock/scripts/acquire.lua",
            "scripts/clock.lua",
            "scripts/naps.lua",
            "lock/scripts/handoff.lua"
        ),
        release: lua_script!(
            new,
            "lock_release",
            "lock/scripts/release.lua",
            "scripts/clock.lua",
            "scripts/naps.lua",
            "lock/scripts/handoff.lua"
        ),
        renew: lua_script!(new, "lock_renew", "lock/scripts/renew.lua"),
        extend: lua_script!(
            new,
            "lock_extend",
            "lock/scripts/extend.lua",
            "scripts/clock.lua",
            "scripts/naps.lua",
            "lock/scripts/handoff.lua"
        ),
        force_unlock: lua_script!(
            new,
            "lock_force_unlock",
            "lock/scripts/force_unlock.lua",
            "scripts/clock.lua",
            "scripts/naps.lua",
            "lock/scripts/handoff.lua"
        ),
        hold_until: lua_script!(
            new,
            "lock_hold_until",
            "lock/scripts/hold_until.lua",
            "scripts/clock.lua",
            "scripts/naps.lua",
            "lock/scripts/handoff.lua"
        ),
    })
}

/// Every script of this folder, for the client to load and the function library to hold.
pub(crate) fn all() -> Vec<&'static Script> {
    let scripts = scripts();
    vec![
        &scripts.acquire,
        &scripts.release,
        &scripts.renew,
        &scripts.extend,
        &scripts.force_unlock,
        &scripts.hold_until,
    ]
}
