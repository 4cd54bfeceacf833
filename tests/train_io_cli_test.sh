#!/usr/bin/env bash
# End-to-end tests of `trainbench train`'s storage side: a resumed run is bit-exact (10 steps with a checkpoint at
# 5, resumed from 5 to 10, equal 10 uninterrupted steps: the step-10 checkpoints are compared byte for byte), with
# synthetic tokens and with the loader, sync and async, at 2 ranks, and with another loader and checkpoint set-up;
# a resume that cannot be bit-identical (another trajectory option) is refused naming the option; an older
# manifest; the report's io group; the reason of a stuck step (watchdog) and of a full disk in the report; the
# storage sweep; a corrupt checkpoint; every bad I/O flag gets one line and exit 2 before any rank starts work;
# shard checksums are verified before the first step and a corrupt shard is refused on every rank.
#   train_io_cli_test.sh TRAINBENCH H5DUMP MPIEXEC [MPIEXEC FLAGS...]
set -uo pipefail
tb=$1; h5dump=$2; shift 2; mpiexec=("$@")
work=$(mktemp -d); trap 'rm -rf "$work"' EXIT
source "$(dirname "${BASH_SOURCE[0]}")/cli_lib.sh"
export OPENBLAS_NUM_THREADS=1

tokens=$work/tokens
expect_ok "$tb" data generate --dir "$tokens" --tokens 200K --shard-tokens 60K --vocab 4096 --quiet
small=(--model tiny --seq 32 --micro-batch 2 --warmup-steps 2 --steps 8)

# --- resume is bit-exact ----------------------------------------------------------------------------------------
# same_checkpoint A B: the two checkpoints hold the same bytes (every rank's slice).
same_checkpoint() {
  checks=$((checks + 1))
  local f
  for f in "$1"/rank-*.bin; do
    cmp -s "$f" "$2/$(basename "$f")" || { fail "resume not bit-exact: $f differs from $2/$(basename "$f")"; return; }
  done
}
for mode in sync async; do
  for data in synthetic loader; do
    extra=(); [[ $data == loader ]] && extra=(--data "$tokens" --loader-workers 2)
    a=$work/$mode-$data-a b=$work/$mode-$data-b
    expect_ok "${mpiexec[@]}" -n 2 "$tb" train "${small[@]}" "${extra[@]}" --checkpoint-dir "$a" --checkpoint-every 5 \
      --checkpoint-mode $mode -o "$work/$mode-$data.h5"
    expect_ok "${mpiexec[@]}" -n 2 "$tb" train "${small[@]}" "${extra[@]}" --checkpoint-dir "$b" --checkpoint-every 5 \
      --checkpoint-mode $mode --resume "$a/step-00000005" -o "$work/$mode-$data-resumed.h5"
    grep -q "^# resumed from .*step 5" "$work/out" || fail "$mode/$data: no resume line: $(cat "$work/out")"
    [[ $(grep -c '^step ' "$work/out") -eq 5 ]] || fail "$mode/$data: the resumed run should run steps 5..9"
    same_checkpoint "$a/step-00000010" "$b/step-00000010"
  done
done
# Options that change only when the bytes arrive or which steps are measured may change on resume: loader workers,
# prefetch, checkpoint mode, and the split of the 10 steps into warm-up and measured ones.
b=$work/allowed-b
expect_ok "${mpiexec[@]}" -n 2 "$tb" train --model tiny --seq 32 --micro-batch 2 --warmup-steps 0 --steps 10 \
  --data "$tokens" --loader-workers 1 --prefetch 1 --checkpoint-dir "$b" --checkpoint-every 5 --checkpoint-mode async \
  --resume "$work/sync-loader-a/step-00000005"
same_checkpoint "$work/sync-loader-a/step-00000010" "$b/step-00000010"
# The full run differs from one that never checkpointed only in timing: a different seed must not match.
expect_ok "${mpiexec[@]}" -n 2 "$tb" train "${small[@]}" --seed 99 --checkpoint-dir "$work/other" --checkpoint-every 10
checks=$((checks + 1))
cmp -s "$work/other/step-00000010/rank-00000.bin" "$work/sync-synthetic-a/step-00000010/rank-00000.bin" &&
  fail "two seeds gave the same checkpoint: the comparison above proves nothing"

