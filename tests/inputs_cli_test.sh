#!/usr/bin/env bash
# End-to-end tests of the shared input rules (issue 10): every numeric flag of every command goes through the one
# range-checked parser (found from each command's --help, so a new flag is covered the day it is added); list
# items, stray words and flags that need another flag; outputs that are an input of the run or not a regular
# file; inputs that are FIFOs; a run whose memory cannot fit. Each bad input is one line and exit 2, before any
# work, and every input file is byte-identical afterwards.
#   inputs_cli_test.sh TRAINBENCH MPIEXEC [MPIEXEC FLAGS...]
set -uo pipefail
tb=$1; shift; mpiexec=("$@")
work=$(mktemp -d); trap 'rm -rf "$work"' EXIT
source "$(dirname "${BASH_SOURCE[0]}")/cli_lib.sh"
export OPENBLAS_NUM_THREADS=1
cd "$work"

# --- every numeric flag: one parser, its range in --help ------------------------------------------------------------
# numeric_flags COMMAND...: the flags whose --help value is a ranged number ("--steps N>=1 (=20)").
numeric_flags() { "$tb" "$@" --help | grep -oE -- '--[a-z-]+ [NX]( in |[<>])' | awk '{print $1}' | sort -u; }
for command in "collectives" "p2p" "train" "data generate" "data verify" "cost" "info"; do
  read -ra cmd <<<"$command"
  checks=$((checks + 1))
  # A flag with a numeric default that is not a ranged value bypasses the mechanism (byte sizes are strings that
  # ParseSize reads, the one grammar of sizes).
  if "$tb" "${cmd[@]}" --help | grep -E -- '--[a-z-]+ arg \(=-?[0-9.]+\)' | grep -vE -- '--latency-size '; then
    fail "$command --help: a numeric flag without a range (above)"
  fi
  for flag in $(numeric_flags "${cmd[@]}"); do
    for bad in nan -inf 0x10 99999999999999999999 ""; do
      expect_error 2 "^trainbench: error: $flag '$bad': (not a decimal|out of range|too large).*\(accepted: " -- \
        "$tb" "${cmd[@]}" "$flag" "$bad"
    done
  done
done
[[ $(numeric_flags train | wc -l) -ge 19 ]] || fail "train --help lists fewer ranged flags than it has"
expect_error 2 "--lr '0': out of range \(accepted: a number in \(0, 1\]\)" -- "$tb" train --model tiny --lr 0
expect_error 2 "--seq '0': out of range" -- "$tb" train --model tiny --seq 0
expect_error 2 "--seq '-1': out of range" -- "$tb" train --model tiny --seq -1
expect_error 2 "--heads '0': out of range" -- "$tb" train --model custom --layers 2 --d-model 64 --heads 0
expect_error 2 "--global-batch '0': out of range" -- "$tb" train --model tiny --scaling-mode strong --global-batch 0
expect_error 2 "--threshold '0': out of range \(accepted: a number in \(0, 1\]\)" -- "$tb" p2p --threshold 0
expect_error 2 "--timeout '1e99': out of range" -- "$tb" train --model tiny --timeout 1e99
expect_error 2 "--steps '1e3': not a decimal whole number" -- "$tb" train --model tiny --steps 1e3
expect_error 2 "invalid size '0' for --record-bytes: must be at least 1 byte" -- \
  "$tb" train --model tiny --data "$work" --record-bytes 0
expect_error 2 "invalid size '0' for --gpu-memory" -- "$tb" cost --model gpt2-124m --gpu-memory 0
expect_error 2 "invalid size '0x10' for --size" -- "$tb" p2p --size 0x10
expect_error 2 "invalid count '0x10' for --tokens: not a number" -- "$tb" data generate --dir d --tokens 0x10
expect_error 2 "--model custom needs --heads \(and" -- "$tb" train --model custom --layers 2 --d-model 64
# The largest timeout accepted is far inside the watchdog's clock: the run starts and ends normally.
expect_ok timeout 60 "$tb" collectives -b 8 -e 8 -n 1 -w 0 --timeout 1e7 --quiet

