#!/usr/bin/env bash
# Everything the project checks on a lent GPU, in one call (see tests/perf/README.md, "gpu_check.sh"):
# the GPU tests (every CUDA layer against the CPU reference), `info`, NCCL collectives on the device, the
# training benchmarks of issue 3 (b) — gpt2-124m and the gpt2-1.5b shape on one GPU, tokens/s and MFU against
# the bf16 peak and against the cuBLASLt GEMM rate measured in the same run — with cuDNN's fused attention and
# with the cuBLAS fallback. Logs and reports go to OUT_DIR (at most 8 files: the device tool's limit); a short
# table is printed last.
#
#   tests/perf/gpu_prepare.sh            # here: build-gpu (sm_90) and the .gpu bundle
#   tests/perf/gpu_check.sh .gpu OUT_DIR # on the GPU host
set -uo pipefail
[[ $# -eq 2 ]] || { echo "usage: tests/perf/gpu_check.sh BUNDLE_DIR OUT_DIR" >&2; exit 2; }
bundle=$(realpath "$1") out=$(realpath "$2")
log=$out/gpu_check.log
[[ -x $bundle/run ]] || { echo "gpu_check: $bundle/run missing (run tests/perf/gpu_prepare.sh here first)" >&2; exit 2; }
cd "$(mktemp -d)"  # scratch for anything the programs write besides their reports

summary=()
step() {  # step NAME SECONDS COMMAND...: runs it under a time limit, logs it, keeps its status for the table
  local name=$1 limit=$2; shift 2
  echo "=== $name: $* (limit ${limit}s)" >>"$log"
  local start=$SECONDS
  timeout "$limit" "$bundle/run" "$@" >>"$log" 2>&1
  local rc=$?
  echo "=== $name: exit $rc after $((SECONDS - start)) s" >>"$log"
  summary+=("$(printf '%-22s exit %3d  %4d s' "$name" "$rc" "$((SECONDS - start))")")
}

{
  echo "# gpu_check $(date -u +%Y-%m-%dT%H:%M:%SZ) on $(hostname)"
  nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm,power.limit --format=csv 2>&1
} >"$log"

step gpu_tests 240 gpu_tests --gtest_color=no
step info 60 mpirun -np 1 trainbench info -o "$out/info.h5"
step collectives 120 mpirun -np 1 trainbench collectives --backend cuda -b 1M -e 1G -f 4 -d bf16 -o "$out/collectives.h5"
step train_124m 150 mpirun -np 1 trainbench train --backend cuda --model gpt2-124m --micro-batch 16 --steps 20 \
  -o "$out/train_124m.h5"
step train_1p5b 200 mpirun -np 1 trainbench train --backend cuda --model gpt2-1.5b --micro-batch 8 --steps 10 \
  --warmup-steps 2 -o "$out/train_1p5b.h5"
step train_1p5b_cublas 200 mpirun -np 1 trainbench train --backend cuda --model gpt2-1.5b --micro-batch 8 --steps 10 \
  --warmup-steps 2 --attention cublas -o "$out/train_1p5b_cublas.h5"

{
  echo
  echo "# summary"
  printf '%s\n' "${summary[@]}"
  grep -E "^\[  (PASSED|FAILED|SKIPPED) |^\[==========\]" "$log" | tail -n 12
  grep -E "^# (peak FLOP|attention)|^# k=|^#   MFU" "$log"
} | tee -a "$log"
