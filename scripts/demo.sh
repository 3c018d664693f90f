#!/usr/bin/env bash
# Set up, build and run picolet with its embedded defaults: `picolet up`
# (shim + agent) imports the bundled busybox demo image from the preload
# folder /var/lib/picolet/images and runs the demo static pod
# examples/manifests/hello.yaml from /etc/picolet/manifests: an init
# container writes a page, busybox httpd serves it on 127.0.0.1:8080.
# Run as root; Ctrl-C removes the demo pod and stops picolet.
set -euo pipefail
cd "$(dirname "$0")/.."
[ "$(id -u)" = 0 ] || { echo "demo: run as root (sudo $0)" >&2; exit 1; }

scripts/setup.sh
cargo build --release --locked -p picolet
bin="${CARGO_TARGET_DIR:-target}/release/picolet"

mkdir -p /var/lib/picolet/images /etc/picolet/manifests
[ -f /var/lib/picolet/images/busybox.tar ] || cargo xtask demo-image /var/lib/picolet/images/busybox.tar
demo_pod=/etc/picolet/manifests/hello.yaml
ours=
if [ ! -e "$demo_pod" ]; then cp examples/manifests/hello.yaml "$demo_pod"; ours=1; fi

setsid "$bin" up &   # own process group: Ctrl-C reaches only this script, which removes the pod first
up=$!
stop() {
  trap - EXIT INT TERM
  if [ -n "$ours" ]; then
    echo; echo "demo: removing the demo pod (the agent stops it with its grace period)"
    rm -f "$demo_pod"
    # Until the agent has removed the pod's sandbox and its log directory
    # (the last thing it does for a pod), or 10 s.
    for _ in $(seq 100); do
      "$bin" ctl pods 2>/dev/null | grep -q ' hello-' || ls -d /var/log/pods/*_hello-* >/dev/null 2>&1 || break
      sleep 0.1
    done
  fi
  kill "$up" 2>/dev/null || true
  wait "$up" 2>/dev/null || true
}
trap stop EXIT INT TERM

page=
# Our httpd Running first (a container left by an earlier, unclean stop may
# still answer on :8080 before the shim is up), then the page.
for _ in $(seq 300); do
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
echo "Try: busybox wget -qO- http://127.0.0.1:10250/pods   (PodList with status, as kubelet's /pods)"
echo "     busybox wget -qO- http://127.0.0.1:10250/events (events: Pulled, Created, Started, ...)"
echo "     edit $demo_pod (the pod is replaced) or drop more v1/Pod files beside it."
echo "Ctrl-C to stop."
wait "$up"