# --- the report's io group ----------------------------------------------------------------------------------------
r=$work/async-loader.h5
"$h5dump" -d /io/k2/checkpoints "$r" | grep -c >/dev/null '"stall_s"' || fail "io/k2/checkpoints table missing"
"$h5dump" -d /io/k2/loader "$r" | grep -c >/dev/null '"bytes_read"' || fail "io/k2/loader table missing"
"$h5dump" -A -a /io/k2/data_wait_share "$r" >/dev/null 2>&1 || fail "io/k2 lacks data_wait_share"
[[ $("$h5dump" -A -a /io/k2/dataset_files_kept_open "$r" | grep -c "(0): [1-9]") == 1 ]] ||
  fail "io/k2 dataset_files_kept_open missing or 0"
# --read auto: a 400 kB dataset fits a quarter of any host's memory, so its files were read from maps.
[[ $("$h5dump" -A -a /io/k2/dataset_files_mapped "$r" | grep -c "(0): [1-9]") == 1 ]] ||
  fail "io/k2 dataset_files_mapped missing or 0 (--read auto on a small dataset)"
"$h5dump" -H -d /train/k2/steps "$r" | grep -c >/dev/null '"data_bytes"' || fail "steps table lacks data_bytes"
# Two checkpoints (steps 5 and 10) on each of 2 ranks: 4 rows.
"$h5dump" -d /io/k2/checkpoints "$r" | grep -c >/dev/null 'DATASPACE  SIMPLE { ( 4 )' || fail "want 4 checkpoint rows"
"$h5dump" -A -a /io/k2/resumed_step "$work/async-loader-resumed.h5" | grep -c >/dev/null "(0): 5" || fail "resumed_step not 5"

# --- storage sweep: throttled reads show up as data_wait ------------------------------------------------------------
# The rates are far apart so that the crossing is certain on a busy machine: at 100000 MB/s a 128 KiB batch takes
# 1.3 us and stays ahead of the steps; at 0.05 MB/s it takes 2.6 s, several times a step of the tiny model even
# with both cores busy (~0.6 s then). One batch of prefetch: with the default 4 the loader read the measured steps'
# batches ahead while a loaded machine was still starting up, and data_wait stayed under 30% (64 KiB records,
# 2026-12-03). The target share is 30%, not the default 5%: on a loaded machine unpacking the batch (h2d, counted
# in data_wait) can take 5% of a step at the fast rate too, and then no rate crosses.
expect_ok "$tb" train --model tiny --seq 32 --micro-batch 2 --warmup-steps 1 --steps 3 --data "$tokens" \
  --record-bytes 64K --prefetch 1 --io-throttle 100000,0.05 --data-wait-share 0.3 -o "$work/sweep.h5"
grep -q "^# storage sweep: data_wait reaches 30% of step time at" "$work/out" ||
  fail "sweep: no crossing reported: $(grep storage "$work/out")"
"$h5dump" -d /io/throttle_sweep "$work/sweep.h5" | grep -c >/dev/null '"data_wait_share"' || fail "sweep table missing"
"$h5dump" -d /train/k1_throttle0.05/steps "$work/sweep.h5" >/dev/null 2>&1 || fail "sweep point group missing"

# --- why a run ended, in its report -----------------------------------------------------------------------------
# reason_is FILE PATTERN: the report's status is failed and its status_reason matches PATTERN.
reason_is() {
  checks=$((checks + 1))
  "$h5dump" -a /status "$1" | grep -c >/dev/null '(0): "failed"' || { fail "$1: status is not failed"; return; }
  "$h5dump" -a /status_reason "$1" | grep -cE >/dev/null -- "$2" ||
    fail "$1: status_reason lacks /$2/: $("$h5dump" -a /status_reason "$1" | grep '(0)')"
}
# A step stuck on the only rank: its watchdog names it, in the error line and in the report, then aborts.
TRAINBENCH_TEST_FAULT=hang@rank=0 expect_error 1 "timeout: training step 0 on 1 ranks did not complete within 2 s" -- \
  "$tb" train "${small[@]}" --timeout 2 -o "$work/stuck1.h5"
