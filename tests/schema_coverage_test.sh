#!/usr/bin/env bash
# Every field results/model/schema.h declares is written by a real run of each command and read by `report`'s views or
# cost's reader (tests/schema_coverage.cc): info, data generate, a collectives sweep, a p2p matrix, a training
# scaling sweep with the loader and checkpoints, a resumed run, a storage sweep and a suite of two repeats, at 2
# ranks where it matters, and a training run across three test hosts.
#   schema_coverage_test.sh TRAINBENCH SCHEMA_COVERAGE MPIEXEC...
set -uo pipefail
tb=$(realpath "$1"); coverage=$(realpath "$2"); shift 2; mpi=("$@")
work=$(mktemp -d); chmod 755 "$work"
hosts=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)/multihost/netns_hosts.sh
trap '"$hosts" down scv; rm -rf "$work"' EXIT
source "$(dirname "${BASH_SOURCE[0]}")/cli_lib.sh"
cd "$work"

small=(--model tiny --seq 32 --micro-batch 2 --warmup-steps 1 --quiet)
expect_ok "$tb" info -o info.h5 --quiet
expect_ok "$tb" data generate --dir tokens --tokens 200000 --vocab 4096 -o data.h5 --quiet
expect_ok "${mpi[@]}" -n 2 "$tb" collectives -b 8 -e 64K -f 8 -n 2 -w 1 --ops all_reduce,moe_alltoall --moe-tokens 16 \
  --moe-hidden 64 -o collectives.h5 --quiet
expect_ok "${mpi[@]}" -n 2 "$tb" p2p --size 64K -n 2 --latency-iters 5 -o p2p.h5 --quiet
expect_ok "${mpi[@]}" -n 2 "$tb" train "${small[@]}" --steps 4 --scaling 1,2 --data tokens --checkpoint-dir ck \
  --checkpoint-every 2 -o train.h5
expect_ok "${mpi[@]}" -n 2 "$tb" train "${small[@]}" --steps 6 --data tokens --resume ck/k2/step-00000004 -o resumed.h5
expect_ok "$tb" train "${small[@]}" --steps 2 --data tokens --record-bytes 4K --io-throttle 100000,0.5 --op-times \
  -o sweep.h5
# The only report with pipeline stages.
expect_ok "${mpi[@]}" -n 2 "$tb" train "${small[@]}" --steps 1 --pipeline-parallel 2 --micro-batches 2 -o pipeline.h5
expect_ok "${mpi[@]}" -n 2 "$tb" suite --repeats 2 -o suite.h5 --quiet
# A hang the watchdog ends: the only report that names stuck ranks.
timeout 120 "${mpi[@]}" -n 2 "$tb" collectives -b 1K -e 1K --inject hang=1 --timeout 3 -o hang.h5 --quiet >/dev/null 2>&1
# Across test hosts (network namespaces, as root: tests/multihost): the only report with train's link probe, which
# runs when a launch spans nodes; node1's link slowed so that the probe names a host.
[[ $(id -u) -eq 0 ]] || { echo "FAIL: schema_coverage_test needs root for its run across test hosts"; exit 1; }
"$hosts" up scv 3 && "$hosts" rate scv node1 20 || fail "cannot bring up the test hosts"
expect_ok env TB_NETNS_SLOTS=1 "$hosts" mpirun scv -np 3 "$tb" train "${small[@]}" --steps 1 --scaling 1 \
  --link-probe 64KiB -o "$work/hosts.h5"

checks=$((checks + 1))
"$coverage" hosts.h5 info.h5 data.h5 collectives.h5 p2p.h5 train.h5 resumed.h5 sweep.h5 pipeline.h5 suite.h5 hang.h5 >"$work/coverage" 2>&1 ||
  fail "fields not covered: $(cat "$work/coverage")"
finish schema_coverage_test
