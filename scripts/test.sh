#!/usr/bin/env bash
# README command 2: installs what is missing, builds fleet with warnings as errors, runs
# the whole test suite through CTest, then checks the sources' style (scripts/format.sh
# --check, .clang-format); it fails when either fails.
#   FLEET_BUILD_DIR  build folder (default build)
#   FLEET_SANITIZE=1 build with AddressSanitizer + UndefinedBehaviorSanitizer
#   CTEST_ARGS       extra ctest arguments (e.g. "-L unit")
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
build=${FLEET_BUILD_DIR:-build}
opts=(-DFLEET_WERROR=ON)
if [ "${FLEET_SANITIZE:-0}" = "1" ]; then opts+=(-DFLEET_SANITIZE=ON); fi
cmake -S . -B "$build" "${opts[@]}" >/dev/null
cmake --build "$build" -j"$(nproc)"
status=0
# shellcheck disable=SC2086
(cd "$build" && ctest --output-on-failure -j"$(nproc)" ${CTEST_ARGS:-}) || status=$?
bash scripts/format.sh --check || status=1
exit "$status"