reason_is "$work/stuck1.h5" "^ +\(0\): \"timeout: training step 0 on 1 ranks did not complete within 2 s .*the job was aborted"
# Rank 1 stuck: rank 0 times out waiting for it in the step's all-reduce and records it before the job ends.
checks=$((checks + 1))
TRAINBENCH_TEST_FAULT=hang@rank=1 timeout 120 "${mpiexec[@]}" -n 2 "$tb" train "${small[@]}" --timeout 2 \
  -o "$work/stuck2.h5" >"$work/out" 2>"$work/err"
rc=$?; [[ $rc -eq 1 ]] || fail "stuck rank 1: exit $rc, want 1: $(cat "$work/err")"
# (Rank 0's own timeout, or rank 1's, which tells rank 0 when it comes first: either way rank 1 is named.)
reason_is "$work/stuck2.h5" "timeout: (on rank 1, )?training step 0 on 2 ranks did not complete within 2 s.*; stuck: rank 1 "
# Disk full when the report is rewritten: one line naming the file and the OS error, exit 1; the earlier report
# stays readable, its status saying why it is the last one. (300 steps make a ~70 KB report; the first, ~15 KB.)
full=$work/full
mkdir -p "$full"
if mount -t tmpfs -o size=64k tmpfs "$full" 2>/dev/null; then
  trap 'umount "$full" 2>/dev/null; rm -rf "$work"' EXIT
  checks=$((checks + 1))
  "$tb" train --model tiny --seq 16 --micro-batch 1 --warmup-steps 0 --steps 300 -o "$full/r.h5" --quiet \
    >"$work/out" 2>"$work/err"
  rc=$?; [[ $rc -eq 1 ]] || fail "disk full: exit $rc, want 1"
  [[ $(wc -l <"$work/err") -eq 1 ]] && grep -qE "^trainbench: error: cannot write report '$full/r.h5': cannot write \
$full/r.h5.tmp.[0-9]+: No space left on device; the earlier report stays, marked failed with this reason$" "$work/err" ||
    fail "disk full: want one line naming the file and the OS error: $(cat "$work/err")"
  reason_is "$full/r.h5" "writing the next one \(status complete\) failed: cannot write report .*No space left on device"
  expect_ok "$tb" report "$full/r.h5" --sections config
  ls "$full" | grep -c >/dev/null tmp && fail "disk full: a temporary report was left: $(ls "$full")"
  umount "$full"
else
  echo "SKIP: cannot mount a tmpfs here (needs root and mount permission); disk-full report rewrite not tested"
fi

# --- bad input: one line, exit 2, before any rank starts work --------------------------------------------------------
# Records as large as the host's memory (a sparse file: no disk space): the loader's buffers cannot fit.
memory=$(( $(awk '/^MemTotal:/{print $2}' /proc/meminfo) * 1024 ))
mkdir -p "$work/sparse" && truncate -s "$memory" "$work/sparse/big.bin"
expect_error 2 "the loader's buffers would take .*; lower --prefetch, --record-bytes or --micro-batch" -- \
  "$tb" train "${small[@]}" --data "$work/sparse" --data-raw --record-bytes $((memory / 2)) --prefetch 1
rm -rf "$work/sparse"
expect_error 2 "--checkpoint-every goes with --checkpoint-dir \(not given\)" -- "$tb" train "${small[@]}" --checkpoint-every 5
expect_error 2 "--checkpoint-dir needs --checkpoint-every" -- "$tb" train "${small[@]}" --checkpoint-dir "$work/x"
expect_error 2 "--checkpoint-every '-1': out of range" -- "$tb" train "${small[@]}" --checkpoint-every -1 --checkpoint-dir "$work/x"
expect_error 2 "--checkpoint-mode 'fast': not one of the choices \(accepted: sync\|async\)" -- "$tb" train "${small[@]}" --checkpoint-mode fast \
  --checkpoint-dir "$work/x" --checkpoint-every 5
expect_error 2 "--on-checkpoint-error" -- "$tb" train "${small[@]}" --on-checkpoint-error ignore
expect_error 2 "--resume" -- "$tb" train "${small[@]}" --resume "$work/none"
expect_error 2 "--resume" -- "$tb" train "${small[@]}" --resume "$tokens"
# A continuation that cannot be bit-identical: one line naming the option and both values, before any work.
a5=$work/sync-synthetic-a/step-00000005
expect_error 2 "written with --seed 1234, this run has --seed 7; resume with the same value" -- \
  "${mpiexec[@]}" -n 2 "$tb" train "${small[@]}" --seed 7 --resume "$a5"
