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

/// The reentrant lock's scripts (`lock/scripts/`); each but `renew` takes the shared
/// `scripts/clock.lua`, `scripts/naps.lua` (what waiters were told) and the lock's
/// `handoff.lua` (the waiter registry and the hand-off).
pub(crate) struct Scripts {
    pub(crate) acquire: Script,
    pub(crate) release: Script,
    pub(crate) renew: Script,
    pub(crate) force_unlock: Script,
    /// The last hold is given back but the lock stays taken until its minimum hold ends
    /// (`#[distributed_lock(min_hold = "...")]`).
    pub(crate) hold_until: Script,
}

/// The client's own script (`client/scripts/`): the layout version of its key prefix,
/// checked on connect.
pub(crate) struct ClientScripts {
    pub(crate) layout: Script,
}

/// The fair lock's scripts (`fair/scripts/`), each with `scripts/clock.lua` and the fair
/// lock's `queue.lua` (the acquisition also with `scripts/naps.lua`).
pub(crate) struct FairScripts {
    pub(crate) acquire: Script,
    pub(crate) release: Script,
    pub(crate) force_unlock: Script,
    pub(crate) queue_len: Script,
}

/// The read-write lock's scripts (`rw/scripts/`), each with `scripts/clock.lua` and the
/// read-write lock's `common.lua` (the acquisition also with `scripts/naps.lua`).
pub(crate) struct RwScripts {
    pub(crate) acquire: Script,
    pub(crate) release: Script,
    pub(crate) renew_read: Script,
    pub(crate) renew_write: Script,
}

/// The multi-lock's script (`multi/scripts/`): its same-slot acquisition, with the lock's
/// shared functions. Its holds are renewed and released by the reentrant lock's scripts.
pub(crate) struct MultiScripts {
    pub(crate) acquire: Script,
}

/// The semaphore's scripts (`semaphore/scripts/`), each with the shared `common.lua`.
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
        &client_scripts().layout,
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

/// A script: its body `$body` with the shared functions of the `$shared` files (paths
/// under `src/`) spliced in at its [`SHARED_MARK`] line, or before it when it has none.
macro_rules! script {
    ($make:ident, $name:literal, $body:literal $(, $shared:literal)* $(,)?) => {
        Script::$make(
            $name,
            splice(
                include_str!(concat!("../", $body)),
                &[$(include_str!(concat!("../", $shared))),*],
            ),
        )
    };
}

/// Where a script's body takes its shared functions. Its common case runs above this line
/// and returns before the functions are defined: each definition costs Redis a closure
/// per call (measured: ten of them halve the calls per second of an empty script).
const SHARED_MARK: &str = "-- @shared\n";

/// `body` with `shared` (concatenated) spliced in at its [`SHARED_MARK`], or before it.
fn splice(body: &str, shared: &[&str]) -> String {
    let shared = shared.concat();
    match body.split_once(SHARED_MARK) {
        Some((above, below)) => format!("{above}{shared}{below}"),
        None => format!("{shared}{body}"),
    }
}

pub(crate) fn client_scripts() -> &'static ClientScripts {
    static SCRIPTS: OnceLock<ClientScripts> = OnceLock::new();
    SCRIPTS.get_or_init(|| ClientScripts {
        layout: script!(creating, "client_layout", "client/scripts/layout.lua"),
    })
}

pub(crate) fn scripts() -> &'static Scripts {
    static SCRIPTS: OnceLock<Scripts> = OnceLock::new();
    SCRIPTS.get_or_init(|| Scripts {
        acquire: script!(
            creating,
            "lock_acquire",
            "lock/scripts/acquire.lua",
            "scripts/clock.lua",
            "scripts/naps.lua",
            "lock/scripts/handoff.lua"
        ),
        release: script!(
            new,
            "lock_release",
            "lock/scripts/release.lua",
            "scripts/clock.lua",
            "scripts/naps.lua",
            "lock/scripts/handoff.lua"
        ),
        renew: script!(new, "lock_renew", "lock/scripts/renew.lua"),
        force_unlock: script!(
            new,
            "lock_force_unlock",
            "lock/scripts/force_unlock.lua",
            "scripts/clock.lua",
            "scripts/naps.lua",
            "lock/scripts/handoff.lua"
        ),
        hold_until: script!(
            new,
            "lock_hold_until",
            "lock/scripts/hold_until.lua",
            "scripts/clock.lua",
            "scripts/naps.lua",
            "lock/scripts/handoff.lua"
        ),
    })
}

