//! The registry of Lua scripts: every primitive's scripts, built once per process. A
//! primitive's `.lua` files live in its own folder; adding a primitive adds its scripts
//! here, and `every_script()` then puts them into what each client loads (`SCRIPT LOAD`,
//! see `redis::scripting`) and into dlock's function library (`library`).
//!
//! - `script`: one script and one call of it;
//! - `library`: every script as one Redis 7 function library.

mod library;
mod script;

pub use library::FunctionLibrary;
pub(crate) use script::{Oom, Script, ScriptCall};

use std::sync::OnceLock;

/// The reentrant lock's scripts (`lock/scripts/`), each but `renew` prefixed with the
/// shared `handoff.lua` (the waiter registry and the hand-off).
pub(crate) struct Scripts {
    pub(crate) acquire: Script,
    pub(crate) release: Script,
    pub(crate) renew: Script,
    pub(crate) force_unlock: Script,
    /// The last hold is given back but the lock stays taken until its minimum hold ends
    /// (`#[distributed_lock(min_hold = "...")]`).
    pub(crate) hold_until: Script,
}

/// The fair lock's scripts (`fair/scripts/`), each prefixed with the shared `queue.lua`.
pub(crate) struct FairScripts {
    pub(crate) acquire: Script,
    pub(crate) release: Script,
    pub(crate) force_unlock: Script,
    pub(crate) queue_len: Script,
}

/// The read-write lock's scripts (`rw/scripts/`), each prefixed with the shared
/// `common.lua`.
pub(crate) struct RwScripts {
    pub(crate) acquire: Script,
    pub(crate) release: Script,
    pub(crate) renew_read: Script,
    pub(crate) renew_write: Script,
}

/// The multi-lock's script (`multi/scripts/`): its same-slot acquisition, prefixed with
/// the lock's `handoff.lua`. Its holds are renewed and released by the reentrant lock's
/// scripts.
pub(crate) struct MultiScripts {
    pub(crate) acquire: Script,
}

/// The semaphore's scripts (`semaphore/scripts/`), each prefixed with the shared
/// `common.lua`.
pub(crate) struct SemScripts {
    pub(crate) acquire: Script,
    pub(crate) release: Script,
    pub(crate) renew: Script,
    pub(crate) available: Script,
    pub(crate) set_permits: Script,
}

/// The fenced writes' scripts (`fenced/scripts/`).
pub(crate) struct FencedScripts {
    pub(crate) write: Script,
    pub(crate) highest: Script,
}

/// Every script of every primitive: what a client loads into each server.
pub(crate) fn every_script() -> impl Iterator<Item = &'static Script> + Clone {
    let (lock, fair, rw, multi, sem, fenced) = (
        scripts(),
        fair_scripts(),
        rw_scripts(),
        multi_scripts(),
        sem_scripts(),
        fenced_scripts(),
    );
    [
        &lock.acquire,
        &lock.release,
        &lock.renew,
        &lock.force_unlock,
        &lock.hold_until,
        &fair.acquire,
        &fair.release,
        &fair.force_unlock,
        &fair.queue_len,
        &rw.acquire,
        &rw.release,
        &rw.renew_read,
        &rw.renew_write,
        &multi.acquire,
        &sem.acquire,
        &sem.release,
        &sem.renew,
        &sem.available,
        &sem.set_permits,
        &fenced.write,
        &fenced.highest,
    ]
    .into_iter()
}

/// A script made of a primitive's shared functions (`$common`), then its own body
/// (`$file`), both in the primitive's `scripts/` folder `$dir`.
macro_rules! prefixed_script {
    ($make:ident, $name:literal, $dir:literal, $common:literal, $file:literal) => {
        Script::$make(
            $name,
            concat!(
                include_str!(concat!("../", $dir, "/scripts/", $common)),
                include_str!(concat!("../", $dir, "/scripts/", $file))
            ),
        )
    };
}

