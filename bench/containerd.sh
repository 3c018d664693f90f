# Sourced by the benchmarks: containerd + runc with its CRI plugin on private
# paths under $1, the sandbox ("pause") image being the project's busybox-made
# localhost/picolet-bench/pause:v1 (nothing is pulled). With $2, its CNI
# configs come from that folder and its plugins from $4 (default Debian's
# /usr/lib/cni), and with $3 it runs in that network namespace (a path). Sets
# CTRD (its pid) and returns once $1/c.sock answers.
#
# Which containerd and runc (paths; CI keeps the defaults, Debian's 1.6):
#   CONTAINERD=/…/containerd  default the one on PATH. containerd looks its
#                             shim (containerd-shim-runc-v2) up on PATH first,
#                             so the shim of its own folder, when there, is put
#                             first on containerd's PATH: else a hand-built 2.x
#                             would start Debian's 1.6 shim. Its folder's ctr
#                             too (CTR), for the images.
#   RUNC=/…/runc              the runc runtime's BinaryName; default none, the
#                             shim runs `runc` from its PATH.
# Sets CONTAINERD, CTR, CONTAINERD_PATH (containerd's PATH) and
# CONTAINERD_MAJOR (1 writes a version 2 config, 2 a version 3 one).
CONTAINERD_PATH="$PATH"
if [ -n "${CONTAINERD:-}" ]; then
  [ -x "$(dirname "$CONTAINERD")/containerd-shim-runc-v2" ] && CONTAINERD_PATH="$(dirname "$CONTAINERD"):$PATH"
else
  CONTAINERD=$(command -v containerd)
fi
CTR=ctr
[ -x "$(dirname "$CONTAINERD")/ctr" ] && CTR="$(dirname "$CONTAINERD")/ctr"
RUNC="${RUNC:-}"
# "containerd github.com/containerd/containerd 1.6.20~ds1 …", "… v2.3.4 …"
CONTAINERD_MAJOR=$("$CONTAINERD" --version | awk '{sub(/^v/, "", $3); split($3, v, "."); print v[1]}')

containerd_cri_start() {
  local d="$1" cni_conf="${2:-}" netns="${3:-}" cni_bin="${4:-/usr/lib/cni}"
  mkdir -p "$d"
  if [ "$CONTAINERD_MAJOR" -ge 2 ]; then
    containerd_config_v3 "$d" "$cni_conf" "$cni_bin" > "$d/config.toml"
  else
    containerd_config_v2 "$d" "$cni_conf" "$cni_bin" > "$d/config.toml"
  fi
  local enter=()
  [ -n "$netns" ] && enter=(nsenter "--net=$netns")
  # nsenter execs env, env execs containerd: $! is containerd's pid.
  "${enter[@]}" env PATH="$CONTAINERD_PATH" "$CONTAINERD" --config "$d/config.toml" 2>"$d/containerd.log" & CTRD=$!
  for _ in $(seq 200); do [ -S "$d/c.sock" ] && return 0; sleep 0.05; done
  echo "bench: containerd did not serve $d/c.sock" >&2
  exit 1
}

# containerd 1.x: one CRI plugin, io.containerd.grpc.v1.cri.
containerd_config_v2() {
  local d="$1" cni_conf="$2" cni_bin="$3"
  cat <<TOML
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
  if [ -n "$RUNC" ]; then
    cat <<TOML
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        BinaryName = "$RUNC"
TOML
  fi
  if [ -n "$cni_conf" ]; then
    cat <<TOML
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "$cni_bin"
    conf_dir = "$cni_conf"
TOML
  fi
}

# containerd 2.x: the same settings in a version 3 config, written as such
# rather than left to 2.x's migration of version 2 (the CRI plugin split in
# two: images, with the sandbox image as pinned_images.sandbox, and runtime).
# 3, not 2.3's own 4: 2.0-2.2 refuse 4, and 2.3 migrates 3 in memory with all
# these settings kept (`containerd config migrate`), one warning in its log.
# NRI is on by default in 2.x; its socket goes under $d, not /var/run/nri.
containerd_config_v3() {
  local d="$1" cni_conf="$2" cni_bin="$3"
  cat <<TOML
version = 3
root = "$d/root"
state = "$d/state"
[grpc]
  address = "$d/c.sock"
[plugins."io.containerd.nri.v1.nri"]
  socket_path = "$d/nri.sock"
[plugins."io.containerd.cri.v1.images"]
  snapshotter = "overlayfs"
  [plugins."io.containerd.cri.v1.images".pinned_images]
    sandbox = "localhost/picolet-bench/pause:v1"
[plugins."io.containerd.cri.v1.runtime"]
  # Root in these VMs cannot lower oom_score_adj (no CAP_SYS_RESOURCE).
  restrict_oom_score_adj = true
  [plugins."io.containerd.cri.v1.runtime".containerd]
    default_runtime_name = "runc"
    [plugins."io.containerd.cri.v1.runtime".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
TOML
  if [ -n "$RUNC" ]; then
    cat <<TOML
      [plugins."io.containerd.cri.v1.runtime".containerd.runtimes.runc.options]
        BinaryName = "$RUNC"
TOML
  fi
  if [ -n "$cni_conf" ]; then
    cat <<TOML
  [plugins."io.containerd.cri.v1.runtime".cni]
    bin_dirs = ["$cni_bin"]
    conf_dir = "$cni_conf"
TOML
  fi
}
