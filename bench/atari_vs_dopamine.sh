#!/usr/bin/env bash
# atari_vs_dopamine.sh EVALS_CSV REF_CSV OUT_PNG [TITLE]: draws a run's evaluations (its
# evals.csv: mean return and 95% CI against frames) beside published per-iteration
# returns (REF_CSV: iteration, frames_mid, dqn_mean, rainbow_mean; e.g.
# docs/results/dopamine-breakout.csv) with gnuplot. Used for docs/results.md ("Atari
# Breakout").
set -euo pipefail
evals=$1 ref=$2 out=$3
title=${4:-"fleet's evaluations and Dopamine's baselines"}
maxf=$(awk -F, 'NR > 1 { f = $18 } END { print f + 0 }' "$evals")
gnuplot <<GP
set terminal pngcairo size 900,520 font ",11"
set output "$out"
set datafile separator ","
set key top left
set grid
set xlabel "frames (millions)"
set ylabel "return"
set title "$title"
set xrange [0:($maxf / 1e6) * 1.15 + 1.2]
plot "$evals" every ::1 using (\$18/1e6):7:11 with yerrorlines lw 2 pt 7 title "fleet: evaluation (10 episodes, epsilon 0.05), 95% CI", \
     "$ref" every ::1 using (\$2/1e6):3 with linespoints lw 2 dt 2 pt 5 title "Dopamine DQN: training episodes (5 runs)", \
     "$ref" every ::1 using (\$2/1e6):4 with linespoints lw 2 dt 3 pt 9 title "Dopamine Rainbow: training episodes (5 runs)"
GP
