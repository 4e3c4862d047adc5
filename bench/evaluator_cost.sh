#!/usr/bin/env bash
# evaluator_cost: what the evaluator role costs the training. Runs the same experiment
# (configs/minatar-breakout.ini by default, same seed) with run.evaluators = 0 and = 1,
# alternating, ROUNDS times each, for SECONDS each, and prints the mean env steps/s and
# learner updates/s over the progress rows after 15 s (metrics.csv), and the evaluations
# made (bench/fleet_ab.sh does the work).
#
#   bash bench/evaluator_cost.sh [CONFIG.ini] [SECONDS] [ROUNDS] [extra --set K=V ...]
#   (defaults: configs/minatar-breakout.ini 60 2)
set -euo pipefail
here="$(cd "$(dirname "$0")/.." && pwd)"
exec bash "$here/bench/fleet_ab.sh" run.evaluators "0 1" "${1:-$here/configs/minatar-breakout.ini}" "${2:-60}" \
  "${3:-2}" "${@:4}"
