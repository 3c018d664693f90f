#!/usr/bin/env bash
# CRI latency: picolet vs containerd + runc (default Debian's containerd 1.6
# and runc), same client (bench/src/main.rs, in-process CRI calls), same
# busybox image, same run. Prints the containerd and runc measured, then
# markdown tables of p50/p95 per RPC. Run as root.
#
#   sudo bench/cri.sh [ITERATIONS]     # default 50
#   sudo CONTAINERD=/…/containerd RUNC=/…/runc bench/cri.sh [ITERATIONS]
#
# CONTAINERD and RUNC (paths) pick another containerd (its shim and ctr from
# its folder when there) and runc: see bench/containerd.sh.
#
# containerd gets a private root/state/socket and a sandbox ("pause") image
# built from busybox, since nothing may be pulled. containerd's CRI insists on
# an IP from CNI for a pod network, so the first side-by-side runs
# host-network pods on both (each still gets its own IPC, UTS (picolet:
# host's, as containerd) and pid namespaces); picolet is also measured with
# its own pod network namespace and no CNI config (loopback only), and with a user
# namespace of the pod's own as well (hostUsers: false). The second
# side-by-side gives both the same CNI network (Debian's bridge + host-local
# + portmap, a hostPort per pod), each runtime started inside a network
# namespace of the bench's own, so the bridge and the rules never reach the
# host's network: the plugins' exec time is in both. The third gives both
# picolet's built-in plugin (type "picolet"; containerd runs it as
# /…/cni-bin/picolet, a link to the binary, called with CNI_COMMAND and no
# arguments), again in network namespaces of their own.
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
  for h in ${NETNS_HOLDERS:-}; do kill "$h" 2>/dev/null || true; done
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
# A network namespace of the bench's own, held by a sleep; prints its path.
NETNS_HOLDERS=
new_netns() {
  unshare --net sleep 100000 & NETNS_HOLDERS="$NETNS_HOLDERS $!"
  local pid=$!
  for _ in $(seq 100); do
    [ "$(readlink /proc/$pid/ns/net)" != "$(readlink /proc/self/ns/net)" ] && break
    sleep 0.02
  done
  NETNS="/proc/$pid/ns/net"
}
# The one CNI network both runtimes get: $1 its folder, $2 the leases' dir.
cni_conf() {
  mkdir -p "$1"
  cat > "$1/10-bench.conflist" <<JSON
{"cniVersion": "1.0.0", "name": "bench", "plugins": [
  {"type": "bridge", "bridge": "cni0", "isGateway": true, "ipMasq": true,
   "ipam": {"type": "host-local", "dataDir": "$2", "ranges": [[{"subnet": "10.98.0.0/16"}]]}},
  {"type": "portmap", "capabilities": {"portMappings": true}}
]}
JSON
}

# picolet's built-in plugin on the same subnet: $1 its folder, $2 the leases'.
builtin_conf() {
  mkdir -p "$1"
  cat > "$1/10-bench.conflist" <<JSON
{"cniVersion": "1.0.0", "name": "bench", "plugins": [
  {"type": "picolet", "bridge": "picolet0", "subnet": "10.98.0.0/16", "dataDir": "$2",
   "ipMasq": true, "capabilities": {"portMappings": true}}
]}
JSON
}

"$T/xtask" busybox-docker "$W/busybox.tar" >/dev/null
"$T/xtask" pause-image "$W/pause.tar" >/dev/null