pub(crate) fn fair_scripts() -> &'static FairScripts {
    static SCRIPTS: OnceLock<FairScripts> = OnceLock::new();
    SCRIPTS.get_or_init(|| FairScripts {
        acquire: script!(
            creating,
            "fair_acquire",
            "fair/scripts/acquire.lua",
            "scripts/clock.lua",
            "scripts/naps.lua",
            "fair/scripts/queue.lua"
        ),
        release: script!(
            new,
            "fair_release",
            "fair/scripts/release.lua",
            "scripts/clock.lua",
            "fair/scripts/queue.lua"
        ),
        force_unlock: script!(
            new,
            "fair_force_unlock",
            "fair/scripts/force_unlock.lua",
            "scripts/clock.lua",
            "fair/scripts/queue.lua"
        ),
        queue_len: script!(
            new,
            "fair_queue_len",
            "fair/scripts/queue_len.lua",
            "scripts/clock.lua",
            "fair/scripts/queue.lua"
        ),
    })
}

pub(crate) fn rw_scripts() -> &'static RwScripts {
    static SCRIPTS: OnceLock<RwScripts> = OnceLock::new();
    SCRIPTS.get_or_init(|| RwScripts {
        acquire: script!(
            creating,
            "rw_acquire",
            "rw/scripts/acquire.lua",
            "scripts/clock.lua",
            "scripts/naps.lua",
            "rw/scripts/common.lua"
        ),
        release: script!(
            new,
            "rw_release",
            "rw/scripts/release.lua",
            "scripts/clock.lua",
            "scripts/naps.lua",
            "rw/scripts/common.lua"
        ),
        renew_read: script!(
            new,
            "rw_renew_read",
            "rw/scripts/renew_read.lua",
            "scripts/clock.lua",
            "rw/scripts/common.lua"
        ),
        renew_write: script!(
            new,
            "rw_renew_write",
            "rw/scripts/renew_write.lua",
            "scripts/clock.lua",
            "rw/scripts/common.lua"
        ),
    })
}

pub(crate) fn multi_scripts() -> &'static MultiScripts {
    static SCRIPTS: OnceLock<MultiScripts> = OnceLock::new();
    SCRIPTS.get_or_init(|| MultiScripts {
        acquire: script!(
            creating,
            "multi_acquire",
            "multi/scripts/acquire.lua",
            "scripts/clock.lua",
            "scripts/naps.lua",
            "lock/scripts/handoff.lua"
        ),
    })
}

pub(crate) fn sem_scripts() -> &'static SemScripts {
    static SCRIPTS: OnceLock<SemScripts> = OnceLock::new();
    SCRIPTS.get_or_init(|| SemScripts {
        acquire: script!(
            creating,
            "sem_acquire",
            "semaphore/scripts/acquire.lua",
            "semaphore/scripts/common.lua"
        ),
        release: script!(
            new,
            "sem_release",
            "semaphore/scripts/release.lua",
            "semaphore/scripts/common.lua"
        ),
        renew: script!(
            new,
            "sem_renew",
            "semaphore/scripts/renew.lua",
            "semaphore/scripts/common.lua"
        ),
        available: script!(
            new,
            "sem_available",
            "semaphore/scripts/available.lua",
            "semaphore/scripts/common.lua"
        ),
        set_permits: script!(
            creating,
            "sem_set_permits",
            "semaphore/scripts/set_permits.lua",
            "semaphore/scripts/common.lua"
        ),
    })
}

pub(crate) fn fenced_scripts() -> &'static FencedScripts {
    static SCRIPTS: OnceLock<FencedScripts> = OnceLock::new();
    SCRIPTS.get_or_init(|| FencedScripts {
        write: script!(creating, "fenced_write", "fenced/scripts/write.lua"),
        highest: script!(new, "fenced_highest", "fenced/scripts/highest.lua"),
    })
}
