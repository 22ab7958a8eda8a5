#!/usr/bin/env bash
# Installs redis-server, redis-sentinel, redis-cli (and openssl, for the TLS test) from the Debian/Ubuntu packages if any
# of them is missing. The tests start their own servers on free ports, so a system Redis
# service that apt may start is harmless.
set -euo pipefail

missing=()
for tool in redis-server redis-sentinel redis-cli openssl; do
    command -v "$tool" >/dev/null 2>&1 || missing+=("$tool")
done
if [ "${#missing[@]}" -eq 0 ]; then
    exit 0
fi

echo "==> Installing Redis (missing: ${missing[*]})"
if [ "$(id -u)" -eq 0 ]; then
    sudo=()
elif command -v sudo >/dev/null 2>&1; then
    sudo=(sudo)
else
    echo "error: ${missing[*]} missing, and installing needs root or sudo;" \
        "install redis-server redis-sentinel redis-tools yourself" >&2
    exit 1
fi
if ! command -v apt-get >/dev/null 2>&1; then
    echo "error: ${missing[*]} missing and apt-get not found;" \
        "install redis-server, redis-sentinel and redis-cli yourself" >&2
    exit 1
fi

${sudo[@]+"${sudo[@]}"} apt-get update
${sudo[@]+"${sudo[@]}"} env DEBIAN_FRONTEND=noninteractive \
    apt-get install -y redis-server redis-sentinel redis-tools openssl
