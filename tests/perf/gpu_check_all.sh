#!/usr/bin/env bash
# Every part of gpu_check.sh in one device call, for a lease too short to start a machine per part, under one deadline,
# each into OUT_DIR/work/PART, in this order: tests, emulate and probe (both skip at once on one host's one GPU),
# train, the parts for what changed since 2026-12-04 (parallel, fence, optimes, ncu), io and cublas (both passed on
# 2026-12-04), and last peer (trainbench against PyTorch), which sizes its runs to the seconds left. PARTS
# (comma-separated) runs those alone, in that order: a rerun of the ones that failed. At the end (also when the
# deadline cut a part short) the parts' logs are appended, in order, to OUT_DIR/gpu_check.log and the reports, the
# JUnit files and the logs are packed into OUT_DIR/gpu_check.tar.gz: the device tool brings back at most 8 files
# (here three: those two and gpu_check_all.log). Exit status: 0 when every part passed, 1 otherwise, 2 on a usage
# error.
#
#   tests/perf/gpu_check_all.sh .gpu.tar.gz OUT_DIR SECONDS [PARTS]   # on the GPU host; SECONDS well inside the call
set -uo pipefail
all_parts=(tests emulate probe train parallel fence optimes ncu io cublas peer)
usage() {
  echo "usage: tests/perf/gpu_check_all.sh BUNDLE OUT_DIR SECONDS [PARTS: $(IFS=,; echo "${all_parts[*]}")]" >&2
  exit 2
}
[[ ($# -eq 3 || $# -eq 4) && $3 =~ ^[1-9][0-9]*$ ]] || usage
parts=("${all_parts[@]}")
if [[ $# -eq 4 ]]; then
  IFS=, read -r -a chosen <<<"$4"
  for p in "${chosen[@]}"; do
    [[ " ${all_parts[*]} " == *" $p "* ]] || { echo "gpu_check_all: unknown part '$p'" >&2; usage; }
  done
  parts=()
  for p in "${all_parts[@]}"; do [[ " ${chosen[*]} " == *" $p "* ]] && parts+=("$p"); done
fi
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
bundle=$(realpath "$1") out=$(realpath -m "$2") deadline=$((SECONDS + $3))
mkdir -p "$out/work"
status=0
for part in "${parts[@]}"; do
  left=$((deadline - SECONDS))
  if [[ $left -lt 30 ]]; then
    echo "gpu_check_all: $part not run: ${left} s left" | tee -a "$out/gpu_check_all.log"
    status=1
    continue
  fi
  echo "gpu_check_all: $part ($left s left)" | tee -a "$out/gpu_check_all.log"
  # The peer part sizes its runs to the time left (gpu_vs_pytorch.sh --budget).
  TB_PEER_BUDGET=$((left - 15)) timeout "$left" "$here/gpu_check.sh" "$bundle" "$out/work/$part" "$part" || status=1
  cat "$out/work/$part/gpu_check_$part.log" >>"$out/gpu_check.log" 2>/dev/null
done
grep -hE '^(PART |# summary \()' "$out/gpu_check.log" 2>/dev/null | tee -a "$out/gpu_check_all.log"
tar -czf "$out/gpu_check.tar.gz" -C "$out/work" . && rm -rf "$out/work"
exit $status
