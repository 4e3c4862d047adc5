#!/usr/bin/env bash
# README command 1: installs what is missing, builds fleet, and runs the default
# experiment (configs/cartpole.ini). Extra arguments go to `fleet run`.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
build=${FLEET_BUILD_DIR:-build}
cmake -S . -B "$build" >/dev/null
cmake --build "$build" -j"$(nproc)"
exec "$build/bin/fleet" run configs/cartpole.ini "$@"
