#!/usr/bin/env bash
# restart_stall: how long a fleet's actors stall when its replay shard is killed and
# restarted. Runs CONFIG for SECONDS, kills the replay shard with SIGKILL every EVERY
# seconds from EVERY on (the launcher restarts it), and prints per kill: when the new
# shard served (after the kill) and, per actor, when its writer had its first
# acknowledgement again, both after the kill and after the shard served (from the
# roles' logs), then the fleet's insert rate by second around each kill (metrics.csv).
# The machine's core count is printed first.
#
#   bash bench/restart_stall.sh [CONFIG.ini] [SECONDS] [EVERY] [extra --set K=V ...]
#   (defaults: configs/minatar-breakout.ini 80 25)
set -euo pipefail
here="$(cd "$(dirname "$0")/.." && pwd)"
fleet="${FLEET_BIN:-$here/build/bin/fleet}"
config="${1:-$here/configs/minatar-breakout.ini}"
seconds="${2:-80}"
every="${3:-25}"
shift $(( $# < 3 ? $# : 3 ))
out="$(mktemp -d /tmp/fleet-stall-XXXXXX)"
trap 'rm -rf "$out"' EXIT

echo "cores: $(nproc); cpu: $(lscpu | sed -n 's/^Model name: *//p' | head -1)"
echo "config: $config, $seconds s, replay killed every $every s"
"$fleet" run "$config" --set run.max_seconds="$seconds" --set run.stop_at_target=false \
  --set run.out_dir="$out" --set run.name=r --set run.progress_every=1 "$@" > "$out/stdout" 2>&1 &
launcher=$!
run="$out/r"
t=0
while [ $(( t + every )) -lt "$seconds" ]; do
  sleep "$every"
  t=$(( t + every ))
  pid=$(pgrep -f "fleet replay --config $run/" | head -1 || true)
  if [ -z "$pid" ]; then echo "no replay process to kill at ${t} s" >&2; continue; fi
  kill -9 "$pid"
done
wait "$launcher" || { echo "the run failed:"; tail -20 "$out/stdout"; exit 1; }

# HH:MM:SS.mmm at the start of a log line -> seconds of the day
secs() { awk -F'[:. ]' '{ printf "%.3f\n", $1 * 3600 + $2 * 60 + $3 + $4 / 1000 }'; }
mapfile -t served < <(grep -h "serving on" "$run/logs/replay-0.log" | tail -n +2 | secs)
k=0
for s in "${served[@]}"; do
  k=$(( k + 1 ))
  line=""
  for log in "$run"/logs/actor-*.log; do
    a=$(basename "$log" .log)
    # the k-th failure and the k-th recovery of this actor's writer
    fail=$(grep -h "will resend" "$log" | sed -n "${k}p" | secs)
    back=$(grep -h "acknowledges again" "$log" | sed -n "${k}p" | secs)
    [ -n "$fail" ] && [ -n "$back" ] || { line="$line  $a: no recovery logged;"; continue; }
    line="$line  $a back $(awk -v b="$back" -v f="$fail" 'BEGIN { printf "%.2f", b - f }') s after the kill,"
    line="$line $(awk -v b="$back" -v s="$s" 'BEGIN { printf "%.2f", b - s }') s after serving;"
    [ "$log" = "$(ls "$run"/logs/actor-*.log | head -1)" ] && first_fail="$fail"
  done
  echo "kill $k: the shard served $(awk -v s="$s" -v f="$first_fail" 'BEGIN { printf "%.2f", s - f }') s after the kill;$line"
done
echo "replay inserts/s by progress row around the kills (time_s inserts_per_s):"
awk -F, -v every="$every" 'NR == 1 { for (i = 1; i <= NF; i++) if ($i == "replay_inserts_per_s") c = i; next }
  { m = $1 % every; if ($1 >= every && (m < 6 || m > every - 1)) printf "  %.1f %.0f\n", $1, $c }' "$run/metrics.csv"
