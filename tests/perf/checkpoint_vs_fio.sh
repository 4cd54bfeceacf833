#!/usr/bin/env bash
# Checkpoint write throughput against fio writing the same bytes, and the async checkpoint stall against the
# sync one, in one invocation. Per round, in rotating order:
#   fio   N jobs (one file each, S/N bytes), sequential write()s of BLOCK bytes, fsync at the end
#   sync  perf_checkpoint_bench on N ranks: Save() of an S-byte state in sync mode (each rank writes its S/N slice
#         in BLOCK writes and fsyncs it; rank 0 then writes the manifest and renames the directory)
#   async the same in async mode as the training loop uses it: Save(), then emulated steps of STEP ms (the state
#         only read, as by forward and backward), each ending in the fence before its optimizer update
#         (BeforeUpdate: the writer reads the state in place, and the fence copies what it has not read yet) and a
#         Poll(); the stall is Save() plus the fences and Polls until the checkpoint completed
# Prints fio GB/s, checkpoint GB/s (S / sync stall) and their ratio (target >= 0.9), the sync write's stages (CRC,
# write calls, commit = fsync + rename), and async stall / sync stall (target <= 0.05) beside a raw memcpy of the
# same slices (what a fence right after Save() would copy at best). Each target ends with a verdict naming the
# limit: the device (met), the cores (the write calls and CRC took the time, nothing was left for fsync, and every
# core had a writer), the memory (the step was shorter than the write and a memcpy of the slices alone is over 5 %
# of the sync stall), or the writer itself.
#
# usage: tests/perf/checkpoint_vs_fio.sh BUILD_DIR [DIR] [ROUNDS]
#   BUILD_DIR  a build directory holding tests/perf_checkpoint_bench (make perf_checkpoint_bench)
#   DIR        where to write (default: a temporary directory under BUILD_DIR); its filesystem is what is measured
#   ROUNDS     rounds of (fio, sync, async) (default 5)
# Environment: TB_PERF_RANKS (2), TB_PERF_CKPT_BYTES (1073741824), TB_PERF_BLOCK (8388608), TB_PERF_STEP_MS (1000: the
#              emulated training step; a CPU step of gpt2-124m, whose state is 1.49 GB, takes 1.2-1.4 s on this VM),
#              TB_PERF_MPIRUN_FLAGS (extra mpirun flags, default "--oversubscribe --bind-to none": fio's jobs are not pinned either).
# Exit status: 0 whatever the ratios (a benchmark, not a test); 1 when a run failed; 2 on a usage error.
set -euo pipefail

Die() {
  echo "checkpoint_vs_fio.sh: $*" >&2
  exit 1
}

Usage() {
  echo "usage: $0 BUILD_DIR [DIR] [ROUNDS]" >&2
  exit 2
}

