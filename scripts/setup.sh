#!/usr/bin/env bash
# Installs what a fresh Debian 12 / Ubuntu machine lacks to build and test
# picolet. Idempotent; run as root. Used by README's commands and by .ci/run.
set -euo pipefail

need_apt=()
for pkg in protobuf-compiler busybox-static skopeo containerd; do
  dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q 'install ok installed' || need_apt+=("$pkg")
done
if [ ${#need_apt[@]} -gt 0 ]; then
  echo "setup: apt-get install ${need_apt[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends "${need_apt[@]}" ca-certificates >/dev/null
fi

if ! command -v cargo >/dev/null; then
  echo "setup: cargo is missing: install the Rust toolchain (rustup) first" >&2
  exit 1
fi
for comp in clippy rustfmt; do
  rustup component list --installed 2>/dev/null | grep -q "^$comp" || rustup component add "$comp"
done
command -v cargo-nextest >/dev/null || cargo install --locked cargo-nextest
