#!/usr/bin/env bash
# One static binary per device arch:
#
#   scripts/dist.sh            # → dist/picolet-x86_64, dist/picolet-aarch64,
#                              #   dist/picolet_<version>_{amd64,arm64}.deb,
#                              #   dist/picolet-<version>-{x86_64,aarch64}.tar.gz
#   scripts/dist.sh --smoke    # … and run the aarch64 one under qemu-aarch64-static,
#                              #   lintian on the packages, systemd-analyze on the unit
#
# Targets x86_64/aarch64-unknown-linux-musl, linked by the toolchain's own
# rust-lld against Rust's self-contained musl (.cargo/config.toml): no cross
# gcc, no sysroot, no C code in the tree. Each binary is checked to be static
# (no program interpreter, no NEEDED entries) and within the size budget;
# sizes are printed. With --smoke: `picolet version`, `picolet check` of the
# example config and manifest, and the pure parsing unit tests (config,
# quantities, manifests, plan, status, cgroup files, CRI log lines, device
# programs), all under qemu-user (which cannot create containers or load eBPF:
# those run natively and in the cgroup v2 VMs).
set -euo pipefail
cd "$(dirname "$0")/.."
BUDGET_MIB=12
mapfile -t TARGETS < <(scripts/setup.sh --list-targets)
smoke=
[ "${1:-}" = --smoke ] && smoke=1

installed=$(rustup target list --installed)
for t in "${TARGETS[@]}"; do
  grep -qx "$t" <<<"$installed" || rustup target add "$t"
done

T="${CARGO_TARGET_DIR:-target}"
mkdir -p dist
status=0
printf '| target | size | static |\n|---|---:|---|\n' > dist/sizes.md
for t in "${TARGETS[@]}"; do
  cargo build --release --locked -p picolet --target "$t"
  arch=${t%%-*}
  out="dist/picolet-$arch"
  cp "$T/$t/release/picolet" "$out"
  bytes=$(stat -c %s "$out")
  static=yes
  if readelf -lW "$out" | grep -q 'Requesting program interpreter'; then static="no (interpreter)"; fi
  if readelf -dW "$out" 2>/dev/null | grep -q '(NEEDED)'; then static="no (NEEDED libraries)"; fi
  mib=$(awk "BEGIN { printf \"%.2f\", $bytes / 1048576 }")
  printf '| %s | %s MiB | %s |\n' "$t" "$mib" "$static" >> dist/sizes.md
  if [ "$static" != yes ]; then echo "dist: $out is not static: $static" >&2; status=1; fi
  if [ "$bytes" -gt $((BUDGET_MIB * 1048576)) ]; then
    echo "dist: $out is $mib MiB, over the ${BUDGET_MIB} MiB budget" >&2; status=1
  fi
done
cat dist/sizes.md
[ "$status" = 0 ] || exit "$status"

# The packages (packaging/deb.sh) and the airgap bundles: the binary, the
# service files, the demo image to preload and the examples, for
# `picolet install --bundle`.
VERSION=$(sed -n 's/^version = "\(.*\)"/\1/p' Cargo.toml | head -1)
busybox_for() {
  case "$1" in
    x86_64) echo /bin/busybox ;;
    aarch64)
      local c=/var/cache/picolet-vm
      mkdir -p "$c"
      dpkg --print-foreign-architectures | grep -qx arm64 || { dpkg --add-architecture arm64; apt-get update -qq; }
      (cd "$c" && { ls busybox-static_*_arm64.deb >/dev/null 2>&1 || apt-get download busybox-static:arm64 >/dev/null; } \
        && rm -rf bb-arm64 && dpkg-deb -x busybox-static_*_arm64.deb bb-arm64)
      echo "$c/bb-arm64/bin/busybox" ;;
  esac
}
for t in "${TARGETS[@]}"; do
  arch=${t%%-*}
  debarch=$([ "$arch" = x86_64 ] && echo amd64 || echo arm64)
  packaging/deb.sh "dist/picolet-$arch" "$debarch" "$VERSION" dist
  B="picolet-$VERSION-$arch"
  W=$(mktemp -d)
  mkdir -p "$W/$B/images" "$W/$B/examples" "$W/$B/packaging"
  cp "dist/picolet-$arch" "$W/$B/picolet"
  BUSYBOX=$(busybox_for "$arch") cargo xtask demo-image "$W/$B/images/busybox.tar" "$debarch" >/dev/null
  cp -r examples/config.yaml examples/manifests "$W/$B/examples/"
  cp packaging/picolet.service packaging/picolet.openrc packaging/picolet.initd "$W/$B/packaging/"
  tar -C "$W" --owner=0 --group=0 -czf "dist/$B.tar.gz" "$B"
  rm -rf "$W"
  echo "dist: dist/$B.tar.gz, dist/picolet_${VERSION}_$debarch.deb"
done

if [ -n "$smoke" ]; then
  # Debian's own checks of the packages and of the unit (with the binary
  # path pointed at the built one: verify wants ExecStart to exist).
  lintian --fail-on error,warning --allow-root dist/picolet_"$VERSION"_*.deb
  U=$(mktemp -d)
  sed "s|@BIN@|$PWD/dist/picolet-x86_64|g" packaging/picolet.service > "$U/picolet.service"
  systemd-analyze verify "$U/picolet.service"
  rm -rf "$U"
  echo "dist: lintian and systemd-analyze verify passed"
  q=qemu-aarch64-static
  command -v "$q" >/dev/null || { echo "dist: $q missing (apt install qemu-user-static)" >&2; exit 1; }
  echo "dist: smoke test of dist/picolet-aarch64 under $q"
  "$q" dist/picolet-aarch64 version
  "$q" dist/picolet-aarch64 check --config examples/config.yaml --node-name edge-1 examples/manifests/hello.yaml
  # Pure unit tests, built for aarch64 and run by qemu (the cargo runner).
  CARGO_TARGET_AARCH64_UNKNOWN_LINUX_MUSL_RUNNER="$q" \
    cargo test --locked --target aarch64-unknown-linux-musl -q \
      -p edge-config -p cgroup -p agent -p cri-proto --lib \
      -- --skip kernel_enforces_the_program 2>&1 | grep -E '^(test result|failures|error)|FAILED|panicked'
  echo "dist: aarch64 smoke test passed"
fi
