# Sourced by the benchmarks: Debian's containerd 1.6 + runc with its CRI
# plugin on private paths under $1, the sandbox ("pause") image being the
# project's busybox-made localhost/picolet-bench/pause:v1 (nothing is
# pulled). With $2, its CNI configs come from that folder and its plugins
# from $4 (default Debian's /usr/lib/cni), and with $3 it runs in that
# network namespace (a path). Sets CTRD (its pid) and returns once $1/c.sock answers.
containerd_cri_start() {
  local d="$1" cni_conf="${2:-}" netns="${3:-}" cni_bin="${4:-/usr/lib/cni}"
  mkdir -p "$d"
  cat > "$d/config.toml" <<TOML
version = 2
root = "$d/root"
state = "$d/state"
[grpc]
  address = "$d/c.sock"
[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "localhost/picolet-bench/pause:v1"
  # Root in these VMs cannot lower oom_score_adj (no CAP_SYS_RESOURCE).
  restrict_oom_score_adj = true
  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "overlayfs"
    default_runtime_name = "runc"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
TOML
  if [ -n "$cni_conf" ]; then
    cat >> "$d/config.toml" <<TOML
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "$cni_bin"
    conf_dir = "$cni_conf"
TOML
  fi
  local enter=()
  [ -n "$netns" ] && enter=(nsenter "--net=$netns")
  # nsenter execs containerd: $! is containerd's pid.
  "${enter[@]}" containerd --config "$d/config.toml" 2>"$d/containerd.log" & CTRD=$!
  for _ in $(seq 200); do [ -S "$d/c.sock" ] && return 0; sleep 0.05; done
  echo "bench: containerd did not serve $d/c.sock" >&2
  exit 1
}
