#!/usr/bin/env bash
# slurm_cluster: a one-node Slurm cluster for tests/integration_slurm.c, made of Debian's
# slurm-wlm and munge with all its state in DIR (nothing in /etc, no system service):
# munged with its own key and socket, slurmctld and slurmd as root on free ports, the
# node being this host (NodeAddr 127.0.0.1) with CPUS cpus as configured (slurmd takes
# the configured count: SlurmdParameters=config_overrides).
#
#   bash tests/slurm_cluster.sh up DIR [CPUS]   # prints "SLURM_CONF=DIR/slurm.conf" once the node is idle
#   bash tests/slurm_cluster.sh down DIR        # stops the daemons (idempotent)
#
# Needs root (slurmd runs jobs as their user), munged, slurmctld, slurmd, sinfo. Exit 0
# on success; otherwise 1 with the daemons' last log lines on stderr.
set -uo pipefail
cmd=${1:-} dir=${2:-}
if [ -z "$cmd" ] || [ -z "$dir" ]; then
  sed -n '2,12p' "$0" | sed 's/^# \{0,1\}//'
  exit 2
fi

stop_pidfile() {
  local f=$1
  [ -s "$f" ] || return 0
  local pid
  pid=$(cat "$f")
  kill "$pid" 2>/dev/null || return 0
  for _ in $(seq 50); do kill -0 "$pid" 2>/dev/null || return 0; sleep 0.1; done
  kill -9 "$pid" 2>/dev/null || true
}

down() {
  export SLURM_CONF="$dir/slurm.conf"
  stop_pidfile "$dir/slurmd.pid"
  stop_pidfile "$dir/slurmctld.pid"
  stop_pidfile "$dir/munge/munged.pid"
}

# A TCP port nothing listens on, from a range the kernel does not hand out by itself.
free_port() {
  local p
  for _ in $(seq 200); do
    p=$(( 20000 + RANDOM % 10000 ))
    if ! ss -Htln "sport = :$p" 2>/dev/null | grep -q .; then echo "$p"; return 0; fi
  done
  return 1
}

fail() {
  echo "slurm_cluster: $*" >&2
  for f in "$dir"/log/*.log; do [ -f "$f" ] && { echo "---- $f" >&2; tail -n 15 "$f" >&2; }; done
  down
  exit 1
}

case "$cmd" in
down) down; exit 0 ;;
up) ;;
*) echo "slurm_cluster: unknown command '$cmd' (expected up or down)" >&2; exit 2 ;;
esac

cpus=${3:-8}
[ "$(id -u)" = 0 ] || { echo "slurm_cluster: needs root (slurmd runs jobs as their users)" >&2; exit 1; }
for b in munged slurmctld slurmd sinfo sbatch; do
  command -v "$b" >/dev/null || { echo "slurm_cluster: $b is not installed (Debian: slurm-wlm, munge)" >&2; exit 1; }
done
mkdir -p "$dir"/state "$dir"/spool "$dir"/log "$dir"/munge || exit 1
chmod 700 "$dir/munge"
head -c 1024 /dev/urandom > "$dir/munge/munge.key" && chmod 400 "$dir/munge/munge.key" || fail "cannot make the munge key"
munged --force --key-file="$dir/munge/munge.key" --socket="$dir/munge/munge.sock" \
  --pid-file="$dir/munge/munged.pid" --log-file="$dir/log/munged.log" --seed-file="$dir/munge/munged.seed" \
  || fail "munged did not start"

host=$(hostname -s)
ctl_port=$(free_port) && d_port=$(free_port) || fail "no free port"
mem=$(awk '/MemTotal/ { printf "%d", $2 / 1024 / 2 }' /proc/meminfo)
cat > "$dir/slurm.conf" <<EOF
ClusterName=fleettest
SlurmctldHost=$host(127.0.0.1)
SlurmUser=root
SlurmdUser=root
SlurmctldPort=$ctl_port
SlurmdPort=$d_port
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket=$dir/munge/munge.sock
StateSaveLocation=$dir/state
SlurmdSpoolDir=$dir/spool
SlurmctldPidFile=$dir/slurmctld.pid
SlurmdPidFile=$dir/slurmd.pid
SlurmctldLogFile=$dir/log/slurmctld.log
SlurmdLogFile=$dir/log/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
SchedulerType=sched/builtin
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
SlurmdParameters=config_overrides
MpiDefault=none
ReturnToService=2
KillWait=30
InactiveLimit=0
NodeName=$host NodeAddr=127.0.0.1 CPUs=$cpus RealMemory=$mem State=UNKNOWN
PartitionName=test Nodes=ALL Default=YES MaxTime=INFINITE State=UP OverSubscribe=YES
EOF
export SLURM_CONF="$dir/slurm.conf"
slurmctld -f "$SLURM_CONF" || fail "slurmctld did not start"
slurmd -f "$SLURM_CONF" || fail "slurmd did not start"
for _ in $(seq 120); do
  state=$(sinfo -h -o %t 2>/dev/null | head -n 1)
  case "$state" in idle*) echo "SLURM_CONF=$SLURM_CONF"; exit 0 ;; esac
  sleep 0.5
done
fail "the node did not become idle within 60 s (state '${state:-none}')"
