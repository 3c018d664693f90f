#!/usr/bin/env bash
# CRI latency: picolet vs Debian's containerd 1.6 + runc, same client
# (bench/src/main.rs, in-process CRI calls), same busybox image, same run.
# Prints a markdown table of p50/p95 per RPC. Run as root.
#
#   sudo bench/cri.sh [ITERATIONS]     # default 50
#
# containerd gets a private root/state/socket, a loopback-only CNI config
# (containernetworking-plugins) so pods get a network namespace as picolet's
# do, and a sandbox ("pause") image built from busybox, since nothing may be
# pulled. Both runtimes run pods with their own network, IPC and UTS namespaces.
set -euo pipefail
cd "$(dirname "$0")/.."
[ "$(id -u)" = 0 ] || { echo "bench: run as root" >&2; exit 1; }
N="${1:-50}"

scripts/setup.sh
dpkg-query -W -f='${Status}' containernetworking-plugins 2>/dev/null | grep -q 'install ok installed' \
  || apt-get install -y -qq containernetworking-plugins >/dev/null
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
"$T/cri-bench" "$W/p/p.sock" busybox "$N" > "$W/picolet.json"
kill "$SHIM"; wait "$SHIM" 2>/dev/null || true; SHIM=

# containerd + runc
mkdir -p "$W/c/cni"
cat > "$W/c/cni/10-lo.conflist" <<JSON
{"cniVersion": "0.4.0", "name": "lo", "plugins": [{"type": "loopback"}]}
JSON
cat > "$W/c/config.toml" <<TOML
version = 2
root = "$W/c/root"
state = "$W/c/state"
[grpc]
  address = "$W/c/c.sock"
[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "localhost/picolet-bench/pause:v1"
  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "overlayfs"
    default_runtime_name = "runc"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "/usr/lib/cni"
    conf_dir = "$W/c/cni"
TOML
containerd --config "$W/c/config.toml" 2>"$W/c/containerd.log" & CTRD=$!
wait_sock "$W/c/c.sock"
for a in busybox pause; do ctr --address "$W/c/c.sock" -n k8s.io images import "$W/$a.tar" >/dev/null; done
"$T/cri-bench" "$W/c/c.sock" docker.io/library/busybox:latest "$N" > "$W/containerd.json"

python3 - "$W/picolet.json" "$W/containerd.json" "$N" "$(containerd --version | awk '{print $3}')" "$(runc --version | head -1 | awk '{print $3}')" <<'PY'
import json, sys, platform, os, datetime
p, c = (json.load(open(f)) for f in sys.argv[1:3])
def q(v, f):
    v = sorted(v); return v[min(len(v) - 1, int(round(f * (len(v) - 1))))]
print(f"\nCRI latency, {sys.argv[3]} iterations, same in-process client ({os.cpu_count()} cores, kernel {platform.release()}, {datetime.date.today()})\n")
print(f"| RPC | picolet p50 | picolet p95 | containerd {sys.argv[4]} + runc {sys.argv[5]} p50 | p95 |")
print("|---|---:|---:|---:|---:|")
for k in ["RunPodSandbox", "CreateContainer", "StartContainer", "StopContainer", "RemoveContainer", "StopPodSandbox", "RemovePodSandbox"]:
    print(f"| {k} | {q(p[k], .5):.1f} ms | {q(p[k], .95):.1f} ms | {q(c[k], .5):.1f} ms | {q(c[k], .95):.1f} ms |")
PY
