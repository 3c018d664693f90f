#!/usr/bin/env bash
# Cluster mode: `picolet up --kubeconfig` against a real kube-apiserver
# (Debian's etcd beside it, on loopback): node Ready after start, then N API
# pods (default 30) created bound to the node one after another (spec.nodeName
# set, as the scheduler's binding does) → phase Running seen through a watch
# (what `kubectl get -w` shows), p50/p95; then the agent's RSS/PSS with the N
# pods. Prints a markdown table. Run as root.
#
#   sudo KUBE_APISERVER=/path/to/kube-apiserver bench/cluster.sh [N]
#
# kube-apiserver is not packaged for Debian: build it yourself (e.g. from
# kubernetes or microshift sources; never committed) and name it in
# KUBE_APISERVER (a command: "hk kube-apiserver" works for a multi-call
# binary). etcd: Debian's etcd-server. No kubelet here for a same-run
# baseline (not packaged either): the kubelet's own pod-start SLO (p99 ≤ 5 s)
# and its measured figures are in BENCHMARKS.md.
set -euo pipefail
cd "$(dirname "$0")/.."
[ "$(id -u)" = 0 ] || { echo "bench: run as root" >&2; exit 1; }
[ -n "${KUBE_APISERVER:-}" ] || { echo "bench: set KUBE_APISERVER to a kube-apiserver command (not packaged; build it)" >&2; exit 1; }
command -v etcd >/dev/null || apt-get install -y -qq etcd-server >/dev/null
N="${1:-30}"