# --- lists, stray words, flags that need another ------------------------------------------------------------------
expect_error 2 "--scaling '1,,2': empty item" -- "$tb" train --model tiny --scaling 1,,2
expect_error 2 "--scaling '1,': empty item" -- "$tb" train --model tiny --scaling 1,
expect_error 2 "--sizes '1K,,1M': empty item" -- "$tb" collectives --sizes 1K,,1M
expect_error 2 "--ops ',': empty item" -- "$tb" collectives --ops ,
expect_error 2 "--io-throttle '1e-09': the lowest rate is 0.001 MB/s" -- "$tb" train --model tiny --data "$work" --io-throttle 1e-9
expect_error 2 "--io-throttle '10,': empty item" -- "$tb" train --model tiny --data "$work" --io-throttle 10,
expect_error 2 "unexpected argument 'stray'" -- "$tb" train --model tiny stray
expect_error 2 "unexpected argument '5'" -- "$tb" collectives -n 2 5
expect_error 2 "unexpected argument 'x'" -- "${mpiexec[@]}" -n 2 "$tb" p2p x
expect_error 2 "--d-model goes with --model custom \(--model is 'tiny'\)" -- "$tb" train --model tiny --d-model 64
expect_error 2 "--global-batch goes with --scaling-mode strong" -- "$tb" train --model tiny --global-batch 8
expect_error 2 "--prefetch goes with --data \(not given\)" -- "$tb" train --model tiny --prefetch 2
expect_error 2 "--direct-io goes with --data" -- "$tb" train --model tiny --direct-io
expect_error 2 "--read goes with --data" -- "$tb" train --model tiny --read mmap
expect_error 2 "--data-wait-share goes with --io-throttle" -- "$tb" train --model tiny --data "$work" --data-wait-share 0.1
expect_error 2 "--checkpoint-keep goes with --checkpoint-dir" -- "$tb" train --model tiny --checkpoint-keep 2
expect_error 2 "--checkpoint-mode goes with --checkpoint-dir" -- "$tb" train --model tiny --checkpoint-mode async
expect_error 2 "--zipf-exponent goes with --distribution zipf" -- "$tb" data generate --dir d --tokens 1K --zipf-exponent 2
expect_error 2 "--sizes and --minbytes cannot be given together" -- "$tb" collectives --sizes 1K -b 8
expect_error 2 "--layers goes with --model" -- "$tb" cost --layers 2
expect_error 2 "--inter-node-gbps goes with --project" -- "$tb" cost --model gpt2-124m --gpu-memory 80G --inter-node-gbps 100
expect_error 2 "--train-tokens and --train-steps cannot be given together" -- "$tb" cost --train-tokens 1G --train-steps 5

