//! Which layout a lock name's hash has: each primitive parses its own (`lock::layout`,
//! `rw::layout`, `semaphore::layout`); here is the dispatch between them. A field no
//! layout has makes the parse fail: never a guess.

use std::collections::HashMap;
use std::time::Duration;

use crate::lock::layout::Fields;
use crate::rw::layout::{RwFields, RW_MODE};

/// What the lock key's hash holds.
pub(crate) enum Layout {
    Lock(Fields),
    ReadWrite(RwFields),
}

impl Layout {
    /// The layout `hash` has; `None` when it fits neither (an empty hash is a free lock).
    pub(super) fn parse(hash: HashMap<String, String>) -> Option<Layout> {
        if hash.contains_key(RW_MODE) {
            RwFields::parse(hash).map(Layout::ReadWrite)
        } else {
            Fields::parse(hash).map(Layout::Lock)
        }
    }
}

/// Time from server time `now` (ms) to `deadline` (ms), none when passed.
pub(super) fn until(deadline: u64, now: u64) -> Option<Duration> {
    deadline
        .checked_sub(now)
        .filter(|ms| *ms > 0)
        .map(Duration::from_millis)
}