scripts/setup.sh
cargo build --release --locked -q -p picolet -p xtask
T="${CARGO_TARGET_DIR:-target}/release"
W=$(mktemp -d /var/tmp/picolet-cluster-bench.XXXXXX)
PIDS=()
BRIDGE_BEFORE=$(ip link show picolet0 >/dev/null 2>&1 && echo yes || echo no)
cleanup() {
  local rc=$?
  if [ "$rc" != 0 ]; then
    for f in up apiserver; do [ -f "$W/$f.log" ] && { echo "--- $f.log (last lines)"; tail -n 25 "$W/$f.log"; } >&2; done
  fi
  # The agent first, then the API server, then etcd: an API server whose
  # etcd went first hangs in its shutdown.
  for ((i=${#PIDS[@]}-1; i>=0; i--)); do kill "${PIDS[$i]}" 2>/dev/null || true; done
  for _ in $(seq 50); do
    local alive=0
    for p in "${PIDS[@]}"; do kill -0 "$p" 2>/dev/null && alive=1; done
    [ "$alive" = 0 ] && break; sleep 0.2
  done
  for p in "${PIDS[@]}"; do kill -9 "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
  find /sys/fs/cgroup/*/picolet-bench-cluster -name cgroup.procs -exec cat {} + 2>/dev/null | sort -u | xargs -r kill -9 2>/dev/null || true
  sleep 0.5
  grep " $W" /proc/mounts | awk '{print $2}' | sort -r | xargs -r -n1 umount -l 2>/dev/null || true
  for h in /sys/fs/cgroup/*/picolet-bench-cluster; do [ -d "$h" ] && find "$h" -depth -type d -exec rmdir {} \; 2>/dev/null; done
  [ "$BRIDGE_BEFORE" = no ] && ip link del picolet0 2>/dev/null || true
  rm -rf "$W"
}
trap cleanup EXIT

# Loopback ports picked free by the kernel.
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
ETCD_PORT=$(free_port); PEER_PORT=$(free_port); API_PORT=$(free_port)
mkdir -p "$W/images" "$W/manifests" "$W/api"
openssl genrsa -out "$W/api/sa.key" 2048 2>/dev/null
ADMIN=$(head -c 16 /dev/urandom | od -An -tx1 | tr -d ' \n'); NODE=$(head -c 16 /dev/urandom | od -An -tx1 | tr -d ' \n')
printf '%s,admin,admin,system:masters\n%s,system:node:bench,node-bench,system:nodes\n' "$ADMIN" "$NODE" > "$W/api/tokens.csv"

etcd --data-dir "$W/etcd" --listen-client-urls "http://127.0.0.1:$ETCD_PORT" \
  --advertise-client-urls "http://127.0.0.1:$ETCD_PORT" --listen-peer-urls "http://127.0.0.1:$PEER_PORT" \
  --initial-advertise-peer-urls "http://127.0.0.1:$PEER_PORT" --initial-cluster "default=http://127.0.0.1:$PEER_PORT" \
  > "$W/etcd.log" 2>&1 & PIDS+=($!)
# shellcheck disable=SC2086
$KUBE_APISERVER --etcd-servers "http://127.0.0.1:$ETCD_PORT" --bind-address 127.0.0.1 \
  --secure-port "$API_PORT" --advertise-address 127.0.0.1 --cert-dir "$W/api" \
  --token-auth-file "$W/api/tokens.csv" --service-account-issuer https://kubernetes.default.svc \
  --service-account-key-file "$W/api/sa.key" --service-account-signing-key-file "$W/api/sa.key" \
  --authorization-mode Node,RBAC --enable-admission-plugins NodeRestriction \
  --service-cluster-ip-range 10.96.0.0/16 > "$W/apiserver.log" 2>&1 & PIDS+=($!)

cat > "$W/node.kubeconfig" <<K
apiVersion: v1
kind: Config
clusters:
- {name: bench, cluster: {server: "https://127.0.0.1:$API_PORT", insecure-skip-tls-verify: true}}
users:
- {name: node, user: {token: "$NODE"}}
contexts:
- {name: bench, context: {cluster: bench, user: node}}
current-context: bench
K
"$T/xtask" demo-image "$W/images/busybox.tar" >/dev/null
cat > "$W/config.yaml" <<YAML
staticPodPath: $W/manifests
healthzPort: 0
port: 0
podLogsDir: $W/logs
cgroupRoot: /picolet-bench-cluster
picolet:
  nodeName: bench
  kubeconfig: $W/node.kubeconfig
  dataDir: $W/root
  runDir: $W/run
  criSocket: $W/run/picolet.sock
  imagesDir: $W/images
  cniConfDir: $W/net.d
YAML

python3 bench/apiserver.py ready "127.0.0.1:$API_PORT" "$ADMIN" 60

START=$(date +%s.%N)
"$T/picolet" up --config "$W/config.yaml" 2>"$W/up.log" & UP=$!; PIDS+=("$UP")
for _ in $(seq 200); do "$T/picolet" ctl --socket "$W/run/picolet.sock" images 2>/dev/null | grep -q busybox && break; sleep 0.05; done
AGENT=$(pgrep -P "$UP" -f " agent " | head -1)

python3 - "$API_PORT" "$ADMIN" "$N" "$START" "$AGENT" <<'PY'
import json, os, platform, datetime, ssl, sys, threading, time, urllib.error, urllib.request
port, token, n, start, agent = sys.argv[1], sys.argv[2], int(sys.argv[3]), float(sys.argv[4]), sys.argv[5]
ctx = ssl._create_unverified_context()
base = f"https://127.0.0.1:{port}"
def call(method, path, body=None):
    req = urllib.request.Request(base + path, method=method, data=json.dumps(body).encode() if body is not None else None,
                                 headers={"Authorization": f"Bearer {token}", "Content-Type": "application/json"})
    return json.load(urllib.request.urlopen(req, context=ctx, timeout=30))

# Node Ready, timed from the start of `picolet up`.
while True:
    try:
        node = call("GET", "/api/v1/nodes/bench")
        if any(c["type"] == "Ready" and c["status"] == "True" for c in node["status"].get("conditions", [])):
            ready = time.time() - start
            break
    except Exception: pass
    if time.time() - start > 60: sys.exit("bench: the node did not become Ready in 60 s (see up.log)")
    time.sleep(0.02)
# The default service account is the controller manager's to make, and it
# does not run here: made by hand (pods here mount no token).
try:
    call("POST", "/api/v1/namespaces/default/serviceaccounts", {"metadata": {"name": "default"}})
except urllib.error.HTTPError as e:
    if e.code != 409: raise
running = {}
def watch():
    rv = call("GET", "/api/v1/namespaces/default/pods")["metadata"]["resourceVersion"]
    req = urllib.request.Request(f"{base}/api/v1/namespaces/default/pods?watch=1&resourceVersion={rv}",
                                 headers={"Authorization": f"Bearer {token}"})
    for line in urllib.request.urlopen(req, context=ctx, timeout=600):
        o = json.loads(line)["object"]
        if o.get("status", {}).get("phase") == "Running":
            running.setdefault(o["metadata"]["name"], time.monotonic())
threading.Thread(target=watch, daemon=True).start()
time.sleep(0.5)
api_lat = []
for i in range(n):
    name = f"b{i}"
    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name},
           "spec": {"nodeName": "bench", "automountServiceAccountToken": False, "terminationGracePeriodSeconds": 1,
                    "containers": [{"name": "c", "image": "busybox:latest", "imagePullPolicy": "IfNotPresent", "command": ["sleep", "3600"]}]}}
    t0 = time.monotonic()
    call("POST", "/api/v1/namespaces/default/pods", pod)
    while name not in running:
        if time.monotonic() - t0 > 60: sys.exit(f"bench: pod {name} not Running in 60 s (see up.log)")
        time.sleep(0.005)
    api_lat.append((running[name] - t0) * 1000)
def pss(pid):
    d = {}
    for l in open(f"/proc/{pid}/smaps_rollup"):
        k, _, v = l.partition(":")
        if v.strip().endswith("kB"): d[k] = int(v.split()[0]) / 1024
    return d.get("Rss", 0), d.get("Pss", 0)
time.sleep(2)
rss, pss_ = pss(agent)
def q(v, f):
    v = sorted(v); return v[min(len(v) - 1, int(round(f * (len(v) - 1))))] if v else float("nan")
print(f"\nCluster mode against a real kube-apiserver on loopback, {n} pods bound to the node one after another "
      f"({os.cpu_count()} cores, kernel {platform.release()}, {datetime.date.today()})\n")
print("| | p50 | p95 | max | goal |")
print("|---|---:|---:|---:|---|")
print(f"| `picolet up` started → Node Ready | {ready*1000:.0f} ms | | | |")
print(f"| pod created bound → phase Running seen by a watch | {q(api_lat,.5):.0f} ms | {q(api_lat,.95):.0f} ms | {max(api_lat):.0f} ms | p50 ≤ 300 ms |")
print(f"| agent RSS / PSS with {n} API pods | {rss:.1f} / {pss_:.1f} MiB | | | PSS ≤ 20 MiB |")
PY
