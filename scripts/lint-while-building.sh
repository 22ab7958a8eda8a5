#!/usr/bin/env bash
# The compiler of the workspace's own crates in a CI run of scripts/test.sh
# (RUSTC_WORKSPACE_WRAPPER): clippy-driver, which lints as `cargo clippy` does and then
# compiles as rustc does, so that the test build itself is the lint of every target and
# no separate check of the whole workspace is needed. Cargo calls it as
# `lint-while-building.sh <rustc> <arguments>`.
#
# Except for the crate trybuild generates for the attribute's compile-time tests
# (macros-ui): its messages are compared word for word with the expected ones, which
# have no clippy lints in them.
#
# Bash, not sh: dash drops environment variables whose names are not shell identifiers,
# and cargo passes `CARGO_BIN_EXE_dlock-bench` (for `env!` in an integration test) that way.
case "${CARGO_MANIFEST_DIR:-}" in
*/tests/trybuild/*) exec "$@" ;;
esac
exec clippy-driver "$@"
