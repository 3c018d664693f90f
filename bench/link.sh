#!/usr/bin/env bash
# What one idle node costs the API server link: picolet (`picolet up`, cluster
# mode) and the real kubelet on containerd + runc, side by side in the same
# run against one kube-apiserver (Debian's etcd beside it, all on loopback).
# Each node gets PODS pods (default 10) bound to it (spec.nodeName set):
# hostNetwork busybox `sleep 1d` with a configMap, a secret and the default
# projected service-account token mounted and an exec readiness probe every
# 10 s. Once all are Running and Ready and SETTLE seconds (default 30) have
# passed, both nodes are left idle for IDLE seconds (default 600) and what
# each sent and got is counted: bytes up/down and TCP connections through a
# byte-counting proxy per node (bench/link-proxy.py, TLS passed through), the
# requests from the API server's audit log (user system:node:<node>, by verb
# and resource). Prints a markdown table, per hour (count × 3600 / IDLE),
# ratio = picolet ÷ kubelet, then the requests by verb and resource and the
# ALPN offered in each node's TLS ClientHellos. OUT=file.json: raw counts;
# LOGS=folder: the logs (nodes, containerd, API server, audit) kept there.
# Run as root.
#
#   sudo bench/link.sh
#   sudo IDLE=600 PICOLET=… XTASK=… OUT=link.json bench/link.sh
#
# PICOLET and XTASK (paths) skip the build (`xtask` makes the images:
# demo-image, busybox-docker, pause-image). The peers are not packaged for
# Debian; bring your own builds (never committed), these are the defaults:
#   KUBE_APISERVER=/opt/peers/bin/kube-apiserver-1.36    (a command)
#   KUBELET=/opt/peers/bin/kubelet-1.36                   (≥ 1.35: failCgroupV1: false is set)
#   CONTAINERD=/opt/peers/bin/containerd-2/containerd     (shim and ctr beside it; bench/containerd.sh)
#   RUNC=/opt/peers/bin/runc-1.3
# etcd: Debian's etcd-server. The kubelet changes sysctls and iptables: the
# ones it touches are saved first and put back after, as is what either node
# added to iptables; /var/lib/kubelet is not used (--root-dir under the work
# folder).
set -euo pipefail
# Paths given relative to where this is run from.
for v in OUT PICOLET XTASK LOGS; do [ -z "${!v:-}" ] || printf -v "$v" '%s' "$(realpath -m "${!v}")"; done
cd "$(dirname "$0")/.."
[ "$(id -u)" = 0 ] || { echo "bench: run as root" >&2; exit 1; }
KUBE_APISERVER="${KUBE_APISERVER:-/opt/peers/bin/kube-apiserver-1.36}"
KUBELET="${KUBELET:-/opt/peers/bin/kubelet-1.36}"
export CONTAINERD="${CONTAINERD:-/opt/peers/bin/containerd-2/containerd}"
export RUNC="${RUNC:-/opt/peers/bin/runc-1.3}"
IDLE="${IDLE:-600}"; SETTLE="${SETTLE:-30}"; PODS="${PODS:-10}"; OUT="${OUT:-}"
for b in "${KUBE_APISERVER%% *}" "$KUBELET" "$CONTAINERD" "$RUNC"; do
  command -v "$b" >/dev/null || { echo "bench: $b not found (peers are not packaged: see the header)" >&2; exit 1; }
done
command -v etcd >/dev/null || apt-get install -y -qq etcd-server >/dev/null

if [ -z "${PICOLET:-}" ] || [ -z "${XTASK:-}" ]; then
  scripts/setup.sh
  cargo build --release --locked -q -p picolet -p xtask
  PICOLET="${PICOLET:-${CARGO_TARGET_DIR:-target}/release/picolet}"
  XTASK="${XTASK:-${CARGO_TARGET_DIR:-target}/release/xtask}"
fi
# shellcheck source=bench/containerd.sh
. bench/containerd.sh

