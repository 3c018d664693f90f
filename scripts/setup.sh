#!/usr/bin/env bash
# Installs what a fresh Debian 12 / Ubuntu machine lacks to build and test
# picolet. Idempotent; run as root. Used by README's commands and by .ci/run.
set -euo pipefail

need_apt=()
# qemu-user-static: the aarch64 smoke test of scripts/dist.sh; binutils: readelf;
# musl-tools, gcc-aarch64-linux-gnu: ring's C for the static builds; openssl:
# the HTTPS server (s_server) of the probe tests; prometheus: promtool and a
# real server scraping /metrics/cadvisor in the observability tests.
# qemu-system-x86/-arm, cpio: the cgroup v2 guests of tests/vm/run.sh.
for pkg in protobuf-compiler busybox-static skopeo containerd qemu-user-static binutils musl-tools gcc-aarch64-linux-gnu openssl prometheus qemu-system-x86 qemu-system-arm cpio; do
  dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q 'install ok installed' || need_apt+=("$pkg")
done
if [ ${#need_apt[@]} -gt 0 ]; then
  echo "setup: apt-get install ${need_apt[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  # Install services without starting them (prometheus would start a
  # server on :9090): a policy-rc.d that refuses, unless one exists.
  own_policy=
  if [ ! -e /usr/sbin/policy-rc.d ]; then
    printf '#!/bin/sh\nexit 101\n' > /usr/sbin/policy-rc.d
    chmod +x /usr/sbin/policy-rc.d
    own_policy=1
  fi
  apt-get install -y -qq --no-install-recommends "${need_apt[@]}" ca-certificates >/dev/null
  if [ -n "$own_policy" ]; then rm -f /usr/sbin/policy-rc.d; fi
fi

if ! command -v cargo >/dev/null; then
  echo "setup: cargo is missing: install the Rust toolchain (rustup) first" >&2
  exit 1
fi
for comp in clippy rustfmt; do
  rustup component list --installed 2>/dev/null | grep -q "^$comp" || rustup component add "$comp"
done
command -v cargo-nextest >/dev/null || cargo install --locked cargo-nextest
# The device targets for scripts/dist.sh (static musl builds, linked by rust-lld).
installed_targets=$(rustup target list --installed 2>/dev/null)
for t in x86_64-unknown-linux-musl aarch64-unknown-linux-musl; do
  grep -qx "$t" <<<"$installed_targets" || rustup target add "$t"
done
