#!/usr/bin/env bash
# Harness overhead of `trainbench collectives` all_reduce against a raw MPI_Allreduce loop (raw_allreduce.cc),
# both at 2 ranks, alternated in one invocation; prints median times and trainbench/raw per size.
#
# usage: tests/perf/allreduce_overhead.sh BUILD_DIR [ROUNDS]
#   BUILD_DIR  a build directory holding the trainbench executable; the raw baseline is compiled into a
#              temporary directory with the MPI C++ compiler that BUILD_DIR was configured with (or mpicxx)
#   ROUNDS     rounds of (raw, trainbench) pairs per size, order alternating each round (default 9)
# Environment: TB_PERF_RANKS (default 2), TB_PERF_MPIRUN_FLAGS (replaces the default "--bind-to core").
# Exit status: 0 whatever the ratios (a benchmark, not a test); 1 when something failed to build or run;
# 2 on a usage error.
set -euo pipefail

SCRIPT_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
readonly SCRIPT_DIR
readonly SIZES=(1024 65536 1048576 16777216)
# Timed iterations per size, chosen so that each timed loop lasts roughly 0.1-0.6 s on a small VM; warm-up is
# about 10% of that. Both programs get the same counts at each size.
readonly ITERS=(100000 10000 1000 40)
readonly WARMUPS=(10000 1000 100 4)
readonly TARGET=1.05
readonly TARGET_FROM_BYTES=65536

Die() {
  echo "allreduce_overhead.sh: $*" >&2
  exit 1
}

Usage() {
  echo "usage: $0 BUILD_DIR [ROUNDS]   (ROUNDS: positive integer, default 9)" >&2
  exit 2
}

