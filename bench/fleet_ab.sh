#!/usr/bin/env bash
# fleet_ab: one configuration key's effect on a whole fleet's speed. Runs the same
# experiment (same seed) once per VALUE of KEY, the values in turn, ROUNDS times, for
# SECONDS each, and prints per value the mean env steps/s and learner updates/s over the
# progress rows after WARMUP seconds (metrics.csv), and the evaluations made. The
# machine's core count is printed with the table.
#
#   bash bench/fleet_ab.sh KEY "VALUE1 VALUE2 ..." [CONFIG.ini] [SECONDS] [ROUNDS] [extra --set K=V ...]
#   (defaults: configs/minatar-breakout.ini 60 2; WARMUP = 15 s)
#   e.g. bash bench/fleet_ab.sh model.cpu_kernels "dnnl reference" configs/minatar-breakout.ini 90 2
#   FLEET_BIN=PATH runs another build's fleet
#   KEY @bin compares builds, alternately: the VALUES are fleet binaries
#   (e.g. bash bench/fleet_ab.sh @bin "/tmp/old/build/bin/fleet build/bin/fleet" configs/cartpole.ini 40 3)
#   FLEET_AB_WARMUP=S counts the rows from S seconds (an Atari fleet learns from ~45 s)
set -euo pipefail
if [ $# -lt 2 ]; then
  sed -n '2,14p' "$0" | sed 's/^# \{0,1\}//'
  exit 2
fi
here="$(cd "$(dirname "$0")/.." && pwd)"
fleet="${FLEET_BIN:-$here/build/bin/fleet}"
key="$1"
read -r -a values <<< "$2"
config="${3:-$here/configs/minatar-breakout.ini}"
seconds="${4:-60}"
rounds="${5:-2}"
shift $(( $# < 5 ? $# : 5 ))
warmup="${FLEET_AB_WARMUP:-15}"
out="$(mktemp -d /tmp/fleet-ab-XXXXXX)"
trap 'rm -rf "$out"' EXIT

# mean of column NAME of metrics.csv over rows with time_s >= warmup
column_mean() {
  awk -F, -v name="$2" -v w="$warmup" 'NR == 1 { for (i = 1; i <= NF; i++) if ($i == name) c = i; next }
    $1 >= w { s += $c; n++ } END { if (n) printf "%.1f", s / n; else printf "nan" }' "$1"
}

declare -A env_sum upd_sum evals_sum
for r in $(seq 1 "$rounds"); do
  for i in "${!values[@]}"; do
    v="${values[$i]}"
    name="v${i}-r${r}"
    bin="$fleet" keyset=(--set "$key=$v")
    if [ "$key" = "@bin" ]; then bin="$v" keyset=(); fi
    "$bin" run "$config" --set run.out_dir="$out" --set run.name="$name" --set run.max_seconds="$seconds" \
      --set run.stop_at_target=false --set run.checkpoints=false "$@" "${keyset[@]}" \
      > "$out/$name.log" 2>&1 || { echo "run $name ($key=$v) failed:"; tail -5 "$out/$name.log"; exit 1; }
    m="$out/$name/metrics.csv"
    env_sum[$i]="${env_sum[$i]:-} $(column_mean "$m" env_steps_per_s)"
    upd_sum[$i]="${upd_sum[$i]:-} $(column_mean "$m" learner_steps_per_s)"
    evals_sum[$i]="${evals_sum[$i]:-} $(grep -c . "$out/$name/evals.csv" 2>/dev/null | awk '{print $1 - 1}' || echo 0)"
  done
done

mean() { echo "$@" | awk '{ s = 0; for (i = 1; i <= NF; i++) s += $i; printf "%.1f", s / NF }'; }
echo "fleet_ab: $key, $(basename "$config"), $rounds x ${seconds} s per value (rows after ${warmup} s), $(nproc) cores"
printf "%-20s %14s %14s %12s   %s\n" "$key" "env steps/s" "updates/s" "evaluations" "per run (env steps/s)"
for i in "${!values[@]}"; do
  printf "%-20s %14s %14s %12s   %s\n" "${values[$i]}" "$(mean ${env_sum[$i]})" "$(mean ${upd_sum[$i]})" \
    "$(mean ${evals_sum[$i]})" "${env_sum[$i]}"
done
