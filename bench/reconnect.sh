#!/usr/bin/env bash
# A fleet coming back after an API server outage: N simulated nodes (default
# 100; `api-nodes`, each the agent's own API client, one HTTP/2 connection,
# with the agent's reflectors on its pods and its Node) against a real
# kube-apiserver (Debian's etcd beside it, on loopback). Once every node
# watches, the nodes lose the API server for OUTAGE seconds (default 600):
# MODE=link (default) drops every packet to its port (an iptables rule on
# loopback: the link is gone, the server and its watch cache stay),
# MODE=restart kills it (SIGKILL) and starts it again on the same port and
# etcd (a new watch cache). From its audit log: what the nodes asked in the
# first minute after it was back (LISTs, i.e. full relists, and WATCHes),
# the busiest second against the mean, and when the last node watched
# again. Prints a markdown table. Run as root.
#
#   sudo KUBE_APISERVER=/path/to/kube-apiserver bench/reconnect.sh [N]
#
# kube-apiserver is not packaged for Debian: build it yourself (see
# bench/cluster.sh) and name it in KUBE_APISERVER. API_NODES= names a built
# api-nodes binary (default: built here).
set -euo pipefail
cd "$(dirname "$0")/.."
BENCH=$PWD/bench
[ "$(id -u)" = 0 ] || { echo "bench: run as root" >&2; exit 1; }
[ -n "${KUBE_APISERVER:-}" ] || { echo "bench: set KUBE_APISERVER to a kube-apiserver command (not packaged; build it)" >&2; exit 1; }
command -v etcd >/dev/null || apt-get install -y -qq etcd-server >/dev/null
N="${1:-100}"
OUTAGE="${OUTAGE:-600}"
MODE="${MODE:-link}"
case "$MODE" in link|restart) ;; *) echo "bench: MODE is link or restart" >&2; exit 1 ;; esac

if [ -z "${API_NODES:-}" ]; then
  cargo build --release --locked -q -p bench --bin api-nodes
  API_NODES="${CARGO_TARGET_DIR:-target}/release/api-nodes"
fi
W=$(mktemp -d /var/tmp/picolet-reconnect-bench.XXXXXX)
PIDS=()
APISERVER=""
DROP=()
cleanup() {
  local rc=$?
  set +e
  [ "${#DROP[@]}" != 0 ] && iptables -D "${DROP[@]}" 2>/dev/null
  [ "$rc" != 0 ] && [ -f "$W/apiserver.log" ] && { echo "--- apiserver.log (last lines)"; tail -n 25 "$W/apiserver.log"; } >&2
  # Nothing here keeps state worth a graceful end.
  for p in "${PIDS[@]}" $APISERVER; do kill -9 "$p" 2>/dev/null; done
  wait 2>/dev/null
  rm -rf "$W"
}
trap cleanup EXIT

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
ETCD_PORT=$(free_port); PEER_PORT=$(free_port); API_PORT=$(free_port)
mkdir -p "$W/api"
openssl genrsa -out "$W/api/sa.key" 2048 2>/dev/null
ADMIN=$(head -c 16 /dev/urandom | od -An -tx1 | tr -d ' \n')
printf '%s,admin,admin,system:masters\n' "$ADMIN" > "$W/api/tokens.csv"
printf 'apiVersion: audit.k8s.io/v1\nkind: Policy\nomitStages: [RequestReceived]\nrules:\n- level: Metadata\n' > "$W/audit-policy.yaml"

etcd --data-dir "$W/etcd" --listen-client-urls "http://127.0.0.1:$ETCD_PORT" \
  --advertise-client-urls "http://127.0.0.1:$ETCD_PORT" --listen-peer-urls "http://127.0.0.1:$PEER_PORT" \
  --initial-advertise-peer-urls "http://127.0.0.1:$PEER_PORT" --initial-cluster "default=http://127.0.0.1:$PEER_PORT" \
  > "$W/etcd.log" 2>&1 & PIDS+=($!)
