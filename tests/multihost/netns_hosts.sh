#!/usr/bin/env bash
# Test hosts on one machine: N Linux network namespaces joined by a bridge, each with its own hostname (a UTS
# namespace per process started in it) and address in 198.18.0.0/24 (RFC 2544's benchmark range), with Open MPI's
# own launcher (plm rsh, through an agent that enters the namespace) running one orted per host. Inside a host,
# ranks talk over shared memory (btl vader); between hosts over TCP on the bridge, whose links tc can shape.
#
#   netns_hosts.sh up SET N        bring up hosts node0..node(N-1) of SET (a short name, [a-z0-9]{1,6}); a set
#                                  of that name left by an earlier run is removed first
#   netns_hosts.sh down SET        remove every namespace of SET, killing what still runs in it
#   netns_hosts.sh mpirun SET ARG..  Open MPI's mpirun, started on node0, across the hosts of SET (hostfile with
#                                  `slots` per host from TB_NETNS_SLOTS, default 2); ARGs go to mpirun
#   netns_hosts.sh exec SET HOST CMD..  run CMD on HOST (its namespace and hostname)
#   netns_hosts.sh rate SET HOST MBIT|off   shape HOST's link in both directions to MBIT Mbit/s (tc tbf), or not
#   netns_hosts.sh link SET HOST down|up    cut or restore HOST's link
#   netns_hosts.sh agent HOST CMD..         the rsh agent mpirun calls (SET from TB_NETNS_SET)
#
# Namespaces are named tb<SET>-sw (the bridge) and tb<SET>-node<i>; the bridge lives in its own namespace, so
# nothing of a set is reachable from the machine's own network and two sets may use the same addresses. The kernel
# here has tbf but no netem: links get a rate, not an added latency (what latency they have is veth's own).
# Needs root, iproute2 and util-linux (nsenter, unshare).
set -euo pipefail

