#!/usr/bin/env bash
# What the project checks on a lent GPU, in parts that each end well inside the device tool's 600 s per call (see
# tests/perf/README.md, "gpu_check.sh"). Every part first prints the host's driver, CUDA, cuDNN and NCCL versions
# (`trainbench info`), then runs its steps, each under a time limit, appending to OUT_DIR/gpu_check_PART.log and
# printing a verdict line as each step ends, so that a part cut short still leaves what it did.
#
#   tests    gpu_tests (every CUDA layer against the CPU reference), NCCL collectives on the device   ≤ 360 s
#   train    gpt2-124m and the gpt2-1.5b shape on one GPU with auto attention, which must be cuDNN's   ≤ 280 s
#   cublas   the gpt2-1.5b shape with --attention cublas (the fallback, for the ratio)                 ≤ 180 s
#   io       gpt2-124m reading token shards, checkpointing from device memory (sync, async with
#            read-back verification), then resuming from the newest checkpoint                        ≤ 200 s
#   emulate  --emulate-pcie on every GPU of the node (2 or more; one GPU: skipped, with the reason): all_reduce
#            on NVLink, then emulated; NCCL's transports (NCCL_DEBUG=INFO) and the report's label        ≤ 300 s
#
# Training steps also check the first step's loss: ≈ ln V for random tokens at GPT-2's initialisation.
# Exit status: 0 when every step passed, 1 when one failed, 2 on a usage error.
#
#   tests/perf/gpu_prepare.sh BUNDLE_SCRIPT                      # here: build-gpu (sm_90), .gpu and .gpu.tar.gz
#   tests/perf/gpu_check.sh .gpu.tar.gz OUT_DIR tests|train|cublas|io|emulate   # on the GPU host, one part per call
# BUNDLE is the packed folder or its .tar.gz (unpacked into a scratch folder first).
set -uo pipefail
usage() { echo "usage: tests/perf/gpu_check.sh BUNDLE_DIR|BUNDLE.tar.gz OUT_DIR tests|train|cublas|io|emulate" >&2; exit 2; }
[[ $# -eq 3 && $3 =~ ^(tests|train|cublas|io|emulate)$ ]] || usage
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

train() {  # train NAME SECONDS ARGS...: one training run on one GPU, with its report and its first-loss check
  local name=$1 limit=$2; shift 2
  # Unbound: Open MPI binds a lone rank to one core, and the initial weights are drawn on every core it may use.
  step "$name" "$limit" mpirun -np 1 --bind-to none trainbench train --backend cuda "$@" -o "$out/$name.h5" &&
    check_first_loss "$name" 50257  # GPT-2's vocabulary, both presets
}

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
    step collectives 120 mpirun -np 1 trainbench collectives --backend cuda -b 1M -e 1G -f 4 -d bf16 \
      -o "$out/collectives.h5"
    ;;
  train)
    train train_124m 100 --model gpt2-124m --micro-batch 16 --steps 20
    train train_1p5b 140 --model gpt2-1.5b --micro-batch 8 --steps 10 --warmup-steps 2 && \
      check_attention train_1p5b cudnn-sdpa
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
esac

{
  echo
  echo "# summary ($part): $failures failed"
  grep -hE "^# (peak FLOP|attention|model setup)|^# k=|^#   MFU" "$scratch"/*.out 2>/dev/null
} | tee -a "$log"
[[ $failures -eq 0 ]]
