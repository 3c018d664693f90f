#!/usr/bin/env bash
# Probe cost: CPU of the agent and of the shim over IDLE seconds (default
# 30) with 50 host-network pods × 2 busybox containers, first without
# probes, then with 200 network probes at periodSeconds 1 (each container:
# tcpSocket liveness + httpGet readiness against one busybox httpd), then
# with 50 exec readiness probes (`true`, through CRI ExecSync: the shim
# starts a process in the container each time). Prints a markdown table.
# Run as root.
#
#   sudo bench/probes.sh [IDLE_SECONDS]
#
# kubelet is not packaged for Debian: the agent's rows have no same-run
# baseline ("no probes" is the floor; CPU per probe is the difference). The
# runtime side of exec probes has one: the same agent then drives Debian's
# containerd 1.6 + runc (private paths, nothing pulled) with the same exec
# probes, and the table shows containerd + its shims (+ runc, their
# children) beside picolet's shim (+ its exec helpers).
set -euo pipefail
cd "$(dirname "$0")/.."
. bench/containerd.sh
[ "$(id -u)" = 0 ] || { echo "bench: run as root" >&2; exit 1; }
IDLE="${1:-30}"
PODS=50

scripts/setup.sh
cargo build --release --locked -q -p picolet -p xtask
T="${CARGO_TARGET_DIR:-target}/release"
W=$(mktemp -d /var/tmp/picolet-probe-bench.XXXXXX)
# Deletes every pod through the agent, then stops it.
stop_agent() {
  [ -n "${AGENT:-}" ] || return 0
  rm -f "$W"/manifests/*.yaml
  for _ in $(seq 600); do
    [ "$("$T/picolet" ctl --socket "$1" pods 2>/dev/null | wc -l)" -le 1 ] && break
    sleep 0.1
  done
  kill "$AGENT" 2>/dev/null || true
  wait "$AGENT" 2>/dev/null || true
  AGENT=
}
cleanup() {
  stop_agent "${SOCK:-/nonexistent}" || true
  [ -n "${SHIM:-}" ] && kill "$SHIM" 2>/dev/null || true
  [ -n "${CTRD:-}" ] && kill "$CTRD" 2>/dev/null || true
  wait 2>/dev/null || true
  # Backstop: monitors and shims of this run, then container processes.
  pkill -9 -f "monitor create .*$W/" 2>/dev/null || true
  pkill -9 -f "containerd-shim.*$W" 2>/dev/null || true
  find /sys/fs/cgroup/*/picolet-bench-probes -name cgroup.procs -exec cat {} + 2>/dev/null | sort -u | xargs -r kill -9 2>/dev/null || true
  sleep 0.5
  grep " $W" /proc/mounts | awk '{print $2}' | sort -r | xargs -r -n1 umount -l 2>/dev/null || true
  for h in /sys/fs/cgroup/*/picolet-bench-probes /sys/fs/cgroup/*/k8s.io; do [ -d "$h" ] && find "$h" -depth -type d -exec rmdir {} \; 2>/dev/null; done
  rm -rf "$W"
}
trap cleanup EXIT

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
API=$(free_port); HTTP=$(free_port)
mkdir -p "$W/images" "$W/manifests"
"$T/xtask" demo-image "$W/images/busybox.tar" >/dev/null
cat > "$W/config.yaml" <<YAML
staticPodPath: $W/manifests
healthzPort: 0
port: 0
readOnlyPort: $API
podLogsDir: $W/logs
cgroupRoot: /picolet-bench-probes
maxPods: 200
picolet:
  nodeName: bench
  nodeIP: 127.0.0.1
  dataDir: $W/root
  runDir: $W/run
  criSocket: $W/run/picolet.sock
  imagesDir: $W/images
YAML
"$T/picolet" shim --config "$W/config.yaml" 2>"$W/shim.log" & SHIM=$!
SOCK="$W/run/picolet.sock"
for _ in $(seq 200); do "$T/picolet" ctl --socket "$SOCK" images 2>/dev/null | grep -q busybox && break; sleep 0.05; done
PICOLET_LOG=warn "$T/picolet" agent --config "$W/config.yaml" 2>"$W/agent.log" & AGENT=$!

write_web() {
cat > "$W/manifests/web.yaml" <<YAML
apiVersion: v1
kind: Pod
metadata: {name: web}
spec:
  hostNetwork: true
  containers:
  - name: httpd
    image: busybox:latest
    imagePullPolicy: IfNotPresent
    command: [sh, -c, 'echo ok > /tmp/ok; exec httpd -f -p 127.0.0.1:$HTTP -h /tmp']
YAML
}
write_web

# $1 = probe YAML for each container (flow map entries) or empty.
write_pods() {
  local i c probes
  for i in $(seq "$PODS"); do
    {
      echo "apiVersion: v1"
      echo "kind: Pod"
      echo "metadata: {name: p$i}"
      echo "spec:"
      echo "  hostNetwork: true"
      echo "  terminationGracePeriodSeconds: 1"
      echo "  containers:"
      for c in a b; do
        echo "  - name: $c"
        echo "    image: busybox:latest"
        echo "    imagePullPolicy: IfNotPresent"
        echo "    command: [sleep, '100000']"
        # $2 = "a": probes on the first container only.
        [ -n "$1" ] && { [ -z "${2:-}" ] || [ "$c" = "$2" ]; } && echo "$1"
      done
    } > "$W/p$i.tmp"
    mv "$W/p$i.tmp" "$W/manifests/p$i.yaml"
  done
}

