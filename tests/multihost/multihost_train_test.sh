#!/usr/bin/env bash
# Training across test hosts (netns_hosts.sh): `train --scaling` by layout (1x2,2x2) and by node count, each point
# recording its nodes and ranks per node; across hosts the gradient all-reduce is hierarchical and its time splits
# into the steps inside and across nodes, and a host's link shaped far below what the gradients need makes the
# inter-node part at least what that link can carry; pipeline stages on different hosts send only their boundary's
# activations across; expert parallel across hosts sends its all-to-alls over the link between them; cost's projection
# checks itself on a held-out 4-host point.
# Everything the test creates is removed at the end.
#
#   multihost_train_test.sh TRAINBENCH     (TB_KEEP_WORK=1 keeps its reports: multihost_lib.sh)
set_name=mht
source "$(dirname "${BASH_SOURCE[0]}")/multihost_lib.sh"
multihost_up 4

small=(--model tiny --seq 32 --micro-batch 2 --steps 3 --warmup-steps 1 --quiet)

# node1's link at 20 Mbit/s (2.5 MB/s) both ways. The tiny model all-reduces S = 3.8 MB of fp32 gradients per
# step; hierarchically each of node1's two ranks sends its S/2 shard across (a 2-rank all-reduce sends all of it),
# so node1 sends S per step: at least 1.5 s at that rate, far above what shared memory takes on a busy machine.
"$hosts" rate "$set_name" node1 20
expect_ok "${on2[@]}" -np 4 "$tb" train "${small[@]}" --scaling 1x2,2x2 --link-probe 64KiB -o "$work/layout.h5"
a='f["train/k2"].attrs'; b='f["train/k4"].attrs'
check_py "1x2 on one node, flat" "$work/layout.h5" "$a['nodes'] == 1 and $a['ranks_per_node'] == 2 and $a['allreduce'] == 'flat'"
check_py "1x2: nothing to tell apart" "$work/layout.h5" "math.isnan($a['comm_inter_s']) and math.isnan($a['comm_intra_s'])"
check_py "2x2 on two nodes, hierarchical" "$work/layout.h5" \
  "$b['nodes'] == 2 and $b['ranks_per_node'] == 2 and $b['allreduce'] == 'hierarchical'"
check_py "2x2: the shaped link bounds the inter-node time from below" "$work/layout.h5" \
  "$b['comm_inter_s'] >= 0.5 * $b['gradient_bytes'] / 2.5e6" "$b['comm_inter_s'], $b['gradient_bytes']"
check_py "2x2: most of the time is across nodes" "$work/layout.h5" "$b['comm_inter_s'] > $b['comm_intra_s']" \
  "$b['comm_intra_s'], $b['comm_inter_s']"
check_py "2x2: every step's parts add up to its comm_total" "$work/layout.h5" \
  "all(abs(i + e - t) <= 1e-9 * max(t, 1e-9) for i, e, t in zip(f['train/k4/steps']['comm_intra_s'], f['train/k4/steps']['comm_inter_s'], f['train/k4/steps']['comm_total_s']))"
check_py "2x2: each rank's host" "$work/layout.h5" \
  "[h.decode() for h in f['train/k4/stall_budget']['host']] == ['node0', 'node0', 'node1', 'node1']" \
  "list(f['train/k4/stall_budget']['host'])"
check_py "2 nodes: the link probe ran and names no host (one link, two ends)" "$work/layout.h5" \
  "f['train'].attrs['link_probe_nodes'] == 2 and f['train'].attrs['link_probe_slow_hosts'] == '' and len(f['train/link_pairs']) == 2 and len(f['train/link_hosts']) == 0 and 'cannot be told apart' in f['train'].attrs['link_probe_verdict']" \
  "dict(f['train'].attrs)"
"$hosts" rate "$set_name" node1 off

# "1 node x 4" against "2 nodes x 2", both measured: the same 4 ranks all on node0 (1x4), and layout.h5's 2x2. cost
# prices each run in the layout it ran (1 node, 2 nodes rented whole) and says both figures are measured; a
# projection of the 1x4 run to 2x2 is marked projected.
expect_ok env TB_NETNS_SLOTS=4 "$hosts" mpirun "$set_name" -np 4 "$tb" train "${small[@]}" -o "$work/one.h5"
# (The example price file without its fabrics: the runs as measured, and --project with the fitted links; projection
# onto fabrics is cost_cli_test's and projection_error.sh's.)
grep -v '^fabric = ' "$multihost_dir/../../launch/prices.example.toml" >"$work/prices.toml"
expect_ok "$tb" cost "$work/one.h5" "$work/layout.h5" --prices "$work/prices.toml" \
  --train-tokens 1e9 --device-as "H100 SXM" --format json