expect_error 2 "written with --micro-batch 2, this run has --micro-batch 4; resume with the same value" -- \
  "${mpiexec[@]}" -n 2 "$tb" train --model tiny --seq 32 --micro-batch 4 --warmup-steps 2 --steps 8 --resume "$a5"
expect_error 2 "written with 2 ranks, this run has 1 ranks" -- "$tb" train "${small[@]}" --resume "$a5"
one=$work/one-rank
expect_ok "$tb" train "${small[@]}" --data "$tokens" --checkpoint-dir "$one" --checkpoint-every 5 --quiet
o5=$one/step-00000005
expect_error 2 "written with --seq 32, this run has --seq 16;" -- "$tb" train --model tiny --seq 16 --micro-batch 2 \
  --warmup-steps 2 --steps 8 --data "$tokens" --resume "$o5"
expect_error 2 "written with --lr 0.0003, this run has --lr 0.001;" -- "$tb" train "${small[@]}" --lr 1e-3 \
  --data "$tokens" --resume "$o5"
expect_error 2 "written with --layers 2, this run has --layers 1;" -- "$tb" train "${small[@]}" --layers 1 \
  --data "$tokens" --resume "$o5"
expect_error 2 "written with --data $tokens, this run has no --data;" -- "$tb" train "${small[@]}" --resume "$o5"
expect_error 2 "written with no --record-bytes, this run has --record-bytes 128;" -- "$tb" train "${small[@]}" \
  --data "$tokens" --record-bytes 128 --resume "$o5"
expect_error 2 "written with 2 sequences per rank \(--global-batch / ranks / --grad-accum\), this run has 4 sequences per rank" -- \
  "$tb" train "${small[@]}" --data "$tokens" --scaling-mode strong --global-batch 4 --resume "$o5"
# The same per-rank batch through --scaling-mode strong is the same trajectory: allowed (and a 0.0003 written as
# 3e-4 is the same rate).
expect_ok "$tb" train "${small[@]}" --data "$tokens" --scaling-mode strong --global-batch 2 --lr 3e-4 --resume "$o5"
# A manifest of an older trainbench, without the trajectory values (and its checksum line redone): resumed, with
# a line saying what could not be checked, also kept in the report.
old=$work/old-manifest
cp -r "$o5" "$old"
grep -vE '^(meta (seq|micro_batch|lr|backend|data|data_raw|record_bytes) |crc32c )' "$o5/manifest.txt" |
  resign_manifest >"$old/manifest.txt"
expect_ok "$tb" train "${small[@]}" --data "$tokens" --resume "$old" -o "$work/old.h5"
grep -q "^# resume: the checkpoint (an older trainbench's) does not record --backend, --seq, --micro-batch, --lr, --data, --data-raw, --record-bytes; assumed equal" "$work/out" ||
  fail "old manifest: no line naming the unchecked options: $(cat "$work/out")"
"$h5dump" -A -a /io/k1/resume_unchecked "$work/old.h5" | grep -c >/dev/null -- '--backend, --seq' ||
  fail "io/k1/resume_unchecked missing"
expect_error 2 "at or past this run's last step" -- "${mpiexec[@]}" -n 2 "$tb" train --model tiny --seq 32 --micro-batch 2 --warmup-steps 0 \
  --steps 4 --resume "$work/sync-synthetic-a/step-00000005"
expect_error 2 "was written with --data .*, this run has no --data" -- "${mpiexec[@]}" -n 2 "$tb" train "${small[@]}" \
  --resume "$work/sync-loader-a/step-00000005"
expect_error 2 "written with --model tiny, this run has --model custom;" -- "${mpiexec[@]}" -n 2 "$tb" train \
  --model custom --layers 2 --d-model 128 --heads 4 --vocab 4096 --seq 32 --micro-batch 2 --resume "$a5"
