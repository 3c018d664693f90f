#!/usr/bin/env bash
# Set up, build and run picolet with its embedded defaults: `picolet up`
# (shim + agent) imports the bundled busybox demo image from the preload
# folder /var/lib/picolet/images and runs the demo static pod
# examples/manifests/hello.yaml from /etc/picolet/manifests: an init
# container writes a page, busybox httpd serves it on 127.0.0.1:8080.
# Run as root (sudo, or a root shell where there is no sudo). Ctrl-C removes
# the demo pod, waits until the agent has torn it down (containers, mounts,
# cgroups, network) and stops picolet: nothing of the demo is left.
#
#   scripts/demo.sh            # interactive: Ctrl-C to stop
#   scripts/demo.sh --check    # non-interactive (CI): up, page served, stop,
#                              # and fail if anything of the pod is left;
#                              # the node network it made is removed
# PICOLET_BIN=path uses that binary instead of building one (CI: the static
# dist/picolet-x86_64).
set -euo pipefail
cd "$(dirname "$0")/.."
[ "$(id -u)" = 0 ] || { echo "demo: run as root (sudo $0, or as root where there is no sudo)" >&2; exit 1; }
check=
[ "${1:-}" = --check ] && check=1

if [ -n "${PICOLET_BIN:-}" ]; then
  bin=$(realpath "$PICOLET_BIN")
  scripts/setup.sh --demo
  . scripts/cargo-env.sh
else
  scripts/setup.sh --demo
  . scripts/cargo-env.sh
  cargo build --release --locked -p picolet
  bin=$(realpath "${CARGO_TARGET_DIR:-target}/release/picolet")
fi

mkdir -p /var/lib/picolet/images /etc/picolet/manifests
[ -f /var/lib/picolet/images/busybox.tar ] || cargo xtask demo-image /var/lib/picolet/images/busybox.tar
demo_pod=/etc/picolet/manifests/hello.yaml
ours=
if [ ! -e "$demo_pod" ]; then cp examples/manifests/hello.yaml "$demo_pod"; ours=1; fi

# What the pod leaves if its teardown is cut short: mounts of its sandbox,
# emptyDir and rootfs, its cgroups, its log dir.
leftovers() {
  grep -E ' /run/picolet/| /var/lib/picolet/(shim|agent)/' /proc/self/mountinfo | grep -E 'hello|sandboxes|containers|pods' || true
  find /sys/fs/cgroup -maxdepth 4 -type d -path '*kubepods*' -name 'pod*' 2>/dev/null || true
  ls -d /var/log/pods/*_hello-* 2>/dev/null || true
}

# picolet's processes: the binary (up, shim, agent) and what the shim runs
# from its sealed in-memory copy (the monitor spawner, monitors), whatever
# path they were started by.
picolet_procs() {
  local p exe
  for p in /proc/[0-9]*; do
    exe=$(readlink "$p/exe" 2>/dev/null) || continue
    case "$exe" in
      "$bin" | "/memfd:picolet"*) echo "${p#/proc/} $(tr '\0' ' ' < "$p/cmdline" 2>/dev/null)" ;;
    esac
  done
}

# The node network picolet makes on first use, as on a device: the picolet0
# bridge, two nat chains and their jumps, the conflist, ip_forward. --check
# (CI) gives the host back as it found it when none of it was there before.
net_state() {
  ip link show picolet0 >/dev/null 2>&1 && echo "link picolet0"
  [ -e /etc/cni/net.d/10-picolet.conflist ] && echo "/etc/cni/net.d/10-picolet.conflist"
  iptables -t nat -S 2>/dev/null | grep -- PICOLET || true
}
net_before=$(net_state)
forward_before=$(cat /proc/sys/net/ipv4/ip_forward)
net_cleanup() {
  [ -z "$net_before" ] || return 0
  ip link del picolet0 2>/dev/null || true
  rm -f /etc/cni/net.d/10-picolet.conflist
  for jump in "PREROUTING -m addrtype --dst-type LOCAL -j PICOLET-HOSTPORTS" \
    "OUTPUT -m addrtype --dst-type LOCAL -j PICOLET-HOSTPORTS" "POSTROUTING -j PICOLET-MASQ"; do
    # shellcheck disable=SC2086 # the rule's words
    while iptables -t nat -D $jump 2>/dev/null; do :; done
  done
  for chain in PICOLET-HOSTPORTS PICOLET-MASQ; do
    iptables -t nat -F "$chain" 2>/dev/null || true
    iptables -t nat -X "$chain" 2>/dev/null || true
  done
  echo "$forward_before" > /proc/sys/net/ipv4/ip_forward
}

setsid "$bin" up &   # own process group: Ctrl-C reaches only this script, which removes the pod first
up=$!
stop() {
  trap - EXIT INT TERM
  # Under a pipe (`demo.sh | tee log`) Ctrl-C ends the reader too: a message
  # to the closed pipe must not end the clean-up.
  trap '' PIPE
  set +e
  if [ -n "$ours" ]; then
    echo; echo "demo: removing the demo pod (the agent stops it with its grace period)"
    rm -f "$demo_pod"
    # Until the agent has removed the pod's sandbox, mounts, cgroups and
    # log directory (its 5 s grace and the teardown), or 60 s.
    for _ in $(seq 600); do
      if ! "$bin" ctl pods 2>/dev/null | grep -q ' hello-' && [ -z "$(leftovers)" ]; then break; fi
      sleep 0.1
    done
  fi
  # picolet itself stops; pods of other manifests keep running (they
  # outlive picolet by design: `up` on SIGTERM never tears pods down).
  kill "$up" 2>/dev/null || true
  wait "$up" 2>/dev/null || true
}
trap stop EXIT INT TERM

page=
# Our httpd Running first (a container left by an earlier, unclean stop may
# still answer on :8080 before the shim is up), then the page.
for _ in $(seq 600); do
  "$bin" ctl ps 2>/dev/null | grep -q 'Running.*httpd' && break
  sleep 0.1
done
for _ in $(seq 300); do
  page=$(busybox wget -qO- http://127.0.0.1:8080/ 2>/dev/null) && break
  sleep 0.1
done
echo
echo "picolet is up (pid $up): CRI on /run/picolet/picolet.sock, static pods from /etc/picolet/manifests"
echo "the demo pod answers on http://127.0.0.1:8080/: ${page:-<no answer yet>}"
echo
"$bin" ctl pods || true
echo
"$bin" ctl ps || true
echo
if [ -n "$check" ]; then
  [ -n "$page" ] || { echo "demo --check: the page was not served" >&2; exit 1; }
  stop
  left=$(leftovers)
  if [ -n "$left" ]; then
    echo "demo --check: left behind:" >&2
    echo "$left" >&2
    exit 1
  fi
  left=$(picolet_procs)
  if [ -n "$left" ]; then
    echo "demo --check: picolet processes left:" >&2
    echo "$left" >&2
    exit 1
  fi
  net_cleanup
  if [ -z "$net_before" ] && [ -n "$(net_state)" ]; then
    echo "demo --check: network left behind:" >&2
    net_state >&2
    exit 1
  fi
  echo "demo --check: served '$page', stopped, nothing left"
  exit 0
fi
echo "Try: $bin ctl logs <container id> / ctl exec -it <id> sh / ctl inspectp <pod id>"
echo "     $bin ctl api /pods: the kubelet API (HTTPS, 127.0.0.1:10250) as root on this host"
echo "     edit $demo_pod (the pod is replaced) or drop more v1/Pod files beside it."
echo "Ctrl-C to stop."
wait "$up"
