#!/usr/bin/env bash
# Draws a run's learning curve from its metrics.csv as a PNG with gnuplot (installed from
# Debian's gnuplot-nox when missing): the mean return of the last 100 episodes against
# env steps, with an optional horizontal reference line (a random policy's return).
#   usage: scripts/plot_run.sh RUN_DIR [OUT.png] [REFERENCE [REFERENCE_LABEL]]
#   e.g.   scripts/plot_run.sh runs/minatar-breakout docs/breakout.png 0.4 "random policy"
set -euo pipefail
run=${1:?usage: scripts/plot_run.sh RUN_DIR [OUT.png] [REFERENCE [LABEL]]}
out=${2:-$run/learning_curve.png}
ref=${3:-}
ref_label=${4:-reference}
csv="$run/metrics.csv"
[ -f "$csv" ] || { echo "plot_run: no $csv (run fleet run first)" >&2; exit 1; }
if ! command -v gnuplot >/dev/null 2>&1; then
  sudo=""; [ "$(id -u)" -ne 0 ] && sudo="sudo"
  echo "plot_run: installing gnuplot-nox"
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends gnuplot-nox >/dev/null
fi
name=$(basename "$run")
refplot=""
if [ -n "$ref" ]; then refplot=", $ref with lines dt 2 lw 2 lc rgb '#888888' title '$ref_label'"; fi
gnuplot <<GP
set datafile separator ','
set terminal pngcairo size 900,500 font 'sans,11'
set output '$out'
set title '$name: mean return of the last 100 episodes (all actors)'
set xlabel 'env steps (all actors)'
set ylabel 'return'
set key top left
set grid
set format x '%.1s%c'
plot '$csv' using 2:5 every ::1 with lines lw 2 lc rgb '#1f77b4' title 'fleet (Ape-X DQN)'$refplot
GP
echo "plot_run: wrote $out"
