#!/usr/bin/env bash
# Makes sure the cuDNN C++ frontend headers (header-only; PyPI: nvidia-cudnn-frontend, a wheel, i.e. a zip) are in
# DIR/include, fetching them when they are not. Only the wheel's include/ folder is kept. The one place that fetches
# them: launch/setup and tests/perf/gpu_prepare.sh both call it. Exit 0 when the headers are there (fetched or
# already present), 1 when they could not be fetched (the reason is printed), 2 on a usage error.
#
#   launch/fetch_cudnn_frontend.sh DIR      # e.g. .deps/cudnn-frontend
set -euo pipefail
[[ $# -eq 1 ]] || { echo "usage: launch/fetch_cudnn_frontend.sh DIR" >&2; exit 2; }
frontend=$1
[[ -f $frontend/include/cudnn_frontend.h ]] && exit 0
echo "fetch_cudnn_frontend: fetching the cuDNN frontend headers (pip download nvidia-cudnn-frontend)"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
if ! python3 -m pip download --no-deps --quiet --dest "$tmp" nvidia-cudnn-frontend; then
  echo "fetch_cudnn_frontend: pip could not download nvidia-cudnn-frontend (no network or no pip?)" >&2
  exit 1
fi
mkdir -p "$frontend"
python3 - "$tmp" "$frontend" <<'PY'
import pathlib, sys, zipfile
wheel = next(pathlib.Path(sys.argv[1]).glob("*.whl"))
with zipfile.ZipFile(wheel) as z:
    for name in z.namelist():
        if name.startswith("include/") and not name.endswith("/"):
            z.extract(name, sys.argv[2])
print(f"fetch_cudnn_frontend: cuDNN frontend headers from {wheel.name}")
PY
[[ -f $frontend/include/cudnn_frontend.h ]] || {
  echo "fetch_cudnn_frontend: the wheel held no include/cudnn_frontend.h" >&2
  exit 1
}
