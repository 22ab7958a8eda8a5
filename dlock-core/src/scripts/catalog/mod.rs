//! Every script dlock runs, by the folder its `.lua` files live in: each module builds
//! its folder's scripts once per process, and [`every_script`] lists them all for the
//! client to load (`SCRIPT LOAD`, see `redis::scripting`) and for dlock's function
//! library to hold. Here, below every primitive, so that loading them needs no import of
//! a primitive: a primitive imports its scripts from here, and its own folder keeps how
//! it calls them.

use std::sync::OnceLock;

use super::Script;

pub(crate) mod client;
pub(crate) mod fair;
pub(crate) mod fenced;
pub(crate) mod lock;
pub(crate) mod multi;
pub(crate) mod rw;
pub(crate) mod semaphore;

/// Every script of every primitive: what a client loads into each server, and what
/// dlock's function library holds. One line per folder with scripts: the one place that
/// names them all.
pub(crate) fn every_script() -> impl Iterator<Item = &'static Script> + Clone {
    static EVERY: OnceLock<Vec<&'static Script>> = OnceLock::new();
    EVERY
        .get_or_init(|| {
            [
                lock::all(),
                client::all(),
                fair::all(),
                rw::all(),
                multi::all(),
                semaphore::all(),
                fenced::all(),
            ]
            .concat()
        })
        .iter()
        .copied()
}
