#!/usr/bin/env bash
# Training across test hosts (netns_hosts.sh): `train --scaling` by layout (1x2,2x2) and by node count, each point
# recording its nodes and ranks per node; across hosts the gradient all-reduce is hierarchical and its time splits
# into the steps inside and across nodes, and a host's link shaped far below what the gradients need makes the
# inter-node part at least what that link can carry. Everything the test creates is removed at the end.
#
#   multihost_train_test.sh TRAINBENCH     (TB_KEEP_WORK=1 keeps the reports in the scratch directory)
set -uo pipefail
tb=$(realpath "$1")
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
hosts=$here/netns_hosts.sh
work=$(mktemp -d)
set_name=mht
source "$here/../cli_lib.sh"

if [[ $(id -u) -ne 0 ]]; then echo "FAIL: multihost tests need root (network namespaces)"; exit 1; fi
cleanup() { "$hosts" down "$set_name"; [[ -n ${TB_KEEP_WORK:-} ]] || rm -rf "$work"; }
trap cleanup EXIT
"$hosts" up "$set_name" 3 || { echo "FAIL: cannot bring up the test hosts"; exit 1; }
chmod 755 "$work"

py() { /usr/bin/python3 -c "import sys, h5py, math; f = h5py.File(sys.argv[1], 'r'); print($2)" "$1"; }
check_py() {  # check_py WHAT FILE 'python condition over f' [DETAIL]
  checks=$((checks + 1))
  [[ $(py "$2" "bool($3)" 2>&1) == True ]] || fail "$1: not $3 in $2 ($(py "$2" "${4:-''}" 2>&1))"
}
on2=(env TB_NETNS_SLOTS=2 "$hosts" mpirun "$set_name")
small=(--model tiny --seq 32 --micro-batch 2 --steps 3 --warmup-steps 1 --quiet)

# node1's link at 50 Mbit/s (6.25 MB/s) both ways. The tiny model all-reduces S = 3.8 MB of fp32 gradients per
# step; hierarchically each of node1's two ranks sends its S/2 shard across (a 2-rank all-reduce sends all of it),
# so node1 sends S per step: at least 0.6 s at that rate.
"$hosts" rate "$set_name" node1 50
expect_ok "${on2[@]}" -np 4 "$tb" train "${small[@]}" --scaling 1x2,2x2 -o "$work/layout.h5"
a='f["train/k2"].attrs'; b='f["train/k4"].attrs'
check_py "1x2 on one node, flat" "$work/layout.h5" "$a['nodes'] == 1 and $a['ranks_per_node'] == 2 and $a['allreduce'] == 'flat'"
check_py "1x2: nothing to tell apart" "$work/layout.h5" "math.isnan($a['comm_inter_s']) and math.isnan($a['comm_intra_s'])"
check_py "2x2 on two nodes, hierarchical" "$work/layout.h5" \
  "$b['nodes'] == 2 and $b['ranks_per_node'] == 2 and $b['allreduce'] == 'hierarchical'"
check_py "2x2: the shaped link bounds the inter-node time from below" "$work/layout.h5" \
  "$b['comm_inter_s'] >= 0.5 * $b['gradient_bytes'] / 6.25e6" "$b['comm_inter_s'], $b['gradient_bytes']"
check_py "2x2: most of the time is across nodes" "$work/layout.h5" "$b['comm_inter_s'] > $b['comm_intra_s']" \
  "$b['comm_intra_s'], $b['comm_inter_s']"
check_py "2x2: every step's parts add up to its comm_total" "$work/layout.h5" \
  "all(abs(i + e - t) <= 1e-9 * max(t, 1e-9) for i, e, t in zip(f['train/k4/steps']['comm_intra_s'], f['train/k4/steps']['comm_inter_s'], f['train/k4/steps']['comm_total_s']))"
check_py "2x2: each rank's host" "$work/layout.h5" \
  "[h.decode() for h in f['train/k4/stall_budget']['host']] == ['node0', 'node0', 'node1', 'node1']" \
  "list(f['train/k4/stall_budget']['host'])"
"$hosts" rate "$set_name" node1 off

# --scaling nodes: every rank of 1, 2 and 3 hosts; --allreduce flat keeps MPI's own algorithm.
expect_ok "${on2[@]}" -np 6 "$tb" train "${small[@]}" --scaling nodes --allreduce flat -o "$work/nodes.h5"
check_py "--scaling nodes: points of 1, 2 and 3 nodes" "$work/nodes.h5" \
  "sorted(k for k in f['train'].keys() if k.startswith('k')) == ['k2', 'k4', 'k6'] and [f['train/k%d' % k].attrs['nodes'] for k in (2, 4, 6)] == [1, 2, 3]" \
  "list(f['train'].keys())"
check_py "--allreduce flat: not told apart" "$work/nodes.h5" \
  "f['train/k6'].attrs['allreduce'] == 'flat' and math.isnan(f['train/k6'].attrs['comm_inter_s'])"
expect_ok "$tb" report "$work/nodes.h5"

# Layouts the launch does not have, and a hierarchical all-reduce over uneven nodes: one line, exit 2.
expect_error 2 "layout 4x1 needs 4 nodes; this launch has 3" -- "${on2[@]}" -np 6 "$tb" train "${small[@]}" --scaling 4x1
expect_error 2 "needs 3 ranks on node 0, which has 2" -- "${on2[@]}" -np 6 "$tb" train "${small[@]}" --scaling 1x3
expect_error 2 "hierarchical needs the same number of ranks on every node" -- \
  "${on2[@]}" -np 6 "$tb" train "${small[@]}" --scaling 3 --allreduce hierarchical

trap - EXIT
cleanup
checks=$((checks + 1))
left=$(ip netns list | awk '{print $1}' | grep -E "^tb$set_name-" || true)
[[ -z $left ]] || fail "namespaces left behind: $left"
finish multihost_train_test
