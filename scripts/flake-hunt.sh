#!/usr/bin/env bash
# Runs the timing-sensitive test binaries again and again while CPU hogs load every core,
# and reports each failure with its test and message: a test that needs a quiet machine to
# pass is a defect, and this is how one is found before a new user finds it.
#
#   scripts/flake-hunt.sh [ROUNDS] [BINARY...]
#
# ROUNDS defaults to 5; the binaries default to the areas whose tests measure time
# (handoff, family, core, faults, topology). The name `suite` stands for the whole run CI
# makes (cargo nextest, profile ci, as many tests at a time as CI runs). Set FLAKE_HOGS to the number of busy loops
# beside the tests (default: one per core), FLAKE_SERVER to run against another server
# (e.g. a valkey-server binary), FLAKE_FILTER to run only tests whose names contain it.
# Failures are listed at the end and kept under target/flake-hunt/; the exit status is 1
# when any round failed.
set -uo pipefail
cd "$(dirname "$0")/.."

rounds="${1:-5}"
shift || true
binaries=("$@")
if [ "${#binaries[@]}" -eq 0 ]; then
    binaries=(handoff family core faults topology)
fi
hogs="${FLAKE_HOGS:-$(nproc)}"
out=target/flake-hunt
rm -rf "$out"
mkdir -p "$out"

binary_args=()
for binary in "${binaries[@]}"; do
    [ "$binary" = suite ] || binary_args+=("--test=$binary")
done
if [[ " ${binaries[*]} " == *" suite "* ]]; then
    cargo nextest run --workspace --profile ci --no-run >/dev/null 2>&1 || {
        echo "the suite does not build" >&2
        exit 2
    }
fi
[ "${#binary_args[@]}" -eq 0 ] || cargo test -p dlock-tests --no-run "${binary_args[@]}" >/dev/null 2>&1 || {
    echo "the test binaries do not build" >&2
    exit 2
}

hog_pids=()
stop_hogs() {
    for pid in "${hog_pids[@]}"; do
        kill "$pid" 2>/dev/null
    done
}
trap stop_hogs EXIT
for _ in $(seq "$hogs"); do
    (while :; do :; done) &
    hog_pids+=("$!")
done
echo "flake hunt: $rounds round(s) of ${binaries[*]} beside $hogs busy loop(s)"

failed_rounds=0
for round in $(seq "$rounds"); do
    for binary in "${binaries[@]}"; do
        log="$out/$binary-$round.log"
        started=$(date +%s)
        if [ -n "${FLAKE_SERVER:-}" ]; then
            export DLOCK_REDIS_SERVER="$FLAKE_SERVER"
        fi
        # shellcheck disable=SC2206 # an empty filter is no argument
        if [ "$binary" = suite ]; then
            run=(cargo nextest run --workspace --profile ci ${FLAKE_FILTER:-})
        else
            run=(cargo test -q -p dlock-tests --test "$binary" -- --test-threads=2 ${FLAKE_FILTER:-})
        fi
        if "${run[@]}" >"$log" 2>&1; then
            echo "round $round $binary: ok ($(($(date +%s) - started)) s)"
        else
            failed_rounds=$((failed_rounds + 1))
            echo "round $round $binary: FAILED ($(($(date +%s) - started)) s), $log"
        fi
    done
done

echo
if [ "$failed_rounds" -eq 0 ]; then
    echo "flake hunt: every round passed"
    exit 0
fi
echo "flake hunt: $failed_rounds failed run(s); each failure with its message:"
for log in "$out"/*.log; do
    if grep -qE "^ +(FAIL|TIMEOUT) \[" "$log"; then
        # nextest's own summary: each failed test once, then each message (from the
        # failures' output repeated after the summary, not a passing test's own panic).
        echo "--- $log"
        grep -E "^ +(FAIL|TIMEOUT) \[" "$log" | sort -u
        awk '/^ *Summary \[/ { after = 1 }
            after && /^ +(PASS|FAIL|TIMEOUT|SLOW|LEAK) \[/ { failed = ($1 == "FAIL" || $1 == "TIMEOUT") }
            after && failed' "$log" | grep -A3 "panicked at" | grep -v "^stack backtrace" | head -20
        continue
    fi
    grep -q "^test result: FAILED" "$log" || continue
    echo "--- $log"
    # The failed tests (the list after the last "failures:" line), then each message.
    awk '/^failures:$/ { names = "" ; listing = 1; next } listing && /^    / { names = names $0 "\n"; next } { listing = 0 } END { printf "%s", names }' "$log"
    grep -A3 "panicked at" "$log" | grep -v "^stack backtrace" | head -20
done
exit 1
