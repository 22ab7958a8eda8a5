#!/usr/bin/env bash
# Makes the Rust toolchain pinned in rust-toolchain.toml available, downloading it only
# when nothing on the machine can stand in for it.
#
# The pin exists for macros-ui/tests/ui/*.stderr: trybuild compares compiler messages
# word for word, and they change between Rust versions. CI cannot download: its machine
# has one toolchain, `stable`. When stable's rustc is exactly the pinned version, this
# links it under the pinned name (rustup's own `toolchain link` refuses official names,
# so the link is made in $RUSTUP_HOME/toolchains). Otherwise (a developer's machine with
# another stable) it installs the pinned version with rustup, and fails saying what to
# do only when that fails too. Idempotent.
set -euo pipefail
cd "$(dirname "$0")/.."

pinned=$(sed -n 's/^channel *= *"\([^"]*\)".*/\1/p' rust-toolchain.toml)
if [ -z "$pinned" ]; then
    echo "toolchain.sh: no channel in rust-toolchain.toml" >&2
    exit 1
fi
# Never let a probe below start a download.
export RUSTUP_AUTO_INSTALL=0

# `+stable` overrides rust-toolchain.toml, so this works before the pin is satisfied.
if ! host=$(rustc +stable -vV 2>/dev/null | sed -n 's/^host: //p') || [ -z "$host" ]; then
    host=$(rustup show 2>/dev/null | sed -n 's/^Default host: //p' || true)
fi
name="$pinned-$host"

if rustup toolchain list | grep -q "^$name"; then
    echo "toolchain.sh: $name is installed"
    exit 0
fi

stable=$(rustc +stable --version 2>/dev/null | awk '{print $2}' || true)
if [ "$stable" = "$pinned" ]; then
    sysroot=$(rustc +stable --print sysroot)
    toolchains="${RUSTUP_HOME:-$HOME/.rustup}/toolchains"
    ln -s "$sysroot" "$toolchains/$name"
    echo "toolchain.sh: linked $name -> $sysroot (stable is rustc $stable)"
    actual=$(rustc --version | awk '{print $2}')
    if [ "$actual" != "$pinned" ]; then
        echo "toolchain.sh: after linking, rustc in this repository is $actual, not $pinned" >&2
        exit 1
    fi
    exit 0
fi

echo "toolchain.sh: installing Rust $pinned (pinned by rust-toolchain.toml; stable is ${stable:-missing})"
if RUSTUP_AUTO_INSTALL=1 rustup toolchain install "$pinned" --profile minimal -c rustfmt -c clippy; then
    exit 0
fi

cat >&2 <<MESSAGE
toolchain.sh: rust-toolchain.toml pins Rust $pinned, which could not be installed, and this
machine's stable toolchain is ${stable:-missing}, so it cannot stand in for it.
The pin keeps macros-ui/tests/ui/*.stderr (compiler messages, compared word for word)
valid. Either
  - install the pinned toolchain:  rustup toolchain install $pinned --profile minimal -c rustfmt -c clippy
  - or move the pin: set channel = "<version>" in rust-toolchain.toml, then refresh the
    expected messages with  TRYBUILD=overwrite cargo test -p dlock-macros-ui --test ui
    and review the diff.
MESSAGE
exit 1
