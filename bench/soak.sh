#!/usr/bin/env bash
# soak: does a fleet's memory stay flat? Runs `fleet run CONFIG` (configs/minatar-breakout.ini
# by default; no target stop, run.max_seconds = MINUTES) and every EVERY seconds samples
# each process of it (the launcher and every role) for its resident memory (VmRSS) and
# open file descriptors. After the replay shards are full (replay_size reaches the
# config's replay.capacity in metrics.csv; at half the run when they never fill), it
# prints per process the least-squares slope of RSS in MB per 10 minutes and the
# descriptors' range. Target: under 1 MB per 10 minutes per process, descriptors flat.
# It also prints the slope of the replay tables' own memory (replay_storage_mb), which
# grows with the data when fewer frames are shared between transitions.
# The core count is printed with the table; the samples stay in OUT/samples.csv.
#
#   bash bench/soak.sh [MINUTES] [CONFIG.ini] [EVERY] [extra --set K=V ...]
#   (defaults: 10 configs/minatar-breakout.ini 10)
set -euo pipefail
here="$(cd "$(dirname "$0")/.." && pwd)"
fleet="${FLEET_BIN:-$here/build/bin/fleet}"
minutes="${1:-10}"
config="${2:-$here/configs/minatar-breakout.ini}"
every="${3:-10}"
shift $(( $# < 3 ? $# : 3 ))
out="$(mktemp -d /tmp/fleet-soak-XXXXXX)"
seconds=$(awk -v m="$minutes" 'BEGIN { printf "%d", m * 60 }')

"$fleet" run "$config" --set run.out_dir="$out" --set run.name=soak --set run.stop_at_target=0 \
  --set run.max_seconds="$seconds" "$@" > "$out/fleet.log" 2>&1 &
launcher=$!
samples="$out/samples.csv"
echo "t_s,name,pid,rss_kb,fds" > "$samples"
t0=$(date +%s.%N)

# one row per process: the launcher ("launcher") and its children ("<role>-<index>")
sample() {
  local now t pid name rss fds
  now=$(date +%s.%N)
  t=$(awk -v a="$now" -v b="$t0" 'BEGIN { printf "%.1f", a - b }')
  for pid in "$launcher" $(pgrep -P "$launcher" || true); do
    [ -r "/proc/$pid/status" ] || continue
    if [ "$pid" = "$launcher" ]; then
      name=launcher
    else
      name=$(tr '\0' ' ' < "/proc/$pid/cmdline" 2>/dev/null |
             awk '{ for (i = 3; i < NF; i++) if ($i == "--index" || $i == "--shard") { print $2 "-" $(i + 1); exit } }')
      [ -n "$name" ] || continue # not a role (a plot being drawn)
    fi
    rss=$(awk '/^VmRSS:/ { print $2 }' "/proc/$pid/status" 2>/dev/null || true)
    fds=$(ls "/proc/$pid/fd" 2>/dev/null | wc -l)
    [ -n "$rss" ] && echo "$t,$name,$pid,$rss,$fds" >> "$samples"
  done
}

while kill -0 "$launcher" 2>/dev/null; do
  sample
  sleep "$every"
done
wait "$launcher" || true

run="$out/soak"
capacity=$(awk -F' *= *' '/^\[replay\]/ { s = 1; next } /^\[/ { s = 0 } s && $1 == "capacity" { print $2 + 0 }' \
           "$run/config.ini")
shards=$(awk -F' *= *' '/^\[replay\]/ { s = 1; next } /^\[/ { s = 0 } s && $1 == "shards" { print $2 + 0 }' \
         "$run/config.ini")
fill=$(awk -F, -v cap="$capacity" 'NR == 1 { for (i = 1; i <= NF; i++) if ($i == "replay_size") c = i; next }
         $c >= cap { print $1; exit }' "$run/metrics.csv")
half=$(awk -v s="$seconds" 'BEGIN { printf "%.1f", s / 2 }')
from="${fill:-$half}"
echo "soak: $config, $minutes min, sampled every $every s, $(nproc) cores; replay ($shards shard(s), capacity" \
     "$capacity) $( [ -n "$fill" ] && echo "full at ${fill} s" || echo "never full: slopes from ${half} s")"
printf "%-14s %8s %10s %10s %16s %10s\n" process samples "rss_MB" "max_MB" "MB_per_10min" fds
awk -F, -v from="$from" 'NR > 1 && $1 >= from {
    k = $2; n[k]++; x = $1; y = $4 / 1024
    sx[k] += x; sy[k] += y; sxx[k] += x * x; sxy[k] += x * y
    last[k] = y; if (y > mx[k]) mx[k] = y
    if (!(k in fmin) || $5 < fmin[k]) fmin[k] = $5
    if ($5 > fmax[k]) fmax[k] = $5
  }
  END {
    for (k in n) {
      d = n[k] * sxx[k] - sx[k] * sx[k]
      slope = d > 0 ? (n[k] * sxy[k] - sx[k] * sy[k]) / d * 600 : 0
      printf "%-14s %8d %10.1f %10.1f %16.3f %5d..%d\n", k, n[k], last[k], mx[k], slope, fmin[k], fmax[k]
    }
  }' "$samples" | sort
# The replay's own table memory (stored frames, rows, sum-tree: replay_storage_mb in
# metrics.csv, summed over shards) over the same span: how much of the shards' RSS slope
# is data they hold; and the slope of the shards' RSS (summed) minus that, sample by
# sample (the latest metrics row at or before each sample).
awk -F, -v from="$from" '
  FNR == 1 { file++ }
  file == 1 && FNR == 1 { for (i = 1; i <= NF; i++) { if ($i == "replay_storage_mb") c = i
                                                      if ($i == "replay_frames") f = i }; next }
  file == 1 && c && $c != "" { m++; mt[m] = $1; ms[m] = $c
                               if ($1 >= from) { n++; x = $1; y = $c; sx += x; sy += y; sxx += x * x; sxy += x * y
                                                 if (n == 1) { first = y; ff = $f } last = y; lf = $f } }
  file == 2 && FNR > 1 && $1 >= from && $2 ~ /^replay-/ { rss[$1] += $4 / 1024; if (!($1 in seen)) { seen[$1] = 1; ts[++k] = $1 } }
  END {
    if (!n) exit
    d = n * sxx - sx * sx; slope = d > 0 ? (n * sxy - sx * sy) / d * 600 : 0
    printf "replay tables: %.1f -> %.1f MB (frames %d -> %d), %.3f MB per 10 min\n", first, last, ff, lf, slope
    j = 1; q = 0
    for (i = 1; i <= k; i++) {
      t = ts[i] + 0
      while (j < m && mt[j + 1] + 0 <= t) j++
      if (mt[j] + 0 > t) continue
      q++; y = rss[ts[i]] - ms[j]; qx += t; qy += y; qxx += t * t; qxy += t * y
      if (q == 1) r0 = y; r1 = y
    }
    if (q < 2) exit
    d = q * qxx - qx * qx; rslope = d > 0 ? (q * qxy - qx * qy) / d * 600 : 0
    printf "replay RSS minus tables: %.1f -> %.1f MB, %.3f MB per 10 min\n", r0, r1, rslope
  }' "$run/metrics.csv" "$samples"
echo "exit: $(tail -1 "$out/fleet.log" | cut -c1-160)"
echo "samples: $samples"