start_apiserver() {
  # shellcheck disable=SC2086
  $KUBE_APISERVER --etcd-servers "http://127.0.0.1:$ETCD_PORT" --bind-address 127.0.0.1 \
    --secure-port "$API_PORT" --advertise-address 127.0.0.1 --cert-dir "$W/api" \
    --token-auth-file "$W/api/tokens.csv" --service-account-issuer https://kubernetes.default.svc \
    --service-account-key-file "$W/api/sa.key" --service-account-signing-key-file "$W/api/sa.key" \
    --authorization-mode Node,RBAC --service-cluster-ip-range 10.96.0.0/16 \
    --audit-policy-file "$W/audit-policy.yaml" --audit-log-path "$W/audit.log" \
    --audit-log-maxsize 1000 >> "$W/apiserver.log" 2>&1 &
  APISERVER=$!
  python3 "$BENCH/apiserver.py" ready "127.0.0.1:$API_PORT" "$ADMIN"
}
start_apiserver

"$API_NODES" 127.0.0.1 "$API_PORT" "$ADMIN" "$N" >"$W/api-nodes.out" 2>"$W/api-nodes.err" &
PIDS+=($!)
for _ in $(seq 3000); do grep -qx ready "$W/api-nodes.out" && break; sleep 0.1; done
grep -qx ready "$W/api-nodes.out" || { echo "bench: the simulated nodes did not list in 300 s" >&2; exit 1; }
sleep 5
DOWN=$(date +%s.%N)
if [ "$MODE" = restart ]; then
  kill -9 "$APISERVER"; wait "$APISERVER" 2>/dev/null || true; APISERVER=""
  sleep "$OUTAGE"
  start_apiserver
else
  DROP=(INPUT -i lo -p tcp --dport "$API_PORT" -j DROP)
  iptables -I "${DROP[@]}"
  sleep "$OUTAGE"
  iptables -D "${DROP[@]}"; DROP=()
fi
BACK=$(date +%s.%N)
# A dial that hung through the outage times out in 30 s, then waits out a
# back-off of at most 60 s (30 s and its jitter).
sleep 120

python3 - "$W/audit.log" "$DOWN" "$BACK" "$N" "$OUTAGE" "$MODE" <<'PY'
import collections, datetime, json, os, platform, sys, urllib.parse
log, down, back, n, outage, mode = sys.argv[1], float(sys.argv[2]), float(sys.argv[3]), int(sys.argv[4]), sys.argv[5], sys.argv[6]
def ts(s):
    return datetime.datetime.fromisoformat(s.replace("Z", "+00:00")).timestamp()
seen, reqs = set(), []
for line in open(log):
    e = json.loads(line)
    if e.get("userAgent") != "api-nodes" or e["auditID"] in seen:
        continue
    seen.add(e["auditID"])
    t = ts(e["requestReceivedTimestamp"])
    if t >= down:
        uri = urllib.parse.urlsplit(e["requestURI"])
        key = (uri.path, urllib.parse.parse_qs(uri.query).get("fieldSelector", [""])[0])
        reqs.append((t, e["verb"], e.get("responseStatus", {}).get("code", 0), key))
reqs.sort()
first = [r for r in reqs if r[0] < back + 60]
per_s = collections.Counter(int(r[0] - reqs[0][0]) for r in first) if first else collections.Counter()
verbs = collections.Counter(r[1] for r in first if r[2] and r[2] < 400)
# Each reflector's last watch: the one it still holds.
held = {}
for t, v, c, key in reqs:
    if v == "watch" and c and c < 400:
        held[key] = t
last_watch = (max(held.values()) - back) if len(held) == 2 * n else float("nan")
span = (first[-1][0] - first[0][0]) if len(first) > 1 else 0
how = "unreachable (packets dropped)" if mode == "link" else "killed and restarted"
print(f"\n{n} simulated nodes (the agent's API client and reflectors), API server {how} for {outage} s, "
      f"first minute after it was back ({os.cpu_count()} cores, kernel {platform.release()}, {datetime.date.today()})\n")
print("| | figure |")
print("|---|---:|")
print(f"| requests in the first minute (answered / refused) | {len(first)} ({sum(1 for r in first if r[2] and r[2] < 400)} / {sum(1 for r in first if not r[2] or r[2] >= 400)}) |")
print(f"| LISTs (full relists) / WATCHes resumed | {verbs.get('list', 0)} / {verbs.get('watch', 0)} |")
print(f"| busiest second / mean per second over the spread | {max(per_s.values(), default=0)} / {len(first) / max(1, span):.1f} |")
print(f"| all {2 * n} watches back after | {last_watch:.1f} s ({len(held)} watching) |")
PY
