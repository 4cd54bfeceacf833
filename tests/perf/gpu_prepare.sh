#!/usr/bin/env bash
# Builds trainbench for Hopper (sm_90) in build-gpu, with the cuDNN C++ frontend (fetched into .deps/ when missing,
# by launch/fetch_cudnn_frontend.sh; the build is refused without it, since every cuDNN test would then skip and
# auto attention would quietly run cuBLAS), and packs trainbench and gpu_tests into .gpu for a GPU host that lacks
# Open MPI, HDF5 and Boost, with the workplace's gpu-host bundle script (passed as BUNDLE_SCRIPT), then
# into .gpu.tar.gz: the folder is ~80 MB (OpenBLAS alone 36 MB), over the 64 MiB a device call carries; the archive
# is ~28 MB. Then, on the host: tests/perf/gpu_check.sh .gpu.tar.gz OUT_DIR PART (see tests/perf/README.md).
#   tests/perf/gpu_prepare.sh BUNDLE_SCRIPT
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
[[ $# -eq 1 ]] || { echo "usage: tests/perf/gpu_prepare.sh BUNDLE_SCRIPT (the gpu-host bundle script)" >&2; exit 2; }
bundle_script=$(realpath -m "$1")
[[ -x $bundle_script ]] || { echo "gpu_prepare: $bundle_script is not an executable bundle script" >&2; exit 2; }
cd "$here"
frontend=$here/.deps/cudnn-frontend
"$here/launch/fetch_cudnn_frontend.sh" "$frontend" || {
  echo "gpu_prepare: refusing to build without the cuDNN frontend headers (put them in $frontend/include)" >&2
  exit 1
}
cmake -S . -B build-gpu -DCMAKE_BUILD_TYPE=Release -DTRAINBENCH_WITH_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90 \
  -DCUDNN_FRONTEND_INCLUDE_DIR="$frontend/include" >/dev/null
# An older cache may hold another value; the build must compile attention_cudnn.cc, not its stub.
grep -qx "CUDNN_FRONTEND_INCLUDE_DIR:PATH=$frontend/include" build-gpu/CMakeCache.txt || {
  echo "gpu_prepare: build-gpu is not configured with $frontend/include (remove build-gpu/CMakeCache.txt)" >&2
  exit 1
}
cmake --build build-gpu -j"$(nproc)" --target trainbench gpu_tests
"$bundle_script" .gpu build-gpu/trainbench build-gpu/tests/gpu_tests
tar -czf .gpu.tar.gz .gpu
bytes=$(stat -c %s .gpu.tar.gz)
echo "gpu_prepare: .gpu.tar.gz holds $(du -sh .gpu | cut -f1) in $((bytes >> 20)) MiB"
# The device tool carries 64 MiB in all, the working tree included.
[[ $bytes -lt $((56 << 20)) ]] || { echo "gpu_prepare: .gpu.tar.gz is too large to carry (limit ~56 MiB)" >&2; exit 1; }
