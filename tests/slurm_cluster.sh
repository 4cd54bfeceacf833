#!/usr/bin/env bash
# A private, throwaway Slurm on this machine for tests: munged with its own key and socket, slurmctld and two
# slurmds from Debian's slurm-wlm (two nodes on this host, each with the CPUs of nproc and the machine's memory,
# so that multi-node jobs and node state changes can be tested), everything (config, state, spools, logs, pid
# files, a TMPDIR for jobs) under one directory, on ports nothing else listens on.
#
#   source tests/slurm_cluster.sh; slurm_cluster_up DIR; ...; slurm_cluster_down
#   tests/slurm_cluster.sh up DIR      # leaves it running and prints the SLURM_CONF to export
#   tests/slurm_cluster.sh down DIR
#
# slurm_cluster_up exports SLURM_CONF (the client commands read it) and returns once sinfo shows every node of
# SLURM_CLUSTER_NODES idle. When anything cannot start it prints the reason and the daemon's log
# tail and returns 1; it never skips. slurm_cluster_down cancels the cluster's jobs, stops the daemons by their
# pid files, kills any process still carrying the cluster's marker (its slurmstepds and job processes) and removes
# DIR. Both need root: slurmd starts job steps as the submitting user.
SLURM_CLUSTER_NODES=(tbnode1 tbnode2)

_slurm_cluster_fail() {  # _slurm_cluster_fail REASON [LOG...]: the reason, each log's tail, return 1
  local reason=$1 log; shift
  echo "slurm_cluster: cannot start Slurm: $reason" >&2
  for log in "$@"; do
    [[ -s $log ]] || continue
    echo "slurm_cluster: last lines of $log:" >&2
    tail -n 20 "$log" | sed 's/^/    /' >&2
  done
  return 1
}