# Waits until the pods report `want` ready containers (plus the web pod's).
wait_ready() {
  python3 - "$API" "$(( $1 + 1 ))" <<'PY'
import json, sys, time, urllib.request
port, want = sys.argv[1], int(sys.argv[2])
for _ in range(1200):
    try:
        pods = json.load(urllib.request.urlopen(f"http://127.0.0.1:{port}/pods", timeout=5))["items"]
        ready = sum(1 for p in pods for c in p.get("status", {}).get("containerStatuses", []) if c.get("ready"))
        if ready == want:
            sys.exit(0)
    except Exception:
        pass
    time.sleep(0.25)
sys.exit(f"bench: {want} ready containers not reached")
PY
}

hz=$(getconf CLK_TCK)
# pids → utime + stime + children's (exec helpers, runc: reaped by them)
ticks() {
  local t=0 pid
  for pid in "$@"; do
    [ -r "/proc/$pid/stat" ] || continue
    t=$((t + $(sed 's/^.*) //' "/proc/$pid/stat" | awk '{print $12 + $13 + $14 + $15}')))
  done
  echo "$t"
}
runtime_pids() { echo "$SHIM"; }
# Probe runs so far: the sum of the agent's prober_probe_total.
probe_runs() {
  python3 - "$API" <<'PY'
import sys, urllib.request
text = urllib.request.urlopen(f"http://127.0.0.1:{sys.argv[1]}/metrics/probes", timeout=5).read().decode()
print(int(sum(float(l.rsplit(" ", 1)[1]) for l in text.splitlines() if l.startswith("prober_probe_total{"))))
PY
}
measure() { # label runtime-name
  sleep 3  # let start-up work settle
  local a0 s0 a1 s1 n0 n1
  a0=$(ticks "$AGENT"); s0=$(ticks $(runtime_pids)); n0=$(probe_runs)
  sleep "$IDLE"
  a1=$(ticks "$AGENT"); s1=$(ticks $(runtime_pids)); n1=$(probe_runs)
  echo "$2|$1|$(( n1 - n0 ))|$(( a1 - a0 ))|$(( s1 - s0 ))" >> "$W/rows"
}

EXEC_PROBE="    readinessProbe: {periodSeconds: 1, exec: {command: ['true']}}"
write_pods ""
wait_ready $(( PODS * 2 ))
measure "no probes" picolet
write_pods "    livenessProbe: {periodSeconds: 1, tcpSocket: {port: $HTTP}}
    readinessProbe: {periodSeconds: 1, httpGet: {path: /ok, port: $HTTP}}"
sleep 2
wait_ready $(( PODS * 2 ))
measure "200 network probes (100 tcpSocket + 100 httpGet), period 1 s" picolet
write_pods "$EXEC_PROBE" a
sleep 2
wait_ready $(( PODS * 2 ))
measure "50 exec probes, period 1 s" picolet
stop_agent "$SOCK"
kill "$SHIM"; wait "$SHIM" 2>/dev/null || true; SHIM=

# The same agent against containerd + runc.
containerd_cri_start "$W/c"
"$T/xtask" pause-image "$W/pause.tar" >/dev/null
for a in busybox pause; do
  src="$W/images/busybox.tar"; [ "$a" = pause ] && src="$W/pause.tar"
  "$CTR" --address "$W/c/c.sock" -n k8s.io images import "$src" >/dev/null
done
SOCK="$W/c/c.sock"
sed -i "s|criSocket: .*|criSocket: $SOCK|" "$W/config.yaml"
PICOLET_LOG=warn "$T/picolet" agent --config "$W/config.yaml" 2>"$W/agent-containerd.log" & AGENT=$!
runtime_pids() { echo "$CTRD"; pgrep -f "containerd-shim.*$W" || true; }
write_web
write_pods ""
wait_ready $(( PODS * 2 ))
measure "no probes" containerd
write_pods "$EXEC_PROBE" a
sleep 2
wait_ready $(( PODS * 2 ))
measure "50 exec probes, period 1 s" containerd
stop_agent "$SOCK"

python3 - "$W/rows" "$IDLE" "$hz" <<'PY'
import sys, os, platform, datetime
rows = [l.split("|") for l in open(sys.argv[1]).read().splitlines()]
idle, hz = float(sys.argv[2]), float(sys.argv[3])
# Probe runs per second as measured (a saturated runtime runs fewer).
print(f"\nProbe cost: 50 host-network pods × 2 busybox containers (+1 httpd pod), CPU over {idle:.0f} s "
      f"({os.cpu_count()} cores, kernel {platform.release()}, {datetime.date.today()})\n")
print("| runtime | probes | runs/s | agent CPU | agent per run | runtime CPU | runtime per run |")
print("|---|---|---:|---:|---:|---:|---:|")
base = {}
for rt, label, rate, a, s in rows:
    a_pct = int(a) * 100 / hz / idle
    s_pct = int(s) * 100 / hz / idle
    base.setdefault(rt, (a_pct, s_pct))
    per_a = per_s = "—"
    runs = int(rate) / idle
    if runs > 0:
        # CPU seconds per second ÷ probe runs per second
        per_a = f"{(a_pct - base[rt][0]) / 100 / runs * 1e3:.2f} ms"
        per_s = f"{(s_pct - base[rt][1]) / 100 / runs * 1e3:.2f} ms"
    name = "picolet shim" if rt == "picolet" else "containerd 1.6 + runc"
    print(f"| {name} | {label} | {runs:.0f} | {a_pct:.2f} % | {per_a} | {s_pct:.2f} % | {per_s} |")
PY
