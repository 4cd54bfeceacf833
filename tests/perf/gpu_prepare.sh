#!/usr/bin/env bash
# Builds trainbench for Hopper (sm_90) in build-gpu and packs it, with the GPU tests, into .gpu for a GPU host
# that lacks Open MPI, HDF5 and Boost (../shared/gpu-host/bundle.sh). Then, on the host:
# tests/perf/gpu_check.sh .gpu OUT_DIR.
#   tests/perf/gpu_prepare.sh [BUNDLE_SCRIPT]
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
bundle_script=${1:-$here/../shared/gpu-host/bundle.sh}
[[ -x $bundle_script ]] || { echo "gpu_prepare: $bundle_script not found (pass the path to bundle.sh)" >&2; exit 2; }
cd "$here"
frontend=()
[[ -f .deps/cudnn-frontend/include/cudnn_frontend.h ]] && frontend=(-DCUDNN_FRONTEND_INCLUDE_DIR="$here/.deps/cudnn-frontend/include")
cmake -S . -B build-gpu -DCMAKE_BUILD_TYPE=Release -DTRAINBENCH_WITH_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90 "${frontend[@]}" >/dev/null
cmake --build build-gpu -j"$(nproc)" --target trainbench gpu_tests
"$bundle_script" .gpu build-gpu/trainbench build-gpu/tests/gpu_tests
du -sh .gpu