checks=$((checks + 1))
python3 - "$work/out" <<'EOF2' || fail "cost of 1x4 against 2x2: $(head -c 800 "$work/out")"
import json, sys
runs = json.load(open(sys.argv[1]))["runs"]
rows = {(r["file"].rsplit("/", 1)[-1], row["config"], row["projected"], row["nodes"]) for r in runs for row in r["cost"].get("rows", [])}
assert {c for c in rows if c[0] == "one.h5"} == {("one.h5", "k4 1x4", 0, 1)}, rows
assert {c for c in rows if c[0] == "layout.h5"} == {("layout.h5", "k4 2x2", 0, 2)}, rows
EOF2
expect_ok "$tb" cost "$work/one.h5" --project 2x2 --inter-node-gbps 0.1 --prices "$work/prices.toml" \
  --train-tokens 1e9 --device-as "H100 SXM"
checks=$((checks + 1))
grep -qE "^ +\S+one.h5 +2x2 +projected .* 4 +2 " "$work/out" && grep -qE "^ +\S+one.h5 +k4 1x4 +measured .* 4 +1 " "$work/out" ||
  fail "cost's rows do not say measured 1x4 on 1 node and projected 2x2 on 2: $(grep one.h5 "$work/out" | head -4)"

# A slow host named: node2's link at 10 Mbit/s, the others' unshaped (the bridge carries GB/s). The probe runs over
# the whole launch before the points (one point of one rank here, so that it is all the test waits for): every
# pair with node2 moves 128 KiB each way at most 1.25 MB/s. The other pairs run beside one of node2's, whose ranks
# poll on the 2 cores the others need (at 20 Mbit/s idle, the slowest of them still ran about 3.5 times faster than
# node2's pairs); at 10 Mbit/s the margin over the 80% threshold is wider still.
"$hosts" rate "$set_name" node2 10
expect_ok "${on1[@]}" -np 4 "$tb" train "${small[@]}" --scaling 1 --link-probe 128KiB -o "$work/slow.h5"
checks=$((checks + 1))
grep -q "^# link probe: straggler host node2: its link runs below 80% of the other pairs' rate" "$work/out" ||
  fail "train's verdict does not name node2: $(grep 'link probe' "$work/out")"
check_py "slow link: the report names node2" "$work/slow.h5" \
  "f['train'].attrs['link_probe_slow_hosts'] == 'node2' and len(f['train/link_pairs']) == 6" "dict(f['train'].attrs)"
check_py "slow link: node2 slow, no other host" "$work/slow.h5" \
  "[(h.decode(), s) for h, s in zip(f['train/link_hosts']['host'], f['train/link_hosts']['slow'])] == [('node0', 0), ('node1', 0), ('node2', 1), ('node3', 0)]" \
  "f['train/link_hosts'][:]"
checks=$((checks + 1))
"$tb" validate "$work/slow.h5" >"$work/out" 2>"$work/err"; rc=$?
[[ $rc -eq 3 ]] && with_notes "$work/out" | grep -c >/dev/null "fail .*train.link.node2.l0 .*straggler host node2 (slow link)" ||
  fail "validate of the slow link: exit $rc, want 3 with node2's check failed: $(grep -i link "$work/out")"
"$hosts" rate "$set_name" node2 off

# --scaling nodes: every rank of 1, 2 and 3 hosts; --allreduce flat keeps MPI's own algorithm.
expect_ok "${on2[@]}" -np 6 "$tb" train "${small[@]}" --scaling nodes --allreduce flat -o "$work/nodes.h5"
check_py "--scaling nodes: points of 1, 2 and 3 nodes" "$work/nodes.h5" \
  "sorted(k for k in f['train'].keys() if k.startswith('k')) == ['k2', 'k4', 'k6'] and [f['train/k%d' % k].attrs['nodes'] for k in (2, 4, 6)] == [1, 2, 3]" \
  "list(f['train'].keys())"
check_py "--allreduce flat: not told apart" "$work/nodes.h5" \
  "f['train/k6'].attrs['allreduce'] == 'flat' and math.isnan(f['train/k6'].attrs['comm_inter_s'])"
expect_ok "$tb" report "$work/nodes.h5"

# The projection's held-out check on hosts: 1x2, 2x2 and 4x2 in one launch; cost fits alpha-beta without the 4-host
# point and predicts it (its error is a measurement: tests/perf/projection_multihost.sh; here only that it is made).
expect_ok "${on2[@]}" -np 8 "$tb" train "${small[@]}" --scaling 1x2,2x2,4x2 -o "$work/four.h5"
expect_ok "$tb" cost "$work/four.h5" --project 16 --format json
checks=$((checks + 1))
python3 - "$work/out" <<'EOF' || fail "cost's held-out check of the 4-host point: $(head -c 600 "$work/out")"
import json, math, sys
run = json.load(open(sys.argv[1]))["runs"][0]["cost"]["run"]
assert run["held_out_layout"] == "4x2" and run["held_out_k"] == 8, run
assert math.isfinite(run["held_out_relative_error"]) and run["held_out_measured_step_s"] > 0, run
EOF

# Pipeline stages across hosts: 2 stages on 2 nodes of 2 ranks (stage s on ranks [2s, 2s+2), so each on one node):
# only the stage boundary's activations and gradients cross node1's link, at 20 Mbit/s (2.5 MB/s): each of node1's
# two ranks exchanges 4 micro-batches x 2 x 32 x 128 fp32 (131 kB) each way per step, so its pipeline exchanges take
# at least 2 x 131 kB / 2.5 MB/s = 0.1 s per step; the data parallel all-reduce of each stage stays on its node.
"$hosts" rate "$set_name" node1 20
expect_ok "${on2[@]}" -np 4 "$tb" train "${small[@]}" --pipeline-parallel 2 --micro-batches 4 --link-probe 0 \
  -o "$work/pipeline.h5"
