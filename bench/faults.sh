#!/usr/bin/env bash
# Fault injection: `picolet up` on private paths under /var/tmp,
# static pods of four kinds churned (added, replaced, removed), and KILLS
# random SIGKILLs of the shim, the agent, a container monitor or `up`
# itself; after each, the node must settle to what the manifests say (see
# bench/src/faults.rs for the invariants), and at the end nothing may be
# left: processes, mounts, cgroups, log directories, state records. Prints
# `faults: N kills, V violations, L leaks`; exits 1 on any. Run as root.
#
#   sudo bench/faults.sh [KILLS] [SEED]     # default 50; .ci/run runs 50
set -euo pipefail
cd "$(dirname "$0")/.."
[ "$(id -u)" = 0 ] || { echo "faults: run as root" >&2; exit 1; }
KILLS="${1:-50}"
SEED="${2:-}"

cargo build --release --locked -q -p picolet -p xtask -p bench
T="${CARGO_TARGET_DIR:-target}/release"
W=$(mktemp -d /var/tmp/picolet-faults.XXXXXX)
cleanup() {
  # Whatever a failed run left: processes under our paths (by PID, ours
  # only), containers in our cgroups, mounts, cgroups, files.
  for p in $(grep -l "$W" /proc/[0-9]*/cmdline 2>/dev/null | cut -d/ -f3); do kill -9 "$p" 2>/dev/null || true; done
  cat /sys/fs/cgroup/*/picolet-faults/*/*/*/cgroup.procs /sys/fs/cgroup/*/picolet-faults/*/*/*/*/cgroup.procs 2>/dev/null \
    | sort -u | xargs -r kill -9 2>/dev/null || true
  sleep 0.5
  grep " $W" /proc/mounts | awk '{print $2}' | sort -r | xargs -r -n1 umount -l 2>/dev/null || true
  for h in /sys/fs/cgroup/*/picolet-faults /sys/fs/cgroup/picolet-faults; do
    [ -d "$h" ] && find "$h" -depth -type d -exec rmdir {} \; 2>/dev/null
  done
  rm -rf "$W"
}
trap cleanup EXIT

mkdir -p "$W/images"
"$T/xtask" demo-image "$W/images/busybox.tar" >/dev/null
"$T/faults" "$T/picolet" "$W" "$KILLS" $SEED
