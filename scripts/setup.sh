#!/usr/bin/env bash
# Installs what a fresh Debian 12 / Ubuntu machine lacks to build and test
# picolet. Idempotent; run as root. Used by README's commands and by .ci/run.
set -euo pipefail

# Every Debian package the builds, tests and benchmarks use, each named here
# even when something else happens to pull it in: scripts/check-setup.sh
# (run by CI after the builds) fails when the build reads a file from a
# package outside these and their Depends, as a fresh machine would.
# gcc, libc6-dev: the host linker (`cc`) of build scripts and tests.
# protobuf-compiler: protoc for cri-proto. busybox-static: the test and demo
# images. skopeo, containerd: image tarballs and the reference runtime of the
# tests and benchmarks. qemu-user-static: the aarch64 smoke test of
# scripts/dist.sh; binutils: readelf. musl-tools (x86_64) and
# gcc-aarch64-linux-gnu + libc6-dev-arm64-cross (aarch64): ring's C for the
# static builds. The cross gcc only Recommends the libc headers, and apt runs
# here with --no-install-recommends: without them ring's C fails at
# <stdint.h> (bits/libc-header-start.h). openssl: the HTTPS server
# (s_server) of the probe tests; prometheus: promtool and a real server
# scraping /metrics/cadvisor in the observability tests.
# qemu-system-x86/-arm, cpio: the cgroup v2 guests of tests/vm/run.sh.
# containernetworking-plugins (/usr/lib/cni), iptables (portmap and the
# bridge's masquerade call it), iproute2 and util-linux (ip, nsenter): the
# pod network tests. docker-registry (distribution 2.8) and apache2-utils
# (htpasswd): the registry the pull tests push to and pull from. g++:
# libFuzzer's C++ for scripts/fuzz.sh (libfuzzer-sys builds it). curl: the
# TLS client of the kubelet API tests (the API port's certificate, client
# certificates). lintian, systemd (systemd-analyze): the checks of the
# .deb and the unit in scripts/dist.sh --smoke; mmdebstrap: the Debian
# rootfs with systemd of tests/vm/systemd.sh.
PACKAGES=(gcc g++ libc6-dev protobuf-compiler busybox-static skopeo containerd qemu-user-static binutils
  musl-tools gcc-aarch64-linux-gnu libc6-dev-arm64-cross openssl prometheus qemu-system-x86
  qemu-system-arm cpio ca-certificates containernetworking-plugins iptables iproute2 util-linux
  docker-registry apache2-utils curl lintian systemd mmdebstrap)
# What scripts/demo.sh needs, no more: the build (cc for build scripts,
# protoc) and the demo image (busybox-static), CA certificates for cargo's
# downloads.
DEMO_PACKAGES=(gcc libc6-dev protobuf-compiler busybox-static ca-certificates)
# The rustup targets of the static builds (scripts/dist.sh).
TARGETS=(x86_64-unknown-linux-musl aarch64-unknown-linux-musl)
demo=
case "${1:-}" in
  --list-packages) printf '%s\n' "${PACKAGES[@]}"; exit 0 ;;
  --list-targets) printf '%s\n' "${TARGETS[@]}"; exit 0 ;;
  --demo) demo=1; PACKAGES=("${DEMO_PACKAGES[@]}") ;;
esac

need_apt=()
for pkg in "${PACKAGES[@]}"; do
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
  apt-get install -y -qq --no-install-recommends "${need_apt[@]}" >/dev/null
  if [ -n "$own_policy" ]; then rm -f /usr/sbin/policy-rc.d; fi
fi

# shellcheck source=scripts/cargo-env.sh
. "$(dirname "$0")/cargo-env.sh"
[ -z "$demo" ] || exit 0
for comp in clippy rustfmt; do
  rustup component list --installed 2>/dev/null | grep -q "^$comp" || rustup component add "$comp"
done
command -v cargo-nextest >/dev/null || cargo install --locked cargo-nextest
# The device targets for scripts/dist.sh (static musl builds, linked by rust-lld).
installed_targets=$(rustup target list --installed 2>/dev/null)
for t in "${TARGETS[@]}"; do
  grep -qx "$t" <<<"$installed_targets" || rustup target add "$t"
done
