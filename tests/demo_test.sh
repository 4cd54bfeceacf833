#!/usr/bin/env bash
# launch/demo end to end (the README's first command after setup): every report written, and the decision shown —
# the two training runs compared (their data differ: warned), three repeats priced at the median with the cost
# range, the CPU stand-in labelled, the verdict lines with their reasons, and both HTML pages.
#   demo_test.sh BUILD_DIR
set -uo pipefail
build=$1
work=$(mktemp -d); trap 'rm -rf "$work"' EXIT
source "$(dirname "${BASH_SOURCE[0]}")/cli_lib.sh"
demo=$(cd "$(dirname "${BASH_SOURCE[0]}")/../launch" && pwd)/demo
expect_ok "$demo" --build-dir "$build" --out "$work/demo"
for report in info collectives p2p train train_io; do
  checks=$((checks + 1))
  [[ -s $work/demo/$report.h5 ]] || fail "the demo wrote no $report.h5"
done
expect_line() {
  checks=$((checks + 1))
  grep -qE -- "$1" "$work/out" || fail "demo output lacks /$1/"
}
expect_line '^# warning: runs differ in data \(synthetic vs [0-9]+ samples of [0-9]+ B\): data-loader stalls are not comparable$'
expect_line '^#   3 repeats: tokens/s median .*priced at the median'
expect_line 'a CPU stand-in, priced as if it ran on H100 SXM nodes'
expect_line '^# cheapest: .* over the repeats\), .*; why: .+'
expect_line '^# fastest: .*; why: .+'
for page in report cost; do
  checks=$((checks + 1))
  grep -q '<img alt=' "$work/demo/$page.html" 2>/dev/null || fail "the demo wrote no $page.html with plots"
done
finish demo_tests
