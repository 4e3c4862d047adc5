#!/usr/bin/env bash
# scale: a fleet of N actor processes, for each N given, on this machine: real `fleet run`
# fleets of CartPole actors (one env each, niced and under SCHED_IDLE, oversubscribing the
# cores) with 4 replay shards, 2 parameter-server shards, one CPU learner and no
# evaluator, each run for SECONDS. Prints per N:
#   start_s     seconds from launch to the first progress row where every actor has had
#               transitions acknowledged by the shards (roles.csv's transitions_acked)
#   inserts/s   transitions the shards took a second (metrics.csv, rows after WARMUP s)
#   fetches/s   parameter Fetch calls the parameter servers answered a second (likewise)
#   updates/s   the learner's updates a second (likewise)
#   conns       TCP connections established to the replay shards and to the parameter
#               servers (ss, half way through the run)
#   replay_mb, ps_mb, learner_mb, launcher_mb
#               the most one such process held resident (summary.txt)
#   actor_mb    the most one actor held resident, and (private) its own pages
#   launch_cpu  the launcher's CPU seconds per second of the run
#   late_s      the progress rows' lateness: the longest gap between two rows minus the
#               period (run.progress_every)
#   lost        acknowledged transitions missing from the shards (actors_acked minus
#               replay_inserted, when positive), and the run's exit status
# and the core count. The run folders stay in OUT (printed).
#
# SCALE_HOSTS=H (root, iproute2, unshare and Open MPI) runs each fleet across H hosts
# instead: network namespaces on a bridge, each with its own host name, Open MPI's
# daemons started in them by an rsh agent as ssh would on other machines, one rank per
# role dealt round the hosts (`--map-by node`), every call crossing the bridge with TLS
# and tokens (per-job credentials); connections are then counted inside each host.
#
#   bash bench/scale.sh [SECONDS] [N ...]     (defaults: 60 s; 1 4 16 64 256)
#   e.g. bash bench/scale.sh 300 256          (the five-minute run of 256 actors)
#   SCALE_HOSTS=8 bash bench/scale.sh 60 1 4 16 64
#   FLEET_BIN=PATH runs another build's fleet; SCALE_WARMUP=S counts rows from S s (20);
#   SCALE_SET="KEY=VALUE ..." adds settings to every run (e.g. "actor.sched_idle=false")
set -euo pipefail
here="$(cd "$(dirname "$0")/.." && pwd)"
fleet="${FLEET_BIN:-$here/build/bin/fleet}"
seconds="${1:-60}"
shift || true
sizes=("$@")
[ ${#sizes[@]} -eq 0 ] && sizes=(1 4 16 64 256)
warmup="${SCALE_WARMUP:-20}"
out="$(mktemp -d /tmp/fleet-scale-XXXXXX)"
hosts="${SCALE_HOSTS:-0}"
launch=() # the command before `fleet run`: empty, or mpirun over the hosts
in_host() { "$@"; } # runs a command where a service's sockets are (each host in turn with namespaces)
if [ "$hosts" -gt 0 ]; then
  net="10.$(( 100 + $$ % 150 )).1" br="flsc$(( $$ % 100000 ))"
  ns=()
  cleanup() { for n in "${ns[@]}"; do ip netns del "$n" 2> /dev/null || true; done; ip link del "$br" 2> /dev/null || true; }
  trap cleanup EXIT
  ip link add "$br" type bridge && ip addr add "$net.1/24" dev "$br" && ip link set "$br" up
  { echo '#!/bin/sh'; echo 'host=$1; shift'; echo 'case $host in'; } > "$out/agent.sh"
  : > "$out/hosts"
  for h in $(seq 1 "$hosts"); do
    n="flsc$$-$h"; ns+=("$n")
    ip netns add "$n"
    ip link add "${br}v$h" type veth peer name eth0 netns "$n"
    ip link set "${br}v$h" master "$br" && ip link set "${br}v$h" up
    ip -n "$n" addr add "$net.$(( 10 + h ))/24" dev eth0 && ip -n "$n" link set eth0 up && ip -n "$n" link set lo up
    echo "  $net.$(( 10 + h ))) ns=$n; name=host$h ;;" >> "$out/agent.sh"
    echo "$net.$(( 10 + h )) slots=512" >> "$out/hosts"
  done
  { echo '  *) echo "agent: unknown host $host" >&2; exit 1 ;;'; echo 'esac'
    echo 'exec ip netns exec $ns unshare --uts sh -c "hostname $name; $*"'; } >> "$out/agent.sh"
  chmod +x "$out/agent.sh"
  in_host() { for n in "${ns[@]}"; do ip netns exec "$n" "$@"; done; }
fi

col_mean() { # FILE COLUMN: mean over rows with time_s >= warmup
  awk -F, -v name="$2" -v w="$warmup" 'NR == 1 { for (i = 1; i <= NF; i++) if ($i == name) c = i; next }
    $1 >= w { s += $c; n++ } END { if (n) printf "%.0f", s / n; else printf "nan" }' "$1"
}
kv() { sed -n "s/^$2=//p" "$1" | head -1; }

where="one host"
[ "$hosts" -gt 0 ] && where="$hosts namespace hosts under mpirun, TLS"
printf "scale: CartPole actors, 4 replay shards, 2 parameter servers, 1 CPU learner, %s, %s s each, %s cores; runs in %s\n" \
  "$where" "$seconds" "$(nproc)" "$out"
printf "%6s %8s %10s %10s %9s %7s %7s %9s %7s %10s %10s %13s %10s %7s %10s\n" actors start_s inserts/s fetches/s \
  updates/s r_conns p_conns replay_mb ps_mb learner_mb launch_mb actor_mb\(priv\) launch_cpu late_s lost/exit
for n in "${sizes[@]}"; do
  name="n$n"
  if [ "$hosts" -gt 0 ]; then
    launch=(mpirun --allow-run-as-root --hostfile "$out/hosts" --mca plm_rsh_agent "$out/agent.sh"
      --mca oob_tcp_if_include "$net.0/24" --mca btl_tcp_if_include "$net.0/24" --map-by node --bind-to none
      --oversubscribe -np $(( 1 + 4 + 2 + 1 + n )))
  fi
  "${launch[@]}" "$fleet" run "$here/configs/cartpole.ini" --set run.out_dir="$out" --set run.name="$name" \
    --set run.max_seconds="$seconds" --set run.stop_at_target=false --set run.checkpoints=false \
    --set run.evaluators=0 --set actor.count="$n" --set env.num_envs=1 --set actor.sched_idle=true \
    --set replay.shards=4 --set paramserver.shards=2 --set run.max_restarts=0 \
    $(for kv in ${SCALE_SET:-}; do printf -- "--set %s " "$kv"; done) > "$out/$name.log" 2>&1 &
  pid=$!
  # half way: the services' connections (their ports from the launch plan), the launcher's CPU
  sleep $(( seconds / 2 + 5 ))
  line=$(grep -m1 "services " "$out/$name.log" || true)
  rports=$(echo "$line" | sed -n 's/.*replay \(shards \)\{0,1\}\([^ ]*\), paramserver.*/\2/p' | tr ',' '\n' | sed 's/.*://')
  pports=$(echo "$line" | sed -n 's/.*paramserver \(shards \)\{0,1\}\([^ ]*\), control.*/\2/p' | tr ',' '\n' | sed 's/.*://')
  count_conns() { local c=0; for p in $1; do c=$(( c + $(in_host ss -Htn state established "( sport = :$p )" | wc -l) )); done; echo $c; }
  rc_=$(count_conns "$rports"); pc_=$(count_conns "$pports")
  wait "$pid" && status=0 || status=$?
  dir="$out/$name"
  s="$dir/summary.txt"
  start=$(awk -F, -v n="$n" 'NR == 1 { for (i = 1; i <= NF; i++) { if ($i == "role") r = i; if ($i == "transitions_acked") a = i }; next }
    $r == "actor" && $a > 0 && !($3 in got) { got[$3] = 1; k++; if (k == n) { print $1; exit } }' "$dir/roles.csv")
  late=$(awk -F, -v p="$(kv "$dir/config.ini" progress_every | awk '{print $1}')" 'NR > 1 { if (NR > 2 && $1 - t > g) g = $1 - t; t = $1 }
    END { printf "%.2f", g - (p ? p : 1) }' "$dir/metrics.csv" 2>/dev/null || echo nan)
  acked=$(kv "$s" actors_acked); ins=$(kv "$s" replay_inserted)
  lost=$(( acked > ins ? acked - ins : 0 ))
  ucpu=$(kv "$s" launcher_cpu_s); el=$(kv "$s" elapsed_s)
  lcpu=$(awk -v c="$ucpu" -v e="$el" 'BEGIN { if (e > 0 && c != "") printf "%.3f", c / e; else print "nan" }')
  printf "%6s %8s %10s %10s %9s %7s %7s %9s %7s %10s %10s %13s %10s %7s %10s\n" "$n" "${start:-never}" \
    "$(col_mean "$dir/metrics.csv" replay_inserts_per_s)" "$(col_mean "$dir/metrics.csv" fetches_per_s)" \
    "$(col_mean "$dir/metrics.csv" learner_steps_per_s)" "$rc_" "$pc_" "$(kv "$s" memory_replay_rss_mb)" \
    "$(kv "$s" memory_paramserver_rss_mb)" "$(kv "$s" memory_learner_rss_mb)" "$(kv "$s" memory_launcher_rss_mb)" \
    "$(kv "$s" memory_actor_rss_mb)($(kv "$s" memory_actor_private_mb))" "$lcpu" "$late" "$lost/$status"
done
