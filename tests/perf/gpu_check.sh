#!/usr/bin/env bash
# What the project checks on a lent GPU, in parts that each end well inside the device tool's 600 s per call (see
# tests/perf/README.md, "gpu_check.sh"). Every part first prints the host's driver, CUDA, cuDNN and NCCL versions
# (`trainbench info`), then runs its steps, each under a time limit, appending to OUT_DIR/gpu_check_PART.log and
# printing a verdict line as each step ends, so that a part cut short still leaves what it did.
#
#   tests    gpu_tests (every CUDA layer against the CPU reference), NCCL collectives on the device (every
#            operation to 1 GiB, --cuda-graph 2 --aggregate 4, checked by kernels: collectives_device_sweep)  ≤ 360 s
#   train    gpt2-124m and the gpt2-1.5b shape on one GPU with auto attention, which must be cuDNN's   ≤ 280 s
#   cublas   the gpt2-1.5b shape with --attention cublas (the fallback, for the ratio)                 ≤ 180 s
#   io       gpt2-124m reading token shards, checkpointing from device memory (sync, async with
#            read-back verification), then resuming from the newest checkpoint                        ≤ 200 s
#   emulate  --emulate-pcie on every GPU of the node (2 or more; one GPU: skipped, with the reason): all_reduce
#            on NVLink, then emulated; NCCL's transports (NCCL_DEBUG=INFO) and the report's label        ≤ 300 s
# Parts for what changed since 2026-12-04 and never ran on a GPU (issue 37; each prints a heading, its figures and
# "PART NAME: PASS|FAIL|SKIPPED (reason)"; README "gpu_check.sh" gives each one's budget):
#   parallel zero1 and fsdp on the CUDA model against dp (losses); tensor parallel and pipeline stages: train
#            --tensor-parallel 2 and --pipeline-parallel 2 with 2 GPUs, else the CUDA tensor-parallel model as threads
#            and the CUDA model as 2 stages on one GPU (gpu_tests CudaTensorParallel.*, CudaTransformer.Pipeline*) ≤ 270 s
#   fence    an async checkpoint's deferred-snapshot fence (BeforeUpdate) before the next optimizer step        ≤ 90 s
#   probe    the cross-node link probe's device path: needs ranks on 2 or more hosts; SKIPPED on one host        0 s
#   optimes  train --op-times, its table (SKIPPED while train --help lacks the flag)                           ≤ 90 s
#   ncu      Nsight Compute on one training step of a 2-layer gpt2-124m: trainbench's own kernels (the
#            non-GEMM, memory-bound ones), duration and DRAM throughput % of peak (SKIPPED without ncu)      ≤ 180 s
#   peer     tests/perf/gpu_vs_pytorch.sh --rounds 1: trainbench against PyTorch eager and compiled           ≤ 280 s
#
# Training steps also check the first step's loss: ≈ ln V for random tokens at GPT-2's initialisation.
# Exit status: 0 when every step passed, 1 when one failed, 2 on a usage error.
#
#   tests/perf/gpu_prepare.sh BUNDLE_SCRIPT                      # here: build-gpu (sm_90), .gpu and .gpu.tar.gz
#   tests/perf/gpu_check.sh .gpu.tar.gz OUT_DIR PART   # on the GPU host, one part per call (PART: a name above)
# BUNDLE is the packed folder or its .tar.gz (unpacked into a scratch folder first).
set -uo pipefail
parts='tests|train|cublas|io|emulate|parallel|fence|probe|optimes|ncu|peer'
usage() { echo "usage: tests/perf/gpu_check.sh BUNDLE_DIR|BUNDLE.tar.gz OUT_DIR $parts" >&2; exit 2; }
[[ $# -eq 3 && $3 =~ ^($parts)$ ]] || usage
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)  # gpu_vs_pytorch.sh and pytorch_gpt2.py sit beside this script
bundle=$(realpath "$1") out=$(realpath -m "$2") part=$3
scratch=$(mktemp -d)
if [[ -f $bundle ]]; then
  tar -xzf "$bundle" -C "$scratch" || { echo "gpu_check: cannot unpack $bundle" >&2; exit 2; }
  bundle=$scratch/.gpu
fi
[[ -x $bundle/run ]] || { echo "gpu_check: $bundle/run missing (run tests/perf/gpu_prepare.sh here first)" >&2; exit 2; }
mkdir -p "$out"
log=$out/gpu_check_$part.log
cd "$scratch"  # for anything the programs write besides their reports
failures=0

verdict() {  # verdict NAME TEXT: one result line, to the log and to stdout, as soon as it is known
  printf '%-28s %s\n' "$1" "$2" | tee -a "$log"
  [[ $2 == ok* || $2 == skipped:* ]] || failures=$((failures + 1))
}

step() {  # step NAME SECONDS COMMAND...: runs it under a time limit; its output goes to the log and to NAME.out
  local name=$1 limit=$2; shift 2
  echo "=== $name: $* (limit ${limit}s)" >>"$log"
  local start=$SECONDS
  timeout "$limit" "$bundle/run" "$@" 2>&1 | tee "$scratch/$name.out" >>"$log"
  local rc=${PIPESTATUS[0]}
  local took=$((SECONDS - start))
  echo "=== $name: exit $rc after $took s" >>"$log"
  if [[ $rc -eq 0 ]]; then verdict "$name" "ok (${took} s)"; else verdict "$name" "FAILED: exit $rc after $took s"; fi
  return "$rc"
}

# The first step's loss of a training run, against ln V: at GPT-2's initialisation (weights of std 0.02) the logits
# are small, so random tokens cost ln V plus about half the logits' variance (≈ 0.15 for d_model 768, 0.3 for
# 1600). Far outside that, or NaN, the model computes something else.
check_first_loss() {  # check_first_loss NAME VOCAB
  local loss
  loss=$(grep -m1 -E '^step +[0-9]+' "$scratch/$1.out" | sed -nE 's/.*\| loss ([^ ]+) \|.*/\1/p')
  [[ -n $loss ]] || { verdict "$1 first loss" "FAILED: no step line"; return; }
  if awk -v l="$loss" -v v="$2" 'BEGIN { e = log(v); exit !(l == l + 0 && l > e - 0.1 && l < e + 1.0) }'; then
    verdict "$1 first loss" "ok ($loss, ln V $(awk -v v="$2" 'BEGIN { printf "%.4f", log(v) }'))"
  else
    verdict "$1 first loss" "FAILED: $loss, expected ln V $(awk -v v="$2" 'BEGIN { printf "%.4f", log(v) }') - 0.1 .. + 1.0"
  fi
}

check_attention() {  # check_attention NAME EXPECTED: the attention the run says it used
  local used
  used=$(sed -nE 's/^# attention: ([^ ]+).*/\1/p' "$scratch/$1.out" | head -n1)
  if [[ $used == "$2" ]]; then verdict "$1 attention" "ok ($used)"; else
    verdict "$1 attention" "FAILED: ran '${used:-nothing}', expected $2: $(grep -m1 '^# attention' "$scratch/$1.out")"
  fi
}

# On a GPU host a skipped GPU test means a layer went unchecked (no usable GPU, or a build without the cuDNN
# frontend): only the checks of the no-CUDA stubs and the test that needs two ranks may skip.
check_skips() {
  local unexpected
  [[ -f $out/gpu_tests.xml ]] || { verdict "gpu_tests skips" "FAILED: no $out/gpu_tests.xml"; return; }
  unexpected=$(grep -o '<skipped message="[^"]*"' "$out/gpu_tests.xml" | grep -v -e "built with CUDA" -e "needs 2 ranks" |
    sed 's/.*&#x0A;//; s/"$//' | sort | uniq -c)
  if [[ -z $unexpected ]]; then verdict "gpu_tests skips" "ok (only the stub checks and the 2-rank test)"; else
    verdict "gpu_tests skips" "FAILED: $(echo "$unexpected" | head -n 3 | tr -s ' ' | paste -sd ';')"
  fi
}

# The transports NCCL chose for the channels between ranks (NCCL_DEBUG=INFO: "Channel 00/0 : 0[0] -> 1[1] via
# P2P/CUMEM/read", "via SHM/direct/direct", "via NET/IB/0"), each once: "P2P SHM".
transports() { grep -oE 'Channel [0-9]+/[0-9]+ : .* via [A-Za-z0-9]+' "$scratch/$1.out" | sed -E 's/.* via //' | sort -u | paste -sd ' '; }

# check_emulated NAME: an --emulate-pcie run kept NCCL off NVLink: NCCL read NCCL_P2P_DISABLE=1 (its "set by
# environment" line), no channel went through P2P and some through SHM or NET, NVLink SHARP was not set up, and the
# header, the report and `report` carry the label.
check_emulated() {
  local name=$1 used
  used=$(transports "$name")
  if ! grep -q "NCCL_P2P_DISABLE set by environment to 1" "$scratch/$name.out"; then
    verdict "$name env" "FAILED: no 'NCCL_P2P_DISABLE set by environment to 1' line from NCCL"
  else verdict "$name env" "ok (NCCL read NCCL_P2P_DISABLE=1)"; fi
  if [[ -z $used ]]; then verdict "$name transport" "FAILED: no NCCL 'Channel ... via' line (NCCL_DEBUG=INFO)"
  elif [[ " $used " == *" P2P "* ]]; then verdict "$name transport" "FAILED: via $used: P2P still used"
  else verdict "$name transport" "ok (via $used, no P2P)"; fi
  if grep -q "NVLS multicast support is available" "$scratch/$name.out"; then
    verdict "$name nvls" "FAILED: NCCL set up NVLink SHARP"
  else verdict "$name nvls" "ok (no NVLS)"; fi
  local label
  label=$(grep -m1 '^# intra-node fabric: PCIe emulated on ' "$scratch/$name.out")
  if [[ $label == *"(NCCL_P2P_DISABLE=1, NCCL_NVLS_ENABLE=0)" ]]; then verdict "$name header" "ok (${label#\# })"
  else verdict "$name header" "FAILED: no label line in the header: '${label}'"; fi
  "$bundle/run" trainbench report "$out/$name.h5" --sections config >"$scratch/$name.report" 2>&1
  if grep -qE '^ emulated_fabric +pcie$' "$scratch/$name.report" &&
     grep -qE '^#     intra-node fabric: PCIe emulated on .*\(NCCL_P2P_DISABLE=1, NCCL_NVLS_ENABLE=0\)$' "$scratch/$name.report"; then
    verdict "$name report" "ok (emulated_fabric pcie, labelled)"
  else verdict "$name report" "FAILED: $(head -c 600 "$scratch/$name.report")"; fi
}

# --- collectives (issue 37): every operation on one GPU up to 1 GiB, checked on the device, timed through CUDA graphs
# of aggregated operations; the sweep's own time (the host-side check of 1 GiB once took most of a minute), and the
# header's and footer's word on what ran.
collectives_device_sweep() {
  local name=collectives start=$SECONDS
  step "$name" 120 mpirun -np 1 --bind-to none trainbench collectives --backend cuda --ops all -b 1M -e 1G -f 4 -d bf16 \
    --cuda-graph 2 --aggregate 4 -o "$out/collectives.h5"
  verdict "$name sweep time" "ok ($((SECONDS - start)) s for 7 operations x 6 sizes x 2 modes, 1 MiB .. 1 GiB, bf16)"
  if grep -q "^# 4 ops per iteration issued together (--aggregate), the timed batch launched 2 times as a CUDA graph \
(--cuda-graph); buffer offsets rotate between iterations; verified on the device$" "$scratch/$name.out"; then
    verdict "$name header" "ok (aggregate 4, CUDA graph x2, offsets rotate, verified on the device)"
  else verdict "$name header" "FAILED: $(grep -m1 -E '^# [0-9]+ ops? per iteration' "$scratch/$name.out")"; fi
  if grep -q "^# Out of bounds values : 0 OK$" "$scratch/$name.out" && [[ $(grep -c "^ *1073741824 " "$scratch/$name.out") -eq 7 ]]; then
    verdict "$name verified" "ok (0 wrong elements; every operation reached 1 GiB)"
  else verdict "$name verified" "FAILED: $(grep -m1 '^# Out of bounds' "$scratch/$name.out"), $(grep -c "^ *1073741824 " "$scratch/$name.out") rows of 1 GiB"; fi
  grep -hE '^# busbw:|^# Avg bus bandwidth' "$scratch/$name.out" | sort -u | tee -a "$log"
}

train() {  # train NAME SECONDS ARGS...: one training run on one GPU, with its report and its first-loss check
  local name=$1 limit=$2; shift 2
  # Unbound: Open MPI binds a lone rank to one core, and the initial weights are drawn on every core it may use.
  step "$name" "$limit" mpirun -np 1 --bind-to none trainbench train --backend cuda "$@" -o "$out/$name.h5" &&
    check_first_loss "$name" 50257  # GPT-2's vocabulary, both presets
}

# --- Parts for what changed since 2026-12-04 (issue 37) ------------------------------------------------------------
# Each begins with part_begin (a heading) and ends with part_end (PASS when none of its steps failed, else FAIL;
# SKIPPED with the reason when the host lacks what it needs). Reports are read with the host's python3 and h5py.
python=${TB_CHECK_PYTHON:-python3}
part_failures_before=0
part_begin() {  # part_begin TEXT
  part_failures_before=$failures
  printf '\n## part %s: %s\n' "$part" "$1" | tee -a "$log"
}
part_end() {  # part_end [SKIPPED REASON]
  if [[ $# -gt 0 ]]; then echo "PART $part: SKIPPED ($1)" | tee -a "$log"
  elif [[ $failures -eq $part_failures_before ]]; then echo "PART $part: PASS" | tee -a "$log"
  else echo "PART $part: FAIL ($((failures - part_failures_before)) failed)" | tee -a "$log"; fi
}
gpu_count() { nvidia-smi -L 2>/dev/null | grep -c '^GPU '; }

# compare_losses NAME REFERENCE TOLERANCE: every step's loss (rank 0, from the reports) within TOLERANCE x the
# reference's: the same weights and tokens must train the same whatever the mode shards.
compare_losses() {
  local text
  if text=$("$python" - "$out/$1.h5" "$out/$2.h5" "$3" <<'EOF' 2>&1
import sys, h5py
def losses(path):
    with h5py.File(path, "r") as f:  # the run's point (one per run here: k1, or k2 on 2 GPUs)
        rows = f["train"][sorted(k for k in f["train"] if k.startswith("k"))[-1]]["steps"][:]
    return {int(r["step"]): float(r["loss"]) for r in rows if int(r["rank"]) == 0}
mode, ref, tol = losses(sys.argv[1]), losses(sys.argv[2]), float(sys.argv[3])
if sorted(mode) != sorted(ref) or not ref:
    sys.exit(f"steps differ: {sorted(mode)} against {sorted(ref)}")
worst = max(abs(mode[s] - ref[s]) / abs(ref[s]) for s in ref)
print(" ".join(f"{mode[s]:.5f}/{ref[s]:.5f}" for s in sorted(ref)) + f"; largest relative difference {worst:.2e}")
sys.exit(0 if worst <= tol else 1)
EOF
  ); then verdict "$1 losses" "ok (against $2 within $3: $text)"
  else verdict "$1 losses" "FAILED: against $2, tolerance $3: $text"; fi
}

compare_steps() {  # compare_steps A B: the median measured step of run A against run B's (info: A/B)
  local text
  text=$("$python" - "$out/$1.h5" "$out/$2.h5" <<'EOF' 2>&1
import sys, h5py, numpy as np
def median_step(path):
    with h5py.File(path, "r") as f:
        rows = f["train"][sorted(k for k in f["train"] if k.startswith("k"))[-1]]["steps"][:]
    return float(np.median(rows[rows["warmup"] == 0]["step_s"]))
a, b = median_step(sys.argv[1]), median_step(sys.argv[2])
print(f"median step {a * 1e3:.2f} ms against {b * 1e3:.2f} ms: {a / b:.3f}x the time")
EOF
  ) || { verdict "$1 step" "FAILED: $text"; return 1; }
  verdict "$1 step" "ok (one run each, not a paired benchmark: $text)"
}

part_parallel() {
  part_begin "zero1, fsdp and tensor parallel on the CUDA model (train --backend cuda; losses against dp)"
  local gpus common=(--model gpt2-124m --micro-batch 8 --warmup-steps 1 --steps 5 --lr 1e-3)
  gpus=$(gpu_count)
  # One rank: zero1 and fsdp shard over one rank, so every step's loss must be dp's (the learning rate makes the
  # optimizer's updates show in the losses within 6 steps).
  train par_dp 60 "${common[@]}"
  train par_zero1 60 "${common[@]}" --parallel zero1 && compare_losses par_zero1 par_dp 1e-4
  train par_fsdp 60 "${common[@]}" --parallel fsdp && compare_losses par_fsdp par_dp 1e-4
  # Gradient accumulation: 2 micro-batches of 4 are the batch of 8's tokens, so the losses are dp's within bf16's
  # summation order; under fsdp the shards accumulate on the device (AddFloats).
  local accum=(--model gpt2-124m --micro-batch 4 --grad-accum 2 --warmup-steps 1 --steps 5 --lr 1e-3)
  train par_dp_ga 60 "${accum[@]}" && compare_losses par_dp_ga par_dp 2e-3
  train par_fsdp_ga 60 "${accum[@]}" --parallel fsdp && compare_losses par_fsdp_ga par_dp 2e-3
  if [[ $gpus -ge 2 ]]; then  # across 2 GPUs: NCCL between devices, and tensor parallel through train
    for mode in dp zero1 fsdp; do
      step "par_${mode}_2gpu" 90 mpirun -np 2 --bind-to none trainbench train --backend cuda "${common[@]}" \
        --parallel "$mode" -o "$out/par_${mode}_2gpu.h5" && check_first_loss "par_${mode}_2gpu" 50257
    done
    compare_losses par_zero1_2gpu par_dp_2gpu 1e-4
    compare_losses par_fsdp_2gpu par_dp_2gpu 1e-4
    # A tensor-parallel group of 2 reads the tokens of data-parallel rank 0: the one-rank run's. With --op-times: the
    # tensor-parallel model's marks on the GPU, its all-reduces in the comm_model row of the table in the log.
    step par_tp2 90 mpirun -np 2 --bind-to none trainbench train --backend cuda "${common[@]}" --tensor-parallel 2 \
      --op-times -o "$out/par_tp2.h5" && check_first_loss par_tp2 50257 && compare_losses par_tp2 par_dp 2e-3
    # Pipeline stages (issue 38): 2 stages over 2 GPUs, 4 micro-batches of 2 in 1F1B (NCCL send/recv between the
    # GPUs) against one GPU's 4 accumulated micro-batches of 2: the same tokens.
    train par_dp_ga4 60 --model gpt2-124m --micro-batch 2 --grad-accum 4 --warmup-steps 1 --steps 5 --lr 1e-3
    step par_pp2 90 mpirun -np 2 --bind-to none trainbench train --backend cuda --model gpt2-124m --micro-batch 2 \
      --pipeline-parallel 2 --micro-batches 4 --warmup-steps 1 --steps 5 --lr 1e-3 -o "$out/par_pp2.h5" &&
      compare_losses par_pp2 par_dp_ga4 2e-3
    # Expert parallel (issue 39): moe-tiny's 4 experts over 2 GPUs (NCCL all-to-alls) against one GPU's 2 accumulated
    # micro-batches: the same tokens; routing ties may tip a choice between bf16 runs, so 2e-2.
    step par_moe_ga2 60 mpirun -np 1 --bind-to none trainbench train --backend cuda --model moe-tiny --grad-accum 2 \
      --warmup-steps 1 --steps 5 -o "$out/par_moe_ga2.h5"
    step par_ep2 90 mpirun -np 2 --bind-to none trainbench train --backend cuda --model moe-tiny --expert-parallel 2 \
      --warmup-steps 1 --steps 5 --op-times -o "$out/par_ep2.h5" && compare_losses par_ep2 par_moe_ga2 2e-2
  else
    verdict "par_2gpu" "skipped: $gpus GPU(s): train puts one rank on each GPU (two ranks on one GPU are refused), so zero1, fsdp and tensor parallel across GPUs need 2"
    # The CUDA tensor-parallel model as threads sharing this GPU, T = 1, 2, 4, against the CPU reference and the
    # full model (tests/gpu_tp_transformer_test.cc), and the CUDA model as 2 pipeline stages of 2 micro-batches on
    # this GPU against the whole CPU model (tests/gpu_transformer_test.cc, issue 38).
    step par_tp_threads 90 gpu_tests --gtest_color=no --gtest_filter='CudaTensorParallel.*:CudaTransformer.Pipeline*' \
      --gtest_output="xml:$out/par_tp_threads.xml"
    grep -E '^\[ +(OK|FAILED|SKIPPED) +\]' "$scratch/par_tp_threads.out" | tee -a "$log"
  fi
  part_end
}

# The deferred snapshot's fence (src/storage/checkpoint.h BeforeUpdate, before the optimizer step after an async
# checkpoint): on a GPU the state is device memory, copied at Save(), so the fence has nothing to wait for. The
# 2026-12-04 run measured 3.9 ms there before the fix that makes it wait only for a block of host state.
check_fence() {  # check_fence NAME
  local text
  if text=$("$python" - "$out/$1.h5" <<'EOF' 2>&1
import sys, h5py
with h5py.File(sys.argv[1], "r") as f:
    steps = {int(r["step"]): r for r in f["train/k1/steps"][:] if int(r["rank"]) == 0}
    checkpoints = [r for r in f["io/k1/checkpoints"][:] if int(r["rank"]) == 0]
fences = []
print(f"{'checkpoint':>10} {'save stall ms':>14} {'fence stall ms':>15} {'write s':>8} {'copy s':>7}")
for c in checkpoints:
    s = int(c["step"])  # steps completed: saved at the end of step s-1, fenced before step s's optimizer
    save = steps[s - 1]["checkpoint_stall_s"] * 1e3 if s - 1 in steps else float("nan")
    fence = steps[s]["checkpoint_stall_s"] * 1e3 if s in steps else None
    if fence is not None:
        fences.append(fence)
    print(f"{s:>10} {save:>14.3f} {'(last)' if fence is None else f'{fence:.3f}':>15} "
          f"{float(c['write_s']):>8.3f} {float(c['copy_s']):>7.3f}")
if not fences:
    sys.exit("no step after a checkpoint: nothing fenced")
print(f"largest fence stall {max(fences):.3f} ms (limit 1 ms; 3.9 ms on 2026-12-04 before the fix)")
sys.exit(0 if max(fences) <= 1.0 else 1)
EOF
  ); then echo "$text" | tee -a "$log"; verdict "$1 fence" "ok ($(tail -n1 <<<"$text"))"
  else echo "$text" | tee -a "$log"; verdict "$1 fence" "FAILED: $(tail -n1 <<<"$text")"; fi
}

part_fence() {
  part_begin "the async checkpoint's deferred-snapshot fence before the next optimizer step"
  # Checkpoints after 3, 6 and 9 steps (the warm-up step counts): each fenced in the step after it.
  train fence_async 90 --model gpt2-124m --micro-batch 8 --warmup-steps 1 --steps 9 --checkpoint-mode async \
    --checkpoint-dir "$scratch/ckpt_fence" --checkpoint-every 3 --checkpoint-verify && check_fence fence_async
  part_end
}

part_probe() {
  part_begin "the cross-node link probe's device path (collectives/link_probe.cc over NCCL)"
  # train probes only when its ranks span nodes (MPI_COMM_TYPE_SHARED: one node per host), each rank on a GPU of its
  # own; one lent machine is one node, and trainbench has no way to place its ranks on separate nodes of one host.
  part_end "the probe runs only across nodes and this is 1 host with $(gpu_count) GPU(s); its MPI path is tested by link_probe_mpi_test"
}

part_optimes() {
  part_begin "train --op-times: time per operation of a gpt2-124m step"
  if ! "$bundle/run" trainbench train --help 2>&1 | grep -c -- '--op-times' >/dev/null; then
    part_end "this trainbench's train --help has no --op-times"
    return
  fi
  train optimes 90 --model gpt2-124m --micro-batch 16 --warmup-steps 2 --steps 5 --op-times
  # The table, from its "# op times" heading to the point's "# k=" summary; if train words it otherwise, all it
  # printed but the per-step lines.
  local table
  table=$(sed -n '/^# op times/,/^# k=/p' "$scratch/optimes.out" | sed '$d')
  [[ -n $table ]] || table=$(grep -v -E '^step +[0-9]+' "$scratch/optimes.out")
  echo "$table" | tee -a "$log"
  part_end
}

# The memory-bound kernels of one training step under Nsight Compute: trainbench's own kernels (named ...Kernel by
# the house style: LayerNorm, GELU, residual, cross-entropy, AdamW, casts; the GEMMs are cuBLASLt's and the attention
# cuDNN's, both left out), a 2-layer gpt2-124m at micro-batch 8 x 1024, one step. SpeedOfLight gives duration, DRAM
# throughput % of peak and SM throughput %; dram bytes give the rate. --clock-control none leaves the GPU's clocks
# as they are (ncu would lock them to base otherwise).
part_ncu() {
  part_begin "Nsight Compute: trainbench's own (memory-bound) kernels in one training step"
  local ncu candidate
  ncu=$(command -v ncu)
  for candidate in /usr/local/cuda/bin/ncu /opt/nvidia/nsight-compute/*/ncu; do
    [[ -z $ncu && -x $candidate ]] && ncu=$candidate
  done
  if [[ ! -x $ncu ]]; then part_end "no ncu on this host"; return; fi
  echo "# $("$ncu" --version 2>&1 | tail -n1)" | tee -a "$log"
  echo "=== ncu_step: $ncu ... trainbench train (limit 150s)" >>"$log"
  local start=$SECONDS
  timeout 150 "$ncu" --clock-control none --target-processes all --kernel-name regex:Kernel --launch-count 400 \
    --section SpeedOfLight --metrics dram__bytes_read.sum,dram__bytes_write.sum --force-overwrite \
    --export "$out/ncu_step" "$bundle/run" trainbench train --backend cuda --model gpt2-124m --layers 2 \
    --micro-batch 8 --warmup-steps 0 --steps 1 -o "$out/ncu_train.h5" >"$scratch/ncu_step.out" 2>&1
  local rc=$?
  cat "$scratch/ncu_step.out" >>"$log"
  if [[ $rc -ne 0 || ! -f $out/ncu_step.ncu-rep ]]; then
    verdict ncu_step "FAILED: exit $rc after $((SECONDS - start)) s: $(grep -m1 -E '==ERROR==|error' "$scratch/ncu_step.out")"
    part_end
    return
  fi
  verdict ncu_step "ok ($((SECONDS - start)) s)"
  "$ncu" --import "$out/ncu_step.ncu-rep" --csv --page raw --print-units base >"$scratch/ncu_raw.csv" 2>&1
  local table
  if table=$("$python" - "$scratch/ncu_raw.csv" <<'EOF' 2>&1
import csv, re, sys
rows = list(csv.reader(open(sys.argv[1])))
start = next((i for i, r in enumerate(rows) if "Kernel Name" in r), None)
if start is None:
    sys.exit("no 'Kernel Name' column in ncu's CSV: " + " | ".join(",".join(r)[:200] for r in rows[:3]))
head, data = rows[start], [r for r in rows[start + 2:] if len(r) == len(rows[start])]  # row start+1: units
col = {name: head.index(name) for name in head}
def value(r, name):
    try:
        return float(r[col[name]].replace(",", "")) if name in col else float("nan")
    except ValueError:
        return float("nan")
kernels = {}
for r in data:
    # "void tb::gpu::(anonymous namespace)::LayerNormForwardKernel<__nv_bfloat16>(float*, ...)" -> the identifier
    # before the parameter list (ncu may also give the bare name).
    raw = r[col["Kernel Name"]]
    found = re.search(r"([A-Za-z_]\w*)\s*(?:<[^()]*>)?\s*\(", raw)
    name = found.group(1) if found else raw
    if name == "FillKernel":  # the start-up GEMM-rate measurement's operands (models/cuda/gemm_rate.cu), not the step's
        continue
    k = kernels.setdefault(name, {"calls": 0, "ns": 0.0, "dram_pct_ns": 0.0, "sm_pct_ns": 0.0, "bytes": 0.0})
    ns = value(r, "gpu__time_duration.sum")
    k["calls"] += 1
    k["ns"] += ns
    k["dram_pct_ns"] += value(r, "dram__throughput.avg.pct_of_peak_sustained_elapsed") * ns
    k["sm_pct_ns"] += value(r, "sm__throughput.avg.pct_of_peak_sustained_elapsed") * ns
    k["bytes"] += value(r, "dram__bytes_read.sum") + value(r, "dram__bytes_write.sum")
if not kernels:
    sys.exit("no kernel rows in ncu's CSV")
total = sum(k["ns"] for k in kernels.values())
print(f"{'kernel':<40} {'calls':>5} {'total us':>9} {'mean us':>8} {'DRAM %':>7} {'SM %':>6} {'GB/s':>7} bound")
for name, k in sorted(kernels.items(), key=lambda kv: -kv[1]["ns"]):
    dram, sm = k["dram_pct_ns"] / k["ns"], k["sm_pct_ns"] / k["ns"]
    print(f"{name[:40]:<40} {k['calls']:>5} {k['ns'] / 1e3:>9.1f} {k['ns'] / k['calls'] / 1e3:>8.1f} {dram:>7.1f} "
          f"{sm:>6.1f} {k['bytes'] / k['ns']:>7.0f} {'memory' if dram >= sm else 'compute'}")
print(f"# {sum(k['calls'] for k in kernels.values())} launches of {len(kernels)} kernels, {total / 1e3:.1f} us in all; DRAM % and SM % are "
      "time-weighted means of ncu's SpeedOfLight (% of peak sustained); GB/s = DRAM bytes read + written / duration")
EOF
  ); then echo "$table" | tee -a "$log"; verdict ncu_table "ok ($(tail -n1 <<<"$table" | cut -d';' -f1 | sed 's/^# //'))"
  else echo "$table" | tee -a "$log"; head -n 5 "$scratch/ncu_raw.csv" >>"$log"; verdict ncu_table "FAILED: $(tail -n1 <<<"$table")"; fi
  part_end
}

part_peer() {
  part_begin "trainbench against its PyTorch peer, eager and compiled (tests/perf/gpu_vs_pytorch.sh, one round)"
  if ! "$python" -c 'import torch; assert torch.cuda.is_available()' >/dev/null 2>&1; then
    part_end "$python has no PyTorch that sees a GPU"
    return
  fi
  # gpu_check_all.sh passes the seconds it has left (TB_PEER_BUDGET); runs that would not fit are skipped.
  local budget=${TB_PEER_BUDGET:-270}
  [[ $budget -gt 270 ]] && budget=270
  echo "=== peer: gpu_vs_pytorch.sh --rounds 1 --budget $budget (limit $((budget + 10))s)" >>"$log"
  local start=$SECONDS
  timeout $((budget + 10)) "$here/gpu_vs_pytorch.sh" --rounds 1 --budget "$budget" "$bundle" "$out/peer" 2>&1 |
    tee -a "$log"
  local rc=${PIPESTATUS[0]}
  if [[ $rc -eq 0 ]]; then verdict peer "ok ($((SECONDS - start)) s)"
  else verdict peer "FAILED: exit $rc after $((SECONDS - start)) s (gpu_vs_pytorch.log in the archive)"; fi
  part_end
}
# --- end of the issue-37 parts ---------------------------------------------------------------------------------------

{
  echo "# gpu_check $part $(date -u +%Y-%m-%dT%H:%M:%SZ) on $(hostname)"
  nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm,power.limit --format=csv 2>&1
  nvidia-smi 2>/dev/null | grep -m1 -o "Driver Version.*CUDA Version: *[0-9.]*"  # even if trainbench cannot start
} | tee "$log"
# Versions first: driver, CUDA runtime, cuDNN and NCCL as the programs load them (trainbench info's library line).
step info 40 mpirun -np 1 trainbench info -o "$out/info.h5"
grep -m1 '^# libraries' "$scratch/info.out" | tee -a "$log"

case $part in
  tests)
    step gpu_tests 200 gpu_tests --gtest_color=no --gtest_output="xml:$out/gpu_tests.xml"
    grep -E "^\[  (FAILED|SKIPPED) |^\[  PASSED|^\[==========\]" "$scratch/gpu_tests.out" | tail -n 12 | tee -a "$log"
    check_skips
    collectives_device_sweep
    ;;
  train)
    train train_124m 100 --model gpt2-124m --micro-batch 16 --steps 20
    # CUDA graphs of the step (issue 37 item 8): the same run replayed from graphs, its losses the eager run's (the
    # autotuner may choose other algorithms in another process: 2e-3), its median step against the eager one's.
    train train_124m_graph 100 --model gpt2-124m --micro-batch 16 --steps 20 --cuda-graph &&
      compare_losses train_124m_graph train_124m 2e-3 && compare_steps train_124m_graph train_124m
    train train_1p5b 140 --model gpt2-1.5b --micro-batch 8 --steps 10 --warmup-steps 2 && \
      check_attention train_1p5b cudnn-sdpa

    # MoE blocks (issue 39): two of Mixtral-8x7B's layers (8 experts of 14336, top-2; --op-times: the MoE layer's
    # share of the step, its MLP rate in the active convention), and moe-tiny against the CPU backend's losses from the
    # same weights and tokens (bf16 against fp32: 2%).
    train train_moe_mixtral 140 --model moe-mixtral-8x7b --layers 2 --micro-batch 4 --steps 10 --warmup-steps 2 \
      --op-times
    step train_moe_tiny 60 mpirun -np 1 --bind-to none trainbench train --backend cuda --model moe-tiny --steps 10 \
      --warmup-steps 0 -o "$out/train_moe_tiny.h5"
    step train_moe_tiny_cpu 120 mpirun -np 1 --bind-to none trainbench train --backend cpu --model moe-tiny \
      --steps 10 --warmup-steps 0 -o "$out/train_moe_tiny_cpu.h5" && compare_losses train_moe_tiny train_moe_tiny_cpu 0.02
    ;;
  cublas)
    train train_1p5b_cublas 140 --model gpt2-1.5b --micro-batch 8 --steps 10 --warmup-steps 2 --attention cublas
    ;;
  io)  # the checkpoint's device-to-host snapshot and the loader's host-to-device copies on a real device
    step data_generate 40 mpirun -np 1 trainbench data generate --dir "$scratch/data" --tokens 20M --vocab 50257
    for mode in sync async; do
      train "io_$mode" 60 --model gpt2-124m --micro-batch 8 --steps 10 --warmup-steps 1 --data "$scratch/data" \
        --checkpoint-dir "$scratch/ckpt_$mode" --checkpoint-every 5 --checkpoint-mode "$mode" --checkpoint-verify
    done
    # The resumed run starts from step 10's state, so its first loss is not ln V: only its exit status counts.
    step io_resume 60 mpirun -np 1 --bind-to none trainbench train --backend cuda --model gpt2-124m --micro-batch 8 \
      --steps 15 --warmup-steps 0 --data "$scratch/data" --resume "$scratch/ckpt_async" -o "$out/io_resume.h5"
    ;;
  emulate)  # --emulate-pcie (issue 36): the same all_reduce sweep on the node's own fabric, then emulated
    gpus=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU ')
    if [[ $gpus -lt 2 ]]; then
      verdict emulate_pcie "skipped: this host has $gpus GPU(s); --emulate-pcie changes the path between the GPUs of a node, so it needs 2 or more"
    else
      export NCCL_DEBUG=INFO  # the transport of each channel, and NCCL's "set by environment" lines
      sweep=(collectives --backend cuda --ops all_reduce -b 1M -e 512M -f 4 -n 10 -w 3)
      step emulate_own 120 mpirun -np "$gpus" --bind-to none trainbench "${sweep[@]}" -o "$out/emulate_own.h5"
      verdict "emulate_own transport" "ok (via $(transports emulate_own); the node's own fabric, for the ratio)"
      step emulate_pcie 150 mpirun -np "$gpus" --bind-to none trainbench "${sweep[@]}" --emulate-pcie \
        -o "$out/emulate_pcie.h5" && check_emulated emulate_pcie
      # A variable set against it: one line, exit 2, no report, before NCCL starts.
      (export NCCL_P2P_DISABLE=0; timeout 40 "$bundle/run" mpirun -np 2 --bind-to none trainbench "${sweep[@]}" \
        --emulate-pcie -o "$out/emulate_conflict.h5") >"$scratch/emulate_conflict.out" 2>&1
      rc=$?
      cat "$scratch/emulate_conflict.out" >>"$log"
      if [[ $rc -eq 2 && ! -e $out/emulate_conflict.h5 ]] && grep -q "trainbench: error: --emulate-pcie: \
NCCL_P2P_DISABLE=0 is set in the environment; it would re-enable NVLink peer-to-peer" "$scratch/emulate_conflict.out"; then
        verdict "emulate_conflict" "ok (exit 2, one line, no report)"
      else verdict "emulate_conflict" "FAILED: exit $rc: $(grep -m1 trainbench: "$scratch/emulate_conflict.out")"; fi
      grep -hE '^# Avg bus bandwidth' "$scratch/emulate_own.out" "$scratch/emulate_pcie.out" | tee -a "$log"
    fi
    ;;
  parallel) part_parallel ;;
  fence) part_fence ;;
  probe) part_probe ;;
  optimes) part_optimes ;;
  ncu) part_ncu ;;
  peer) part_peer ;;
esac

{
  echo
  echo "# summary ($part): $failures failed"
  grep -hE "^# (peak FLOP|attention|model setup)|^# k=|^#   MFU" "$scratch"/*.out 2>/dev/null
} | tee -a "$log"
[[ $failures -eq 0 ]]
