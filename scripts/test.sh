#!/usr/bin/env bash
# The test command (README, CI): installs what is missing, then runs every
# test of the workspace with nextest. Run as root: end-to-end tests run real
# overlayfs and unpack real whiteouts; with CI=true they may not skip.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
. scripts/cargo-env.sh
exec cargo nextest run --workspace --locked --no-fail-fast "$@"
