#!/usr/bin/env bash
# Footprint: summed RSS and PSS of every picolet process (up, shim, agent,
# per-container monitors) idle with 0, 10 and 30 running pods, and idle CPU
# over 60 s with 30 pods, beside Debian's containerd 1.6 + its per-pod
# containerd-shim-runc-v2 processes holding the same pods, in the same run;
# plus the static binary size. Prints a markdown table. Run as root.
#
#   sudo bench/footprint.sh [IDLE_SECONDS]      # default 60
#
# Pods: host network, one idle busybox container each. picolet's pods come
# from static pod files through its agent (so its figure includes the
# agent); containerd's are made by the same in-process CRI client as
# bench/cri.sh (no kubelet counted). Container processes themselves, and
# containerd's per-pod sandbox ("pause") processes, are not counted.
set -euo pipefail
cd "$(dirname "$0")/.."
. bench/containerd.sh
[ "$(id -u)" = 0 ] || { echo "bench: run as root" >&2; exit 1; }
IDLE="${1:-60}"

scripts/setup.sh
cargo build --release --locked -q -p picolet --target x86_64-unknown-linux-musl
cargo build --release --locked -q -p xtask -p bench
T="${CARGO_TARGET_DIR:-target}"
BIN="$T/x86_64-unknown-linux-musl/release/picolet"
W=$(mktemp -d /var/tmp/picolet-footprint.XXXXXX)
LOOP=
cleanup() {
  [ -n "${UP:-}" ] && kill "$UP" 2>/dev/null || true
  [ -n "${HOLD_PID:-}" ] && kill "$HOLD_PID" 2>/dev/null || true
  [ -n "${CTRD:-}" ] && kill "$CTRD" 2>/dev/null || true
  wait 2>/dev/null || true
  pgrep -f "containerd-shim.*$W" | xargs -r kill -9 2>/dev/null || true
  find /sys/fs/cgroup/*/picolet-footprint -name cgroup.procs -exec cat {} + 2>/dev/null | sort -u | xargs -r kill -9 2>/dev/null || true
  sleep 0.5
  grep " $W" /proc/mounts | awk '{print $2}' | sort -r | xargs -r -n1 umount -l 2>/dev/null || true
  for h in /sys/fs/cgroup/*/picolet-footprint /sys/fs/cgroup/*/picolet-bench; do
    [ -d "$h" ] && find "$h" -depth -type d -exec rmdir {} \; 2>/dev/null
  done
  umount "$W" 2>/dev/null || true
  [ -n "$LOOP" ] && losetup -d "$LOOP" 2>/dev/null
  rm -rf "$W" "$W.img" /var/log/pods/bench-*
}
trap cleanup EXIT
# Both runtimes' files on a fresh ext4 of their own (a sparse file on a loop
# device): a host disk past an eviction threshold (this VM's root had 14.8 %
# available, under imagefs.available<15 %) put picolet's node under
# DiskPressure, and its eviction passes then read every pod's stats every
# 10 s: idle CPU 0.39 % instead of 0.12 %.
truncate -s 2G "$W.img"
mkfs.ext4 -q -F "$W.img"
LOOP=$(losetup -f --show "$W.img")
mount "$LOOP" "$W"
cp "$BIN" "$W/picolet"   # a private path: its processes are the ones with this exe
P="$W/picolet"

# pids → "rss_kib pss_kib count"
mem() {
  local rss=0 pss=0 n=0 pid r s
  for pid in "$@"; do
    [ -r "/proc/$pid/smaps_rollup" ] || continue
    r=$(awk '/^Rss:/ {print $2}' "/proc/$pid/smaps_rollup")
    s=$(awk '/^Pss:/ {print $2}' "/proc/$pid/smaps_rollup")
    rss=$((rss + r)); pss=$((pss + s)); n=$((n + 1))
  done
  echo "$rss $pss $n"
}
# pids → "tid ns" lines: each of their threads' time on a CPU so far
# (schedstat, nanoseconds; /proc/<pid>/stat counts 10 ms ticks, and 0.1 %
# of a core over 30 s is three of them).
# A third field names the thread: its process's role (the second word of
# the command line: shim, agent, monitor, up) and the thread's name.
thread_ns() {
  local pid t role
  for pid in "$@"; do
    role=$(tr '\0' ' ' < "/proc/$pid/cmdline" 2>/dev/null | awk '{print $2}')
    for t in /proc/"$pid"/task/*; do
      [ -r "$t/schedstat" ] && echo "${t##*/} $(cut -d' ' -f1 "$t/schedstat" 2>/dev/null) ${role:-?}/$(tr ' ' _ < "$t/comm" 2>/dev/null)"
    done
  done
}
picolet_pids() {
  for d in /proc/[0-9]*; do
    [ "$(readlink "$d/exe" 2>/dev/null)" = "$P" ] && echo "${d#/proc/}"
  done
}
ctrd_pids() { echo "$CTRD"; pgrep -f "containerd-shim.*$W" || true; }
running() { "$P" ctl --socket "$1" ps 2>/dev/null | grep -c Running || true; }
wait_running() { for _ in $(seq 600); do [ "$(running "$1")" -ge "$2" ] && return 0; sleep 0.1; done; echo "bench: $2 pods not running" >&2; exit 1; }
cpu_pct() { # pids-function → CPU % of one core over IDLE seconds (a thread
  # that ends in between takes its share with it; one that starts counts whole)
  # per-role/thread-name shares go to $W/idle-$1 (the busiest first)
  local a b
  a=$(thread_ns $($1)); sleep "$IDLE"; b=$(thread_ns $($1))
  awk -v idle="$IDLE" -v out="$W/idle-$1" 'NR == FNR { a[$1] = $2; next }
    NF == 3 { x = $2 - ($1 in a ? a[$1] : 0); d += x; by[$3] += x }
    END { for (k in by) printf "%.4f %s\n", by[k] / 1e7 / idle, k | "sort -rn > " out
          printf "%.3f", d / 1e7 / idle }' <(echo "$a") <(echo "$b")
}

