#!/usr/bin/env bash
# Draws a run's learning curve as a PNG with gnuplot (installed from Debian's gnuplot-nox
# when missing).
#   usage: scripts/plot_run.sh RUN_DIR [OUT.png] [REFERENCE [REFERENCE_LABEL]]
# A run folder with evals.csv or returns.csv (what `fleet run` writes): `fleet plot RUN_DIR`
# draws RUN_DIR/curve.png (`fleet help plot`), copied to OUT.png when given. There is no
# reference line: add one to a copy of RUN_DIR/curve.gp.
# An older run folder with metrics.csv only: the mean return of the last 100 episodes
# against env steps, with an optional horizontal reference line (a random policy's
# return), to OUT.png (default RUN_DIR/learning_curve.png).
#   e.g. scripts/plot_run.sh runs/minatar-breakout docs/breakout.png 0.4 "random policy"
# The fleet binary: $FLEET, else build/bin/fleet, else fleet on PATH.
set -euo pipefail
usage="usage: scripts/plot_run.sh RUN_DIR [OUT.png] [REFERENCE [LABEL]]"
run=${1:?$usage}
out=${2:-}
ref=${3:-}
ref_label=${4:-reference}
if ! command -v gnuplot >/dev/null 2>&1; then
  sudo=""; [ "$(id -u)" -ne 0 ] && sudo="sudo"
  echo "plot_run: installing gnuplot-nox"
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends gnuplot-nox >/dev/null
fi

if [ -f "$run/evals.csv" ] || [ -f "$run/returns.csv" ]; then
  fleet=${FLEET:-$(dirname "$0")/../build/bin/fleet}
  [ -x "$fleet" ] || fleet=fleet
  [ -z "$ref" ] || echo "plot_run: no reference line on curve.png (add one to a copy of $run/curve.gp)" >&2
  png=$("$fleet" plot "$run")
  if [ -n "$out" ]; then cp "$png" "$out"; png=$out; fi
  echo "plot_run: wrote $png"
  exit 0
fi

csv="$run/metrics.csv"
[ -f "$csv" ] || { echo "plot_run: no $run/evals.csv, returns.csv or metrics.csv (run fleet run first)" >&2; exit 1; }
out=${out:-$run/learning_curve.png}
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
