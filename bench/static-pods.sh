#!/usr/bin/env bash
# Static pod start latency: a manifest written into the folder (temp file +
# rename) → its container running (CRI started_at), p50/p95/p99 over N pods
# (default 30) one after another, then over M pods (default 100) written at
# once (a cold start: kubelet's pod-start SLO is p99 <= 5 s), with
# `picolet up` on private paths. Prints a markdown table. Run as root.
#
#   sudo bench/static-pods.sh [N] [M]
#   sudo PICOLET=/path/to/picolet bench/static-pods.sh [N] [M]   (another build, e.g. the last
#                                                                 commit's, beside this one)
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
M="${2:-100}"

scripts/setup.sh
cargo build --release --locked -q -p picolet -p xtask -p bench
T="${CARGO_TARGET_DIR:-target}/release"
P="${PICOLET:-$T/picolet}"
W=$(mktemp -d /var/tmp/picolet-pod-bench.XXXXXX)
LOOP=
cleanup() {
  [ -n "${UP:-}" ] && kill "$UP" 2>/dev/null || true
  [ -n "${HOLDER:-}" ] && kill "$HOLDER" 2>/dev/null || true
  wait 2>/dev/null || true
  find /sys/fs/cgroup/*/picolet-bench-pods -name cgroup.procs -exec cat {} + 2>/dev/null | sort -u | xargs -r kill -9 2>/dev/null || true
  sleep 0.5
  grep " $W" /proc/mounts | awk '{print $2}' | sort -r | xargs -r -n1 umount -l 2>/dev/null || true
  for h in /sys/fs/cgroup/*/picolet-bench-pods; do [ -d "$h" ] && find "$h" -depth -type d -exec rmdir {} \; 2>/dev/null; done
  [ -n "$LOOP" ] && losetup -d "$LOOP" 2>/dev/null
  rm -rf "$W" "$W.img"
}
trap cleanup EXIT

# The bench's files on a fresh journaled ext4 (a sparse file on a loop
# device), as on a device's disk, and runDir on a tmpfs, as /run/picolet
# there. This VM's root is ext4 without a journal, where every new inode
# scans past the ones deleted in the last minutes: with the bench on it, a
# fifth of 100 pods' cold-start CPU went there, and each run was slower
# than the one before (20 sequential pods: p50 28 → 67 ms over 8 runs).
truncate -s 2G "$W.img"
mkfs.ext4 -q -F "$W.img"
LOOP=$(losetup -f --show "$W.img")
mount "$LOOP" "$W"
mkdir -p "$W/images" "$W/manifests" "$W/run"
mount -t tmpfs -o mode=0755,size=64m tmpfs "$W/run"
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
  cniConfDir: $W/net.d
YAML
# picolet up writes its built-in network into cniConfDir, as on a device;
# its bridge and iptables rules go into a network namespace of the bench's
# own, held by a sleep, and end with it.
unshare --net sleep 100000 & HOLDER=$!
for _ in $(seq 100); do
  [ "$(readlink /proc/$HOLDER/ns/net)" != "$(readlink /proc/self/ns/net)" ] && break
  sleep 0.02
done
nsenter --net="/proc/$HOLDER/ns/net" "$P" up --config "$W/config.yaml" 2>"$W/up.log" & UP=$!
for _ in $(seq 200); do "$P" ctl --socket "$W/run/picolet.sock" images 2>/dev/null | grep -q busybox && break; sleep 0.05; done
"$T/static-pod-bench" "$W/manifests" "$W/run/picolet.sock" bench "$N" > "$W/lat.json"
# It also says the busy CPU of the whole machine (all processes, kernel
# threads too) from the writes until the last pod ran: steadier run to run
# than their latency on this VM.
"$T/static-pod-bench" "$W/manifests" "$W/run/picolet.sock" bench "$M" at-once > "$W/cold.json" 2> "$W/cold.err"
TICKS=$(awk '/^busy-ticks/{print $2}' "$W/cold.err")

python3 - "$W/lat.json" "$N" "$W/cold.json" "$M" "${TICKS:-0}" "$(getconf CLK_TCK)" "$W/cold.err" <<'PY'
import json, sys, platform, os, datetime
def row(what, path):
    v = sorted(json.load(open(path)))
    q = lambda f: v[min(len(v) - 1, int(round(f * (len(v) - 1))))]
    return f"| {what} | {q(.5):.1f} ms | {q(.95):.1f} ms | {q(.99):.1f} ms | {v[-1]:.1f} ms |"
print(f"\nStatic pod manifest written → container running "
      f"({os.cpu_count()} cores, kernel {platform.release()}, {datetime.date.today()})\n")
print("| picolet up (inotify → sandbox → container started) | p50 | p95 | p99 | max |")
print("|---|---:|---:|---:|---:|")
print(row(f"{sys.argv[2]} pods one after another", sys.argv[1]))
print(row(f"{sys.argv[4]} pods written at once (cold start)", sys.argv[3]))
print("| kubelet, event missed by inotify | ≤ fileCheckFrequency (default 20 s) | | | |")
ticks, hz, m = int(sys.argv[5]), int(sys.argv[6]), int(sys.argv[4])
print(f"\nCPU while the {m} pods started (whole machine, /proc/stat): "
      f"{ticks / hz:.2f} s, {1000 * ticks / hz / m:.1f} ms per pod")
ph = [json.loads(l.split(" ", 1)[1]) for l in open(sys.argv[7]) if l.startswith("phases ")]
if ph:
    q = lambda v, f: v[min(len(v) - 1, int(round(f * (len(v) - 1))))] if v else float("nan")
    print("Cold start phases, ms after the write (p50 / p99): " + ", ".join(
        f"{what} {q(ph[0][k], .5):.0f} / {q(ph[0][k], .99):.0f}"
        for k, what in [("sandbox", "RunPodSandbox called"), ("container", "CreateContainer called"),
                        ("started", "started")]))
PY