[[ $# -ge 1 && $# -le 2 ]] || Usage
BUILD_DIR="$(cd "$1" 2>/dev/null && pwd)" || Die "build directory '$1' does not exist"
readonly BUILD_DIR
readonly ROUNDS="${2:-9}"
[[ "$ROUNDS" =~ ^[1-9][0-9]*$ ]] || Usage
readonly TRAINBENCH="$BUILD_DIR/trainbench"
[[ -x "$TRAINBENCH" ]] || Die "no trainbench executable at $TRAINBENCH (build it first: cmake --build $BUILD_DIR)"

# Tools: prefer what BUILD_DIR was configured with, so that both programs use the same MPI.
CacheValue() {
  [[ -f "$BUILD_DIR/CMakeCache.txt" ]] || return 0
  sed -n "s/^$1:[A-Z]*=//p" "$BUILD_DIR/CMakeCache.txt" | head -n 1
}
MPICXX="$(CacheValue MPI_CXX_COMPILER)"
[[ -n "$MPICXX" && -x "$MPICXX" ]] || MPICXX="$(command -v mpicxx || true)"
[[ -n "$MPICXX" ]] || Die "no MPI C++ compiler (mpicxx) found to build the raw baseline"
MPIRUN="$(CacheValue MPIEXEC_EXECUTABLE)"
[[ -n "$MPIRUN" && -x "$MPIRUN" ]] || MPIRUN="$(command -v mpirun || true)"
[[ -n "$MPIRUN" ]] || Die "no mpirun found"
readonly MPICXX MPIRUN

readonly RANKS="${TB_PERF_RANKS:-2}"
MPIRUN_FLAGS=(-np "$RANKS")
read -r -a extra_flags <<<"${TB_PERF_MPIRUN_FLAGS---bind-to core}"
MPIRUN_FLAGS+=("${extra_flags[@]}")
MPIRUN_VERSION="$("$MPIRUN" --version 2>&1 | head -n 1 || true)"
readonly MPIRUN_VERSION
if [[ "$(id -u)" == 0 && "$MPIRUN_VERSION" =~ Open\ MPI|OpenRTE ]]; then
  MPIRUN_FLAGS+=(--allow-run-as-root)
fi
readonly MPIRUN_FLAGS

WORK_DIR="$(mktemp -d "${TMPDIR:-/tmp}/allreduce_overhead.XXXXXX")" || Die "cannot create a temporary directory"
readonly WORK_DIR
trap 'rm -rf "$WORK_DIR"' EXIT
readonly RAW="$WORK_DIR/raw_allreduce"
readonly LOG="$WORK_DIR/last.log"

# Runs one command, its output to $LOG; on failure shows the output and exits 1.
RunOrDie() {
  if ! "$@" >"$LOG" 2>&1; then
    cat "$LOG" >&2
    Die "command failed: $*"
  fi
}

readonly COMPILE=("$MPICXX" -O2 -std=c++17 -DOMPI_SKIP_MPICXX -DMPICH_SKIP_MPICXX -o "$RAW" "$SCRIPT_DIR/raw_allreduce.cc")
RunOrDie "${COMPILE[@]}"

Median() { sort -g | awk '{ v[NR] = $1 } END { if (NR == 0) exit 1; printf "%.3f\n", (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }

# Prints "time_us" of one raw run at size index $1.
RunRaw() {
  local i=$1
  RunOrDie "$MPIRUN" "${MPIRUN_FLAGS[@]}" "$RAW" -n "${ITERS[i]}" -w "${WARMUPS[i]}" "${SIZES[i]}"
  awk -v size="${SIZES[i]}" '$1 == size { print $2; found = 1 } END { exit !found }' "$LOG" ||
    { cat "$LOG" >&2; Die "no '${SIZES[i]} time_us' line in the raw baseline's output"; }
}

# Prints the out-of-place time (us) of one trainbench run at size index $1.
RunTrainbench() {
  local i=$1
  RunOrDie "$MPIRUN" "${MPIRUN_FLAGS[@]}" "$TRAINBENCH" collectives --ops all_reduce --sizes "${SIZES[i]}" \
    -n "${ITERS[i]}" -w "${WARMUPS[i]}" -c 0 --modes out-of-place
  awk -v size="${SIZES[i]}" '!/^#/ && NF >= 6 && $1 == size { print $6; found = 1 } END { exit !found }' "$LOG" ||
    { cat "$LOG" >&2; Die "no data row for ${SIZES[i]} B in trainbench's output"; }
}

echo "# allreduce_overhead: trainbench collectives all_reduce vs raw MPI_Allreduce, $RANKS ranks, $ROUNDS rounds"
echo "# date:      $(date -u +%Y-%m-%dT%H:%M:%SZ)"
echo "# host:      $(hostname)"
cpu_model="$(sed -n 's/^model name[[:space:]]*: //p' /proc/cpuinfo 2>/dev/null | head -n 1)"
echo "# cpu:       ${cpu_model:-unknown}, $(nproc) cores"
os_name="$(sed -n 's/^PRETTY_NAME="\{0,1\}\([^"]*\)"\{0,1\}$/\1/p' /etc/os-release 2>/dev/null || true)"
echo "# os:        ${os_name:-$(uname -s)} ($(uname -r))"
mpi_version="$MPIRUN_VERSION"
if command -v ompi_info >/dev/null; then mpi_version="$(ompi_info --version 2>&1 | head -n 1) ($mpi_version)"; fi
echo "# mpi:       $mpi_version"
echo "# load:      $(cut -d' ' -f1-3 /proc/loadavg) (1, 5, 15 min) at start"
echo "# build:     ${COMPILE[*]}"
echo "# raw:       $MPIRUN ${MPIRUN_FLAGS[*]} $RAW -n ITERS -w WARMUP SIZE"
echo "# trainbench: $MPIRUN ${MPIRUN_FLAGS[*]} $TRAINBENCH collectives --ops all_reduce --sizes SIZE -n ITERS -w WARMUP -c 0 --modes out-of-place"
for i in "${!SIZES[@]}"; do
  echo "#   SIZE ${SIZES[i]}: ITERS ${ITERS[i]}, WARMUP ${WARMUPS[i]}"
done
echo "# time = max over ranks of each rank's mean us per call; one mpirun per program, size and round;"
echo "# order within a round alternates (odd rounds raw first, even rounds trainbench first)"
echo "#"
echo "# load1 = 1-minute load average just before the pair (other processes on the machine distort the figures)"
echo "# round         size     raw_us  trainbench_us  ratio  load1"

declare -A raw_samples tb_samples ratio_samples
for ((round = 1; round <= ROUNDS; ++round)); do
  for i in "${!SIZES[@]}"; do
    load1="$(cut -d' ' -f1 /proc/loadavg)"
    if ((round % 2 == 1)); then
      raw_us="$(RunRaw "$i")"
      tb_us="$(RunTrainbench "$i")"
    else
      tb_us="$(RunTrainbench "$i")"
      raw_us="$(RunRaw "$i")"
    fi
    ratio="$(awk -v t="$tb_us" -v r="$raw_us" 'BEGIN { printf "%.3f", t / r }')"
    printf "# %5d %12d %10.2f %14.2f  %s  %s\n" "$round" "${SIZES[i]}" "$raw_us" "$tb_us" "$ratio" "$load1"
    raw_samples[$i]+="$raw_us"$'\n'
    tb_samples[$i]+="$tb_us"$'\n'
    ratio_samples[$i]+="$ratio"$'\n'
  done
done
echo "# load:      $(cut -d' ' -f1-3 /proc/loadavg) (1, 5, 15 min) at end"
echo "#"
echo "# ratio  = median(trainbench) / median(raw)"
echo "# paired = median of the per-round trainbench/raw ratios (the two runs of a pair are back to back, so a slow"
echo "#          spell of the machine tends to hit both alike); range = smallest..largest per-round ratio"
echo "# best   = min(trainbench) / min(raw): each program's fastest run, insensitive to slow spells"
echo "# The target verdict uses the paired median, the most robust of the median-based figures on a noisy machine."
printf "%10s %11s %18s %7s %7s %13s %6s  %s\n" "size_bytes" "raw_med_us" "trainbench_med_us" "ratio" "paired" \
  "range" "best" "target paired <= $TARGET"
for i in "${!SIZES[@]}"; do
  raw_med="$(printf "%s" "${raw_samples[$i]}" | Median)"
  tb_med="$(printf "%s" "${tb_samples[$i]}" | Median)"
  ratio="$(awk -v t="$tb_med" -v r="$raw_med" 'BEGIN { printf "%.3f", t / r }')"
  paired="$(printf "%s" "${ratio_samples[$i]}" | Median)"
  range="$(printf "%s" "${ratio_samples[$i]}" | sort -g | awk 'NR == 1 { lo = $1 } { hi = $1 } END { print lo ".." hi }')"
  raw_min="$(printf "%s" "${raw_samples[$i]}" | sort -g | head -n 1)"
  tb_min="$(printf "%s" "${tb_samples[$i]}" | sort -g | head -n 1)"
  best="$(awk -v t="$tb_min" -v r="$raw_min" 'BEGIN { printf "%.3f", t / r }')"
  if ((SIZES[i] < TARGET_FROM_BYTES)); then
    verdict="n/a (target applies from 64 KiB)"
  elif awk -v q="$paired" -v t="$TARGET" 'BEGIN { exit !(q <= t) }'; then
    verdict="met"
  else
    verdict="NOT met"
  fi
  if awk -v r="$range" 'BEGIN { split(r, b, /\.\./); exit !(b[1] < 0.9 || b[2] > 1.1) }'; then
    verdict+=" (noisy: per-round ratios beyond 0.9..1.1)"
  fi
  printf "%10d %11.2f %18.2f %7.3f %7.3f %13s %6.3f  %s\n" "${SIZES[i]}" "$raw_med" "$tb_med" "$ratio" "$paired" \
    "$range" "$best" "$verdict"
done
exit 0
