#!/usr/bin/env bash
# End-to-end tests of `train --repeats N` (issue 15): every repeat of every point runs its own warm-up on a fresh
# model (the same losses each time), checkpoints into a folder of its own, and is kept in the report (a row per
# repeat, the spread of each figure, the median repeat's steps); `report` shows the spread and `cost` prices the
# median with the range of the total over the repeats; a report of one repeat says "1 run: spread unknown" in both;
# bad --repeats values are one line and exit 2.
#   repeats_cli_test.sh TRAINBENCH MPIEXEC [MPIEXEC FLAGS...]
set -uo pipefail
tb=$1; shift; mpiexec=("$@")
work=$(mktemp -d); trap 'rm -rf "$work"' EXIT
source "$(dirname "${BASH_SOURCE[0]}")/cli_lib.sh"
export OPENBLAS_NUM_THREADS=1
prices=$(cd "$(dirname "${BASH_SOURCE[0]}")/../launch" && pwd)/prices.example.toml
h100=(--device-as "H100 SXM")
h5py=/usr/bin/python3
small=(--model tiny --seq 32 --micro-batch 2 --warmup-steps 1 --steps 3)

# check DESCRIPTION PYTHON-CODE FILE: the code (h5py's `f` open on FILE) asserts; a failure names the description.
check() {
  checks=$((checks + 1))
  "$h5py" - "$3" <<EOF || fail "$1"
import sys, math, h5py
f = h5py.File(sys.argv[1], "r")
$2
EOF
}

# --- three repeats of two points, with checkpoints ---------------------------------------------------------------
r3=$work/r3.h5
expect_ok "${mpiexec[@]}" -n 2 "$tb" train "${small[@]}" --scaling 1,2 --repeats 3 --checkpoint-every 2 \
  --checkpoint-dir "$work/ckpt" -o "$r3"
cp "$work/out" "$work/train.out"
checks=$((checks + 1))
[[ $(grep -c '^# k2: repeat [123] of 3$' "$work/train.out") -eq 3 ]] || fail "want 3 repeat lines for k2"
grep -qE '^#   over 3 repeats \(the figures above are repeat [123].s, at the median\): tokens/s median [0-9]+ \(min [0-9]+, max [0-9]+, CV [0-9.]+%\)' \
  "$work/train.out" || fail "no spread line: $(grep '^#   over' "$work/train.out")"
# Each repeat trains a fresh model: the k2 losses of repeat 1 recur in repeats 2 and 3.
checks=$((checks + 1))
"$h5py" - "$work/train.out" <<'EOF' || fail "the repeats' losses differ: each repeat must start from the same model"
import re, sys
runs, current = {}, None
for line in open(sys.argv[1]):
    m = re.match(r"# (k\d+): repeat (\d) of 3", line)
    if m:
        current = m.groups(); runs[current] = []
    elif current and line.startswith("step") and "| k   2 |" in line:
        runs[current].append(re.search(r"loss (\S+)", line).group(1))
k2 = [v for (k, r), v in sorted(runs.items()) if k == "k2"]
assert len(k2) == 3 and k2[0] and k2[0] == k2[1] == k2[2], k2
EOF
for point in k1 k2; do
  for r in 1 2 3; do
    checks=$((checks + 1))
    ls -d "$work/ckpt/$point/r$r"/step-* >/dev/null 2>&1 || fail "no checkpoints of $point repeat $r under $work/ckpt/$point/r$r"
  done
done
check "the report keeps every repeat and the spread" '
assert f["config"].attrs["repeats"] == 3
for point in ("k1", "k2"):
    g = f["train"][point]
    assert g.attrs["repeats"] == 3 and 1 <= g.attrs["median_repeat"] <= 3, dict(g.attrs)
    rows = g["repeats"][()]
    assert list(rows["repeat"]) == [1, 2, 3], rows
    assert all(r > 0 for r in rows["tokens_per_s"]) and all(r > 0 for r in rows["checkpoint_write_GBps"]), rows
    # the group is the median repeat: its tokens/s is that row, and the middle of the three
    m = g.attrs["median_repeat"] - 1
    assert rows["tokens_per_s"][m] == g.attrs["tokens_per_s"], (rows, g.attrs["tokens_per_s"])
    assert sorted(rows["tokens_per_s"])[1] == g.attrs["tokens_per_s"]
    spread = {r["figure"].decode(): r for r in g["spread"][()]}
    t = spread["tokens_per_s"]
    assert t["count"] == 3 and t["min"] <= t["median"] <= t["max"] and t["median"] == g.attrs["tokens_per_s"], t
    assert t["cv"] >= 0 and math.isnan(spread["mfu_peak"]["median"]), spread
