#!/usr/bin/env bash
# End-to-end CLI tests: every documented bad input gets one clear line and exit code 2; good runs write a
# report that a standard HDF5 tool reads back; the failure rules (rank failure, stuck collective, SIGTERM)
# end the job with the documented codes instead of hanging.
#   cli_test.sh TRAINBENCH H5DUMP MPIEXEC [MPIEXEC FLAGS...]
set -uo pipefail
tb=$1; h5dump=$2; shift 2; mpiexec=("$@")
work=$(mktemp -d); trap 'rm -rf "$work"' EXIT
source "$(dirname "${BASH_SOURCE[0]}")/cli_lib.sh"

# --- usage errors, single process --------------------------------------------------------------------------
expect_error 2 "no command given" -- "$tb"
expect_error 2 "unknown command 'colectives'" -- "$tb" colectives
expect_error 2 "invalid size '1Q' for -b/--minbytes" -- "$tb" collectives -b 1Q
expect_error 2 "invalid size '8X' for -e/--maxbytes" -- "$tb" collectives -e 8X
expect_error 2 "-e/--maxbytes \(1K\) is below -b/--minbytes \(1M\)" -- "$tb" collectives -b 1M -e 1K
expect_error 2 "unknown operation 'allreduce' for --ops" -- "$tb" collectives --ops allreduce
expect_error 2 "--dtype 'float8': not one of the choices \\(accepted: float\\|fp32" -- "$tb" collectives -d float8
expect_error 2 "^trainbench: error: --redop 'prod': not one of the choices \(accepted: sum\|avg\|max\|min\) \(see 'trainbench collectives --help'\)$" -- \
  "$tb" collectives --redop prod
expect_error 2 "--iters '0': out of range \(accepted: a whole number 1\.\.16777216\)" -- "$tb" collectives -n 0
expect_error 2 "--iters '-3': out of range" -- "$tb" collectives --iters=-3
expect_error 2 "--stepfactor '1': out of range" -- "$tb" collectives -f 1
expect_error 2 "--iters 'abc': not a decimal whole number" -- "$tb" collectives --iters abc
expect_error 2 "unrecognised option '--bogus'" -- "$tb" collectives --bogus
expect_error 2 "--root 3 is not a rank" -- "$tb" collectives --ops broadcast --root 3
expect_error 2 "--root goes with --ops broadcast\|reduce\|all \(--ops is 'all_reduce'\)" -- "$tb" collectives --root 1
expect_error 2 "--redop goes with --ops all_reduce\|reduce\|reduce_scatter\|all \(--ops is 'all_gather'\)" -- "$tb" collectives --ops all_gather --redop max
expect_error 2 "needs the cuda backend" -- "$tb" collectives --backend cpu -d bf16
expect_error 2 "--backend 'tpu': not one of the choices \(accepted: auto\|cpu\|cuda\)" -- "$tb" collectives --backend tpu
expect_error 2 "--timeout '-1': out of range \(accepted: a number in \[0, 1e\+07\]\)" -- "$tb" collectives --timeout -1
expect_error 2 "cannot write report '$work/missing/x.h5'" -- "$tb" collectives -o "$work/missing/x.h5"
expect_error 2 "refusing to write -o '$work': it is a directory" -- "$tb" p2p -o "$work"
expect_error 2 "cannot write report" -- "$tb" info -o /proc/forbidden.h5
expect_error 2 "--size" -- "$tb" p2p --size 10
expect_error 2 "invalid size '1Q' for --size" -- "$tb" p2p --size 1Q
expect_error 2 "--threshold" -- "$tb" p2p --threshold 2
if ! "$tb" info --backend cuda >/dev/null 2>&1 && "$tb" info | grep -c >/dev/null "not built"; then
  expect_error 2 "built without CUDA" -- "$tb" collectives --backend cuda
  expect_error 2 "built without CUDA" -- "$tb" train --model tiny --backend cuda
fi

