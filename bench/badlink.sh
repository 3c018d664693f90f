#!/usr/bin/env bash
# One picolet node (`picolet up`, cluster mode) on a bad link to its API
# server for DURATION seconds (default 1800): does it stay Ready, converge and
# restart nothing? etcd (Debian's) and kube-apiserver run in a network
# namespace of their own, joined to the host by a veth pair whose two ends
# both get `tc netem delay 500ms 250ms loss 5% rate 256kbit` (RTT ≈ 1 s
# ± 0.5 s, 256 kbit/s and 5 % loss each way; DELAY_MS, JITTER_MS, LOSS_PCT
# and RATE_KBIT change it). A kernel without sch_netem gets the same in user
# space: two veth pairs with bench/badlink-netem.py forwarding frames between
# them, each way as the qdisc would (its counts in the output). The node
# gets 3 pods bound to it (spec.nodeName set): hostNetwork busybox writing a
# line every 5 s, with a configMap, a secret and the default projected
# service-account token mounted and an exec readiness probe every 10 s. Once
# all are Running and Ready, a watcher inside the namespace (on the API
# server's side of the link: no netem between them) samples every second, for
# DURATION seconds: the node Lease's renewTime (every renewal, the largest gap
# between two, gaps over the lease's 40 s and over the node controller's 50 s
# grace period), the node's Ready condition and each pod's restartCount and
# Ready condition. Halfway and at the end: `kubectl logs` and `kubectl exec
# -- echo hi` of a pod (API server → the node's API over the link), timed, and
# a configMap change, timed until the new value is in the pods' volume on the
# host. Then the WARN lines of picolet's log (RUST_LOG, default info). Prints
# a markdown table. Run as root.
#
#   sudo bench/badlink.sh
#   sudo DURATION=1800 PICOLET=… XTASK=… LOGS=folder bench/badlink.sh
#
# PICOLET and XTASK (paths) skip the build (`xtask demo-image` makes the
# image). kube-apiserver is not packaged for Debian: bring your own build
# (never committed; see bench/cluster.sh), default
# KUBE_APISERVER=/opt/peers/bin/kube-apiserver-1.36 (a command; a
# MicroShift-built one wants the openshift-service-ca.crt configMap made here
# too). etcd: Debian's etcd-server; kubectl: any recent one on PATH. LOGS=folder:
# picolet's, the API server's and etcd's logs kept there. Everything made here
# (namespace, veth pair and its qdiscs, mounts, cgroups, processes) goes on exit.
set -euo pipefail
# Paths given relative to where this is run from.
for v in PICOLET XTASK LOGS; do [ -z "${!v:-}" ] || printf -v "$v" '%s' "$(realpath -m "${!v}")"; done
cd "$(dirname "$0")/.."
[ "$(id -u)" = 0 ] || { echo "bench: run as root" >&2; exit 1; }
KUBE_APISERVER="${KUBE_APISERVER:-/opt/peers/bin/kube-apiserver-1.36}"
DURATION="${DURATION:-1800}"
DELAY_MS="${DELAY_MS:-500}"; JITTER_MS="${JITTER_MS:-250}"; LOSS_PCT="${LOSS_PCT:-5}"; RATE_KBIT="${RATE_KBIT:-256}"
NETEM="delay ${DELAY_MS}ms ${JITTER_MS}ms loss ${LOSS_PCT}% rate ${RATE_KBIT}kbit"
command -v "${KUBE_APISERVER%% *}" >/dev/null || { echo "bench: $KUBE_APISERVER not found (not packaged: see the header)" >&2; exit 1; }
command -v etcd >/dev/null || apt-get install -y -qq etcd-server >/dev/null
command -v kubectl >/dev/null || { echo "bench: kubectl not found" >&2; exit 1; }
command -v tc >/dev/null || { echo "bench: tc (iproute2) not found" >&2; exit 1; }