' "$r3"

# --- report and cost of it ----------------------------------------------------------------------------------------
expect_ok "$tb" report "$r3" --sections train
checks=$((checks + 1))
grep -qE '^ spread +3 repeats: tokens/s CV [0-9.]+%$' "$work/out" || fail "report: no spread field: $(grep '^ spread' "$work/out")"
grep -q '^# train.repeats: ' "$work/out" && grep -q '^# train.spread: ' "$work/out" || fail "report: no repeats or spread tables"
expect_ok "$tb" cost "$r3" --prices "$prices" --train-tokens 1e9 "${h100[@]}"
expect_out "^#   3 repeats: tokens/s median [0-9.e+]+ \(min [0-9.e+]+, max [0-9.e+]+, CV [0-9.]+%\), priced at the median"
expect_out "^# +run +config .* total +range "
expect_out "^# cheapest: .*: \\\$[0-9,.]+ \(\\\$[0-9,.]+-\\\$[0-9,.]+ over the repeats\)"
expect_ok "$tb" cost "$r3" --prices "$prices" --train-tokens 1e9 --format json "${h100[@]}"
checks=$((checks + 1))
python3 -c '
import json, sys
runs = json.load(sys.stdin)["runs"]
rows = runs[0]["cost"]["rows"]
assert rows and all(r["total_usd_low"] <= r["total_usd"] <= r["total_usd_high"] for r in rows), rows
point = runs[0]["cost"]["points"][-1]
assert point["repeats"] == 3 and point["tokens_per_s_min"] <= point["tokens_per_s_max"], point' <"$work/out" ||
  fail "cost JSON: total_usd_low <= total_usd <= total_usd_high, and the points' repeats"

# --- one repeat: the spread is unknown, and says so ---------------------------------------------------------------
r1=$work/r1.h5
expect_ok "$tb" train "${small[@]}" --quiet -o "$r1"
check "one repeat: a repeats table of one row, no spread" '
g = f["train"]["k1"]
assert g.attrs["repeats"] == 1 and g.attrs["median_repeat"] == 1
s = {r["figure"].decode(): r for r in g["spread"][()]}
assert s["tokens_per_s"]["count"] == 1 and math.isnan(s["tokens_per_s"]["cv"])
' "$r1"
expect_ok "$tb" report "$r1" --sections train
expect_out '^ spread +1 run: spread unknown$'
expect_ok "$tb" cost "$r1" --prices "$prices" --train-tokens 1e9 "${h100[@]}"
expect_out '^#   1 run: spread unknown \(train --repeats N measures it\); no cost range$'
expect_out "^# cheapest: .* \(1 run: spread unknown\)"
checks=$((checks + 1))
grep -q ' range ' "$work/out" && fail "cost: a range column for one repeat"

# --- bad input --------------------------------------------------------------------------------------------------------
expect_error 2 "^trainbench: error: --repeats '0': out of range \(accepted: a whole number 1..100\)" -- \
  "$tb" train "${small[@]}" --repeats 0
expect_error 2 "--repeats '101': out of range" -- "$tb" train "${small[@]}" --repeats 101
expect_error 2 "--repeats 'x'" -- "$tb" train "${small[@]}" --repeats x
expect_error 2 "^trainbench: error: --repeats 2 with --resume: a resumed run continues one trajectory once" -- \
  "$tb" train "${small[@]}" --repeats 2 --resume "$work/ckpt/k1/r1"
# A report whose spread table is gone is damaged for cost: one line, exit 2.
cp "$r3" "$work/nospread.h5"
"$h5py" -c 'import h5py, sys; del h5py.File(sys.argv[1], "r+")["train/k2/spread"]' "$work/nospread.h5"
expect_error 2 "records 3 repeats but no spread table" -- \
  "$tb" cost "$work/nospread.h5" --prices "$prices" --train-tokens 1e9 "${h100[@]}"

finish repeats_cli_tests
