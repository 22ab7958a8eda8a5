//! `#[distributed_lock]`: the attribute on every kind, its options, and inside axum.
//!
//! Each module is one subject; run one with `cargo test -p dlock-tests --test attribute <module>::`.

mod attribute;
mod attribute_axum;
mod attribute_family;
mod attribute_kinds;
mod attribute_on_fail;