_slurm_cluster_free_ports() {  # _slurm_cluster_free_ports N: N TCP ports nobody listens on, from a pid-derived base
  local n=$1 port listening=() local_address state
  while read -r _ local_address _ state _; do
    [[ $state == 0A ]] && listening+=($((16#${local_address##*:})))
  done < <(tail -q -n +2 /proc/net/tcp /proc/net/tcp6 2>/dev/null)
  port=$((20000 + ($$ * 7) % 30000))
  while [[ $n -gt 0 && $port -lt 65000 ]]; do
    if [[ " ${listening[*]} " != *" $port "* ]]; then echo "$port"; n=$((n - 1)); fi
    port=$((port + 1))
  done
}

_slurm_cluster_wait() {  # _slurm_cluster_wait SECONDS COMMAND...: true once COMMAND succeeds within SECONDS
  local deadline=$((SECONDS + $1)); shift
  until "$@" >/dev/null 2>&1; do
    [[ $SECONDS -lt $deadline ]] || return 1
    sleep 0.5
  done
}

_slurm_cluster_no_jobs() { [[ -z $(squeue -h 2>/dev/null) ]]; }
_slurm_cluster_nodes_idle() {
  [[ $(sinfo -h -N -n "$(IFS=,; echo "${SLURM_CLUSTER_NODES[*]}")" -o %T 2>/dev/null | grep -cx idle) -eq ${#SLURM_CLUSTER_NODES[@]} ]]
}

# slurm_cluster_common_conf DIR: the slurm.conf lines every private cluster shares (users, munge's socket, state,
# spools, TmpFS, pid and log files under DIR, plugins for a cluster without cgroups or accounting); the caller adds
# ClusterName, SlurmctldHost and the nodes and partition. DIR holds munge/, state/, spool/, tmp/, log/.
slurm_cluster_common_conf() {
  local dir=$1
  cat <<EOF
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket=$dir/munge/munge.socket
StateSaveLocation=$dir/state
SlurmdSpoolDir=$dir/spool/%n
TmpFS=$dir/tmp/%n
SlurmctldPidFile=$dir/slurmctld.pid
SlurmdPidFile=$dir/slurmd-%n.pid
SlurmctldLogFile=$dir/log/slurmctld.log
SlurmdLogFile=$dir/log/slurmd-%n.log
PlugStackConfig=$dir/plugstack.conf
MailProg=/bin/true
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
MpiDefault=none
SwitchType=switch/none
AccountingStorageType=accounting_storage/none
JobAcctGatherType=jobacct_gather/none
JobCompType=jobcomp/none
ReturnToService=2
KillWait=5
SlurmctldDebug=info
SlurmdDebug=info
EOF
}

slurm_cluster_up() {  # slurm_cluster_up DIR (created; must not exist or be empty)
  local dir=$1 cmd host mem_mb ports i node n_nodes=${#SLURM_CLUSTER_NODES[@]}
  for cmd in munged munge unmunge slurmctld slurmd sinfo scontrol sbatch squeue scancel; do
    command -v "$cmd" >/dev/null || { _slurm_cluster_fail "'$cmd' not found: install slurm-wlm and munge (launch/setup does)"; return 1; }
  done
  [[ $(id -u) -eq 0 ]] || { _slurm_cluster_fail "needs root (slurmd starts job steps as the submitting user); running as $(id -un)"; return 1; }
  mkdir -p "$dir" || { _slurm_cluster_fail "cannot create $dir"; return 1; }
  dir=$(cd "$dir" && pwd)
  [[ -z $(ls -A "$dir") ]] || { _slurm_cluster_fail "$dir is not empty"; return 1; }
  mkdir -p "$dir"/{munge,state,spool,log,tmp}
  # munged refuses a socket directory that others cannot traverse, and a key readable by others.
  chmod 711 "$dir" "$dir/munge"
  chmod 1777 "$dir/tmp"

  head -c 1024 /dev/urandom >"$dir/munge/munge.key" && chmod 400 "$dir/munge/munge.key"
  TB_SLURM_CLUSTER=$dir munged --key-file="$dir/munge/munge.key" --socket="$dir/munge/munge.socket" \
    --pid-file="$dir/munge/munged.pid" --log-file="$dir/log/munged.log" --seed-file="$dir/munge/munged.seed" \
    >>"$dir/log/munged.log" 2>&1 || { _slurm_cluster_fail "munged exited with $?" "$dir/log/munged.log"; return 1; }
  _slurm_cluster_wait 10 bash -c "munge -n -S '$dir/munge/munge.socket' | unmunge -S '$dir/munge/munge.socket'" ||
    { _slurm_cluster_fail "munge credentials do not round-trip through $dir/munge/munge.socket" "$dir/log/munged.log"; return 1; }

  host=$(hostname -s)
  mem_mb=$(awk '/^MemTotal:/ { print int($2 / 1024) }' /proc/meminfo)
  mapfile -t ports < <(_slurm_cluster_free_ports $((n_nodes + 1)))
  [[ ${#ports[@]} -eq $((n_nodes + 1)) ]] || { _slurm_cluster_fail "no free TCP ports found"; return 1; }
  : >"$dir/plugstack.conf"  # not the system's /etc/slurm/plugstack.conf
  cat >"$dir/slurm.conf" <<EOF
# Generated by tests/slurm_cluster.sh: a throwaway one-node cluster; everything lives in $dir.
ClusterName=trainbench-test
SlurmctldHost=$host(127.0.0.1)
SlurmctldPort=${ports[0]}
$(slurm_cluster_common_conf "$dir")
EOF
  # Several slurmds on one host (Debian builds Slurm with multiple-slurmd support): one port each.
  for i in "${!SLURM_CLUSTER_NODES[@]}"; do
    echo "NodeName=${SLURM_CLUSTER_NODES[i]} NodeHostname=$host NodeAddr=127.0.0.1 Port=${ports[i + 1]} CPUs=$(nproc) RealMemory=$mem_mb State=UNKNOWN"
  done >>"$dir/slurm.conf"
  echo "PartitionName=trainbench Nodes=$(IFS=,; echo "${SLURM_CLUSTER_NODES[*]}") Default=YES MaxTime=INFINITE State=UP" >>"$dir/slurm.conf"
  export SLURM_CONF=$dir/slurm.conf
  # The marker lets slurm_cluster_down find what the daemons started (slurmstepd inherits slurmd's environment).
  TB_SLURM_CLUSTER=$dir slurmctld -f "$SLURM_CONF" -c >>"$dir/log/slurmctld.out" 2>&1 ||
    { _slurm_cluster_fail "slurmctld exited with $?" "$dir/log/slurmctld.out" "$dir/log/slurmctld.log"; return 1; }
  _slurm_cluster_wait 30 scontrol ping ||
    { _slurm_cluster_fail "slurmctld does not answer 'scontrol ping' on port ${ports[0]}" "$dir/log/slurmctld.out" "$dir/log/slurmctld.log"; return 1; }
  for node in "${SLURM_CLUSTER_NODES[@]}"; do
    # Each node's own TmpFS: PMIx makes its per-step directories there, which would collide on one host.
    mkdir -p "$dir/spool/$node" "$dir/tmp/$node" && chmod 1777 "$dir/tmp/$node"
    TB_SLURM_CLUSTER=$dir slurmd -f "$SLURM_CONF" -N "$node" >>"$dir/log/slurmd-$node.out" 2>&1 ||
      { _slurm_cluster_fail "slurmd -N $node exited with $?" "$dir/log/slurmd-$node.out" "$dir/log/slurmd-$node.log"; return 1; }
  done
  _slurm_cluster_wait 60 _slurm_cluster_nodes_idle || {
    _slurm_cluster_fail "not every node is idle after 60 s: $(sinfo -h -N -o '%N %T %E' 2>&1 | paste -sd';')" \
      "$dir"/log/slurmd-*.out "$dir"/log/slurmd-*.log "$dir/log/slurmctld.log"
    return 1
  }
  echo "slurm_cluster: up in $dir (slurmctld port ${ports[0]}; nodes ${SLURM_CLUSTER_NODES[*]}, each $(nproc) CPUs, ${mem_mb} MB)" >&2
}

_slurm_cluster_marked_pids() {  # the processes started by the cluster in DIR: daemons, slurmstepds, job processes
  local dir=$1 env_file pid env
  for env_file in /proc/[0-9]*/environ; do
    pid=${env_file#/proc/}; pid=${pid%/environ}
    [[ $pid -ne $$ && $pid -ne $BASHPID ]] || continue
    env=$(tr '\0' '\n' 2>/dev/null <"$env_file") || continue
    if grep -qxF "TB_SLURM_CLUSTER=$dir" <<<"$env" ||
       { grep -qxF "SLURM_CONF=$dir/slurm.conf" <<<"$env" && grep -q '^SLURM_JOB_ID=' <<<"$env"; }; then
      echo "$pid"
    fi
  done
}

_slurm_cluster_stop_pidfile() {  # _slurm_cluster_stop_pidfile FILE: SIGTERM, up to 10 s, then SIGKILL
  local file=$1 pid
  [[ -s $file ]] || return 0
  pid=$(<"$file")
  [[ $pid =~ ^[0-9]+$ ]] || return 0
  kill "$pid" 2>/dev/null || return 0
  _slurm_cluster_wait 10 bash -c "! kill -0 $pid" || kill -9 "$pid" 2>/dev/null || true
}

slurm_cluster_down() {  # slurm_cluster_down [DIR] (default: the directory of $SLURM_CONF)
  local dir=${1:-${SLURM_CONF:+$(dirname "$SLURM_CONF")}} pids
  [[ -n $dir && -d $dir ]] || return 0
  dir=$(cd "$dir" && pwd)
  if [[ -f $dir/slurm.conf && -s $dir/slurmctld.pid ]]; then
    SLURM_CONF=$dir/slurm.conf scancel --full --quiet --user=root 2>/dev/null || true
    SLURM_CONF=$dir/slurm.conf _slurm_cluster_wait 15 _slurm_cluster_no_jobs || true
  fi
  local pidfile
  for pidfile in "$dir"/slurmd-*.pid; do _slurm_cluster_stop_pidfile "$pidfile"; done
  _slurm_cluster_stop_pidfile "$dir/slurmctld.pid"
  _slurm_cluster_stop_pidfile "$dir/munge/munged.pid"
  mapfile -t pids < <(_slurm_cluster_marked_pids "$dir")
  [[ ${#pids[@]} -eq 0 ]] || kill -9 "${pids[@]}" 2>/dev/null || true
  rm -rf "$dir"
}

if [[ ${BASH_SOURCE[0]} == "$0" ]]; then
  set -euo pipefail
  case ${1:-} in
    up) [[ $# -eq 2 ]] || { echo "usage: slurm_cluster.sh up|down DIR" >&2; exit 2; }
        slurm_cluster_up "$2" || { slurm_cluster_down "$2"; exit 1; }; echo "export SLURM_CONF=$SLURM_CONF" ;;
    down) [[ $# -eq 2 ]] || { echo "usage: slurm_cluster.sh up|down DIR" >&2; exit 2; }
          slurm_cluster_down "$2" ;;
    *) echo "usage: slurm_cluster.sh up|down DIR" >&2; exit 2 ;;
  esac
fi