# --- nothing we write may destroy an input -------------------------------------------------------------------------
small=(--model tiny --seq 32 --micro-batch 2 --warmup-steps 1 --steps 2 --quiet)
expect_ok "$tb" data generate --dir D --tokens 50K --shard-tokens 20K --vocab 4096 --quiet
expect_ok "$tb" train "${small[@]}" --checkpoint-dir CK --checkpoint-every 2 -o R.h5
prices=$(dirname "${BASH_SOURCE[0]}")/../launch/prices.example.toml
cp "$prices" P.toml
ln D/shard-00001.tbs hardlink.tbs
ln -s R.h5 symlink.h5
mkfifo F
inputs=(D/* R.h5 CK/step-00000002/* P.toml)
sha256sum "${inputs[@]}" >before.sha
expect_error 2 "refusing to write -o 'D/shard-00000.tbs': it is the input 'D/shard-00000.tbs' of this run" -- \
  "$tb" train "${small[@]}" --data D -o D/shard-00000.tbs
expect_error 2 "refusing to write -o 'hardlink.tbs': it is the input 'D/shard-00001.tbs'" -- \
  "$tb" train "${small[@]}" --data D -o hardlink.tbs
expect_error 2 "refusing to write -o 'CK/step-00000002/rank-00000.bin': it is the input" -- \
  "$tb" train "${small[@]}" --resume CK -o CK/step-00000002/rank-00000.bin
expect_error 2 "refusing to write -o 'CK/step-00000002/rank-00000.bin': it is the input" -- \
  "${mpiexec[@]}" -n 1 "$tb" train "${small[@]}" --resume CK/step-00000002 -o CK/step-00000002/rank-00000.bin
expect_error 2 "refusing to write --html 'R.h5': it is the input 'R.h5'" -- "$tb" report R.h5 --html R.h5
expect_error 2 "refusing to write --html 'symlink.h5': it is the input 'R.h5'" -- "$tb" report R.h5 --html symlink.h5
expect_error 2 "refusing to write --html 'P.toml': it is the input 'P.toml'" -- \
  "$tb" cost R.h5 --prices P.toml --train-tokens 1G --device-as "H100 SXM" --html P.toml
expect_error 2 "refusing to write --html 'R.h5': it is the input 'R.h5'" -- \
  "$tb" cost R.h5 --prices P.toml --train-tokens 1G --device-as "H100 SXM" --html R.h5
expect_error 2 "--project '16,,32': empty item" -- "$tb" cost R.h5 --project 16,,32
expect_error 2 "--checkpoint-dir 'D/ck' overlaps --data 'D'" -- \
  "$tb" train "${small[@]}" --data D --checkpoint-dir D/ck --checkpoint-every 1
expect_error 2 "--checkpoint-dir '.' overlaps --data 'D'" -- \
  "$tb" train "${small[@]}" --data D --checkpoint-dir . --checkpoint-every 1
# Outputs that are not regular files are refused, not replaced through the rename.
expect_error 2 "refusing to write -o 'F': it is a FIFO, not a regular file" -- "$tb" collectives -b 8 -e 8 -o F
expect_error 2 "refusing to write -o '/dev/null': it is a character device" -- "$tb" info -o /dev/null
expect_error 2 "refusing to write --html 'F': it is a FIFO" -- "$tb" report R.h5 --html F
checks=$((checks + 1))
[[ -p F && -c /dev/null ]] || fail "a FIFO or /dev/null was replaced"
# Inputs that are not regular files are refused rather than read (reading a FIFO blocks for ever).
expect_error 2 "cannot read report 'F': it is a FIFO, not a regular file" -- "$tb" report F
expect_error 2 "cannot read report 'F': it is a FIFO" -- "$tb" cost F --prices P.toml --train-tokens 1G
expect_error 2 "cannot read price file 'F': it is a FIFO" -- "$tb" cost R.h5 --prices F --train-tokens 1G
mkdir -p CKF/step-00000002 && cp CK/step-00000002/* CKF/step-00000002/ && rm CKF/step-00000002/rank-00000.bin
mkfifo CKF/step-00000002/rank-00000.bin
expect_error 2 "rank-00000.bin: it is a FIFO" -- "$tb" train "${small[@]}" --resume CKF/step-00000002
checks=$((checks + 1))
sha256sum --quiet -c before.sha || fail "an input changed (above)"

# --- memory is checked before it is used ---------------------------------------------------------------------------
expect_error 2 "the run needs an estimated .* of host memory: 1 rank\(s\) on this node, .*activations .* at --micro-batch 100000000.*lower --micro-batch, --seq or --layers" -- \
  "$tb" train --model tiny --micro-batch 100000000
expect_error 2 "the run needs an estimated .* of host memory: 2 rank\(s\) on this node" -- \
  "${mpiexec[@]}" -n 2 "$tb" train --model gpt-70b --layers 40 --micro-batch 1 --seq 128
expect_error 2 "the run needs an estimated .* of host memory: .*send and receive buffers of the largest size.*lower -e/--maxbytes" -- \
  "$tb" collectives -e 1T
expect_error 2 "the run needs an estimated .* of host memory: 2 rank\(s\) on this node" -- \
  "${mpiexec[@]}" -n 2 "$tb" collectives --sizes 1K,1T --ops all_gather
expect_error 2 "the run needs an estimated .* of host memory: .*a send and a receive buffer of --size.*lower --size" -- \
  "$tb" p2p --size 1T

finish inputs_cli_test
