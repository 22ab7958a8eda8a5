//! Compile-time tests of `#[distributed_lock]` (`tests/ui.rs`); this library is empty.