pub(crate) fn scripts() -> &'static Scripts {
    static SCRIPTS: OnceLock<Scripts> = OnceLock::new();
    SCRIPTS.get_or_init(|| Scripts {
        acquire: prefixed_script!(
            creating,
            "lock_acquire",
            "lock",
            "handoff.lua",
            "acquire.lua"
        ),
        release: prefixed_script!(new, "lock_release", "lock", "handoff.lua", "release.lua"),
        renew: Script::new("lock_renew", include_str!("../lock/scripts/renew.lua")),
        force_unlock: prefixed_script!(
            new,
            "lock_force_unlock",
            "lock",
            "handoff.lua",
            "force_unlock.lua"
        ),
        hold_until: prefixed_script!(
            new,
            "lock_hold_until",
            "lock",
            "handoff.lua",
            "hold_until.lua"
        ),
    })
}

pub(crate) fn fair_scripts() -> &'static FairScripts {
    static SCRIPTS: OnceLock<FairScripts> = OnceLock::new();
    SCRIPTS.get_or_init(|| FairScripts {
        acquire: prefixed_script!(creating, "fair_acquire", "fair", "queue.lua", "acquire.lua"),
        release: prefixed_script!(new, "fair_release", "fair", "queue.lua", "release.lua"),
        force_unlock: prefixed_script!(
            new,
            "fair_force_unlock",
            "fair",
            "queue.lua",
            "force_unlock.lua"
        ),
        queue_len: prefixed_script!(new, "fair_queue_len", "fair", "queue.lua", "queue_len.lua"),
    })
}

pub(crate) fn rw_scripts() -> &'static RwScripts {
    static SCRIPTS: OnceLock<RwScripts> = OnceLock::new();
    SCRIPTS.get_or_init(|| RwScripts {
        acquire: prefixed_script!(creating, "rw_acquire", "rw", "common.lua", "acquire.lua"),
        release: prefixed_script!(new, "rw_release", "rw", "common.lua", "release.lua"),
        renew_read: prefixed_script!(new, "rw_renew_read", "rw", "common.lua", "renew_read.lua"),
        renew_write: prefixed_script!(new, "rw_renew_write", "rw", "common.lua", "renew_write.lua"),
    })
}

pub(crate) fn multi_scripts() -> &'static MultiScripts {
    static SCRIPTS: OnceLock<MultiScripts> = OnceLock::new();
    SCRIPTS.get_or_init(|| MultiScripts {
        acquire: Script::creating(
            "multi_acquire",
            concat!(
                include_str!("../lock/scripts/handoff.lua"),
                include_str!("../multi/scripts/acquire.lua")
            ),
        ),
    })
}

pub(crate) fn sem_scripts() -> &'static SemScripts {
    static SCRIPTS: OnceLock<SemScripts> = OnceLock::new();
    SCRIPTS.get_or_init(|| SemScripts {
        acquire: prefixed_script!(
            creating,
            "sem_acquire",
            "semaphore",
            "common.lua",
            "acquire.lua"
        ),
        release: prefixed_script!(new, "sem_release", "semaphore", "common.lua", "release.lua"),
        renew: prefixed_script!(new, "sem_renew", "semaphore", "common.lua", "renew.lua"),
        available: prefixed_script!(
            new,
            "sem_available",
            "semaphore",
            "common.lua",
            "available.lua"
        ),
        set_permits: prefixed_script!(
            creating,
            "sem_set_permits",
            "semaphore",
            "common.lua",
            "set_permits.lua"
        ),
    })
}

pub(crate) fn fenced_scripts() -> &'static FencedScripts {
    static SCRIPTS: OnceLock<FencedScripts> = OnceLock::new();
    SCRIPTS.get_or_init(|| FencedScripts {
        write: Script::creating("fenced_write", include_str!("../fenced/scripts/write.lua")),
        highest: Script::new(
            "fenced_highest",
            include_str!("../fenced/scripts/highest.lua"),
        ),
    })
}