die() { echo "netns_hosts: $*" >&2; exit 2; }
[[ $# -ge 1 ]] || die "usage: netns_hosts.sh up|down|mpirun|exec|rate|link|agent ... (see the header)"
[[ $(id -u) -eq 0 ]] || die "needs root (network namespaces)"
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
self=$here/$(basename "${BASH_SOURCE[0]}")
state_root=/run/trainbench-netns

check_set() { [[ $1 =~ ^[a-z0-9]{1,6}$ ]] || die "set name '$1' must be 1-6 of [a-z0-9]"; }
ns_of() { echo "tb$1-$2"; }                # ns_of SET HOST
namespaces_of() { ip netns list | awk '{print $1}' | grep -E "^tb$1-(sw|node[0-9]+)$" || true; }
hosts_of() { [[ -f $state_root/$1/hosts ]] || die "set '$1' is not up"; cat "$state_root/$1/hosts"; }
check_host() {  # check_host SET HOST
  hosts_of "$1" | grep -cx >/dev/null "$2" || die "set '$1' has no host '$2' (hosts: $(hosts_of "$1" | tr '\n' ' '))"
}

# Runs "$@" in HOST's network namespace with HOST as hostname (a UTS namespace of its own). nsenter, not `ip netns
# exec`, which remounts /sys for the namespace and so hides the cgroup hierarchy (slurmd needs it).
in_host() {  # in_host SET HOST CMD..
  local set=$1 host=$2; shift 2
  exec nsenter --net="/run/netns/$(ns_of "$set" "$host")" unshare --uts -- sh -c 'hostname "$0" && exec "$@"' "$host" "$@"
}

down() {
  local set=$1 ns pid
  for ns in $(namespaces_of "$set"); do
    for pid in $(ip netns pids "$ns" 2>/dev/null); do kill -9 "$pid" 2>/dev/null || true; done
  done
  for ns in $(namespaces_of "$set"); do ip netns del "$ns" 2>/dev/null || true; done
  rm -rf "${state_root:?}/$set"
}

up() {
  local set=$1 n=$2 i sw host ns
  [[ $n =~ ^[1-9][0-9]?$ && $n -le 64 ]] || die "host count '$n' must be 1 to 64"
  down "$set"
  mkdir -p "$state_root/$set"
  sw=$(ns_of "$set" sw)
  ip netns add "$sw"
  ip -n "$sw" link set lo up
  ip -n "$sw" link add br0 type bridge
  ip -n "$sw" link set br0 up
  for ((i = 0; i < n; i++)); do
    host=node$i
    ns=$(ns_of "$set" "$host")
    ip netns add "$ns"
    ip -n "$ns" link set lo up
    # One veth per host: eth0 inside the host, port<i> on the bridge.
    ip link add "tb$set-p$i" netns "$sw" type veth peer name eth0 netns "$ns"
    ip -n "$sw" link set "tb$set-p$i" master br0 up
    ip -n "$ns" addr add "198.18.0.$((i + 1))/24" dev eth0
    ip -n "$ns" link set eth0 up
    echo "$host" >>"$state_root/$set/hosts"
  done
}

# tbf on both ends of HOST's veth: what HOST sends (eth0) and what the bridge sends it (its port).
rate() {
  local set=$1 host=$2 mbit=$3 i=${2#node} dev ns
  for end in host bridge; do
    if [[ $end == host ]]; then ns=$(ns_of "$set" "$host"); dev=eth0; else ns=$(ns_of "$set" sw); dev=tb$set-p$i; fi
    tc -n "$ns" qdisc del dev "$dev" root 2>/dev/null || true
    [[ $mbit == off ]] && continue
    # Burst: 10 ms of traffic and at least 64 KiB (tbf needs rate/HZ; a small bucket keeps TCP's few flows well
    # below the rate); queue up to 100 ms before dropping.
    local burst=$(( mbit * 1000000 / 8 / 100 ))
    (( burst >= 65536 )) || burst=65536
    tc -n "$ns" qdisc add dev "$dev" root tbf rate "${mbit}mbit" burst "$burst" latency 100ms
  done
}

cmd=$1; shift
case $cmd in
  up) [[ $# -eq 2 ]] || die "usage: up SET N"; check_set "$1"; up "$1" "$2" ;;
  down) [[ $# -eq 1 ]] || die "usage: down SET"; check_set "$1"; down "$1" ;;
  exec) [[ $# -ge 3 ]] || die "usage: exec SET HOST CMD.."; check_set "$1"; check_host "$1" "$2"; in_host "$@" ;;
  rate)
    [[ $# -eq 3 ]] || die "usage: rate SET HOST MBIT|off"; check_set "$1"; check_host "$1" "$2"
    [[ $3 == off || $3 =~ ^[1-9][0-9]{0,5}$ ]] || die "rate '$3' must be a whole number of Mbit/s (1 to 999999) or off"
    rate "$@" ;;
  link)
    [[ $# -eq 3 && $3 =~ ^(up|down)$ ]] || die "usage: link SET HOST down|up"; check_set "$1"; check_host "$1" "$2"
    ip -n "$(ns_of "$1" "$2")" link set eth0 "$3" ;;
  mpirun)
    [[ $# -ge 1 ]] || die "usage: mpirun SET ARGS.."; check_set "$1"
    set_name=$1; shift
    slots=${TB_NETNS_SLOTS:-2}
    [[ $slots =~ ^[1-9][0-9]*$ ]] || die "TB_NETNS_SLOTS '$slots' must be a positive integer"
    hostfile=$state_root/$set_name/hostfile
    hosts_of "$set_name" | sed "s/\$/ slots=$slots/" >"$hostfile"
    export TB_NETNS_SET=$set_name OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
    # Every orted is started from node0 (no tree spawn: the agent must run where TB_NETNS_SET is set); TCP and the
    # out-of-band channel stay on the bridge's subnet. Keepalive on the out-of-band channel (probes after 20 s idle,
    # 3 every 5 s) lets mpirun see a host whose link is cut within about 35 s instead of Open MPI's 8 minutes.
    in_host "$set_name" node0 mpirun --hostfile "$hostfile" --mca plm_rsh_agent "$self agent" \
      --mca plm_rsh_no_tree_spawn 1 --mca btl self,vader,tcp --mca btl_tcp_if_include 198.18.0.0/24 \
      --mca oob_tcp_if_include 198.18.0.0/24 --mca oob_tcp_keepalive_time 20 --mca oob_tcp_keepalive_intvl 5 \
      --mca oob_tcp_keepalive_probes 3 --bind-to none "$@" ;;
  agent)
    # Open MPI calls: agent [options] HOST COMMAND-LINE (one string, as for rsh).
    while [[ $# -gt 0 && $1 == -* ]]; do shift; done
    [[ $# -ge 2 && -n ${TB_NETNS_SET:-} ]] || die "agent: usage: agent HOST CMD (with TB_NETNS_SET set)"
    host=$1; shift
    exec nsenter --net="/run/netns/$(ns_of "$TB_NETNS_SET" "$host")" unshare --uts -- sh -c "hostname $host && $*" ;;
  *) die "unknown command '$cmd' (up, down, mpirun, exec, rate, link, agent)" ;;
esac