W=$(mktemp -d /var/tmp/picolet-link-bench.XXXXXX)
CG_P=picolet-bench-link-p; CG_K=picolet-bench-link-k
PIDS=()
BRIDGE_BEFORE=$(ip link show picolet0 >/dev/null 2>&1 && echo yes || echo no)
VARLIB_BEFORE=$([ -e /var/lib/kubelet ] && echo yes || echo no)
LOGC_BEFORE=$([ -e /var/log/containers ] && echo yes || echo no)
# What the kubelet sets (setupKernelTunables), to put back.
SYSCTLS="vm.overcommit_memory vm.panic_on_oom kernel.panic kernel.panic_on_oops kernel.keys.root_maxkeys kernel.keys.root_maxbytes"
mkdir -p "$W/saved"
for k in $SYSCTLS; do echo "$k=$(sysctl -n "$k")"; done > "$W/saved/sysctl"
iptables-save > "$W/saved/iptables"; ip6tables-save > "$W/saved/ip6tables"

# Processes started from this run: every one names the work folder.
pids_of_run() { python3 bench/run-pids.py "$W"; }
# Undo what was added to iptables/ip6tables since $1 (an iptables-save dump):
# added rules deleted, added chains flushed and removed. Nothing else touched.
iptables_undo() {
  python3 - "$1" "$2" <<'PY'
import subprocess, sys
before_file, cmd = sys.argv[1], sys.argv[2]
def parse(text):
    t, chains, rules = None, {}, {}
    for l in text.splitlines():
        if l.startswith("*"): t = l[1:]; chains[t], rules[t] = set(), []
        elif l.startswith(":"): chains[t].add(l[1:].split()[0])
        elif l.startswith("-A "): rules[t].append(l[3:])
    return chains, rules
bc, br = parse(open(before_file).read())
nc, nr = parse(subprocess.run([f"{cmd}-save"], capture_output=True, text=True).stdout)
for t in nr:
    left = list(br.get(t, []))
    for r in nr[t]:
        if r in left: left.remove(r); continue
        subprocess.run(f"{cmd} -w -t {t} -D {r}", shell=True, stderr=subprocess.DEVNULL)
    for c in nc[t] - bc.get(t, set()):
        subprocess.run([cmd, "-w", "-t", t, "-F", c], stderr=subprocess.DEVNULL)
    for c in nc[t] - bc.get(t, set()):
        subprocess.run([cmd, "-w", "-t", t, "-X", c], stderr=subprocess.DEVNULL)
PY
}
cleanup() {
  local rc=$?
  set +e
  if [ "$rc" != 0 ]; then
    for f in p/up k/kubelet k/c/containerd apiserver; do [ -f "$W/$f.log" ] && { echo "--- $f.log (last lines)"; tail -n 25 "$W/$f.log"; } >&2; done
  fi
  [ -n "${LOGS:-}" ] && { mkdir -p "$LOGS"; cp "$W"/*.log "$W"/p/*.log "$W"/k/*.log "$W"/k/c/*.log "$LOGS"/ 2>/dev/null; }
  # Nodes first, then the runtime, the proxies and the API server.
  for ((i=${#PIDS[@]}-1; i>=0; i--)); do kill "${PIDS[$i]}" 2>/dev/null; done
  for _ in $(seq 50); do
    local alive=0
    for p in "${PIDS[@]}"; do kill -0 "$p" 2>/dev/null && alive=1; done
    [ "$alive" = 0 ] && break; sleep 0.2
  done
  for p in "${PIDS[@]}"; do kill -9 "$p" 2>/dev/null; done
  wait 2>/dev/null
  # The pods' processes (in the nodes' cgroups), then containerd's shims and
  # anything else of this run left (all name $W).
  find /sys/fs/cgroup/*/"$CG_P" /sys/fs/cgroup/*/"$CG_K" -name cgroup.procs -exec cat {} + 2>/dev/null | sort -u | xargs -r kill -9 2>/dev/null
  pids_of_run | xargs -r kill -9 2>/dev/null
  sleep 0.5
  # runc's state of the containers and the shims' sockets: both in
  # containerd's default /run/containerd, whatever its config says. Ours name
  # $W (runc's state.json) or hash it (a shim's socket: sha256 of
  # <containerd socket>/<namespace>/<sandbox id>).
  for st in /run/containerd/runc/*/*/state.json; do
    grep -qF "$W/" "$st" 2>/dev/null || continue
    d=$(dirname "$st"); id=$(basename "$d"); ns=$(basename "$(dirname "$d")")
    rm -f "/run/containerd/s/$(printf '%s' "$W/k/c/c.sock/$ns/$id" | sha256sum | cut -c1-64)"
    rm -rf "$d"
  done
  grep " $W" /proc/mounts | awk '{print $2}' | sort -r | xargs -r -n1 umount -l 2>/dev/null
  for h in /sys/fs/cgroup/*/"$CG_P" /sys/fs/cgroup/*/"$CG_K"; do [ -d "$h" ] && find "$h" -depth -type d -exec rmdir {} \; 2>/dev/null; done
  while IFS== read -r k v; do [ "$(sysctl -n "$k")" = "$v" ] || sysctl -qw "$k=$v"; done < "$W/saved/sysctl"
  iptables_undo "$W/saved/iptables" iptables; iptables_undo "$W/saved/ip6tables" ip6tables
  [ "$BRIDGE_BEFORE" = no ] && ip link del picolet0 2>/dev/null
  [ "$VARLIB_BEFORE" = no ] && rm -rf /var/lib/kubelet
  [ -d /var/log/containers ] && find /var/log/containers -maxdepth 1 -type l -lname "$W/*" -delete
  [ "$LOGC_BEFORE" = no ] && rmdir /var/log/containers 2>/dev/null
  rm -rf "$W"
}
trap cleanup EXIT

# Loopback ports picked free by the kernel.
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
token() { head -c 16 /dev/urandom | od -An -tx1 | tr -d ' \n'; }
ETCD_PORT=$(free_port); PEER_PORT=$(free_port); API_PORT=$(free_port); KUBELET_PORT=$(free_port)
mkdir -p "$W/api" "$W/p/images" "$W/p/manifests" "$W/k/kubelet" "$W/k/pki" "$W/k/logs" "$W/k/net.d"
openssl genrsa -out "$W/api/sa.key" 2048 2>/dev/null
ADMIN=$(token); TOKEN_P=$(token); TOKEN_K=$(token)
printf '%s,admin,admin,system:masters\n%s,system:node:link-p,node-link-p,system:nodes\n%s,system:node:link-k,node-link-k,system:nodes\n' \
  "$ADMIN" "$TOKEN_P" "$TOKEN_K" > "$W/api/tokens.csv"
# One rule: every request of a node, at Metadata level, once it is answered
# (and once a watch starts); nothing of anyone else.
cat > "$W/api/audit.yaml" <<YAML
apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: [RequestReceived]
rules:
- level: Metadata
  userGroups: [system:nodes]
YAML

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
  --audit-policy-file "$W/api/audit.yaml" --audit-log-path "$W/audit.log" --audit-log-maxsize 100000 \
  --service-cluster-ip-range 10.96.0.0/16 > "$W/apiserver.log" 2>&1 & PIDS+=($!)

# A byte-counting proxy in front of the API server for each node.
for n in p k; do
  python3 bench/link-proxy.py --target "127.0.0.1:$API_PORT" --port-file "$W/$n/proxy.port" \
    --stats "$W/$n/proxy.json" & PIDS+=($!)
done
PROXY_P=${PIDS[-2]}; PROXY_K=${PIDS[-1]}
for n in p k; do
  for _ in $(seq 100); do [ -s "$W/$n/proxy.port" ] && break; sleep 0.05; done
  tok=$TOKEN_P; [ "$n" = k ] && tok=$TOKEN_K
  cat > "$W/$n/node.kubeconfig" <<K
apiVersion: v1
kind: Config
clusters:
- {name: link, cluster: {server: "https://127.0.0.1:$(cat "$W/$n/proxy.port")", insecure-skip-tls-verify: true}}
users:
- {name: node, user: {token: "$tok"}}
contexts:
- {name: link, context: {cluster: link, user: node}}
current-context: link
K
done

"$XTASK" demo-image "$W/p/images/busybox.tar" >/dev/null
"$XTASK" busybox-docker "$W/k/busybox.tar" >/dev/null
"$XTASK" pause-image "$W/k/pause.tar" >/dev/null

# API ready; what the pods need that a controller-manager would make (the
# default service account, kube-root-ca.crt) and the pods' configMap and secret.
python3 bench/apiserver.py ready "127.0.0.1:$API_PORT" "$ADMIN" 90
python3 bench/apiserver.py objects "127.0.0.1:$API_PORT" "$ADMIN" "$W/api/apiserver.crt" "$(printf 'mode=idle\n%.0s' $(seq 20))"

# picolet. Both nodes get the same eviction thresholds and image GC (the
# defaults evict on a big disk a few tens of GB short of 15 % free).
cat > "$W/p/config.yaml" <<YAML
staticPodPath: $W/p/manifests
healthzPort: 0
port: 0
podLogsDir: $W/p/logs
cgroupRoot: /$CG_P
evictionHard: {memory.available: "1Mi", nodefs.available: "1%", nodefs.inodesFree: "1%", imagefs.available: "1%"}
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
picolet:
  nodeName: link-p
  kubeconfig: $W/p/node.kubeconfig
  dataDir: $W/p/root
  runDir: $W/p/run
  criSocket: $W/p/run/picolet.sock
  imagesDir: $W/p/images
  cniConfDir: $W/p/net.d
YAML
"$PICOLET" up --config "$W/p/config.yaml" 2>"$W/p/up.log" & PIDS+=($!)

# kubelet on containerd + runc. Its cgroup root must exist in every hierarchy
# (with cpuset's cpus and mems). containerd gets a CNI network, never used
# (hostNetwork pods), so that it reports NetworkReady and the node is Ready.
for c in /sys/fs/cgroup/*/; do mkdir -p "$c$CG_K"; done
cat /sys/fs/cgroup/cpuset/cpuset.cpus > "/sys/fs/cgroup/cpuset/$CG_K/cpuset.cpus"
cat /sys/fs/cgroup/cpuset/cpuset.mems > "/sys/fs/cgroup/cpuset/$CG_K/cpuset.mems"
cat > "$W/k/net.d/10-link.conflist" <<JSON
{"cniVersion": "0.4.0", "name": "link", "plugins": [
  {"type": "bridge", "bridge": "linkbench0", "isGateway": true, "ipMasq": false,
   "ipam": {"type": "host-local", "subnet": "10.79.0.0/24", "dataDir": "$W/k/ipam"}}]}
JSON
containerd_cri_start "$W/k/c" "$W/k/net.d"; PIDS+=("$CTRD")
for a in busybox pause; do "$CTR" --address "$W/k/c/c.sock" -n k8s.io images import "$W/k/$a.tar" >/dev/null; done
cat > "$W/k/kubelet.yaml" <<YAML
apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
failCgroupV1: false
containerRuntimeEndpoint: unix://$W/k/c/c.sock
imageServiceEndpoint: unix://$W/k/c/c.sock
cgroupDriver: cgroupfs
cgroupsPerQOS: true
cgroupRoot: /$CG_K
failSwapOn: false
address: 127.0.0.1
port: $KUBELET_PORT
readOnlyPort: 0
healthzPort: 0
authentication: {anonymous: {enabled: true}, webhook: {enabled: false}}
authorization: {mode: AlwaysAllow}
enforceNodeAllocatable: []
evictionHard: {memory.available: "1Mi", nodefs.available: "1%", nodefs.inodesFree: "1%", imagefs.available: "1%"}
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
podLogsDir: $W/k/logs
resolvConf: /etc/resolv.conf
YAML
"$KUBELET" --config "$W/k/kubelet.yaml" --kubeconfig "$W/k/node.kubeconfig" --root-dir "$W/k/kubelet" \
  --cert-dir "$W/k/pki" --hostname-override link-k --v=2 > "$W/k/kubelet.log" 2>&1 & PIDS+=($!)

VERSIONS="picolet $("$PICOLET" --version | awk '{print $2}'), kubelet $("$KUBELET" --version | awk '{print $2}'), containerd $("$CONTAINERD" --version | awk '{print $3}'), runc $("$RUNC" --version | awk 'NR==1{print $3}'), kube-apiserver $($KUBE_APISERVER --version | awk '{print $2}')"

python3 - "$API_PORT" "$ADMIN" "$PODS" "$SETTLE" "$IDLE" "$W" "$PROXY_P" "$PROXY_K" "$OUT" "$VERSIONS" <<'PY'
import collections, datetime, json, os, platform, signal, ssl, sys, time, urllib.request
port, token, npods, settle, idle, w, proxy_p, proxy_k, out, versions = sys.argv[1:]
npods, settle, idle = int(npods), float(settle), float(idle)
ctx = ssl._create_unverified_context()
base = f"https://127.0.0.1:{port}"
NODES = {"link-p": ("picolet", int(proxy_p), f"{w}/p/proxy.json"), "link-k": ("kubelet", int(proxy_k), f"{w}/k/proxy.json")}
def call(method, path, body=None):
    req = urllib.request.Request(base + path, method=method, data=json.dumps(body).encode() if body is not None else None,
                                 headers={"Authorization": f"Bearer {token}", "Content-Type": "application/json"})
    return json.load(urllib.request.urlopen(req, context=ctx, timeout=30))
def log(msg): print(f"bench: {msg}", file=sys.stderr, flush=True)

t0 = time.time()
for node in NODES:
    while True:
        try:
            n = call("GET", f"/api/v1/nodes/{node}")
            if any(c["type"] == "Ready" and c["status"] == "True" for c in n["status"].get("conditions", [])): break
        except Exception: pass
        if time.time() - t0 > 180: sys.exit(f"bench: node {node} not Ready in 180 s")
        time.sleep(0.5)
log(f"both nodes Ready after {time.time() - t0:.0f} s")
for node in NODES:
    for i in range(npods):
        call("POST", "/api/v1/namespaces/default/pods", {
            "apiVersion": "v1", "kind": "Pod", "metadata": {"name": f"{node}-{i}", "labels": {"app": "link"}},
            "spec": {"nodeName": node, "hostNetwork": True, "terminationGracePeriodSeconds": 1,
                     "containers": [{"name": "c", "image": "busybox:latest", "imagePullPolicy": "Never",
                                     "command": ["sleep", "1d"],
                                     "readinessProbe": {"exec": {"command": ["true"]}, "periodSeconds": 10},
                                     "volumeMounts": [{"name": "cm", "mountPath": "/etc/app"},
                                                      {"name": "sec", "mountPath": "/etc/secret"}]}],
                     "volumes": [{"name": "cm", "configMap": {"name": "app"}},
                                 {"name": "sec", "secret": {"secretName": "app"}}]}})
def ready_pods():
    pods = call("GET", "/api/v1/namespaces/default/pods?labelSelector=app%3Dlink")["items"]
    ok = collections.Counter()
    for p in pods:
        st = p.get("status", {})
        if st.get("phase") == "Running" and any(c["type"] == "Ready" and c["status"] == "True" for c in st.get("conditions", [])):
            ok[p["spec"]["nodeName"]] += 1
    return ok, pods
t1 = time.time()
while True:
    ok, _ = ready_pods()
    if all(ok[n] == npods for n in NODES): break
    if time.time() - t1 > 300: sys.exit(f"bench: pods not all Running and Ready in 300 s: {dict(ok)}")
    time.sleep(1)
log(f"all {2 * npods} pods Running and Ready after {time.time() - t1:.0f} s; settling {settle:.0f} s, then {idle:.0f} s idle")
time.sleep(settle)

def reading():
    r = {}
    for node, (_, pid, path) in NODES.items():
        before = json.load(open(path))["dumps"]
        os.kill(pid, signal.SIGUSR1)
        for _ in range(200):
            d = json.load(open(path))
            if d["dumps"] > before: break
            time.sleep(0.01)
        else: sys.exit(f"bench: the proxy of {node} did not answer")
        r[node] = d
    return time.time(), r
start, r0 = reading()
time.sleep(idle)
end, r1 = reading()
ok, pods = ready_pods()
restarts = collections.Counter()
for p in pods:
    restarts[p["spec"]["nodeName"]] += sum(c.get("restartCount", 0) for c in p.get("status", {}).get("containerStatuses", []))
time.sleep(2)  # the audit log of the last requests

def ts(s): return datetime.datetime.fromisoformat(s.replace("Z", "+00:00")).timestamp()
seen, req, agents = set(), {n: collections.Counter() for n in NODES}, {n: collections.Counter() for n in NODES}
for line in open(f"{w}/audit.log"):
    e = json.loads(line)
    node = e.get("user", {}).get("username", "").removeprefix("system:node:")
    if node not in NODES or e["auditID"] in seen: continue
    seen.add(e["auditID"])
    if not start <= ts(e["requestReceivedTimestamp"]) < end: continue
    o = e.get("objectRef", {})
    what = o.get("resource", e.get("requestURI", "?").split("?")[0]) + ("/" + o["subresource"] if o.get("subresource") else "")
    req[node][f"{e['verb']} {what}"] += 1
    agents[node][e.get("userAgent", "?")] += 1

per_h = 3600 / idle
def d(node, k): return r1[node][k] - r0[node][k]
def count(node, f): return sum(v for k, v in req[node].items() if f(*k.split(" ", 1)))
rows = [
    ("bytes up / down (KiB)", lambda n: (d(n, "up") / 1024, d(n, "down") / 1024)),
    ("requests", lambda n: (sum(req[n].values()),)),
    ("GET configmaps / secrets", lambda n: (count(n, lambda v, r: v == "get" and r == "configmaps"),
                                           count(n, lambda v, r: v == "get" and r == "secrets"))),
    ("GET nodes", lambda n: (count(n, lambda v, r: v == "get" and r.split("/")[0] == "nodes"),)),
    ("watch requests", lambda n: (count(n, lambda v, r: v == "watch"),)),
    ("lease renewals (PUT or PATCH) / status PATCHes", lambda n: (count(n, lambda v, r: v in ("update", "patch") and r == "leases"),
                                              count(n, lambda v, r: v in ("patch", "update") and r.endswith("/status")))),
    ("TokenRequests", lambda n: (count(n, lambda v, r: v == "create" and r == "serviceaccounts/token"),)),
    ("TCP connections opened", lambda n: (d(n, "opened"),)),
]
def fmt(x): return f"{x:,.0f}" if x >= 10 or x == 0 else f"{x:.1f}"
def ratio(p, k):
    if k == 0: return "—" if p == 0 else "∞"
    r = p / k
    return "0×" if r == 0 else f"{r:.0f}×" if r >= 10 else f"{r:.1f}×" if r >= 0.1 else f"{r:.2f}×"
print(f"\nOne idle node on the API server link: {npods} pods each (hostNetwork busybox, configMap + secret + "
      f"projected service-account token, exec readiness probe every 10 s), {idle:.0f} s idle window after "
      f"{settle:.0f} s settling, per hour ({os.cpu_count()} cores, kernel {platform.release()}, {datetime.date.today()}; "
      f"{versions})\n")
print("| per hour, idle | picolet | kubelet 1.36 | ratio |")
print("|---|---:|---:|---:|")
raw = {"idle_s": idle, "settle_s": settle, "pods_per_node": npods, "versions": versions, "nodes": {}}
for label, f in rows:
    p, k = f("link-p"), f("link-k")
    print(f"| {label} | {' / '.join(fmt(x * per_h) for x in p)} | "
          f"{' / '.join(fmt(x * per_h) for x in k)} | {' / '.join(ratio(a, b) for a, b in zip(p, k))} |")
print("\nStatus PATCHes: PATCH or PUT of any …/status (nodes, pods). Ratio: picolet ÷ kubelet.")
print("\nRequests in the window by verb and resource, per hour:\n")
print("| verb resource | picolet | kubelet 1.36 |")
print("|---|---:|---:|")
for k in sorted(set(req["link-p"]) | set(req["link-k"])):
    print(f"| {k} | {fmt(req['link-p'][k] * per_h)} | {fmt(req['link-k'][k] * per_h)} |")
print()
for node, (name, _, _) in NODES.items():
    alpn = r1[node]["alpn"]
    offers = ", ".join(f"{'[' + a + ']'} ×{c}" for a, c in sorted(alpn.items())) or "none"
    print(f"- {name}: TLS ClientHello ALPN offered (all {r1[node]['opened']} connections of the run): {offers}; "
          f"open at the end: {r1[node]['opened'] - r1[node]['closed']}; user agents in the window: "
          f"{', '.join(f'`{a}` ×{c}' for a, c in agents[node].most_common()) or 'none'}")
    if ok[node] != npods or restarts[node]:
        print(f"- {name}: at the end of the window {ok[node]}/{npods} pods Ready, {restarts[node]} container restarts")
    raw["nodes"][name] = {"node": node, "bytes_up": d(node, "up"), "bytes_down": d(node, "down"),
                          "connections_opened": d(node, "opened"), "alpn_offered_run": alpn,
                          "open_connections_end": r1[node]["opened"] - r1[node]["closed"],
                          "requests": dict(req[node]), "user_agents": dict(agents[node]),
                          "pods_ready_end": ok[node], "restarts_end": restarts[node]}
if out:
    with open(out, "w") as f: json.dump(raw, f, indent=1)
PY
