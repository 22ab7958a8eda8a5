//! Compile-time behaviour of `#[distributed_lock]`: every mistake gives a spanned error
//! (`tests/ui/*.stderr`). The supported function shapes are `tests/shapes.rs`.
//!
//! Refresh the expected output with `TRYBUILD=overwrite cargo test -p dlock-macros-ui --test ui`
//! on the pinned toolchain, then review the diff.
// Setting the process environment is unsafe in edition 2024; this binary's one test does
// it before any other thread or child process exists.
#![allow(unsafe_code)]

/// The rustc flags trybuild gives the cases it compiles (its `rustflags.rs`, trybuild
/// 1.0.122, with the `--diagnostic-width` of its case builds).
const CASE_FLAGS: [&str; 6] = [
    "--cfg",
    "trybuild",
    "--verbose",
    "-A",
    "dead_code",
    "--diagnostic-width=140",
];

#[test]
fn ui() {
    // trybuild checks the dependencies with one set of flags and then the cases with
    // another (the diagnostic width added): cargo then checks the facade's whole
    // dependency tree twice, which was half of this test's time (142 s of CPU). The
    // variable cargo reads before trybuild's `--config` flags gives both builds the cases'
    // flags, and the tree is checked once.
    // SAFETY: the only test of this binary, before trybuild starts anything.
    unsafe { std::env::set_var("CARGO_ENCODED_RUSTFLAGS", CASE_FLAGS.join("\x1f")) };
    let cases = trybuild::TestCases::new();
    cases.compile_fail("tests/ui/*.rs");
}
