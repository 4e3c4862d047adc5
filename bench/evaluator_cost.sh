#!/usr/bin/env bash
# evaluator_cost: what the evaluator role costs the training. Runs the same experiment
# (configs/minatar-breakout.ini by default, same seed) with run.evaluators = 0 and = 1,
# alternating, ROUNDS times each, for SECONDS each, and prints the mean env steps/s and
# learner updates/s over the progress rows after WARMUP seconds (metrics.csv), and the
# evaluations made. The machine's core count is printed with the table.
#
#   bash bench/evaluator_cost.sh [CONFIG.ini] [SECONDS] [ROUNDS] [extra --set K=V ...]
#   (defaults: configs/minatar-breakout.ini 60 2; WARMUP = 15 s)
set -euo pipefail
here="$(cd "$(dirname "$0")/.." && pwd)"
fleet="${FLEET_BIN:-$here/build/bin/fleet}"
config="${1:-$here/configs/minatar-breakout.ini}"
seconds="${2:-60}"
rounds="${3:-2}"
shift $(( $# < 3 ? $# : 3 ))
warmup=15
out="$(mktemp -d /tmp/fleet-evalcost-XXXXXX)"
trap 'rm -rf "$out"' EXIT

# mean of column NAME of metrics.csv over rows with time_s >= warmup
column_mean() {
  awk -F, -v name="$2" -v w="$warmup" 'NR == 1 { for (i = 1; i <= NF; i++) if ($i == name) c = i; next }
    $1 >= w { s += $c; n++ } END { if (n) printf "%.1f", s / n; else printf "nan" }' "$1"
}

declare -A env_sum upd_sum evals_sum
for r in $(seq 1 "$rounds"); do
  for ev in 0 1; do
    name="e${ev}-r${r}"
    "$fleet" run "$config" --set run.out_dir="$out" --set run.name="$name" --set run.evaluators="$ev" \
      --set run.max_seconds="$seconds" --set run.stop_at_target=false --set run.checkpoints=false "$@" \
      > "$out/$name.log" 2>&1 || { echo "run $name failed:"; tail -5 "$out/$name.log"; exit 1; }
    m="$out/$name/metrics.csv"
    env_sum[$ev]="${env_sum[$ev]:-} $(column_mean "$m" env_steps_per_s)"
    upd_sum[$ev]="${upd_sum[$ev]:-} $(column_mean "$m" learner_steps_per_s)"
    evals_sum[$ev]="${evals_sum[$ev]:-} $(grep -c . "$out/$name/evals.csv" | awk '{print $1 - 1}')"
  done
done

mean() { echo "$@" | awk '{ s = 0; for (i = 1; i <= NF; i++) s += $i; printf "%.1f", s / NF }'; }
echo "evaluator cost: $(basename "$config"), $rounds x ${seconds} s per setting (rows after ${warmup} s), $(nproc) cores"
printf "%-14s %14s %14s %12s   %s\n" "evaluators" "env steps/s" "updates/s" "evaluations" "per run (env steps/s)"
for ev in 0 1; do
  printf "%-14s %14s %14s %12s   %s\n" "$ev" "$(mean ${env_sum[$ev]})" "$(mean ${upd_sum[$ev]})" \
    "$(mean ${evals_sum[$ev]})" "${env_sum[$ev]}"
done
