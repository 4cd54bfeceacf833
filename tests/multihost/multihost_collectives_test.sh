#!/usr/bin/env bash
# Multi-host measurement on test hosts (netns_hosts.sh: network namespaces with their own hostnames, ranks launched
# by Open MPI's rsh launcher across them): topology shows each host as its own node, `collectives --split` measures
# inside and across hosts with the per-NIC rate, tc shapes a host's link, and p2p flags a slow host's pairs within
# the inter-node class; moe_alltoall reports the share of its rows that crosses hosts. Everything the test creates
# is removed at the end, also when it fails.
#
#   multihost_collectives_test.sh TRAINBENCH     (TB_KEEP_WORK=1 keeps its reports: multihost_lib.sh)
set_name=mhc
source "$(dirname "${BASH_SOURCE[0]}")/multihost_lib.sh"
multihost_up 4

# --- two hosts, two ranks each: topology and the three splits ----------------------------------------------------
expect_ok "${on2[@]}" -np 4 "$tb" collectives -b 256K -e 256K --modes out-of-place -n 3 -w 1 -o "$work/all.h5"
check_py "2x2 topology hosts" "$work/all.h5" \
  "[h.decode() for h in f['topology/ranks']['host']] == ['node0', 'node0', 'node1', 'node1']" \
  "list(f['topology/ranks']['host'])"
check_py "2x2 topology nodes and local ranks" "$work/all.h5" \
  "list(f['topology/ranks']['node']) == [0, 0, 1, 1] and list(f['topology/ranks']['local_rank']) == [0, 1, 0, 1]"
check_py "split all: one communicator of 4 ranks on 2 nodes" "$work/all.h5" \
  "f['collectives/all_reduce'].attrs['split'] == 'all' and f['collectives/all_reduce'].attrs['n_ranks'] == 4 and f['collectives/all_reduce'].attrs['nodes'] == 2"
check_py "split all: per-NIC rate = busbw x (k-1)/(n-1)" "$work/all.h5" \
  "abs(f['collectives/all_reduce/results']['out_of_place_nic_busbw_GBps'][0] - f['collectives/all_reduce/results']['out_of_place_busbw_GBps'][0] / 3) < 1e-9"
grep -q "Per-NIC rate" "$work/out" || fail "split all: no per-NIC line in the output: $(tail -5 "$work/out")"

# moe_alltoall over the two hosts: about half of the rows cross to the other host, and their rate is reported.
expect_ok "${on2[@]}" -np 4 "$tb" collectives --ops moe_alltoall --moe-tokens 64 --moe-hidden 256 -n 2 -w 1 \
  -o "$work/moe.h5"
check_py "moe_alltoall across 2 hosts: verified, nodes, the share that crosses and its rate" "$work/moe.h5" \
  "f['moe_alltoall'].attrs['nodes'] == 2 and f['moe_alltoall/results']['dispatch_wrong'][0] == 0 and f['moe_alltoall/results']['combine_wrong'][0] == 0 and 0.3 < f['moe_alltoall/results']['inter_node_fraction'][0] < 0.7 and f['moe_alltoall/results']['dispatch_inter_node_GBps'][0] > 0" \
  "dict(f['moe_alltoall'].attrs), f['moe_alltoall/results'][()]"

# node1's link at 20 Mbit/s (2.5 MB/s) both ways: what crosses it cannot go faster, and the ranks inside a host
# (shared memory) do not cross it.
"$hosts" rate "$set_name" node1 20
for split in intra inter; do
  expect_ok "${on2[@]}" -np 4 "$tb" collectives -b 256K -e 256K --modes out-of-place -n 3 -w 1 --split "$split" -o "$work/$split.h5"
  check_py "split $split attribute" "$work/$split.h5" "f['collectives/all_reduce'].attrs['split'] == '$split'"
  check_py "split $split: 2 communicators of 2 ranks" "$work/$split.h5" \
    "f['collectives/all_reduce'].attrs['communicators'] == 2 and f['collectives/all_reduce'].attrs['n_ranks'] == 2"
  check_py "split $split: verified" "$work/$split.h5" "f['collectives/all_reduce/results']['out_of_place_wrong'][0] == 0"
