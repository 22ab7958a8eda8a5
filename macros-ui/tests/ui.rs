//! Compile-time behaviour of `#[distributed_lock]`: every mistake gives a spanned error
//! (`tests/ui/*.stderr`). The supported function shapes are `tests/shapes.rs`.
//!
//! Refresh the expected output with `TRYBUILD=overwrite cargo test -p dlock-macros-ui --test ui`
//! on the pinned toolchain, then review the diff.

#[test]
fn ui() {
    let cases = trybuild::TestCases::new();
    cases.compile_fail("tests/ui/*.rs");
}