p='f["train/k4"]'
check_py "pipeline: the stage boundary crosses nodes" "$work/pipeline.h5" \
  "[l.decode() for l in $p['stages']['next_stage_link']] == ['inter-node', '']" "$p['stages'][()]"
check_py "pipeline: the bytes sent between stages are the theory's" "$work/pipeline.h5" \
  "$p.attrs['traffic_pipeline_bytes'] == $p.attrs['traffic_pipeline_bytes_theory'] == 4 * 2 * 32 * 128 * 4" \
  "dict($p.attrs)"
check_py "pipeline: the shaped link bounds the exchanges from below" "$work/pipeline.h5" \
  "$p.attrs['comm_pipeline_s'] >= 0.5 * 2 * $p.attrs['traffic_pipeline_bytes'] / 2.5e6" "$p.attrs['comm_pipeline_s']"
check_py "pipeline: each stage's gradients stay on its node (all-reduced flat inside it)" "$work/pipeline.h5" \
  "[h.decode() for h in $p['stall_budget']['host']] == ['node0', 'node0', 'node1', 'node1'] and $p.attrs['allreduce'] == 'flat'" \
  "list($p['stall_budget']['host']), $p.attrs['allreduce']"
"$hosts" rate "$set_name" node1 off

# Expert parallel across hosts: moe-tiny's 4 experts over 2 nodes of 2 ranks (--allow-cross-node-ep; without it the
# groups must stay inside a node and are refused). Each rank sends 2 of its 3 peers' rows across node1's link at
# 20 Mbit/s (2.5 MB/s): of the 4 all-to-alls x 2 blocks x 64 tokens x top-2 x 128 x 4 B x 3/4 = 393 kB a rank sends
# per step when routing is balanced, 2/3 cross; node1's two ranks share its link, so their all-to-alls take at least
# 2 x 0.26 MB / 2.5 MB/s = 0.2 s per step (half of that asked, as above).
"$hosts" rate "$set_name" node1 20
moe=(--model moe-tiny --seq 32 --micro-batch 2 --steps 3 --warmup-steps 1 --quiet --link-probe 0)
expect_error 2 "of one expert parallel group of the 4-rank point are on different nodes|--expert-parallel 4 does not divide the ranks of each node" -- \
  "${on2[@]}" -np 4 "$tb" train "${moe[@]}" --expert-parallel 4 -o "$work/refused.h5"
expect_ok "${on2[@]}" -np 4 "$tb" train "${moe[@]}" --expert-parallel 4 --allow-cross-node-ep -o "$work/experts.h5"
check_py "experts: the all-to-all crosses nodes, about 2/3 of it" "$work/experts.h5" \
  "$p.attrs['expert_parallel'] == 4 and 0.4 < $p.attrs['alltoall_inter_node_bytes'] / $p.attrs['alltoall_bytes'] < 0.9" \
  "dict($p.attrs)"
check_py "experts: the bytes sent near the theory's (balanced routing)" "$work/experts.h5" \
  "0.5 < $p.attrs['alltoall_bytes'] / $p.attrs['alltoall_bytes_theory'] < 1.5" \
  "$p.attrs['alltoall_bytes'], $p.attrs['alltoall_bytes_theory']"
check_py "experts: the shaped link bounds the all-to-alls from below" "$work/experts.h5" \
  "$p.attrs['comm_alltoall_s'] >= 0.5 * 2 * $p.attrs['alltoall_inter_node_bytes'] / 2.5e6" \
  "$p.attrs['comm_alltoall_s'], $p.attrs['alltoall_inter_node_bytes']"
# (The experts' all-to-alls are not what dominates here: the 3.8 MB of dense gradients all-reduced over the shaped
# link are; the stall budget has both kinds apart.)
check_py "experts: the all-to-all is a kind of its own in every rank's stall budget" "$work/experts.h5" \
  "all(r['comm_alltoall_p50'] > 0 and r['comm_gradient_sync_p50'] > 0 for r in $p['stall_budget'][()])" \
  "$p['stall_budget'][()]"
"$hosts" rate "$set_name" node1 off

# Layouts the launch does not have, and a hierarchical all-reduce over uneven nodes: one line, exit 2.
expect_error 2 "layout 5x1 needs 5 nodes; this launch has 3" -- "${on2[@]}" -np 6 "$tb" train "${small[@]}" --scaling 5x1
expect_error 2 "needs 3 ranks on node 0, which has 2" -- "${on2[@]}" -np 6 "$tb" train "${small[@]}" --scaling 1x3
expect_error 2 "hierarchical needs the same number of ranks on every node" -- \
  "${on2[@]}" -np 6 "$tb" train "${small[@]}" --scaling 3 --allreduce hierarchical

multihost_finish multihost_train_test
