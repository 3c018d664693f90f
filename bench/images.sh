#!/usr/bin/env bash
# Image import and pull benchmark: picolet vs Debian's containerd (`ctr images
# import`, `ctr images pull`), same archive, same registry, same run. Prints
# a markdown table. Run as root.
#
#   sudo bench/images.sh [MB] [RUNS]     # default: 100 MiB layer, 3 runs
#
# The archive is a docker-archive of busybox + MB MiB of incompressible data
# (gzip layer), written by `cargo xtask bench-image`. Each run starts a fresh
# picolet shim / containerd on private dirs, imports once (both unpack the
# layers: picolet into its snapshots, containerd into overlayfs), and reads the
# server's peak RSS (VmHWM) and the client's (GNU time). The pulls come from
# Debian's docker-registry on 127.0.0.1 (plain HTTP) holding the same image,
# pushed with skopeo; both runtimes fetch, verify and unpack it.
set -euo pipefail
cd "$(dirname "$0")/.."
[ "$(id -u)" = 0 ] || { echo "bench: run as root" >&2; exit 1; }
MB="${1:-100}"
RUNS="${2:-3}"

scripts/setup.sh
command -v /usr/bin/time >/dev/null || { apt-get install -y -qq time >/dev/null; }
# picolet as it ships (static musl, as bench/footprint.sh measures it: its
# allocator's RSS, not glibc's per-thread arenas); xtask for the host.
cargo build --release --locked -q -p xtask
cargo build --release --locked -q -p picolet --target x86_64-unknown-linux-musl
T="${CARGO_TARGET_DIR:-target}/release"
P="${CARGO_TARGET_DIR:-target}/x86_64-unknown-linux-musl/release/picolet"
W=$(mktemp -d /var/tmp/picolet-bench.XXXXXX)
cleanup() {
  [ -n "${SHIM:-}" ] && kill "$SHIM" 2>/dev/null || true
  [ -n "${CTRD:-}" ] && kill "$CTRD" 2>/dev/null || true
  [ -n "${REG:-}" ] && kill "$REG" 2>/dev/null || true
  wait 2>/dev/null || true
  umount -R "$W"/containerd/root/* 2>/dev/null || true
  rm -rf "$W"
}
trap cleanup EXIT

"$T/xtask" bench-image "$W/big.tar" "$MB" >/dev/null
ARCHIVE_MB=$(( $(stat -c %s "$W/big.tar") / 1048576 ))

now_ms() { echo $(( $(date +%s%N) / 1000000 )); }
hwm_kb() { awk '/VmHWM/ {print $2}' "/proc/$1/status"; }
wait_sock() { for _ in $(seq 200); do [ -S "$1" ] && return 0; sleep 0.05; done; echo "no socket $1" >&2; exit 1; }

# A fresh containerd (no CRI plugin) on private paths: $CTRD.
start_containerd() {
  cat > "$W/containerd/config.toml" <<TOML
version = 2
root = "$W/containerd/root"
state = "$W/containerd/state"
disabled_plugins = ["io.containerd.grpc.v1.cri"]
[grpc]
  address = "$W/containerd/c.sock"
TOML
  containerd --config "$W/containerd/config.toml" 2>"$W/containerd/log" & CTRD=$!
  wait_sock "$W/containerd/c.sock"
}

p_ms=(); p_srv=(); p_cli=(); c_ms=(); c_srv=(); c_cli=()
for i in $(seq "$RUNS"); do
  rm -rf "$W/p" "$W/containerd"; mkdir -p "$W/p/images" "$W/containerd"
  sync; echo 3 > /proc/sys/vm/drop_caches 2>/dev/null || true

  "$P" shim --root "$W/p/root" --run-dir "$W/p/run" --socket "$W/p/run/p.sock" \
    --images-dir "$W/p/images" 2>"$W/p/shim.log" & SHIM=$!
  wait_sock "$W/p/run/p.sock"
  t0=$(now_ms)
  /usr/bin/time -f %M -o "$W/p/cli" "$P" ctl --socket "$W/p/run/p.sock" import "$W/big.tar" >/dev/null
  p_ms+=($(( $(now_ms) - t0 ))); p_srv+=("$(hwm_kb $SHIM)"); p_cli+=("$(cat "$W/p/cli")")
  kill "$SHIM"; wait "$SHIM" 2>/dev/null || true; SHIM=

  start_containerd
  t0=$(now_ms)
  /usr/bin/time -f %M -o "$W/containerd/cli" ctr --address "$W/containerd/c.sock" -n bench images import "$W/big.tar" >/dev/null
  c_ms+=($(( $(now_ms) - t0 ))); c_srv+=("$(hwm_kb $CTRD)"); c_cli+=("$(cat "$W/containerd/cli")")
  kill "$CTRD"; wait "$CTRD" 2>/dev/null || true; CTRD=
  umount -R "$W"/containerd/root/* 2>/dev/null || true
done

# Pulls from a local registry.
PORT=$(shuf -i 20000-40000 -n 1)
REF="127.0.0.1:$PORT/bench/big:v1"
cat > "$W/registry.yml" <<YML
version: 0.1
log: {level: error}
storage: {filesystem: {rootdirectory: $W/registry}}
http: {addr: 127.0.0.1:$PORT}
YML
docker-registry serve "$W/registry.yml" 2>"$W/registry.log" & REG=$!
for _ in $(seq 100); do (exec 3<>"/dev/tcp/127.0.0.1/$PORT") 2>/dev/null && break; sleep 0.1; done
skopeo --insecure-policy copy -q --dest-tls-verify=false "docker-archive:$W/big.tar" "docker://$REF"

pp_ms=(); pp_srv=(); cp_ms=(); cp_srv=()
for i in $(seq "$RUNS"); do
  rm -rf "$W/p" "$W/containerd"; mkdir -p "$W/p/images" "$W/containerd"
  printf 'mirrors:\n  "127.0.0.1:%s":\n    endpoint: ["http://127.0.0.1:%s"]\n' "$PORT" "$PORT" > "$W/p/registries.yaml"
  sync; echo 3 > /proc/sys/vm/drop_caches 2>/dev/null || true
  "$P" shim --root "$W/p/root" --run-dir "$W/p/run" --socket "$W/p/run/p.sock" \
    --images-dir "$W/p/images" --registry-config "$W/p/registries.yaml" 2>"$W/p/shim.log" & SHIM=$!
  wait_sock "$W/p/run/p.sock"
  t0=$(now_ms)
  "$P" ctl --socket "$W/p/run/p.sock" pull "$REF" >/dev/null
  pp_ms+=($(( $(now_ms) - t0 ))); pp_srv+=("$(hwm_kb $SHIM)")
  kill "$SHIM"; wait "$SHIM" 2>/dev/null || true; SHIM=

  start_containerd
  t0=$(now_ms)
  ctr --address "$W/containerd/c.sock" -n bench images pull --plain-http "$REF" >/dev/null
  cp_ms+=($(( $(now_ms) - t0 ))); cp_srv+=("$(hwm_kb $CTRD)")
  kill "$CTRD"; wait "$CTRD" 2>/dev/null || true; CTRD=
  umount -R "$W"/containerd/root/* 2>/dev/null || true
done

median() { printf '%s\n' "$@" | sort -n | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }
mib() { awk -v k="$1" 'BEGIN {printf "%.1f", k/1024}'; }
echo
echo "Image import: busybox + ${MB} MiB random layer (docker-archive, ${ARCHIVE_MB} MiB), median of $RUNS runs"
echo "($(nproc) cores, kernel $(uname -r), $(date -u +%Y-%m-%d))"
echo
echo "| | picolet | containerd $(containerd --version | awk '{print $3}') + ctr |"
echo "|---|---:|---:|"
echo "| import + unpack wall time | $(median "${p_ms[@]}") ms | $(median "${c_ms[@]}") ms |"
echo "| server peak RSS (VmHWM) | $(mib "$(median "${p_srv[@]}")") MiB | $(mib "$(median "${c_srv[@]}")") MiB |"
echo "| client peak RSS | $(mib "$(median "${p_cli[@]}")") MiB | $(mib "$(median "${c_cli[@]}")") MiB |"
echo "| pull + unpack from a local registry, wall time | $(median "${pp_ms[@]}") ms | $(median "${cp_ms[@]}") ms |"
echo "| server peak RSS during the pull (VmHWM) | $(mib "$(median "${pp_srv[@]}")") MiB | $(mib "$(median "${cp_srv[@]}")") MiB |"
echo
echo "runs (ms): import picolet ${p_ms[*]} / containerd ${c_ms[*]}; pull picolet ${pp_ms[*]} / containerd ${cp_ms[*]}"
