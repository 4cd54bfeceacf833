#!/usr/bin/env bash
# Reports written by an earlier release (tests/data/reports-v1: info, a 2-rank collectives sweep and p2p matrix, a
# 2-rank train scaling sweep with the loader and checkpoints, a storage sweep; written at 2ac81de) still read, and
# `report` and `cost` give exactly the numbers and tables they gave then (tests/data/reports-v1/expected). A change
# that means to alter an export regenerates the expected files with --update and shows the difference in review.
#   old_reports_test.sh TRAINBENCH [--update]
set -uo pipefail
tb=$(realpath "$1"); update=${2:-}
data=$(cd "$(dirname "${BASH_SOURCE[0]}")/data/reports-v1" && pwd)
work=$(mktemp -d); trap 'rm -rf "$work"' EXIT
source "$(dirname "${BASH_SOURCE[0]}")/cli_lib.sh"
cd "$data"  # the run names in the exports are the paths as given

reports=(info.h5 collectives.h5 p2p.h5 train.h5 sweep.h5)
cost=(cost train.h5 --prices prices.toml --train-tokens 1e9 --device-as "H100 SXM" --project 4,16
      --inter-node-gbps 100 --deadline-hours 1e6)
# same_as NAME COMMAND...: the command's standard output equals expected/NAME.
same_as() {
  local name=$1; shift
  checks=$((checks + 1))
  "$tb" "$@" >"$work/$name" 2>"$work/err"
  local rc=$?
  if [[ $rc -ne 0 ]]; then fail "$* -> exit $rc: $(cat "$work/err")"; return; fi
  if [[ $update == --update ]]; then cp "$work/$name" "expected/$name"; return; fi
  if [[ $name == *.json ]]; then  # the same values (numbers read back bit for bit), however the text is laid out
    python3 -c 'import json, sys; sys.exit(json.load(open(sys.argv[1])) != json.load(open(sys.argv[2])))' \
      "expected/$name" "$work/$name" || fail "$name: other values than the earlier release's"
    return
  fi
  diff -u "expected/$name" "$work/$name" >"$work/diff" || fail "$name differs from the earlier release's: $(head -40 "$work/diff")"
}
mkdir -p expected
for format in text csv json; do
  same_as "report.$format" report "${reports[@]}" --format "$format"
  same_as "cost.$format" "${cost[@]}" --format "$format"
done
same_as memory_fit.text cost --model gpt2-1.5b --micro-batch 2 --gpu-memory 80G

finish old_reports_test
