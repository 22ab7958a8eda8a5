//! The hand-off between owners (docs/PROTOCOL.md): waiting and waking, the grant, the
//! local line, the scripts one call at a time, cancellation, and the liveness bound (the
//! regressions and the property test).
//!
//! Each module is one subject; run one with `cargo test -p dlock-tests --test handoff <module>::`.

mod bound;
mod cancel_leaves_nothing;
mod dead_waiters;
mod expiries;
mod grant;
mod hand_off;
mod handoff_scripts;
mod kinds_on_one_name;
mod local_hand_off;
mod local_line;
mod local_line_gives_way;
mod multi_waits;
mod outage_bounds;
mod proptest_liveness;
mod registry_leftovers;
mod subscribe_batch;
mod subscriber_stall;
mod waiting;
mod wake_one;