expect_error 2 "unknown model 'gpt3' for --model" -- "$tb" train --model gpt3
expect_error 2 "shape mixture-of-experts blocks: give --experts E, or an moe-\* model" -- \
  "$tb" train --model tiny --top-k 2
expect_error 2 "--layers '0': out of range" -- "$tb" train --model tiny --layers 0
expect_error 2 "--model custom needs --d-model, --heads" -- "$tb" train --model custom --layers 2
expect_error 2 "not divisible by --heads" -- "$tb" train --model custom --layers 2 --d-model 100 --heads 3
expect_error 2 "--seq 300 exceeds the model's 256 positions" -- "$tb" train --model tiny --seq 300
expect_error 2 "--steps '0': out of range \(accepted: a whole number >= 1\)" -- "$tb" train --model tiny --steps 0
expect_error 2 "--bucket-mb '0': out of range" -- "$tb" train --model tiny --bucket-mb 0
expect_error 2 "--scaling '3': out of range \(accepted: a whole number 1\.\.1\)" -- "$tb" train --model tiny --scaling 1,3
expect_error 2 "--scaling-mode 'linear': not one of the choices \(accepted: weak\|strong\)" -- "$tb" train --model tiny --scaling-mode linear
expect_error 2 "cannot write report" -- "$tb" train --model tiny -o "$work/missing/t.h5"
expect_error 2 "--attention 'flash': not one of the choices \(accepted: auto\|cudnn\|cublas\)" -- "$tb" train --model tiny --attention flash
expect_error 2 "--attention cublas applies to --backend cuda" -- "$tb" train --model tiny --backend cpu --attention cublas

# --- the same errors under mpiexec: still one line, exit 2, no hang ----------------------------------------
expect_error 2 "invalid size '1Q' for -b/--minbytes" -- "${mpiexec[@]}" -n 2 "$tb" collectives -b 1Q
expect_error 2 "--iters '0': out of range" -- "${mpiexec[@]}" -n 2 "$tb" collectives -n 0
expect_error 2 "cannot write report" -- "${mpiexec[@]}" -n 2 "$tb" collectives -o "$work/missing/x.h5"

# --- help and version ---------------------------------------------------------------------------------------
checks=$((checks + 1))
# grep reads the whole help (no -q): stopping at the match would end the pipe while trainbench still writes, and
# pipefail would then fail the check on its SIGPIPE (seen once under load after --emulate-pcie lengthened the help).
"$tb" collectives --help | grep -- "--maxbytes" >/dev/null || fail "collectives --help lacks --maxbytes"
checks=$((checks + 1))
"$tb" --version | grep -c >/dev/null "^trainbench " || fail "--version"

# --- good runs and report read-back with h5dump ---------------------------------------------------------------
checks=$((checks + 1))
if "${mpiexec[@]}" -n 2 "$tb" collectives -b 1K -e 64K -f 8 --ops all -n 3 -w 1 -o "$work/c.h5" >"$work/out" 2>"$work/err"; then
  grep -q "# Out of bounds values : 0 OK" "$work/out" || fail "collectives: no OK verdict"
  [[ $(grep -cE '^ +[0-9]+ ' "$work/out") -eq 21 ]] || fail "collectives: want 21 rows (7 ops x 3 sizes): $(cat "$work/out")"
  "$h5dump" -A -a /status "$work/c.h5" | grep -c >/dev/null '"complete"' || fail "report status is not complete"
  "$h5dump" -d /collectives/all_reduce/results "$work/c.h5" >"$work/dump" || fail "h5dump cannot read the results table"
  for field in size_bytes out_of_place_busbw_GBps in_place_wrong; do
    grep -q "\"$field\"" "$work/dump" || fail "results table lacks $field"
  done
  "$h5dump" -d /topology/ranks "$work/c.h5" | grep -c >/dev/null '"host"' || fail "topology table lacks host"
  "$h5dump" -A -a /summary/wrong_elements_total "$work/c.h5" | grep -c >/dev/null "(0): 0" || fail "summary wrong_elements_total"
  "$h5dump" -A -a /config/ops "$work/c.h5" | grep -c >/dev/null '"all"' || fail "config lacks ops"
  [[ -z $(ls "$work" | grep -E 'tmp|probe') ]] || fail "temporary files left behind: $(ls "$work")"