done
grep -q "2 communicators of 2 ranks at once (--split inter)" "$work/out" || fail "split inter header: $(grep '^# all_reduce' "$work/out")"
# Two inter-node all-reduces of 256 KiB share node1's 2.5 MB/s: each rank sends its 256 KiB over it, so busbw
# (= S/t for 2 ranks) is at most 1.25 MB/s; allow twice that for tbf's burst.
check_py "split inter: bounded by the shaped link" "$work/inter.h5" \
  "f['collectives/all_reduce/results']['out_of_place_busbw_GBps'][0] <= 2.5e-3" \
  "f['collectives/all_reduce/results']['out_of_place_busbw_GBps'][0]"
check_py "split inter: per-NIC rate = busbw for one rank per node" "$work/inter.h5" \
  "abs(f['collectives/all_reduce/results']['out_of_place_nic_busbw_GBps'][0] - f['collectives/all_reduce/results']['out_of_place_busbw_GBps'][0]) < 1e-12"
check_py "split intra: no per-NIC rate inside a node" "$work/intra.h5" \
  "math.isnan(f['collectives/all_reduce/results']['out_of_place_nic_busbw_GBps'][0])"
intra=$(py "$work/intra.h5" "f['collectives/all_reduce/results']['out_of_place_busbw_GBps'][0]")
inter=$(py "$work/inter.h5" "f['collectives/all_reduce/results']['out_of_place_busbw_GBps'][0]")
checks=$((checks + 1))
/usr/bin/python3 -c "import sys; sys.exit(0 if float('$intra') > 2 * float('$inter') else 1)" ||
  fail "intra-node busbw $intra GB/s is not well above the shaped inter-node $inter GB/s"
"$hosts" rate "$set_name" node1 off

# A split that makes no sense for the layout is bad input, before any measurement.
expect_error 2 "split inter needs ranks on at least 2 nodes" -- "${on2[@]}" -np 2 "$tb" collectives --split inter
expect_error 2 "split intra needs at least 2 ranks per node" -- "${on1[@]}" -np 2 "$tb" collectives --split intra

# --- four hosts, one rank each, node3's link slow: p2p flags exactly node3's pairs, as inter-node links ------------
# Six of the twelve pairs are slow, so the median is the mean of the slowest fast pair and the fastest slow one:
# should one fast pair measure below a slow one (ranks descheduled on a busy machine), the median would be a slow
# pair's rate and the others would pass. At 2 Mbit/s a 128 KiB message takes 0.5 s; a fast pair measuring that
# slowly would need its ranks off the cores for half a second per message (at 20 Mbit/s and 256 KiB, 0.1 s was not
# enough on two busy cores: one pair of six was flagged).
"$hosts" rate "$set_name" node3 2
expect_ok "${on1[@]}" -np 4 "$tb" p2p --size 128K -n 2 -w 1 --latency-iters 5 -o "$work/p2p.h5"
check_py "p2p: 4 nodes" "$work/p2p.h5" "f['p2p'].attrs['nodes'] == 4"
check_py "p2p: node3's six pairs flagged, nothing else" "$work/p2p.h5" \
  "sorted((int(s), int(d)) for s, d in zip(f['p2p/flagged']['src_rank'], f['p2p/flagged']['dst_rank'])) == [(0, 3), (1, 3), (2, 3), (3, 0), (3, 1), (3, 2)]" \
  "list(zip(f['p2p/flagged']['src_rank'], f['p2p/flagged']['dst_rank']))"
check_py "p2p: flagged as inter-node links" "$work/p2p.h5" "set(l.decode() for l in f['p2p/flagged']['link']) == {'inter'}"
check_py "p2p: no intra-node pairs on one rank per node" "$work/p2p.h5" "math.isnan(f['p2p'].attrs['median_uni_intra_GBps'])"
grep -q "x median of the inter-node pairs" "$work/out" || fail "p2p weak-link line: $(grep 'weak link' "$work/out" | head -2)"
"$hosts" rate "$set_name" node3 off

multihost_finish multihost_collectives_test