# picolet
mkdir -p "$W/p/images"
"$T/picolet" shim --root "$W/p/root" --run-dir "$W/p/run" --socket "$W/p/p.sock" --images-dir "$W/p/images" 2>"$W/p/shim.log" & SHIM=$!
wait_sock "$W/p/p.sock"
"$T/picolet" ctl --socket "$W/p/p.sock" import "$W/busybox.tar" >/dev/null
"$T/cri-bench" "$W/p/p.sock" busybox "$N" pod > "$W/picolet-pod.json"
# The same pods with a user namespace of their own (kubelet's hostUsers: false).
"$T/cri-bench" "$W/p/p.sock" busybox "$N" userns > "$W/picolet-userns.json"
"$T/cri-bench" "$W/p/p.sock" busybox "$N" host > "$W/picolet.json"
kill "$SHIM"; wait "$SHIM" 2>/dev/null || true; SHIM=
# picolet with the CNI bridge, in its own network namespace.
new_netns
cni_conf "$W/p/cni" "$W/p/ipam"
nsenter --net="$NETNS" "$T/picolet" shim --root "$W/p/root" --run-dir "$W/p/run" --socket "$W/p/p.sock" \
  --images-dir "$W/p/images" --cni-conf-dir "$W/p/cni" --cni-bin-dir /usr/lib/cni 2>>"$W/p/shim.log" & SHIM=$!
wait_sock "$W/p/p.sock"
"$T/cri-bench" "$W/p/p.sock" busybox "$N" cni > "$W/picolet-cni.json"
kill "$SHIM"; wait "$SHIM" 2>/dev/null || true; SHIM=
# picolet with its built-in plugin, in another network namespace.
new_netns
builtin_conf "$W/p/builtin" "$W/p/ipam-builtin"
nsenter --net="$NETNS" "$T/picolet" shim --root "$W/p/root" --run-dir "$W/p/run" --socket "$W/p/p.sock" \
  --images-dir "$W/p/images" --cni-conf-dir "$W/p/builtin" --cni-bin-dir "$W/no-plugins" 2>>"$W/p/shim.log" & SHIM=$!
wait_sock "$W/p/p.sock"
"$T/cri-bench" "$W/p/p.sock" busybox "$N" cni > "$W/picolet-builtin.json"
kill "$SHIM"; wait "$SHIM" 2>/dev/null || true; SHIM=

# containerd + runc
containerd_cri_start "$W/c"
for a in busybox pause; do "$CTR" --address "$W/c/c.sock" -n k8s.io images import "$W/$a.tar" >/dev/null; done
"$T/cri-bench" "$W/c/c.sock" docker.io/library/busybox:latest "$N" host > "$W/containerd.json"
kill "$CTRD"; wait "$CTRD" 2>/dev/null || true; CTRD=
# containerd with the same CNI bridge, in its own network namespace.
new_netns
cni_conf "$W/c/cni" "$W/c/ipam"
rm -f "$W/c/c.sock"
containerd_cri_start "$W/c" "$W/c/cni" "$NETNS"
"$T/cri-bench" "$W/c/c.sock" docker.io/library/busybox:latest "$N" cni > "$W/containerd-cni.json"
kill "$CTRD"; wait "$CTRD" 2>/dev/null || true; CTRD=
# containerd with picolet's built-in plugin, in another network namespace.
new_netns
builtin_conf "$W/c/builtin" "$W/c/ipam-builtin"
mkdir -p "$W/cni-bin"
ln -s "$(realpath "$T/picolet")" "$W/cni-bin/picolet"
# containerd runs `loopback` from its bin_dir too (1.6 always, 2.x unless
# use_internal_loopback).
ln -s /usr/lib/cni/loopback "$W/cni-bin/loopback"
rm -f "$W/c/c.sock"
containerd_cri_start "$W/c" "$W/c/builtin" "$NETNS" "$W/cni-bin"
"$T/cri-bench" "$W/c/c.sock" docker.io/library/busybox:latest "$N" cni > "$W/containerd-builtin.json"

# What was measured: the runc the shim ran (BinaryName, else `runc` on
# containerd's PATH) and the shim containerd found on its PATH.
runc_bin="${RUNC:-$(PATH="$CONTAINERD_PATH" command -v runc)}"
shim_bin=$(PATH="$CONTAINERD_PATH" command -v containerd-shim-runc-v2)
python3 - "$W/picolet.json" "$W/containerd.json" "$W/picolet-pod.json" "$N" \
  "$("$CONTAINERD" --version | awk '{print $3}')" "$("$runc_bin" --version | head -1 | awk '{print $3}')" \
  "$W/picolet-cni.json" "$W/containerd-cni.json" "$W/picolet-builtin.json" "$W/containerd-builtin.json" \
  "$W/picolet-userns.json" \
  "$CONTAINERD: $("$CONTAINERD" --version | head -1); shim $shim_bin" \
  "$runc_bin: $("$runc_bin" --version | head -1)" <<'PY'
