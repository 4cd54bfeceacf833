#!/usr/bin/env bash
# Faults across test hosts (netns_hosts.sh): one host's link cut in the middle of a training run. Every rank exits
# within --timeout plus 30 s, rank 0's line and the report's reason name the host that cannot be reached, and the
# report keeps the point that finished before the cut. Everything the test creates is removed at the end.
#
#   multihost_faults_test.sh TRAINBENCH     (TB_KEEP_WORK=1 keeps its reports: multihost_lib.sh)
set_name=mhf
source "$(dirname "${BASH_SOURCE[0]}")/multihost_lib.sh"
multihost_up 2

# The ranks' processes (mpirun's command line starts with "mpirun", the agents' with "nsenter" and "sh").
ranks_alive() { pgrep -f "^$tb train .*-o $work/cut.h5" >/dev/null; }  # this run's, not another test's

# --- the link of node1 cut while k2 (one rank on each host) runs, once k1 (node0 alone) has finished ------------
# 400 steps a point: k1 takes a second or two, k2 (each step all-reducing 3.8 MB over the bridge) several, and the
# cut comes as soon as rank 0 prints k2's first step.
timeout_s=5
TB_NETNS_SLOTS=1 timeout 300 "$hosts" mpirun "$set_name" -np 2 "$tb" train --model tiny --seq 32 --micro-batch 2 \
  --steps 400 --warmup-steps 1 --scaling 1,2 --timeout "$timeout_s" -o "$work/cut.h5" >"$work/out" 2>"$work/err" &
launcher=$!
for ((i = 0; i < 1200; i++)); do
  grep -q '| k   2 |' "$work/out" 2>/dev/null && break
  kill -0 "$launcher" 2>/dev/null || break
  sleep 0.1
done
checks=$((checks + 1))
if ! grep -q '| k   2 |' "$work/out"; then
  fail "k2 never started: $(tail -3 "$work/out") $(tail -3 "$work/err")"
else
  "$hosts" link "$set_name" node1 down
  cut=$SECONDS
  while ranks_alive && ((SECONDS - cut <= timeout_s + 60)); do sleep 0.5; done
  gone=$((SECONDS - cut))
  checks=$((checks + 1))
  ((gone <= timeout_s + 30)) || fail "the ranks took $gone s after the cut to exit (want within --timeout + 30 = $((timeout_s + 30)) s)"
  # Open MPI's mpirun, once the job is aborting, may wait on for the daemon it cannot reach: the ranks are gone,
  # the report written; end it.
  kill "$launcher" 2>/dev/null
  wait "$launcher" 2>/dev/null
  checks=$((checks + 1))
  grep -q "^trainbench: rank 0 (node0) error: timeout: .*rank 1 (node1) could not be reached.*host node1 unreachable" \
    "$work/err" || fail "rank 0's line does not name node1 unreachable: $(grep trainbench: "$work/err")"
  check_py "cut: status failed, node1 named" "$work/cut.h5" \
    "f.attrs['status'] == 'failed' and 'host node1 unreachable' in f.attrs['status_reason'] and f.attrs['stuck_ranks'] == '1'" \
    "f.attrs['status'], f.attrs['status_reason']"
  check_py "cut: the point that finished is kept" "$work/cut.h5" \
    "'k1' in f['train'] and f['train/k1'].attrs['measured_steps'] == 400 and 'k2' not in f['train']" "list(f['train'])"
  expect_ok "$tb" report "$work/cut.h5"
fi

multihost_finish multihost_faults_test