else
  fail "collectives run failed: $(cat "$work/err")"
fi

checks=$((checks + 1))
if "${mpiexec[@]}" -n 2 "$tb" p2p --size 64K -n 3 --latency-iters 10 -o "$work/p.h5" >"$work/out" 2>"$work/err"; then
  grep -q "# Weak links" "$work/out" || fail "p2p: no verdict line"
  "$h5dump" -d /p2p/uni_bw_GBps "$work/p.h5" | grep -c >/dev/null "DATASPACE  SIMPLE { ( 2, 2 )" || fail "p2p matrix not 2x2"
else
  fail "p2p run failed: $(cat "$work/err")"
fi

checks=$((checks + 1))
"$tb" info -o "$work/i.h5" >"$work/out" 2>&1 || fail "info failed: $(cat "$work/out")"
grep -q "# backends" "$work/out" || fail "info lacks backends line"
"$h5dump" -A -a /topology/mpi_library "$work/i.h5" >/dev/null 2>&1 || fail "info report lacks topology/mpi_library"

checks=$((checks + 1))
if "${mpiexec[@]}" -n 2 "$tb" train --model tiny --seq 32 --micro-batch 2 --steps 3 --warmup-steps 1 --scaling 1,2 \
     -o "$work/t.h5" >"$work/out" 2>"$work/err"; then
  grep -q "^# k=2: 3 measured steps" "$work/out" || fail "train: no k=2 summary: $(cat "$work/out")"
  [[ $(grep -c '^step ' "$work/out") -eq 8 ]] || fail "train: want 8 step lines (2 points x 4 steps)"
  "$h5dump" -H -d /train/k2/steps "$work/t.h5" | grep -c '"comm_exposed_s"' >/dev/null || fail "train: steps table lacks comm_exposed_s"
  "$h5dump" -A -a /train/k2/scaling_efficiency "$work/t.h5" >/dev/null || fail "train: no scaling_efficiency"
  # tiny's 3.8 MB of gradients fit one 25 MiB bucket
  "$h5dump" -A -a /train/k2/gradient_buckets "$work/t.h5" | grep -c >/dev/null "(0): 1$" || fail "train: gradient_buckets is not 1"
  grep -q "MB of gradients in 1 bucket," "$work/out" || fail "train: the comm line does not give the bucket count"
  "$h5dump" -A -a /model/parameters "$work/t.h5" | grep -c >/dev/null "(0): 953856" || fail "train: tiny should have 953856 parameters"
  "$h5dump" -A -a /status "$work/t.h5" | grep -c >/dev/null '"complete"' || fail "train: report status is not complete"
  "$h5dump" -A -a /train/attention "$work/t.h5" | grep -c >/dev/null '"cpu"' || fail "train: attention attribute is not cpu"
  "$h5dump" -d /train/memory "$work/t.h5" | grep -c >/dev/null '"peak_device_memory_bytes"' || fail "train: memory table lacks device column"
else
  fail "train run failed: $(cat "$work/err")"
fi

