#!/usr/bin/env bash
# validate over a large report: a 1024-rank x 1000-step training report (perf_validate_scale writes it, with 14
# history nights of its configuration) validated against that history. Prints validate's wall time and peak memory
# (GNU time), next to a raw baseline in the same invocation: h5py reading every dataset of the same file, which is
# the least any reader of the whole report must do; and `history` over the nights' directory, text and --html.
# Goal (issue 12): under 5 s and under 1 GiB.
#   tests/perf/validate_scale.sh BUILD_DIR [RANKS=1024] [STEPS=1000] [ROUNDS=3]
set -euo pipefail
build=$(realpath "$1"); ranks=${2:-1024}; steps=${3:-1000}; rounds=${4:-3}
work=$(mktemp -d); trap 'rm -rf "$work"' EXIT
mkdir "$work/history"
"$build/tests/perf_validate_scale" "$work/big.h5" "$work/history" "$ranks" "$steps" 14
ls -l "$work/big.h5" | awk '{printf "# report: %.1f MB\n", $5 / 1e6}'

measure() {  # prints "seconds peak_KiB"
  /usr/bin/time -f "%e %M" -o "$work/time" "$@" >/dev/null 2>"$work/err" || {
    rc=$?; [[ $rc -eq 3 ]] || { cat "$work/err"; exit 1; }  # validate exits 3: the slow rank is a straggler
  }
  tail -1 "$work/time"  # GNU time first notes a non-zero exit on its own line
}
measure_raw() {
  measure /usr/bin/python3 -c '
import h5py, sys
def read(name, obj):
    if isinstance(obj, h5py.Dataset): obj[()]
h5py.File(sys.argv[1], "r").visititems(read)' "$work/big.h5"
}
printf '%-6s %10s %12s %10s %12s %8s %10s %12s\n' round validate_s validate_MiB raw_s raw_MiB ratio history_s history_MiB
times=()
for round in $(seq "$rounds"); do
  # alternated: raw first on odd rounds, validate first on even ones
  if (( round % 2 )); then r=$(measure_raw); v=$(measure "$build/trainbench" validate "$work/big.h5" --history "$work/history"); else
    v=$(measure "$build/trainbench" validate "$work/big.h5" --history "$work/history"); r=$(measure_raw); fi
  h=$(measure "$build/trainbench" history "$work/history" --html "$work/trend.html")
  read -r vs vk <<<"$v"; read -r rs rk <<<"$r"; read -r hs hk <<<"$h"
  printf '%-6s %10.2f %12.0f %10.2f %12.0f %8.2f %10.2f %12.0f\n' "$round" "$vs" "$((vk / 1024))" "$rs" "$((rk / 1024))" \
    "$(awk -v a="$vs" -v b="$rs" 'BEGIN { print a / b }')" "$hs" "$((hk / 1024))"
  times+=("$vs")
done
printf '# median validate time: %s s\n' "$(printf '%s\n' "${times[@]}" | sort -n | sed -n "$(( (rounds + 1) / 2 ))p")"
