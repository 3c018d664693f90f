#!/usr/bin/env bash
# CRI latency: picolet vs Debian's containerd 1.6 + runc, same client
# (bench/src/main.rs, in-process CRI calls), same busybox image, same run.
# Prints a markdown table of p50/p95 per RPC. Run as root.
#
#   sudo bench/cri.sh [ITERATIONS]     # default 50
#
# containerd gets a private root/state/socket and a sandbox ("pause") image
# built from busybox, since nothing may be pulled. containerd's CRI insists on
# an IP from CNI for a pod network, which would need a bridge on the host, so
# the side-by-side runs host-network pods on both (each still gets its own IPC,
# UTS (picolet: host's, as containerd) and pid namespaces); picolet is also
# measured with its own pod network namespace (loopback), its default.
set -euo pipefail
cd "$(dirname "$0")/.."
. bench/containerd.sh
[ "$(id -u)" = 0 ] || { echo "bench: run as root" >&2; exit 1; }
N="${1:-50}"

scripts/setup.sh
cargo build --release --locked -q -p picolet -p xtask -p bench
T="${CARGO_TARGET_DIR:-target}/release"
W=$(mktemp -d /var/tmp/picolet-cri-bench.XXXXXX)
cleanup() {
  [ -n "${SHIM:-}" ] && kill "$SHIM" 2>/dev/null || true
  [ -n "${CTRD:-}" ] && kill "$CTRD" 2>/dev/null || true
  wait 2>/dev/null || true
  # Containers a failed run left behind: everything in our bench cgroups.
  cat /sys/fs/cgroup/*/picolet-bench/*/*/cgroup.procs 2>/dev/null | sort -u | xargs -r kill -9 2>/dev/null || true
  sleep 0.5
  grep " $W" /proc/mounts | awk '{print $2}' | sort -r | xargs -r -n1 umount -l 2>/dev/null || true
  for h in /sys/fs/cgroup/*/picolet-bench; do [ -d "$h" ] && find "$h" -depth -type d -exec rmdir {} \; 2>/dev/null; done
  rm -rf "$W" /var/log/pods/bench-*
}
trap cleanup EXIT
wait_sock() { for _ in $(seq 200); do [ -S "$1" ] && return 0; sleep 0.05; done; echo "no socket $1" >&2; exit 1; }

"$T/xtask" busybox-docker "$W/busybox.tar" >/dev/null
"$T/xtask" pause-image "$W/pause.tar" >/dev/null

# picolet
mkdir -p "$W/p/images"
"$T/picolet" shim --root "$W/p/root" --run-dir "$W/p/run" --socket "$W/p/p.sock" --images-dir "$W/p/images" 2>"$W/p/shim.log" & SHIM=$!
wait_sock "$W/p/p.sock"
"$T/picolet" ctl --socket "$W/p/p.sock" import "$W/busybox.tar" >/dev/null
"$T/cri-bench" "$W/p/p.sock" busybox "$N" pod > "$W/picolet-pod.json"
"$T/cri-bench" "$W/p/p.sock" busybox "$N" host > "$W/picolet.json"
kill "$SHIM"; wait "$SHIM" 2>/dev/null || true; SHIM=

# containerd + runc
containerd_cri_start "$W/c"
for a in busybox pause; do ctr --address "$W/c/c.sock" -n k8s.io images import "$W/$a.tar" >/dev/null; done
"$T/cri-bench" "$W/c/c.sock" docker.io/library/busybox:latest "$N" host > "$W/containerd.json"

python3 - "$W/picolet.json" "$W/containerd.json" "$W/picolet-pod.json" "$N" \
  "$(containerd --version | awk '{print $3}')" "$(runc --version | head -1 | awk '{print $3}')" <<'PY'
import json, sys, platform, os, datetime
p_file, c_file, pp_file, n, cver, rver = sys.argv[1:7]
p, c, pp = (json.load(open(f)) for f in (p_file, c_file, pp_file))
def q(v, f):
    v = sorted(v); return v[min(len(v) - 1, int(round(f * (len(v) - 1))))]
print(f"\nCRI latency, {n} iterations, same in-process client ({os.cpu_count()} cores, kernel {platform.release()}, {datetime.date.today()})\n")
print(f"| RPC (host-network pods) | picolet p50 | picolet p95 | containerd {cver} + runc {rver} p50 | p95 | picolet, own netns, p50 | p95 |")
print("|---|---:|---:|---:|---:|---:|---:|")
for k in ["RunPodSandbox", "CreateContainer", "StartContainer", "ExecSync", "StopContainer", "RemoveContainer", "StopPodSandbox", "RemovePodSandbox"]:
    print(f"| {k} | {q(p[k], .5):.1f} ms | {q(p[k], .95):.1f} ms | {q(c[k], .5):.1f} ms | {q(c[k], .95):.1f} ms | {q(pp[k], .5):.1f} ms | {q(pp[k], .95):.1f} ms |")
PY
