#!/usr/bin/env bash
# Set up, build and run picolet with its embedded defaults: the shim serves
# CRI on /run/picolet/picolet.sock and imports the bundled busybox demo image
# from the preload folder /var/lib/picolet/images. Run as root; Ctrl-C stops.
set -euo pipefail
cd "$(dirname "$0")/.."
[ "$(id -u)" = 0 ] || { echo "demo: run as root (sudo $0)" >&2; exit 1; }

scripts/setup.sh
cargo build --release --locked -p picolet
bin="${CARGO_TARGET_DIR:-target}/release/picolet"

mkdir -p /var/lib/picolet/images
[ -f /var/lib/picolet/images/busybox.tar ] || cargo xtask demo-image /var/lib/picolet/images/busybox.tar

"$bin" shim &
shim=$!
trap 'kill "$shim" 2>/dev/null; wait "$shim" 2>/dev/null' EXIT INT TERM
for _ in $(seq 100); do
  "$bin" ctl images 2>/dev/null | grep -q busybox && break
  sleep 0.1
done
echo
echo "picolet shim is running (pid $shim) on /run/picolet/picolet.sock; its images:"
"$bin" ctl images
echo
echo "Any CRI client works too, e.g. crictl --runtime-endpoint unix:///run/picolet/picolet.sock images"
echo "Static pods arrive with the agent (issue 4). Ctrl-C to stop."
wait "$shim"