expect_error 2 "data directory '$work/missing'|$work/missing" -- "$tb" train "${small[@]}" --data "$work/missing"
expect_error 2 "--io-throttle goes with --data \(not given\)" -- "$tb" train "${small[@]}" --io-throttle 10
expect_error 2 "--io-throttle 'fast': not a decimal number" -- "$tb" train "${small[@]}" --data "$tokens" --io-throttle fast
expect_error 2 "a storage sweep lists decreasing rates" -- "$tb" train "${small[@]}" --data "$tokens" --io-throttle 10,20
expect_error 2 "a storage sweep.*takes one scaling point" -- "${mpiexec[@]}" -n 2 "$tb" train "${small[@]}" \
  --data "$tokens" --io-throttle 20,10 --scaling 1,2
expect_error 2 "--data-wait-share '2': out of range \(accepted: a number in \(0, 1\)\)" -- "$tb" train "${small[@]}" --data "$tokens" --io-throttle 10 --data-wait-share 2
expect_error 2 "--loader-workers '0': out of range" -- "$tb" train "${small[@]}" --data "$tokens" --loader-workers 0
expect_error 2 "smaller than one sample" -- "$tb" train "${small[@]}" --data "$tokens" --record-bytes 8
expect_error 2 "--read mmap and --direct-io exclude each other" -- "$tb" train "${small[@]}" --data "$tokens" --read mmap \
  --direct-io
expect_error 2 "--read 'mapped': not one of the choices \(accepted: auto\|pread\|mmap\)" -- "$tb" train "${small[@]}" \
  --data "$tokens" --read mapped
expect_ok "$tb" data generate --dir "$work/wide" --tokens 10K --vocab 60000 --quiet
expect_error 2 "beyond model 'tiny' \(vocab 4096\)" -- "$tb" train "${small[@]}" --data "$work/wide"
expect_error 2 "fewer than one global batch" -- "$tb" train --seq 250 --micro-batch 64 --data "$work/wide" \
  --model custom --layers 1 --d-model 64 --heads 2 --vocab 60000
# A corrupt slice: the checksum names the file; every rank refuses with one line.
cp -r "$work/sync-synthetic-a/step-00000005" "$work/corrupt"
printf 'x' | dd of="$work/corrupt/rank-00001.bin" bs=1 seek=100 conv=notrunc status=none
expect_error 2 "rank-00001.bin" -- "${mpiexec[@]}" -n 2 "$tb" train "${small[@]}" --resume "$work/corrupt"

# --- shard checksums: verified before the first step; a corrupt payload is refused on every rank ------------------
"$h5dump" -A -a /io/data_verify_bytes "$work/sync-loader.h5" | grep -c >/dev/null "(0): 400000" ||
  fail "io data_verify_bytes is not the dataset's 200K tokens x 2 B"
bad=$work/bad-tokens; cp -r "$tokens" "$bad"
printf 'x' | dd of="$bad/shard-00003.tbs" bs=1 seek=5000 conv=notrunc status=none  # still a token below 4096
sums=$(md5sum "$bad"/*)
expect_error 2 "rank 1 .*: $bad/shard-00003.tbs: payload checksum mismatch" -- \
  "${mpiexec[@]}" -n 2 "$tb" train "${small[@]}" --data "$bad" -o "$work/bad.h5"
grep -q "^step " "$work/out" && fail "a corrupt shard: steps ran before the refusal"
[[ -e $work/bad.h5 ]] && fail "a corrupt shard: a report was written"
expect_error 2 "^trainbench: error: $bad/shard-00003.tbs: payload checksum mismatch" -- \
  "$tb" train "${small[@]}" --data "$bad" --loader-workers 3
expect_ok "${mpiexec[@]}" -n 2 "$tb" train "${small[@]}" --data "$bad" --skip-data-verify
grep -q "^# data: not verified: --skip-data-verify (shard headers only)" "$work/out" || fail "no --skip-data-verify line"
expect_ok "$tb" train "${small[@]}" --data "$bad" --data-raw
grep -q "^# data: not verified: --data-raw files carry no checksums" "$work/out" || fail "no --data-raw line"
checks=$((checks + 1))
[[ $(md5sum "$bad"/*) == "$sums" ]] || fail "train changed the dataset"
expect_error 2 "--skip-data-verify goes with --data \(not given\)" -- "$tb" train "${small[@]}" --skip-data-verify

finish train_io_cli_test