[[ $# -ge 1 && $# -le 3 ]] || Usage
BUILD_DIR="$(cd "$1" 2>/dev/null && pwd)" || Die "build directory '$1' does not exist"
readonly BUILD_DIR
readonly BENCH="$BUILD_DIR/tests/perf_checkpoint_bench"
[[ -x "$BENCH" ]] || Die "no $BENCH (build it: cmake --build $BUILD_DIR --target perf_checkpoint_bench)"
readonly ROUNDS="${3:-5}"
readonly STEP_MS="${TB_PERF_STEP_MS:-1000}"
[[ "$STEP_MS" =~ ^[0-9]+$ ]] || { echo "checkpoint_vs_fio.sh: TB_PERF_STEP_MS must be a whole number of ms" >&2; exit 2; }
[[ "$ROUNDS" =~ ^[1-9][0-9]*$ ]] || Usage
FIO="$(command -v fio || true)"
[[ -n "$FIO" ]] || Die "fio is not installed (apt-get install fio)"
readonly FIO
MPIRUN="$(sed -n 's/^MPIEXEC_EXECUTABLE:[A-Z]*=//p' "$BUILD_DIR/CMakeCache.txt" 2>/dev/null | head -n 1)"
[[ -n "$MPIRUN" && -x "$MPIRUN" ]] || MPIRUN="$(command -v mpirun || true)"
[[ -n "$MPIRUN" ]] || Die "no mpirun found"
readonly MPIRUN

readonly RANKS="${TB_PERF_RANKS:-2}"
readonly BYTES="${TB_PERF_CKPT_BYTES:-1073741824}"
readonly BLOCK="${TB_PERF_BLOCK:-8388608}"
((BYTES % RANKS == 0)) || Die "TB_PERF_CKPT_BYTES ($BYTES) must be a multiple of TB_PERF_RANKS ($RANKS): same bytes per file"
readonly FILE_BYTES=$((BYTES / RANKS))
MPIRUN_FLAGS=(-np "$RANKS")
read -r -a extra_flags <<<"${TB_PERF_MPIRUN_FLAGS---oversubscribe --bind-to none}"
MPIRUN_FLAGS+=("${extra_flags[@]}")
[[ "$(id -u)" == 0 ]] && MPIRUN_FLAGS+=(--allow-run-as-root)
readonly MPIRUN_FLAGS

if [[ $# -ge 2 ]]; then
  mkdir -p "$2" || Die "cannot create $2"
  WORK_DIR="$(mktemp -d "$2/checkpoint_vs_fio.XXXXXX")" || Die "cannot create a directory under $2"
else
  WORK_DIR="$(mktemp -d "$BUILD_DIR/checkpoint_vs_fio.XXXXXX")" || Die "cannot create a directory under $BUILD_DIR"
fi
readonly WORK_DIR
trap 'rm -rf "$WORK_DIR"' EXIT
readonly LOG="$WORK_DIR/last.log"
readonly TARGET="$WORK_DIR/target"

# Each run starts on an empty directory with no dirty pages of the previous run still being written back.
Clean() {
  rm -rf "$TARGET"
  mkdir -p "$TARGET"
  sync
}

RunOrDie() {
  if ! "$@" >"$LOG" 2>&1; then
    cat "$LOG" >&2
    Die "command failed: $*"
  fi
}

readonly FIO_CMD=("$FIO" --name=ckpt --directory="$TARGET" --numjobs="$RANKS" --size="$FILE_BYTES" --bs="$BLOCK"
  --rw=write --ioengine=psync --end_fsync=1 --fallocate=none --group_reporting --output-format=terse)

# Prints fio's GB/s: bytes written / group runtime (the runtime includes the final fsync).
RunFio() {
  Clean
  RunOrDie "${FIO_CMD[@]}"
  awk -F';' 'NF > 50 { if ($50 > 0) { printf "%.4f\n", $47 * 1024 / ($50 / 1000) / 1e9; found = 1 } }
             END { exit !found }' "$LOG" || { cat "$LOG" >&2; Die "cannot read fio's terse output"; }
}

# Prints "stall_s write_s crc_s write_calls_s commit_s memcpy_s" of one checkpoint in mode $1 (memcpy_s: async only,
# the bench's raw memcpy of the same slices, else 0).
RunCheckpoint() {
  Clean
  RunOrDie "$MPIRUN" "${MPIRUN_FLAGS[@]}" "$BENCH" --dir "$TARGET" --bytes "$BYTES" --block "$BLOCK" --mode "$1" --reps 1 \
    --step-ms "$STEP_MS"
  awk '$1 == "rep" { rep = $4 " " $8 " " $10 " " $12 " " $14; found = 1 } $1 == "raw" { raw = $3 }
       END { if (found) print rep, (raw == "" ? 0 : raw); exit !found }' "$LOG" ||
    { cat "$LOG" >&2; Die "no 'rep' line in perf_checkpoint_bench's output"; }
}

Median() { sort -g | awk '{ v[NR] = $1 } END { if (NR == 0) exit 1; printf "%.4f\n", (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }

echo "# checkpoint_vs_fio: $BYTES bytes in $RANKS files of $FILE_BYTES, block $BLOCK, $ROUNDS rounds"
echo "# date:   $(date -u +%Y-%m-%dT%H:%M:%SZ)"
echo "# host:   $(hostname)"
cpu_model="$(sed -n 's/^model name[[:space:]]*: //p' /proc/cpuinfo 2>/dev/null | head -n 1)"
echo "# cpu:    ${cpu_model:-unknown}, $(nproc) cores, $(awk '/MemTotal/ { printf "%.0f GiB", $2 / 1048576 }' /proc/meminfo) memory"
os_name="$(sed -n 's/^PRETTY_NAME="\{0,1\}\([^"]*\)"\{0,1\}$/\1/p' /etc/os-release 2>/dev/null || true)"
echo "# os:     ${os_name:-$(uname -s)} ($(uname -r))"
echo "# disk:   $(df -T "$WORK_DIR" | awk 'NR == 2 { print $1, $2, "mounted on", $7 }'), dirty_ratio $(cat /proc/sys/vm/dirty_ratio)%"
echo "# fio:    $("$FIO" --version) : ${FIO_CMD[*]}"
echo "# ckpt:   $MPIRUN ${MPIRUN_FLAGS[*]} $BENCH --dir $TARGET --bytes $BYTES --block $BLOCK --mode sync|async --reps 1 --step-ms $STEP_MS"
echo "# each run starts on an empty directory after sync(1); order rotates each round"
echo "#"
echo "# round  fio_GB/s  ckpt_GB/s  ratio   sync_stall_s  async_stall_s  async/sync  ckpt_write_s  crc_s  calls_s  commit_s  memcpy_s"

declare -a fio_rates ckpt_rates ratios stall_ratios sync_stalls async_stalls crcs calls commits memcpys floors
for ((round = 1; round <= ROUNDS; ++round)); do
  for ((k = 0; k < 3; ++k)); do
    case $(((round + k) % 3)) in
      0) fio_rate="$(RunFio)" ;;
      1) out="$(RunCheckpoint sync)" && read -r sync_stall sync_write sync_crc sync_calls sync_commit _ <<<"$out" ;;
      2) out="$(RunCheckpoint async)" && read -r async_stall _ _ _ _ memcpy_s <<<"$out" ;;
    esac
  done
  ckpt_rate="$(awk -v b="$BYTES" -v s="$sync_stall" 'BEGIN { printf "%.4f", b / s / 1e9 }')"
  ratio="$(awk -v c="$ckpt_rate" -v f="$fio_rate" 'BEGIN { printf "%.3f", c / f }')"
  stall_ratio="$(awk -v a="$async_stall" -v s="$sync_stall" 'BEGIN { printf "%.3f", a / s }')"
  printf "# %5d  %8.3f  %9.3f  %5s  %13.3f  %13.3f  %10s  %12.3f  %5.3f  %7.3f  %8.3f  %8.3f\n" "$round" "$fio_rate" \
    "$ckpt_rate" "$ratio" "$sync_stall" "$async_stall" "$stall_ratio" "$sync_write" "$sync_crc" "$sync_calls" \
    "$sync_commit" "$memcpy_s"
  crcs+=("$sync_crc")
  calls+=("$sync_calls")
  commits+=("$sync_commit")
  memcpys+=("$memcpy_s")
  floors+=("$(awk -v m="$memcpy_s" -v s="$sync_stall" 'BEGIN { printf "%.4f", m / s }')")
  fio_rates+=("$fio_rate")
  ckpt_rates+=("$ckpt_rate")
  ratios+=("$ratio")
  stall_ratios+=("$stall_ratio")
  sync_stalls+=("$sync_stall")
  async_stalls+=("$async_stall")
done

Verdict() { awk -v v="$1" -v t="$3" "BEGIN { exit !(v $2 t) }"; }
MedianOf() { printf "%s\n" "$@" | Median; }
RangeOf() { printf "%s..%s" "$(printf "%s\n" "$@" | sort -g | head -n 1)" "$(printf "%s\n" "$@" | sort -g | tail -n 1)"; }
fio_med="$(MedianOf "${fio_rates[@]}")"
ratio_med="$(MedianOf "${ratios[@]}")"
stall_med="$(MedianOf "${stall_ratios[@]}")"
sync_med="$(MedianOf "${sync_stalls[@]}")"
async_med="$(MedianOf "${async_stalls[@]}")"
crc_med="$(MedianOf "${crcs[@]}")"
calls_med="$(MedianOf "${calls[@]}")"
commit_med="$(MedianOf "${commits[@]}")"
memcpy_med="$(MedianOf "${memcpys[@]}")"
cores="$(nproc)"
if Verdict "$ratio_med" ">=" 0.9; then
  write_verdict="met: the device is the limit"
elif Verdict "$commit_med" "<" "$(awk -v w="$sync_med" 'BEGIN { print 0.1 * w }')" &&
  ((cores <= RANKS)); then
  write_verdict="NOT met: the cores are the limit ($RANKS writers on $cores cores spent ${crc_med} s in CRC and ${calls_med} s in write calls; fsync found ${commit_med} s left to write)"
else
  write_verdict="NOT met: the writer is the limit (CRC ${crc_med} s, write calls ${calls_med} s, commit ${commit_med} s)"
fi
# Per round: the raw memcpy of the slices over the sync stall (what a fence right after Save() would cost at best).
floor_med="$(printf "%.3f" "$(MedianOf "${floors[@]}")")"
if Verdict "$stall_med" "<=" 0.05; then
  async_verdict="met (the writer reads the state during the ${STEP_MS} ms step; the fence copies what is left)"
elif Verdict "$floor_med" ">" 0.05; then
  async_verdict="NOT met: memory is the limit (the ${STEP_MS} ms step left much unwritten, and a raw memcpy of the slices alone is $floor_med of the sync stall)"
else
  async_verdict="NOT met: the writer or the fence is the limit (a raw memcpy of the slices is $floor_med of the sync stall)"
fi
echo "#"
echo "# medians over $ROUNDS rounds; ratio = checkpoint GB/s / fio GB/s per round; async/sync and memcpy/sync per round"
printf "fio_write_GB/s       %.3f\n" "$fio_med"
printf "checkpoint_sync_GB/s %.3f\n" "$(MedianOf "${ckpt_rates[@]}")"
printf "write_ratio          %.3f  (range %s)  target >= 0.9: %s\n" "$ratio_med" "$(RangeOf "${ratios[@]}")" "$write_verdict"
printf "sync_stall_s         %.3f  (CRC %.3f, write calls %.3f, commit %.3f)\n" "$sync_med" "$crc_med" "$calls_med" \
  "$commit_med"
printf "async_stall_s        %.3f  (raw memcpy of the same slices %.3f: %s of the sync stall)\n" "$async_med" "$memcpy_med" "$floor_med"
printf "async/sync_stall     %.3f  (range %s)  target <= 0.05: %s\n" "$stall_med" "$(RangeOf "${stall_ratios[@]}")" \
  "$async_verdict"
exit 0
