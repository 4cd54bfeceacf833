#!/usr/bin/env bash
# Every part of gpu_check.sh in one device call, for a lease too short to start a machine per part: tests, emulate,
# train, io, cublas in that order (most to least needed; emulate skips at once on one GPU), under one deadline, each
# into OUT_DIR/work/PART. At the end (also when the deadline cut a part short) each part's log is copied to
# OUT_DIR/gpu_check_PART.log and the reports, the JUnit file and the logs are packed into OUT_DIR/gpu_check.tar.gz:
# the device tool brings back at most 8 files (the five parts' logs, the overall log and the archive). Exit status: 0
# when every part passed, 1 otherwise, 2 on a usage error.
#
#   tests/perf/gpu_check_all.sh .gpu.tar.gz OUT_DIR SECONDS    # on the GPU host; SECONDS well inside the call's limit
set -uo pipefail
[[ $# -eq 3 && $3 =~ ^[1-9][0-9]*$ ]] || { echo "usage: tests/perf/gpu_check_all.sh BUNDLE OUT_DIR SECONDS" >&2; exit 2; }
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
bundle=$(realpath "$1") out=$(realpath -m "$2") deadline=$((SECONDS + $3))
mkdir -p "$out/work"
status=0
for part in tests emulate train io cublas; do
  left=$((deadline - SECONDS))
  if [[ $left -lt 30 ]]; then echo "gpu_check_all: $part not run: ${left} s left" | tee -a "$out/gpu_check_all.log"; status=1; continue; fi
  echo "gpu_check_all: $part ($left s left)" | tee -a "$out/gpu_check_all.log"
  timeout "$left" "$here/gpu_check.sh" "$bundle" "$out/work/$part" "$part" || status=1
  cp "$out/work/$part/gpu_check_$part.log" "$out/" 2>/dev/null
done
tar -czf "$out/gpu_check.tar.gz" -C "$out/work" . && rm -rf "$out/work"
exit $status
