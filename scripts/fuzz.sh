#!/usr/bin/env bash
# Fuzzes the parsers of outside input with cargo-fuzz (libFuzzer + ASan):
# static pod manifests, the config file, /dev/kmsg records with the OOM
# matcher, CRI log lines and the log writer, image archive import, the CRI
# socket's :authority rewriter (HTTP/2 frames, HPACK), SPDY/3.1 and
# WebSocket streaming frames (resize and status channels), certificates,
# CDI spec files.
#
#   scripts/fuzz.sh [SECONDS_PER_TARGET] [TARGET...]   # default 20 s, all
#
# CI runs it for a short budget; by hand, give it minutes or hours. Each
# target starts from fuzz/seeds/<target> and a working corpus kept under
# the build directory between runs; a crash stops the run with libFuzzer's
# report and the input (fuzz/artifacts/<target>/). Run as root: the archive
# target unpacks layers with their owners. cargo-fuzz's -Z flags run on the
# stable toolchain with RUSTC_BOOTSTRAP=1 (no nightly here).
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/cargo-env.sh
secs=${1:-20}
shift || true
targets=("$@")
[ ${#targets[@]} -gt 0 ] || targets=(manifest config kmsg cri_log archive hpack spdy websocket x509 cdi_spec)
command -v cargo-fuzz >/dev/null || cargo install --locked cargo-fuzz
export RUSTC_BOOTSTRAP=1
target_dir="${CARGO_TARGET_DIR:-$PWD/target}/fuzz"
corpora="$target_dir/corpus"
cd fuzz
echo "fuzz: building the targets (libFuzzer, ASan; about 5 minutes from nothing)"
cargo fuzz build -O --target-dir "$target_dir" 2>&1 | grep -E '^(error|warning)' -A5 || true
for t in "${targets[@]}"; do
  mkdir -p "$corpora/$t"
  log=$(mktemp)
  # Small inputs for the text parsers; archives need room for tar blocks.
  max_len=65536
  [ "$t" = archive ] && max_len=262144
  if ! cargo fuzz run -O --target-dir "$target_dir" "$t" "$corpora/$t" "seeds/$t" -- \
      -max_total_time="$secs" -max_len="$max_len" -rss_limit_mb=2048 -timeout=10 \
      -print_final_stats=1 >"$log" 2>&1; then
    tail -60 "$log" >&2
    echo "fuzz: $t: CRASH (input in fuzz/artifacts/$t/)" >&2
    exit 1
  fi
  runs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -1)
  cov=$(grep -o 'cov: [0-9]*' "$log" | tail -1)
  echo "fuzz: $t: ${runs:-?} execs in ${secs}s, ${cov:-cov: ?}, 0 crashes, corpus $(ls "$corpora/$t" | wc -l)"
  rm -f "$log"
done
