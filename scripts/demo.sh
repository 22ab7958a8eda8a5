#!/usr/bin/env bash
# The main job: runs the quickstart against a Redis it starts itself (or $DLOCK_REDIS_URL).
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/install-redis.sh
cargo run --release -p quickstart
