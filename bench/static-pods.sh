#!/usr/bin/env bash
# Static pod start latency: a manifest written into the folder (temp file +
# rename) → its container running (CRI started_at), p50/p95 over N pods
# (default 30), one after another, with `picolet up` on private paths.
# Prints a markdown table. Run as root.
#
#   sudo bench/static-pods.sh [N]
#
# picolet only: kubelet is not packaged for Debian, so no same-run baseline.
# For reference, kubelet watches the static pod folder with inotify too; its
# fileCheckFrequency (default 20 s) is the fallback rescan, so a missed
# event costs up to 20 s there (picolet rescans every fileCheckFrequency as
# well, same default).
set -euo pipefail
cd "$(dirname "$0")/.."
[ "$(id -u)" = 0 ] || { echo "bench: run as root" >&2; exit 1; }
N="${1:-30}"

scripts/setup.sh
cargo build --release --locked -q -p picolet -p xtask -p bench
T="${CARGO_TARGET_DIR:-target}/release"
W=$(mktemp -d /var/tmp/picolet-pod-bench.XXXXXX)
cleanup() {
  [ -n "${UP:-}" ] && kill "$UP" 2>/dev/null || true
  wait 2>/dev/null || true
  find /sys/fs/cgroup/*/picolet-bench-pods -name cgroup.procs -exec cat {} + 2>/dev/null | sort -u | xargs -r kill -9 2>/dev/null || true
  sleep 0.5
  grep " $W" /proc/mounts | awk '{print $2}' | sort -r | xargs -r -n1 umount -l 2>/dev/null || true
  for h in /sys/fs/cgroup/*/picolet-bench-pods; do [ -d "$h" ] && find "$h" -depth -type d -exec rmdir {} \; 2>/dev/null; done
  rm -rf "$W"
}
trap cleanup EXIT

mkdir -p "$W/images" "$W/manifests"
"$T/xtask" demo-image "$W/images/busybox.tar" >/dev/null
cat > "$W/config.yaml" <<YAML
staticPodPath: $W/manifests
healthzPort: 0
port: 0
podLogsDir: $W/logs
cgroupRoot: /picolet-bench-pods
picolet:
  nodeName: bench
  dataDir: $W/root
  runDir: $W/run
  criSocket: $W/run/picolet.sock
  imagesDir: $W/images
YAML
"$T/picolet" up --config "$W/config.yaml" 2>"$W/up.log" & UP=$!
for _ in $(seq 200); do "$T/picolet" ctl --socket "$W/run/picolet.sock" images 2>/dev/null | grep -q busybox && break; sleep 0.05; done
"$T/static-pod-bench" "$W/manifests" "$W/run/picolet.sock" bench "$N" > "$W/lat.json"

python3 - "$W/lat.json" "$N" <<'PY'
import json, sys, platform, os, datetime
v = sorted(json.load(open(sys.argv[1])))
def q(f): return v[min(len(v) - 1, int(round(f * (len(v) - 1))))]
print(f"\nStatic pod manifest written → container running, {sys.argv[2]} pods one after another "
      f"({os.cpu_count()} cores, kernel {platform.release()}, {datetime.date.today()})\n")
print("| | p50 | p95 | max |")
print("|---|---:|---:|---:|")
print(f"| picolet up (inotify → sandbox → container started) | {q(.5):.1f} ms | {q(.95):.1f} ms | {v[-1]:.1f} ms |")
print("| kubelet, event missed by inotify | ≤ fileCheckFrequency (default 20 s) | | |")
PY
