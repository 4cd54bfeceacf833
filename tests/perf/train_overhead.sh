#!/usr/bin/env bash
# Harness overhead of `trainbench train` on the CPU backend: one rank's median step time against a bare loop
# of the same model code and BLAS calls (tests/perf/train_raw.cc: no phase timers, buckets, communicator,
# watchdog or report), alternating the two for ROUNDS rounds; prints the medians and trainbench/raw.
# Target: ratio <= 1.03.
#   tests/perf/train_overhead.sh BUILD_DIR [ROUNDS]
set -euo pipefail
[[ $# -ge 1 ]] || { echo "usage: tests/perf/train_overhead.sh BUILD_DIR [ROUNDS]" >&2; exit 2; }
build=$(realpath "$1"); rounds=${2:-7}
[[ $rounds =~ ^[1-9][0-9]*$ ]] || { echo "train_overhead: ROUNDS must be a positive integer" >&2; exit 2; }
tb=$build/trainbench raw=$build/tests/perf_train_raw
for exe in "$tb" "$raw"; do [[ -x $exe ]] || { echo "train_overhead: $exe not built" >&2; exit 1; }; done

# The shape: 2 layers of width 128 (the "tiny" preset), seq 256, 4 sequences per step.
layers=2 d_model=128 heads=4 vocab=4096 seq=256 batch=4 steps=12 warmup=2 seed=1234
export OPENBLAS_NUM_THREADS=1 OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
raw_cmd=("$raw" $layers $d_model $heads $vocab $seq $batch $steps $warmup $seed)
tb_cmd=("$tb" train --backend cpu --model custom --layers $layers --d-model $d_model --heads $heads --vocab $vocab
        --seq $seq --micro-batch $batch --steps $steps --warmup-steps $warmup --seed $seed)

echo "# train_overhead: trainbench train (1 rank) vs a bare loop of the same model code, $rounds rounds"
echo "# date: $(date -u +%Y-%m-%dT%H:%M:%SZ); cpu: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs), $(nproc) cores"
echo "# load: $(cut -d' ' -f1-3 /proc/loadavg)"
echo "# raw:        ${raw_cmd[*]}"
echo "# trainbench: ${tb_cmd[*]}"

median() { sort -g | awk '{v[NR]=$1} END {print v[int((NR+1)/2)]}'; }
run_raw() { "${raw_cmd[@]}" | awk '/^median_step_s/ {print $2}'; }
# Median of the measured steps' times (ms on the step lines; warm-up lines are marked and skipped).
run_tb() { "${tb_cmd[@]}" | awk -F'|' '/^step/ && !/warm-up/ {gsub(/ ms/, "", $4); print $4 / 1000}' | median; }

raws=() tbs=()
for ((round = 1; round <= rounds; round++)); do
  if ((round % 2)); then r=$(run_raw); t=$(run_tb); else t=$(run_tb); r=$(run_raw); fi
  [[ -n $r && -n $t ]] || { echo "train_overhead: a run produced no timing" >&2; exit 1; }
  raws+=("$r"); tbs+=("$t")
  printf '# round %2d: raw %.3f ms, trainbench %.3f ms, ratio %.3f\n' "$round" "$(echo "$r * 1000" | bc -l)" \
    "$(echo "$t * 1000" | bc -l)" "$(echo "$t / $r" | bc -l)"
done
raw_median=$(printf '%s\n' "${raws[@]}" | median)
tb_median=$(printf '%s\n' "${tbs[@]}" | median)
ratio=$(echo "$tb_median / $raw_median" | bc -l)
printf 'raw_median_ms %.3f  trainbench_median_ms %.3f  ratio %.4f  target<=1.03 %s\n' \
  "$(echo "$raw_median * 1000" | bc -l)" "$(echo "$tb_median * 1000" | bc -l)" "$ratio" \
  "$(echo "$ratio <= 1.03" | bc -l | sed 's/1/met/; s/0/not met/')"