# --parallel zero1 and fsdp against dp at 2 and 4 ranks, same seed: the same losses step by step (printed to 4
# decimals; the fp32 summation order may differ below that), the point recording the mode and no all-reduce.
for n in 2 4; do
  checks=$((checks + 1))
  for mode in dp zero1 fsdp; do
    "${mpiexec[@]}" -n $n "$tb" train --model tiny --seq 32 --micro-batch 2 --steps 3 --warmup-steps 1 \
      --parallel $mode -o "$work/$mode$n.h5" >"$work/$mode$n.out" 2>"$work/err" || fail "train --parallel $mode -n $n: $(cat "$work/err")"
  done
  [[ $(grep -o 'loss [0-9.]*' "$work/zero1$n.out") == $(grep -o 'loss [0-9.]*' "$work/dp$n.out") && \
     $(grep -c '^step .*loss [0-9.]*' "$work/dp$n.out") -eq 4 ]] ||
    fail "zero1 at $n ranks: losses differ from dp's: $(grep -o 'loss [0-9.]*' "$work/zero1$n.out" | tr '\n' ' ') vs $(grep -o 'loss [0-9.]*' "$work/dp$n.out" | tr '\n' ' ')"
  "$h5dump" -A -a /train/k$n/parallel "$work/zero1$n.h5" | grep -c >/dev/null '"zero1"' || fail "zero1 at $n ranks: the point does not record parallel zero1"
  grep -q "reduce-scattered and the parameters all-gathered" "$work/zero1$n.out" || fail "zero1: the comm line does not say so"
  # AdamW's m and v (8 bytes per element on the CPU) over n ranks: ZeRO's 8 Psi / n, allocated as such.
  grep -qE "model state per rank \(zero1\), MB allocated / ZeRO's: .* optimizer ([0-9.]+) / \1$" "$work/zero1$n.out" &&
    grep -q "optimizer 7.6 / 7.6$" "$work/dp$n.out" ||
    fail "zero1 at $n ranks: the model state line: $(grep 'model state' "$work/zero1$n.out" "$work/dp$n.out")"
  [[ $(grep -o 'loss [0-9.]*' "$work/fsdp$n.out") == $(grep -o 'loss [0-9.]*' "$work/dp$n.out") ]] ||
    fail "fsdp at $n ranks: losses differ from dp's: $(grep -o 'loss [0-9.]*' "$work/fsdp$n.out" | tr '\n' ' ')"
  "$h5dump" -A -a /train/k$n/parallel "$work/fsdp$n.h5" | grep -c >/dev/null '"fsdp"' || fail "fsdp at $n ranks: parallel not recorded"
  # Everything sharded: weights, gradients and optimizer state each at ZeRO's figure over n (16 Psi / n in all).
  grep -qE "model state per rank \(fsdp\), MB allocated / ZeRO's: weights ([0-9.]+) / \1, gradients ([0-9.]+) / \2, optimizer ([0-9.]+) / \3$" \
    "$work/fsdp$n.out" || fail "fsdp at $n ranks: the model state line: $(grep 'model state' "$work/fsdp$n.out")"
  grep -q "fsdp working buffers" "$work/fsdp$n.out" || fail "fsdp at $n ranks: no working buffers line"
  # Traffic next to ZeRO's volumes: dp's all-reduce issues exactly its 2 Psi (N-1)/N; fsdp reduce-scatters Psi and
  # gathers less than 2 Psi (the embeddings and the final LayerNorm are gathered once, held through backward).
  grep -qE "sent per rank per step \(ring\), MB issued / ZeRO's: gradient sync ([0-9.]+) / \1, parameter gather 0.00 / 0.00" \
    "$work/dp$n.out" || fail "dp at $n ranks: traffic line: $(grep 'sent per rank' "$work/dp$n.out")"
  grep -qE "gradient sync ([0-9.]+) / \1, parameter gather" "$work/fsdp$n.out" ||
    fail "fsdp at $n ranks: traffic line: $(grep 'sent per rank' "$work/fsdp$n.out")"
  "$h5dump" -A -a /train/k$n/traffic_parameter_gather_bytes_theory "$work/fsdp$n.h5" | grep -c >/dev/null "(0): [1-9]" ||
    fail "fsdp at $n ranks: no gather theory in the report"
