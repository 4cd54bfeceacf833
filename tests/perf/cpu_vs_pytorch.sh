#!/usr/bin/env bash
# trainbench's CPU backend against PyTorch on the CPU: tokens/s of a full training step (forward, backward, AdamW)
# on one rank, the same GPT-2 shape on both sides (tests/perf/pytorch_gpt2_cpu.py builds PyTorch's), at 1 and at 2
# threads. Each (model, threads) runs ROUNDS paired rounds, the order alternating; prints each round's ratio and the
# median ratio ours/theirs (> 1: trainbench is faster). Target: >= 1.0 at every point.
#   [PYTHON=/path/to/python] tests/perf/cpu_vs_pytorch.sh BUILD_DIR [ROUNDS]
# Threads: both sides run under `taskset -c 0..N-1`; trainbench takes its thread count from the CPUs it may use
# (CpuThreads(), models/peaks.h), PyTorch from torch.set_num_threads(N). THREADS="1 2" by default. On a machine shared
# with other work, RUN_PREFIX="chrt -f 1" (root) runs both sides ahead of it, so that each has the cores it asks for.
# PyTorch is this benchmark's dependency only (never CI's): python3 -m venv ~/torchenv && ~/torchenv/bin/pip install
# torch (the CPU wheel is enough: --index-url https://download.pytorch.org/whl/cpu), then PYTHON=~/torchenv/bin/python.
set -euo pipefail
[[ $# -ge 1 ]] || { echo "usage: [PYTHON=python3] tests/perf/cpu_vs_pytorch.sh BUILD_DIR [ROUNDS]" >&2; exit 2; }
build=$(realpath "$1"); rounds=${2:-5}
[[ $rounds =~ ^[1-9][0-9]*$ ]] || { echo "cpu_vs_pytorch: ROUNDS must be a positive integer" >&2; exit 2; }
tb=$build/trainbench
[[ -x $tb ]] || { echo "cpu_vs_pytorch: $tb not built" >&2; exit 1; }
python=${PYTHON:-python3}
here=$(dirname "$(realpath "$0")")
export CUDA_VISIBLE_DEVICES="" OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
if ! torch_version=$("$python" -c 'import torch; print(torch.__version__)' 2>/dev/null); then
  echo "cpu_vs_pytorch: PyTorch is not importable by $python. It is this benchmark's dependency only:" >&2
  echo "  python3 -m venv ~/torchenv && ~/torchenv/bin/pip install torch --index-url https://download.pytorch.org/whl/cpu" >&2
  echo "  PYTHON=~/torchenv/bin/python tests/perf/cpu_vs_pytorch.sh $1" >&2
  exit 1
fi

# name, then the shape as trainbench's and the python side's flags take it
models=("tiny:2 128 4 4096 256" "l4-d256-v8192:4 256 4 8192 256")
batch=4 steps=10 warmup=2
threads_list=${THREADS:-1 2}
prefix=${RUN_PREFIX:-}

echo "# cpu_vs_pytorch: trainbench train --backend cpu vs PyTorch $torch_version on the CPU, $rounds paired rounds"
echo "# date: $(date -u +%Y-%m-%dT%H:%M:%SZ); cpu: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs), $(nproc) cores"
echo "# load: $(cut -d' ' -f1-3 /proc/loadavg); micro-batch $batch, $steps measured steps after $warmup warm-up${prefix:+; run under: $prefix}"

median() { sort -g | awk '{v[NR]=$1} END {print v[int((NR+1)/2)]}'; }
# tokens/s of trainbench's median measured step; fails unless it ran on the threads asked for.
run_tb() {
  local threads=$1 layers=$2 d=$3 heads=$4 vocab=$5 seq=$6 out
  out=$($prefix taskset -c "0-$((threads - 1))" "$tb" train --backend cpu --model custom --layers "$layers" --d-model "$d" \
        --heads "$heads" --vocab "$vocab" --seq "$seq" --micro-batch $batch --steps $steps --warmup-steps $warmup)
  grep -q "cpu ($threads BLAS threads)" <<<"$out" || { echo "cpu_vs_pytorch: trainbench did not run on $threads threads" >&2; return 1; }
  awk -F'|' '/^step/ && !/warm-up/ {gsub(/ ms/, "", $4); print $4 / 1000}' <<<"$out" | median |
    awk -v tokens=$((batch * seq)) '{print tokens / $1}'
}
run_torch() {
  local threads=$1 layers=$2 d=$3 heads=$4 vocab=$5 seq=$6
  $prefix taskset -c "0-$((threads - 1))" "$python" "$here/pytorch_gpt2_cpu.py" --layers "$layers" --d-model "$d" \
    --heads "$heads" --vocab "$vocab" --seq "$seq" --micro-batch $batch --steps $steps --warmup-steps $warmup \
    --threads "$threads" | awk '/^median_step_s/ {print $4}'
}

summary=()
for model in "${models[@]}"; do
  name=${model%%:*}; read -r layers d heads vocab seq <<<"${model#*:}"
  for threads in $threads_list; do
    ((threads <= $(nproc))) || { echo "# $name: skipping $threads threads (only $(nproc) cores)"; continue; }
    echo "# $name (layers $layers, d_model $d, heads $heads, vocab $vocab, seq $seq), $threads threads"
    ratios=()
    for ((round = 1; round <= rounds; round++)); do
      shape=("$threads" "$layers" "$d" "$heads" "$vocab" "$seq")
      if ((round % 2)); then ours=$(run_tb "${shape[@]}"); theirs=$(run_torch "${shape[@]}");
      else theirs=$(run_torch "${shape[@]}"); ours=$(run_tb "${shape[@]}"); fi
      [[ -n $ours && -n $theirs ]] || { echo "cpu_vs_pytorch: a run produced no timing" >&2; exit 1; }
      ratio=$(echo "$ours / $theirs" | bc -l); ratios+=("$ratio")
      printf '#   round %2d: trainbench %8.1f tokens/s, pytorch %8.1f tokens/s, ratio %.3f\n' "$round" "$ours" "$theirs" "$ratio"
    done
    summary+=("$(printf '%-14s threads %d  median ratio ours/theirs %.3f  target>=1.0 %s' "$name" "$threads" \
      "$(printf '%s\n' "${ratios[@]}" | median)" \
      "$(echo "$(printf '%s\n' "${ratios[@]}" | median) >= 1.0" | bc -l | sed 's/1/met/; s/0/not met/')")")
  done
done
printf '%s\n' "${summary[@]}"
