//! What dlock logs, read from a capturing subscriber: the attribute's intents, a lost
//! hold, a failed release, what an outage leaves owed, and a task that waits for its own
//! hold. One binary: the
//! subscriber is global to it, installed at the `DEBUG` level.
//!
//! Each module is one subject; run one with `cargo test -p dlock-tests --test logged <module>::`.

mod attribute_intents;
mod attribute_on_lost;
mod attribute_release_failure;
mod outage;
mod self_wait;