done
# --tensor-parallel T: groups of T ranks split the model (Megatron), data parallel across the groups, which share
# their batch: T x G ranks give the losses of dp on G ranks, and the point reports the activation traffic.
for spec in "2 2 1 dp" "4 2 2 dp" "4 4 1 dp" "4 2 2 zero1" "4 2 2 fsdp"; do
  read -r n t g mode <<<"$spec"
  checks=$((checks + 1))
  "${mpiexec[@]}" -n $n "$tb" train --model tiny --seq 32 --micro-batch 2 --steps 3 --warmup-steps 1 \
    --tensor-parallel $t --parallel $mode -o "$work/tp$n$t.h5" >"$work/tp$n$t.out" 2>"$work/err" ||
    fail "train --tensor-parallel $t -n $n: $(cat "$work/err")"
  if [[ ! -s "$work/dp$g.out" ]]; then
    "${mpiexec[@]}" -n $g "$tb" train --model tiny --seq 32 --micro-batch 2 --steps 3 --warmup-steps 1 \
      >"$work/dp$g.out" 2>"$work/err" || fail "train -n $g: $(cat "$work/err")"
  fi
  [[ $(grep -o 'loss [0-9.]*' "$work/tp$n$t.out") == $(grep -o 'loss [0-9.]*' "$work/dp$g.out") ]] ||
    fail "tensor parallel $t ($mode) on $n ranks: losses differ from dp on $g: $(grep -o 'loss [0-9.]*' "$work/tp$n$t.out" | tr '\n' ' ')"
  grep -q "tensor parallel $t: activation all-reduces send" "$work/tp$n$t.out" || fail "tp $t: no activation line"
  "$h5dump" -A -a /train/k$n/tensor_parallel "$work/tp$n$t.h5" | grep -c >/dev/null "(0): $t$" || fail "tp $t: not recorded"
  "$h5dump" -A -a /train/k$n/traffic_activation_bytes_theory "$work/tp$n$t.h5" | grep -c >/dev/null "(0): [1-9]" ||
    fail "tp $t: no activation theory"
done
expect_error 2 "--tensor-parallel 3 does not divide --heads 4" -- "$tb" train --model tiny --tensor-parallel 3
expect_error 2 "--tensor-parallel 2 does not divide the 1-rank point" -- "$tb" train --model tiny --tensor-parallel 2
expect_error 2 "--allow-cross-node-tp goes with --tensor-parallel" -- "$tb" train --model tiny --allow-cross-node-tp

# fsdp without overlap: every gather and reduce-scatter blocking, the same losses.
checks=$((checks + 1))
"${mpiexec[@]}" -n 2 "$tb" train --model tiny --seq 32 --micro-batch 2 --steps 3 --warmup-steps 1 --parallel fsdp \
  --no-overlap >"$work/fsdp_blocking.out" 2>"$work/err" || fail "train --parallel fsdp --no-overlap: $(cat "$work/err")"
[[ $(grep -o 'loss [0-9.]*' "$work/fsdp_blocking.out") == $(grep -o 'loss [0-9.]*' "$work/dp2.out") ]] ||
  fail "fsdp --no-overlap: losses differ from dp's"
expect_error 2 "--no-overlap goes with --parallel dp.fsdp \\(--parallel is 'zero1'\\)" -- \
  "$tb" train --model tiny --parallel zero1 --no-overlap
expect_error 2 "--bucket-mb goes with --parallel dp \\(--parallel is 'fsdp'\\)" -- \
  "$tb" train --model tiny --parallel fsdp --bucket-mb 4
expect_error 2 "--parallel fsdp reduce-scatters the gradients instead" -- \
  "$tb" train --model tiny --parallel fsdp --allreduce hierarchical
expect_error 2 "--parallel fsdp with checkpoints .* is not built yet" -- \
  "$tb" train --model tiny --parallel fsdp --checkpoint-dir "$work/ck" --checkpoint-every 2
expect_error 2 "--parallel 'zero3': not one of the choices" -- "$tb" train --model tiny --parallel zero3
expect_error 2 "--parallel zero1 reduce-scatters the gradients instead" -- "$tb" train --model tiny --parallel zero1 --allreduce flat
expect_error 2 "--parallel zero1 with checkpoints .* is not built yet" -- \
  "$tb" train --model tiny --parallel zero1 --checkpoint-dir "$work/ck" --checkpoint-every 2