import json, sys, platform, os, datetime
p_file, c_file, pp_file, n, cver, rver, pc_file, cc_file, pb_file, cb_file, pu_file, cline, rline = sys.argv[1:14]
p, c, pp, pc, cc, pb, cb, pu = (json.load(open(f)) for f in (p_file, c_file, pp_file, pc_file, cc_file, pb_file, cb_file, pu_file))
def q(v, f):
    v = sorted(v); return v[min(len(v) - 1, int(round(f * (len(v) - 1))))]
print(f"\nCRI latency, {n} iterations, same in-process client ({os.cpu_count()} cores, kernel {platform.release()}, {datetime.date.today()})\n")
print(f"containerd: {cline}\nrunc: {rline}\n")
print(f"| RPC (host-network pods) | picolet p50 | picolet p95 | containerd {cver} + runc {rver} p50 | p95 | picolet, own netns, p50 | p95 |")
print("|---|---:|---:|---:|---:|---:|---:|")
for k in ["RunPodSandbox", "CreateContainer", "StartContainer", "Create + Start", "ExecSync", "Exec (streaming)", "StopContainer", "StopContainer: exit → return", "RemoveContainer", "StopPodSandbox", "RemovePodSandbox"]:
    print(f"| {k} | {q(p[k], .5):.1f} ms | {q(p[k], .95):.1f} ms | {q(c[k], .5):.1f} ms | {q(c[k], .95):.1f} ms | {q(pp[k], .5):.1f} ms | {q(pp[k], .95):.1f} ms |")
print(f"\n| RPC (pod network: the same CNI bridge + portmap, a hostPort each) | picolet p50 | picolet p95 | containerd {cver} p50 | p95 | containerd/picolet p50 |")
print("|---|---:|---:|---:|---:|---:|")
for k in ["RunPodSandbox", "CreateContainer", "StartContainer", "StopPodSandbox", "RemovePodSandbox"]:
    a, b = q(pc[k], .5), q(cc[k], .5)
    print(f"| {k} | {a:.1f} ms | {q(pc[k], .95):.1f} ms | {b:.1f} ms | {q(cc[k], .95):.1f} ms | {b / a:.1f}x |")
print(f"\n| RPC (pod network: picolet's built-in plugin for both, a hostPort each) | picolet p50 | picolet p95 | containerd {cver} p50 | p95 | containerd/picolet p50 | containerd + Debian's plugins / picolet + built-in p50 |")
print("|---|---:|---:|---:|---:|---:|---:|")
for k in ["RunPodSandbox", "CreateContainer", "StartContainer", "StopPodSandbox", "RemovePodSandbox"]:
    a, b = q(pb[k], .5), q(cb[k], .5)
    print(f"| {k} | {a:.1f} ms | {q(pb[k], .95):.1f} ms | {b:.1f} ms | {q(cb[k], .95):.1f} ms | {b / a:.1f}x | {q(cc[k], .5) / a:.1f}x |")
print(f"\n| RPC (picolet, pod network namespace, no CNI) | own netns p50 | p95 | + own user namespace p50 | p95 |")
print("|---|---:|---:|---:|---:|")
for k in ["RunPodSandbox", "CreateContainer", "StartContainer", "Create + Start", "ExecSync", "StopContainer", "RemoveContainer", "StopPodSandbox", "RemovePodSandbox"]:
    print(f"| {k} | {q(pp[k], .5):.1f} ms | {q(pp[k], .95):.1f} ms | {q(pu[k], .5):.1f} ms | {q(pu[k], .95):.1f} ms |")
PY
