#!/usr/bin/env bash
# launch/demo end to end (the README's first command after setup): every report written, and the decision shown —
# the two training runs compared (their data differ: warned), three repeats priced at the median with the cost
# range, the CPU stand-in labelled, one NVLink node or four PCIe nodes each in its best layout with the reason, the
# verdict lines with their reasons, and both HTML pages.
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
expect_line '^demo: one 8-GPU NVLink node or four 8-GPU PCIe nodes\? The CPU sweep is a stand-in'
expect_line '^#   on coreweave-hgx-h100 \(fabric hgx-h100-nvswitch-8x400g-ib, nvswitch\), 32 GPUs:$'
expect_line '^demo:   1x8 NVLink node\(s\), InfiniBand +[a-z0-9+]+ +[0-9.]+ h \$[0-9,]+: [a-z0-9+]+ is the fastest that fits'
expect_line '^demo:   4x8 PCIe node\(s\), Ethernet +[a-z0-9+]+ +[0-9.]+ h \$[0-9,]+: [a-z0-9+]+ is the fastest that fits'
expect_line '^# cheapest: .* over the repeats\), .*; why: .+'
expect_line '^# fastest: .*; why: .+'
for page in report cost; do
  checks=$((checks + 1))
  grep -q '<img alt=' "$work/demo/$page.html" 2>/dev/null || fail "the demo wrote no $page.html with plots"
done
finish demo_tests