# --- failure rules ------------------------------------------------------------------------------------------
# A rank that fails: its message names rank and host and what failed; the job ends with code 1, no hang.
checks=$((checks + 1))
start=$(date +%s)
TRAINBENCH_TEST_FAULT=fail@rank=1 timeout 120 "${mpiexec[@]}" -n 2 "$tb" collectives -b 1K -e 1K >"$work/out" 2>"$work/err"
rc=$?
[[ $rc -eq 1 ]] || fail "rank failure: exit $rc, want 1"
grep -qE "rank 1 \(.*\) error: injected fault" "$work/err" || fail "rank failure message: $(cat "$work/err")"

# A stuck collective: the watchdog names the operation and aborts within the timeout.
checks=$((checks + 1))
start=$(date +%s)
TRAINBENCH_TEST_FAULT=hang@rank=1 timeout 120 "${mpiexec[@]}" -n 2 "$tb" collectives -b 1K -e 1K --timeout 3 \
  -o "$work/hang.h5" >"$work/out" 2>"$work/err"
rc=$?
elapsed=$(( $(date +%s) - start ))
[[ $rc -eq 1 ]] || fail "stuck collective: exit $rc, want 1 (124 = hung): $(cat "$work/err")"
grep -q "timeout: all_reduce out-of-place, 1024 B, float" "$work/err" || fail "watchdog message: $(cat "$work/err")"
[[ $elapsed -lt 60 ]] || fail "watchdog took ${elapsed}s"
"$h5dump" -A -a /status "$work/hang.h5" | grep -c >/dev/null '"failed"' || fail "stuck run: report status is not failed"

# Rank 0 stuck outside any guarded operation (p2p's fault hook runs before its first measured phase): its own
# watchdog has nothing to time, so rank 1's tells it, and rank 0's probe names rank 0 itself.
checks=$((checks + 1))
start=$(date +%s)
TRAINBENCH_TEST_FAULT=hang@rank=0 timeout 120 "${mpiexec[@]}" -n 2 "$tb" p2p --size 64K --timeout 3 \
  -o "$work/hang0.h5" >"$work/out" 2>"$work/err"
rc=$?
elapsed=$(( $(date +%s) - start ))
[[ $rc -eq 1 ]] || fail "rank 0 stuck: exit $rc, want 1 (124 = hung): $(cat "$work/err")"
grep -qE "rank 0 .*error: timeout: on rank 1, .* did not complete within 3 s on a communicator of 2 ranks; stuck: rank 0 \([^)]+\) outside communication for [0-9.]+ s, outside any guarded operation" \
  "$work/err" || fail "rank 0 stuck: not named: $(cat "$work/err")"
[[ $elapsed -lt 33 ]] || fail "rank 0 stuck: the job took ${elapsed}s to end"
"$h5dump" -A -a /stuck_ranks "$work/hang0.h5" | grep -c >/dev/null '"0"' || fail "rank 0 stuck: stuck_ranks is not 0"

# SIGTERM: the run stops at the next size, writes its report as interrupted and exits 128+15. The signal goes
# once the first size's row is out (the handlers are installed by then), with 63 sizes still to run.
checks=$((checks + 1))
sizes=$(printf '64K,%.0s' {1..64}); sizes=${sizes%,}
"$tb" collectives --sizes "$sizes" -n 200000 -c 0 -o "$work/int.h5" >"$work/out" 2>"$work/err" &
pid=$!
for _ in $(seq 600); do grep -qE '^ +65536 ' "$work/out" && break; sleep 0.1; done
kill -TERM $pid
wait $pid; rc=$?
[[ $rc -eq 143 ]] || fail "SIGTERM: exit $rc, want 143: $(cat "$work/err")"
"$h5dump" -A -a /status "$work/int.h5" | grep -c >/dev/null '"interrupted"' || fail "SIGTERM: report status is not interrupted"

finish cli_test
