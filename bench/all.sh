#!/usr/bin/env bash
# Every benchmark, one command; each part prints its markdown table with
# picolet beside Debian's containerd 1.6 + runc where a baseline exists
# (installed and started on private paths by the scripts themselves).
#
#   sudo bench/all.sh | tee bench.md
#
# Parts: binary sizes per target (scripts/dist.sh), CRI latency
# (bench/cri.sh), static pod start latency (bench/static-pods.sh),
# memory and idle CPU (bench/footprint.sh), probe CPU (bench/probes.sh),
# /metrics/cadvisor cost (scrape-bench), image import (bench/images.sh).
set -euo pipefail
cd "$(dirname "$0")/.."
[ "$(id -u)" = 0 ] || { echo "bench: run as root" >&2; exit 1; }
echo "## Binary sizes"
echo
scripts/dist.sh 2>/dev/null | grep '^|'
bench/cri.sh 50 2>/dev/null
bench/static-pods.sh 30 2>/dev/null
bench/footprint.sh 60 2>/dev/null
bench/probes.sh 30 2>/dev/null
cargo run --release --locked -q -p bench --bin scrape-bench 100
bench/images.sh 100 3 2>/dev/null