mkdir -p "$W/images" "$W/manifests"
"$T/release/xtask" demo-image "$W/images/busybox.tar" >/dev/null
"$T/release/xtask" busybox-docker "$W/busybox-docker.tar" >/dev/null
"$T/release/xtask" pause-image "$W/pause.tar" >/dev/null

# --- picolet up ---
cat > "$W/config.yaml" <<YAML
staticPodPath: $W/manifests
healthzPort: 0
port: 0
podLogsDir: $W/logs
cgroupRoot: /picolet-footprint
picolet: {nodeName: fp, dataDir: $W/root, runDir: $W/run, criSocket: $W/run/picolet.sock, imagesDir: $W/images,
          cniConfDir: $W/net.d, defaultNetwork: false}
YAML
S="$W/run/picolet.sock"
"$P" up --config "$W/config.yaml" 2>"$W/up.log" & UP=$!
for _ in $(seq 200); do "$P" ctl --socket "$S" images 2>/dev/null | grep -q busybox && break; sleep 0.05; done
manifest() {
  cat > "$W/manifests/.p$1" <<YAML
apiVersion: v1
kind: Pod
metadata: {name: p$1}
spec:
  hostNetwork: true
  terminationGracePeriodSeconds: 1
  containers:
  - name: app
    image: busybox:latest
    imagePullPolicy: IfNotPresent
    command: [sh, -c, "trap 'exit 0' TERM; sleep 3600 & wait"]
YAML
  mv "$W/manifests/.p$1" "$W/manifests/p$1.yaml"
}
declare -A PM
sleep 5; PM[0]=$(mem $(picolet_pids))
for i in $(seq 1 10); do manifest "$i"; done; wait_running "$S" 10; sleep 5; PM[10]=$(mem $(picolet_pids))
for i in $(seq 11 30); do manifest "$i"; done; wait_running "$S" 30; sleep 5; PM[30]=$(mem $(picolet_pids))
PCPU=$(cpu_pct picolet_pids)
rm -f "$W"/manifests/*.yaml
for _ in $(seq 300); do [ "$(running "$S")" = 0 ] && break; sleep 0.1; done
kill "$UP"; wait "$UP" 2>/dev/null || true; UP=

# --- containerd + runc ---
containerd_cri_start "$W/c"
for a in busybox-docker pause; do "$CTR" --address "$W/c/c.sock" -n k8s.io images import "$W/$a.tar" >/dev/null; done
declare -A CM
coproc HOLD { "$T/release/pods-hold" "$W/c/c.sock" docker.io/library/busybox:latest; }
HOLD_PID=$HOLD_PID
for n in 0 10 30; do
  echo "$n" >&"${HOLD[1]}"; read -r _ _ <&"${HOLD[0]}"
  sleep 5; CM[$n]=$(mem $(ctrd_pids))
done
CCPU=$(cpu_pct ctrd_pids)
exec {HOLD[1]}>&-
wait "$HOLD_PID" 2>/dev/null || true; HOLD_PID=

size=$(stat -c %s "$BIN")
python3 - "$IDLE" "$size" "$PCPU" "$CCPU" "$("$CONTAINERD" --version | awk '{print $3}')" \
  "${PM[0]}" "${PM[10]}" "${PM[30]}" "${CM[0]}" "${CM[10]}" "${CM[30]}" <<'PY'
import sys, os, platform, datetime
idle, size, pcpu, ccpu, cver = sys.argv[1:6]
pm = [list(map(int, x.split())) for x in sys.argv[6:9]]
cm = [list(map(int, x.split())) for x in sys.argv[9:12]]
mib = lambda k: f"{k / 1024:.1f} MiB"
print(f"\nFootprint ({os.cpu_count()} cores, kernel {platform.release()}, {datetime.date.today()}); "
      f"host-network pods, one idle container each\n")
print(f"| | picolet (up + shim + agent + monitors) | containerd {cver} + shims |")
print("|---|---:|---:|")
for i, n in enumerate([0, 10, 30]):
    p, c = pm[i], cm[i]
    print(f"| {n} pods: RSS | {mib(p[0])} ({p[2]} processes) | {mib(c[0])} ({c[2]} processes) |")
    print(f"| {n} pods: PSS | {mib(p[1])} | {mib(c[1])} |")
print(f"| idle CPU, 30 pods, {idle} s | {pcpu} % of one core | {ccpu} % of one core |")
print(f"| static binary (x86_64 musl) | {int(size) / 1048576:.1f} MiB | |")
PY
echo
echo "picolet's idle CPU by process role / thread name (% of one core, the busiest):"
head -8 "$W/idle-picolet_pids" 2>/dev/null | sed 's/^/    /' 