if [ -z "${PICOLET:-}" ] || [ -z "${XTASK:-}" ]; then
  scripts/setup.sh
  cargo build --release --locked -q -p picolet -p xtask
  PICOLET="${PICOLET:-${CARGO_TARGET_DIR:-target}/release/picolet}"
  XTASK="${XTASK:-${CARGO_TARGET_DIR:-target}/release/xtask}"
fi

W=$(mktemp -d /var/tmp/picolet-badlink-bench.XXXXXX)
SFX=$(head -c 3 /dev/urandom | od -An -tx1 | tr -d ' \n')
NS="picolet-badlink-$SFX"; NSM="picolet-badlink-$SFX-link"
VH="blh$SFX"; VN="bln$SFX"; VX="blx$SFX"; VA="bla$SFX"; VB="blb$SFX"
CG=picolet-bench-badlink
NODE=badlink
PIDS=()
NS_MADE=no; NSM_MADE=no

# Processes started from this run: every one names the work folder.
pids_of_run() { python3 bench/run-pids.py "$W"; }
cleanup() {
  local rc=$?
  set +e
  if [ "$rc" != 0 ]; then
    for f in up apiserver; do [ -f "$W/$f.log" ] && { echo "--- $f.log (last lines)"; tail -n 25 "$W/$f.log"; } >&2; done
  fi
  [ -n "${LOGS:-}" ] && { mkdir -p "$LOGS"; cp "$W"/*.log "$W"/*.json "$LOGS"/ 2>/dev/null; }
  # The node first, then the API server and etcd.
  for ((i=${#PIDS[@]}-1; i>=0; i--)); do kill "${PIDS[$i]}" 2>/dev/null; done
  for _ in $(seq 50); do
    local alive=0
    for p in "${PIDS[@]}"; do kill -0 "$p" 2>/dev/null && alive=1; done
    [ "$alive" = 0 ] && break; sleep 0.2
  done
  for p in "${PIDS[@]}"; do kill -9 "$p" 2>/dev/null; done
  wait 2>/dev/null
  # The pods' processes (in the node's cgroups), then anything else of this
  # run left (all name $W).
  find /sys/fs/cgroup/*/"$CG" -name cgroup.procs -exec cat {} + 2>/dev/null | sort -u | xargs -r kill -9 2>/dev/null
  pids_of_run | xargs -r kill -9 2>/dev/null
  sleep 0.5
  grep " $W" /proc/mounts | awk '{print $2}' | sort -r | xargs -r -n1 umount -l 2>/dev/null
  for h in /sys/fs/cgroup/*/"$CG"; do [ -d "$h" ] && find "$h" -depth -type d -exec rmdir {} \; 2>/dev/null; done
  # The veth pair goes with either end, its qdiscs with it.
  ip link del "$VH" 2>/dev/null
  [ "$NSM_MADE" = yes ] && ip netns del "$NSM" 2>/dev/null
  [ "$NS_MADE" = yes ] && ip netns del "$NS" 2>/dev/null
  rm -rf "$W"
}
trap cleanup EXIT

# A /30 of 10.251.0.0/16 in a /24 nothing on the host uses or routes.
SUBNET=""
for _ in $(seq 100); do
  x=$((RANDOM % 256)); y=$((RANDOM % 64 * 4))
  if ! ip -4 -o addr show | grep -qF " 10.251.$x." && ! ip -4 route show table all | grep -qE "^(10\.251\.$x\.|10\.251\.0\.0/16|10\.0\.0\.0/8)"; then
    SUBNET="10.251.$x"; break
  fi
done
[ -n "$SUBNET" ] || { echo "bench: no free /30 in 10.251.0.0/16" >&2; exit 1; }
HOST_IP="$SUBNET.$((y + 1))"; NS_IP="$SUBNET.$((y + 2))"

# The namespace and the link: the host's end is the namespace's default
# route (the API server reaches the node's API on the host's node IP), and
# the host reaches the namespace through the veth only (its /30). netem on
# both ends of one veth pair; on a kernel without sch_netem, two pairs with
# bench/badlink-netem.py between them in a namespace of its own (NSM), doing
# each way what the qdisc would.
ip netns add "$NS"; NS_MADE=yes
ip link add "$VH" type veth peer name "$VX"
sysctl -qw "net.ipv6.conf.$VH.disable_ipv6=1"
ip addr add "$HOST_IP/30" dev "$VH"
# shellcheck disable=SC2086
if NETEM_ERR=$(tc qdisc add dev "$VH" root netem $NETEM 2>&1); then
  LINK=netem
  ip link set "$VX" netns "$NS"; ip -n "$NS" link set "$VX" name "$VN"
  # shellcheck disable=SC2086
  tc -n "$NS" qdisc add dev "$VN" root netem $NETEM
  QDISCS="tc qdisc: host $(tc qdisc show dev "$VH" | head -1); namespace $NS: $(tc -n "$NS" qdisc show dev "$VN" | head -1)"
else
  LINK=user
  ip netns add "$NSM"; NSM_MADE=yes
  ip link set "$VX" netns "$NSM"; ip -n "$NSM" link set "$VX" name "$VA"
  ip link add "$VB" netns "$NSM" type veth peer name "$VN" netns "$NS"
  ip netns exec "$NSM" sysctl -qw "net.ipv6.conf.all.disable_ipv6=1"
  for v in "$VA" "$VB"; do ip -n "$NSM" link set "$v" promisc on up; done
  python3 bench/badlink-netem.py offload-off "$VH"
  ip netns exec "$NSM" python3 bench/badlink-netem.py offload-off "$VA" "$VB"
  ip netns exec "$NS" python3 bench/badlink-netem.py offload-off "$VN"
  ip netns exec "$NSM" python3 bench/badlink-netem.py forward "$VA" "$VB" --delay "$DELAY_MS" \
    --jitter "$JITTER_MS" --loss "$LOSS_PCT" --rate "$RATE_KBIT" --limit 1000 --stats "$W/link.json" & PIDS+=($!)
  QDISCS="no sch_netem in this kernel (tc: ${NETEM_ERR%%$'\n'*}): user-space netem, bench/badlink-netem.py forward $VA $VB --delay $DELAY_MS --jitter $JITTER_MS --loss $LOSS_PCT --rate $RATE_KBIT --limit 1000 (namespace $NSM, between $VH on the host and $VN in $NS; each way ≡ tc qdisc add dev <egress> root netem $NETEM limit 1000)"
fi
ip link set "$VH" up
ip netns exec "$NS" sysctl -qw "net.ipv6.conf.$VN.disable_ipv6=1"
ip -n "$NS" link set lo up
ip -n "$NS" addr add "$NS_IP/30" dev "$VN"; ip -n "$NS" link set "$VN" up
ip -n "$NS" route add default via "$HOST_IP"
echo "bench: $QDISCS" >&2
echo "bench: host → namespace: $(ip route get "$NS_IP" | head -1)" >&2
ip route get "$NS_IP" | grep -q " dev $VH " || { echo "bench: $NS_IP is not routed through $VH" >&2; exit 1; }

token() { head -c 16 /dev/urandom | od -An -tx1 | tr -d ' \n'; }
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("0.0.0.0",0)); print(s.getsockname()[1])'; }
API_PORT=6443  # in the namespace: every port is free there
KUBELET_PORT=$(free_port)
mkdir -p "$W/api" "$W/pki" "$W/images" "$W/manifests" "$W/net.d"
openssl genrsa -out "$W/api/sa.key" 2048 2>/dev/null
ADMIN=$(token); NODE_TOKEN=$(token)
printf '%s,admin,admin,system:masters\n%s,system:node:%s,node-%s,system:nodes\n' "$ADMIN" "$NODE_TOKEN" "$NODE" "$NODE" > "$W/api/tokens.csv"
# The API server's client certificate for the node's API (logs, exec),
# signed by a CA the node trusts for client certificates; system:masters
# passes the node's SubjectAccessReview.
openssl req -x509 -newkey rsa:2048 -nodes -days 2 -subj "/CN=picolet-badlink-client-ca" \
  -keyout "$W/pki/ca.key" -out "$W/pki/ca.crt" 2>/dev/null
openssl req -newkey rsa:2048 -nodes -subj "/O=system:masters/CN=kube-apiserver-kubelet-client" \
  -keyout "$W/pki/apiserver-kubelet-client.key" -out "$W/pki/apiserver-kubelet-client.csr" 2>/dev/null
printf 'basicConstraints=CA:FALSE\nkeyUsage=digitalSignature,keyEncipherment\nextendedKeyUsage=clientAuth\n' > "$W/pki/client.ext"
openssl x509 -req -days 2 -in "$W/pki/apiserver-kubelet-client.csr" -CA "$W/pki/ca.crt" -CAkey "$W/pki/ca.key" \
  -CAcreateserial -extfile "$W/pki/client.ext" -out "$W/pki/apiserver-kubelet-client.crt" 2>/dev/null

ip netns exec "$NS" etcd --data-dir "$W/etcd" --listen-client-urls http://127.0.0.1:2379 \
  --advertise-client-urls http://127.0.0.1:2379 --listen-peer-urls http://127.0.0.1:2380 \
  --initial-advertise-peer-urls http://127.0.0.1:2380 --initial-cluster default=http://127.0.0.1:2380 \
  > "$W/etcd.log" 2>&1 & PIDS+=($!)
# shellcheck disable=SC2086
ip netns exec "$NS" $KUBE_APISERVER --etcd-servers http://127.0.0.1:2379 --bind-address 0.0.0.0 \
  --secure-port "$API_PORT" --advertise-address "$NS_IP" --cert-dir "$W/api" \
  --token-auth-file "$W/api/tokens.csv" --service-account-issuer https://kubernetes.default.svc \
  --service-account-key-file "$W/api/sa.key" --service-account-signing-key-file "$W/api/sa.key" \
  --authorization-mode Node,RBAC --enable-admission-plugins NodeRestriction \
  --kubelet-client-certificate "$W/pki/apiserver-kubelet-client.crt" \
  --kubelet-client-key "$W/pki/apiserver-kubelet-client.key" \
  --kubelet-preferred-address-types InternalIP \
  --service-cluster-ip-range 10.96.0.0/16 > "$W/apiserver.log" 2>&1 & PIDS+=($!)

kubeconfig() {  # user token
  cat <<K
apiVersion: v1
kind: Config
clusters:
- {name: badlink, cluster: {server: "https://$NS_IP:$API_PORT", insecure-skip-tls-verify: true}}
users:
- {name: $1, user: {token: "$2"}}
contexts:
- {name: badlink, context: {cluster: badlink, user: $1}}
current-context: badlink
K
}
kubeconfig node "$NODE_TOKEN" > "$W/node.kubeconfig"
kubeconfig admin "$ADMIN" > "$W/admin.kubeconfig"
"$XTASK" demo-image "$W/images/busybox.tar" >/dev/null
# A network the node reports ready, never used: the pods are hostNetwork.
cat > "$W/net.d/10-badlink.conflist" <<JSON
{"cniVersion": "0.4.0", "name": "badlink", "plugins": [
  {"type": "bridge", "bridge": "bl$SFX", "isGateway": true, "ipMasq": false,
   "ipam": {"type": "host-local", "subnet": "10.252.0.0/24", "dataDir": "$W/ipam"}}]}
JSON
# This disk counts as low for the default eviction thresholds and image GC.
cat > "$W/config.yaml" <<YAML
staticPodPath: $W/manifests
healthzPort: 0
port: $KUBELET_PORT
podLogsDir: $W/logs
cgroupRoot: /$CG
authentication: {x509: {clientCAFile: $W/pki/ca.crt}}
evictionHard: {imagefs.available: "1%", nodefs.available: "1%", memory.available: "100Mi"}
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
picolet:
  nodeName: $NODE
  kubeconfig: $W/node.kubeconfig
  dataDir: $W/root
  runDir: $W/run
  criSocket: $W/run/picolet.sock
  imagesDir: $W/images
  cniConfDir: $W/net.d
  defaultNetwork: false
YAML

# API ready (asked inside the namespace); what the pods need that a
# controller-manager would make (the default service account,
# kube-root-ca.crt) and the pods' configMap and secret.
ip netns exec "$NS" python3 bench/apiserver.py ready "$NS_IP:$API_PORT" "$ADMIN"
ip netns exec "$NS" python3 bench/apiserver.py objects "$NS_IP:$API_PORT" "$ADMIN" "$W/api/apiserver.crt" "generation=0"$'\n'

RUST_LOG="${RUST_LOG:-info}" "$PICOLET" up --config "$W/config.yaml" 2>"$W/up.log" & PIDS+=($!)

VERSIONS="picolet $("$PICOLET" --version | awk '{print $2}'), kube-apiserver $($KUBE_APISERVER --version | awk '{print $2}'), kubectl $(kubectl version --client 2>/dev/null | awk '/Client Version/{print $3}')"

# The watcher and the table: inside the namespace, on the API server's side
# of the link.
ip netns exec "$NS" python3 - "$NS_IP:$API_PORT" "$ADMIN" "$W" "$NODE" "$DURATION" "$NETEM" "$QDISCS" "$VERSIONS" <<'PY'
import collections, datetime, glob, json, os, platform, re, ssl, subprocess, sys, threading, time, urllib.error, urllib.request
addr, token, w, node, duration, netem, qdiscs, versions = sys.argv[1:]
duration = float(duration)
ctx = ssl._create_unverified_context()
base = f"https://{addr}"
NPODS = 3
PODS = [f"badlink-{i}" for i in range(NPODS)]
LEASE = f"/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases/{node}"
def call(method, path, body=None, ctype="application/json", timeout=30):
    req = urllib.request.Request(base + path, method=method, data=json.dumps(body).encode() if body is not None else None,
                                 headers={"Authorization": f"Bearer {token}", "Content-Type": ctype})
    return json.load(urllib.request.urlopen(req, context=ctx, timeout=timeout))
def log(msg): print(f"bench: {msg}", file=sys.stderr, flush=True)
def ts(s): return datetime.datetime.fromisoformat(s.replace("Z", "+00:00")).timestamp()
def ready(conds): return any(c["type"] == "Ready" and c["status"] == "True" for c in conds or [])

t0 = time.time()
while True:
    try:
        if ready(call("GET", f"/api/v1/nodes/{node}")["status"].get("conditions")): break
    except Exception: pass
    if time.time() - t0 > 900: sys.exit("bench: the node did not become Ready in 900 s (see up.log)")
    time.sleep(1)
node_ready_s = time.time() - t0
log(f"node Ready {node_ready_s:.0f} s after picolet started")
for name in PODS:
    call("POST", "/api/v1/namespaces/default/pods", {
        "apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "labels": {"app": "badlink"}},
        "spec": {"nodeName": node, "hostNetwork": True, "terminationGracePeriodSeconds": 1,
                 "containers": [{"name": "c", "image": "busybox:latest", "imagePullPolicy": "Never",
                                 "command": ["sh", "-c", "while true; do echo tick; sleep 5; done"],
                                 "readinessProbe": {"exec": {"command": ["true"]}, "periodSeconds": 10},
                                 "volumeMounts": [{"name": "cm", "mountPath": "/etc/app"},
                                                  {"name": "sec", "mountPath": "/etc/secret"}]}],
                 "volumes": [{"name": "cm", "configMap": {"name": "app"}},
                             {"name": "sec", "secret": {"secretName": "app"}}]}})
def pods():
    return {p["metadata"]["name"]: p for p in call("GET", "/api/v1/namespaces/default/pods?labelSelector=app%3Dbadlink")["items"]}
def pod_state(p):
    st = p.get("status", {})
    return (st.get("phase") == "Running" and ready(st.get("conditions")),
            sum(c.get("restartCount", 0) for c in st.get("containerStatuses", [])))
t1 = time.time()
while True:
    try:
        if sum(pod_state(p)[0] for p in pods().values()) == NPODS: break
    except Exception: pass
    if time.time() - t1 > 1800: sys.exit("bench: the pods were not all Running and Ready in 1800 s (see up.log)")
    time.sleep(1)
pods_ready_s = time.time() - t1
uids = {n: p["metadata"]["uid"] for n, p in pods().items()}
log(f"{NPODS} pods Running and Ready {pods_ready_s:.0f} s after they were created; watching for {duration:.0f} s")

# Every renewal: a watch on the lease (every version) and the sampler below.
renewals = {}  # renewTime -> when the watcher first saw it
lock = threading.Lock()
stop = threading.Event()
def seen_renewal(lease):
    rt = lease.get("spec", {}).get("renewTime")
    if rt:
        with lock: renewals.setdefault(rt, time.time())
def watch_lease():
    while not stop.is_set():
        try:
            l = call("GET", LEASE); seen_renewal(l)
            rv = l["metadata"]["resourceVersion"]
            req = urllib.request.Request(
                f"{base}/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases?watch=1&fieldSelector=metadata.name%3D{node}"
                f"&resourceVersion={rv}&timeoutSeconds=300", headers={"Authorization": f"Bearer {token}"})
            for line in urllib.request.urlopen(req, context=ctx, timeout=330):
                ev = json.loads(line)
                if ev.get("type") in ("ADDED", "MODIFIED"): seen_renewal(ev["object"])
        except Exception:
            time.sleep(1)
events, sample_errors = [], [0]
last = {"node": None, "pods": {}}
def sample():
    while not stop.is_set():
        t = time.time()
        try:
            seen_renewal(call("GET", LEASE, timeout=5))
            n = call("GET", f"/api/v1/nodes/{node}", timeout=5)
            r = next((c for c in n["status"].get("conditions", []) if c["type"] == "Ready"), {})
            cur = (r.get("status"), r.get("reason"))
            if cur != last["node"]:
                if last["node"] is not None: events.append((t, f"node Ready {last['node'][0]} → {cur[0]} ({cur[1]})"))
                last["node"] = cur
            for name, p in pods().items():
                cur = pod_state(p)
                prev = last["pods"].get(name)
                if prev is not None and cur != prev:
                    events.append((t, f"pod {name}: Ready {prev[0]} → {cur[0]}, restarts {prev[1]} → {cur[1]}"))
                last["pods"][name] = cur
        except Exception as e:
            sample_errors[0] += 1
            if sample_errors[0] <= 3: log(f"sample: {e}")
        stop.wait(max(0, 1 - (time.time() - t)))
threads = [threading.Thread(target=watch_lease, daemon=True), threading.Thread(target=sample, daemon=True)]
for th in threads: th.start()

KUBECTL = ["kubectl", "--kubeconfig", f"{w}/admin.kubeconfig", "--request-timeout=300s", "--cache-dir", f"{w}/kube-cache"]
def timed(args):
    t = time.monotonic()
    try:
        r = subprocess.run(KUBECTL + args, capture_output=True, text=True, timeout=330)
        ok, out = r.returncode == 0, (r.stdout.strip() or r.stderr.strip())
    except subprocess.TimeoutExpired:
        ok, out = False, "timed out after 330 s"
    return time.monotonic() - t, ok, out
def cm_files(name):
    # The configMap volume's file on the host, under the node's dataDir.
    fs = [f for f in glob.glob(f"{w}/root/**/{uids[name]}/**/app.conf", recursive=True)
          if "/.." not in f and "/rootfs/" not in f]
    return fs
generation = [0]
def probe(label):
    r = {}
    dt, ok, out = timed(["logs", PODS[0], "--tail=2"])
    r["logs"] = (dt, ok and "tick" in out, out.splitlines()[-1] if out else "")
    log(f"{label}: kubectl logs {dt:.1f} s ({'ok' if r['logs'][1] else 'FAILED: ' + out[:200]})")
    dt, ok, out = timed(["exec", PODS[0], "--", "echo", "hi"])
    r["exec"] = (dt, ok and out == "hi", out)
    log(f"{label}: kubectl exec {dt:.1f} s ({'ok' if r['exec'][1] else 'FAILED: ' + out[:200]})")
    generation[0] += 1
    want = f"generation={generation[0]}\n"
    files = {n: cm_files(n) for n in PODS}
    t = time.monotonic()
    call("PATCH", "/api/v1/namespaces/default/configmaps/app", {"data": {"app.conf": want}},
         ctype="application/merge-patch+json")
    got = {}
    while len(got) < NPODS and time.monotonic() - t < 600:
        for n in PODS:
            if n in got: continue
            for f in files[n] or cm_files(n):
                try:
                    if open(f).read() == want: got[n] = time.monotonic() - t
                except OSError: pass
        time.sleep(0.2)
    r["cm"] = (min(got.values()) if got else None, max(got.values()) if len(got) == NPODS else None, len(got))
    log(f"{label}: configMap in {len(got)}/{NPODS} pods' volumes: " +
        ", ".join(f"{n} {v:.1f} s" for n, v in sorted(got.items())))
    return r

start = time.time()
time.sleep(max(0, start + duration / 2 - time.time()))
half = probe("halfway")
time.sleep(max(0, start + duration - time.time()))
end = time.time()
final = probe("end")
stop.set()
time.sleep(1.5)
now_pods = pods()
states = {n: pod_state(p) for n, p in now_pods.items()}

# Renewals: the last one before the window, those in it, and the open gap
# at its end; by renewTime (the node's clock when it sent it) and by when the
# watcher saw it (what a node controller goes by).
with lock: rs = sorted((ts(k), v) for k, v in renewals.items())
in_win = [r for r in rs if r[1] >= start and r[1] <= end]
before = [r for r in rs if r[1] < start][-1:]
seq = before + in_win
def gaps(vals, tail):
    vals = sorted(vals)
    g = [(b - a, a) for a, b in zip(vals, vals[1:])]
    if vals: g.append((tail - vals[-1], vals[-1]))
    return g
g_rt = gaps([r[0] for r in seq], end)
g_seen = gaps([r[1] for r in seq], end)
max_rt, max_seen = max(g_rt, default=(float("nan"), 0)), max(g_seen, default=(float("nan"), 0))
over = lambda g, s: sum(1 for x, _ in g if x > s)
win_events = [(t, e) for t, e in events if start <= t <= end + 60]
node_flaps = sum(1 for _, e in win_events if e.startswith("node Ready True →"))
pod_unready = sum(1 for _, e in win_events if e.startswith("pod ") and "Ready True → False" in e)
restarts = sum(s[1] for s in states.values())
ready_end = sum(1 for s in states.values() if s[0])

# picolet's log: WARN lines (all, in the window, and about the lease, the
# node's status and the watches/lists), the recoveries ("working again").
warn, topical, again = [], [], []
TOPIC = re.compile(r"lease|node status|read the node|register the node|watch|list ", re.I)
for line in open(f"{w}/up.log", errors="replace"):
    m = re.match(r"(\S+Z)\s+(\w+)\s", line)
    if not m: continue
    try: t = ts(m.group(1))
    except ValueError: continue
    if m.group(2) == "WARN":
        warn.append((t, line.rstrip()))
        if TOPIC.search(line): topical.append((t, line.rstrip()))
    if "working again" in line: again.append((t, line.rstrip()))
warn_win = [x for x in warn if start <= x[0] <= end]
topical_win = [x for x in topical if start <= x[0] <= end]

def s(v): return "—" if v is None else f"{v:.1f} s"
def lat(r, k): return f"{r[k][0]:.1f} s" + ("" if r[k][1] else " (FAILED)")
def cm(r): return f"{s(r['cm'][0])} / {s(r['cm'][1])}" + ("" if r["cm"][2] == NPODS else f" ({r['cm'][2]}/{NPODS} pods)")
def iso(t): return datetime.datetime.fromtimestamp(t, datetime.timezone.utc).strftime("%H:%M:%S")
print(f"\nOne picolet node on a bad link to its API server, {NPODS} pods (hostNetwork busybox, configMap + secret + "
      f"projected token, exec readiness probe every 10 s), watched {duration:.0f} s from the API server's side "
      f"({os.cpu_count()} cores, kernel {platform.release()}, {datetime.date.today()}; {versions})\n")
print("| | figure |")
print("|---|---:|")
print(f"| duration watched | {end - start:.0f} s |")
print(f"| netem, each end of the veth | `{netem}` |")
print(f"| setup: node Ready after picolet started / {NPODS} pods Running+Ready after created | {node_ready_s:.0f} s / {pods_ready_s:.0f} s |")
print(f"| lease renewals seen in the window (every 10 s: {duration / 10:.0f}) | {len(in_win)} |")
print(f"| max renewal gap: renewTime / as seen at the API server | {max_rt[0]:.1f} s / {max_seen[0]:.1f} s |")
print(f"| renewal gaps > 40 s (lease) / > 50 s (node monitor grace) | {over(g_rt, 40)} / {over(g_rt, 50)} (as seen: {over(g_seen, 40)} / {over(g_seen, 50)}) |")
print(f"| node Ready transitions away from True | {node_flaps} |")
print(f"| pod restarts (restartCount, all pods) / pod Ready → False | {restarts} / {pod_unready} |")
print(f"| pods Running+Ready at the end | {ready_end}/{NPODS} |")
print(f"| `kubectl logs` latency, halfway / end | {lat(half, 'logs')} / {lat(final, 'logs')} |")
print(f"| `kubectl exec -- echo hi` latency, halfway / end | {lat(half, 'exec')} / {lat(final, 'exec')} |")
print(f"| configMap change → in the volume, first / all pods, halfway | {cm(half)} |")
print(f"| configMap change → in the volume, first / all pods, end | {cm(final)} |")
print(f"| picolet WARN lines about lease/node status/watches, window / whole run (all WARN: window / run) | "
      f"{len(topical_win)} / {len(topical)} ({len(warn_win)} / {len(warn)}) |")
print(f"\n- link: {qdiscs}")
if os.path.exists(f"{w}/link.json"):
    for way, c in json.load(open(f"{w}/link.json"))["ways"].items():
        print(f"- {way}: {c.get('frames_in', 0)} frames in ({c.get('bytes_in', 0) / 1024:.0f} KiB), "
              f"{c.get('lost', 0)} lost ({100 * c.get('lost', 0) / max(1, c.get('frames_in', 0)):.1f} %), "
              f"{c.get('overflow', 0)} over the limit, {c.get('frames_out', 0)} out, largest frame {c.get('max_frame', 0)} B, "
              f"longest queue {c.get('max_queue', 0)} frames, send errors {c.get('send_errors', 0)}")
print(f"- renewal gaps over 20 s (renewTime): " +
      (", ".join(f"{g:.1f} s after {iso(a)}" for g, a in sorted(g_rt, key=lambda x: x[1]) if g > 20) or "none"))
if sample_errors[0]: print(f"- watcher: {sample_errors[0]} samples failed")
for t, e in win_events: print(f"- {iso(t)} {e}")
for t, l in topical[:6]: print(f"- WARN: `{l[:300]}`")
for t, l in again[:6]: print(f"- `{l[:300]}`")
with open(f"{w}/badlink.json", "w") as f:
    json.dump({"start": start, "end": end, "renewals": renewals, "events": events, "half": half, "end_probe": final}, f, indent=1)
PY
