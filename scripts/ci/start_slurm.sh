#!/usr/bin/env bash
# A one-node SLURM cluster on this machine, for the tests that run scripts/slurm/train.sbatch
# under a real slurmctld/slurmd (tests/integration/test_slurm.py).  Needs root.
#
#   bash scripts/ci/start_slurm.sh          # install (Debian) if missing, start, wait until idle
#   bash scripts/ci/start_slurm.sh stop     # stop the daemons it started (by their pid files)
#   bash scripts/ci/start_slurm.sh status   # exit 0 when the node answers idle/mixed/allocated
#
# Everything it writes is under FSA_SLURM_STATE (default /tmp/fsa-slurm): slurm.conf, the
# munge socket, pid files, logs, slurmctld's state and slurmd's spool.  Clients find the
# cluster with SLURM_CONF=$FSA_SLURM_STATE/slurm.conf (printed at the end).
# The node: "localhost", 2 CPUs (FSA_SLURM_CPUS), no cgroups (proctrack/linuxproc,
# task/none), SlurmUser=root, munged --force; ports FSA_SLURM_PORT (slurmctld, default 6817)
# and the next one (slurmd).  Start waits at most FSA_SLURM_WAIT_S (default 60) seconds.
set -euo pipefail

STATE=${FSA_SLURM_STATE:-/tmp/fsa-slurm}
CPUS=${FSA_SLURM_CPUS:-2}
PORT=${FSA_SLURM_PORT:-6817}
WAIT_S=${FSA_SLURM_WAIT_S:-60}
CONF=$STATE/slurm.conf
export SLURM_CONF=$CONF

say() { echo "[start_slurm] $*"; }
die() { echo "[start_slurm] error: $*" >&2; exit 1; }

# the pid in FILE if that process runs, else nothing
running_pid() {
  local pid
  [ -s "$1" ] || return 1
  pid=$(cat "$1" 2>/dev/null) || return 1
  [[ "$pid" =~ ^[0-9]+$ ]] && kill -0 "$pid" 2>/dev/null && echo "$pid"
}

node_ready() {
  local state
  state=$(timeout 10 sinfo -h -N -n localhost -o %t 2>/dev/null | head -1) || return 1
  [[ "$state" =~ ^(idle|mix|alloc) ]]
}

stop() {
  if [ -f "$CONF" ] && running_pid "$STATE/slurmctld.pid" >/dev/null; then
    timeout 10 scancel --quiet --user "$(id -un)" 2>/dev/null || true  # this cluster's jobs only
  fi
  local name pid i
  for name in slurmd slurmctld munged; do
    pid=$(running_pid "$STATE/$name.pid") || { rm -f "$STATE/$name.pid"; continue; }
    kill -TERM "$pid" 2>/dev/null || true
    for ((i = 0; i < 50; i++)); do kill -0 "$pid" 2>/dev/null || break; sleep 0.2; done
    if kill -0 "$pid" 2>/dev/null; then
      kill -KILL "$pid" 2>/dev/null || true
      say "$name (pid $pid) did not stop in 10 s: killed"
    else
      say "stopped $name (pid $pid)"
    fi
    rm -f "$STATE/$name.pid"
  done
}

install_packages() {
  local missing=()
  command -v munged >/dev/null 2>&1 || missing+=(munge)
  command -v slurmctld >/dev/null 2>&1 || missing+=(slurmctld)
  command -v slurmd >/dev/null 2>&1 || missing+=(slurmd)
  command -v sbatch >/dev/null 2>&1 || missing+=(slurm-client)
  [ ${#missing[@]} -eq 0 ] && return 0
  command -v apt-get >/dev/null 2>&1 || die "no apt-get to install ${missing[*]}"
  say "installing ${missing[*]} (Debian packages)"
  export DEBIAN_FRONTEND=noninteractive
  timeout 300 apt-get update -qq || die "apt-get update failed"
  timeout 600 apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null \
    || die "apt-get install ${missing[*]} failed"
}

write_config() {
  mkdir -p "$STATE/ctld" "$STATE/spool" "$STATE/munge"
  chmod 700 "$STATE/munge"
  local key=/etc/munge/munge.key
  if [ ! -s "$key" ]; then
    key=$STATE/munge/munge.key
    [ -s "$key" ] || { dd if=/dev/urandom of="$key" bs=1 count=1024 status=none; chmod 600 "$key"; }
  fi
  echo "$key" > "$STATE/munge/key_path"
  cat > "$CONF" <<EOF
# written by scripts/ci/start_slurm.sh: one node, no cgroups
ClusterName=fsa-ci
SlurmctldHost=$(hostname -s)(127.0.0.1)
SlurmctldPort=$PORT
SlurmdPort=$((PORT + 1))
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket=$STATE/munge/munge.socket
StateSaveLocation=$STATE/ctld
SlurmdSpoolDir=$STATE/spool
SlurmctldPidFile=$STATE/slurmctld.pid
SlurmdPidFile=$STATE/slurmd.pid
SlurmctldLogFile=$STATE/slurmctld.log
SlurmdLogFile=$STATE/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
MpiDefault=none
SchedulerType=sched/builtin
# a job that waits for the node starts within a second or two of it becoming free
# (default: the next pass of the scheduling loop, up to 60 s later)
SchedulerParameters=sched_interval=1,sched_min_interval=100000
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
ReturnToService=2
KillWait=10
MinJobAge=600
SlurmdTimeout=60
InactiveLimit=0
NodeName=localhost NodeAddr=127.0.0.1 CPUs=$CPUS State=UNKNOWN
PartitionName=ci Nodes=localhost Default=YES MaxTime=INFINITE State=UP OverSubscribe=NO
EOF
}

start() {
  [ "$(id -u)" = "0" ] || die "needs root (SlurmUser=root, munged --force)"
  if running_pid "$STATE/slurmctld.pid" >/dev/null && running_pid "$STATE/slurmd.pid" >/dev/null && node_ready; then
    say "already running (SLURM_CONF=$CONF)"
    return 0
  fi
  stop >/dev/null
  install_packages
  write_config
  munged --force --socket="$STATE/munge/munge.socket" --pid-file="$STATE/munged.pid" \
    --log-file="$STATE/munged.log" --seed-file="$STATE/munge/munged.seed" \
    --key-file="$(cat "$STATE/munge/key_path")" || die "munged did not start (see $STATE/munged.log)"
  slurmctld -c -f "$CONF" || die "slurmctld did not start (see $STATE/slurmctld.log)"
  slurmd -f "$CONF" -N localhost || die "slurmd did not start (see $STATE/slurmd.log)"
  local deadline=$((SECONDS + WAIT_S))
  until node_ready; do
    if ((SECONDS >= deadline)); then
      tail -5 "$STATE/slurmctld.log" "$STATE/slurmd.log" >&2 || true
      stop >/dev/null
      die "the node did not become idle in ${WAIT_S}s"
    fi
    sleep 0.5
  done
  say "node localhost idle, $CPUS CPUs (SLURM_CONF=$CONF)"
}

case "${1:-start}" in
  start) start ;;
  stop) stop ;;
  status) [ -f "$CONF" ] && node_ready ;;
  *) die "usage: $0 [start|stop|status]" ;;
esac
