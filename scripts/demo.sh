#!/usr/bin/env bash
# The main job: the stock-decrement demo. Installs redis-server if missing, builds, starts
# a throw-away Redis (or uses --config FILE), three service processes, and sends 5,000 buy
# requests at concurrency 200; the report shows 0 oversold. Extra arguments go to the
# demo, e.g. ./scripts/demo.sh --no-lock   or   ./scripts/demo.sh --mode hot --hold 50ms
# or (fault mode: a holder stopped past its lease) ./scripts/demo.sh --mode hot --route manual
# --pause-holder 6s [--writes plain]
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/toolchain.sh
./scripts/install-redis.sh
cargo run --release -p stock-demo -- "$@"
