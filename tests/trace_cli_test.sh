#!/usr/bin/env bash
# trainbench report --trace and --trace-dir end to end: a training run at 1 and 2 ranks with a checkpoint, exported as
# one Chrome trace and as per-rank traces, read back by tests/trace_check.py — with Holistic Trace Analysis, and with
# Perfetto's trace processor where its binary can be had — against the steps table as h5py reads it (slices per rank,
# every duration); --trace-point; every bad input: one line, exit 2, nothing written.
#   trace_cli_test.sh TRAINBENCH MPIEXEC [MPIEXEC FLAGS...]
set -uo pipefail
tb=$1; shift; mpiexec=("$@")
work=$(mktemp -d); trap 'rm -rf "$work"' EXIT
source "$(dirname "${BASH_SOURCE[0]}")/cli_lib.sh"
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
export OPENBLAS_NUM_THREADS=1
# HTA and perfetto are PyPI packages, installed by launch/setup into the python3 on PATH; h5py is Debian's.
py=python3
h5py=/usr/bin/python3

t=$work/t.h5 c=$work/c.h5
expect_ok "${mpiexec[@]}" -n 2 "$tb" train --model tiny --seq 32 --micro-batch 2 --warmup-steps 1 --steps 4 \
  --scaling 1,2 --checkpoint-dir "$work/ckpt" --checkpoint-every 2 -o "$t" --quiet
expect_ok "$tb" collectives -b 1K -e 4K -n 2 -w 1 -o "$c" --quiet
for r in "$t" "$c"; do [[ -s $r ]] || { fail "no report $r"; finish trace_cli_tests; exit; }; done

# --- the export: the largest point (k2), one file and one per rank ------------------------------------------------
expect_ok "$tb" report "$t" --sections train --trace "$work/t.json" --trace-dir "$work/per"
expect_out "^# trace: $work/t.json \(training point k2: 2 ranks x 5 steps, laid end to end\)$"
expect_out "^# traces per rank: $work/per/rank0.json \.\.\. "
[[ $(ls "$work/per" | tr '\n' ' ') == "rank0.json rank1.json " ]] || fail "--trace-dir holds: $(ls "$work/per")"

# The traced point's steps table and each rank's place, as h5py reads them.
checks=$((checks + 1))
"$h5py" - "$t" k2 >"$work/steps.json" <<'PY' || fail "cannot read the steps table with h5py"
import h5py, json, sys
path, point = sys.argv[1:]
with h5py.File(path, "r") as f:
    steps = f["train/%s/steps" % point][:]
    budget = f["train/%s/stall_budget" % point][:]
plain = lambda v: v.decode() if isinstance(v, bytes) else v.item()
rows = [{name: plain(row[name]) for name in steps.dtype.names} for row in steps]
places = [(int(r["rank"]), r["host"].decode(), r["device"].decode()) for r in budget]
json.dump({"point": point, "steps": rows, "places": places}, sys.stdout)
PY
checks=$((checks + 1))
if "$py" "$here/trace_check.py" "$work/steps.json" "$work/t.json" "$work/per" >"$work/check" 2>&1; then
  sed 's/^/# /' "$work/check"  # each reader's verdict, or why it could not run
else
  fail "the traces do not match the steps table: $(tail -15 "$work/check")"
fi
# The run took a checkpoint (step 2): its stall is on the checkpoint_stall track.
grep -q '"name":"checkpoint_stall","cat":"phase"' "$work/t.json" || fail "no checkpoint_stall slice in the trace"

# --- --trace-point: another point; the JSON export on stdout stays one JSON document -----------------------------
expect_ok "$tb" report "$t" --format json --trace "$work/k1.json" --trace-point k1
checks=$((checks + 1))
"$py" - "$work/out" "$work/k1.json" <<'PY' || fail "--trace-point k1: wrong trace, or stdout is not JSON"
import json, sys
json.load(open(sys.argv[1]))
trace = json.load(open(sys.argv[2]))
assert trace["otherData"]["point"] == "k1", trace["otherData"]["point"]
steps = [e for e in trace["traceEvents"] if e["ph"] == "X" and e["cat"] == "step"]
assert {e["pid"] for e in steps} == {0} and len(steps) == 5, [(e["pid"], e["name"]) for e in steps]
PY

# --- bad input: one line, exit 2, nothing written ---------------------------------------------------------------------
expect_error 2 "cannot trace report '$c': it has no training steps \(a collectives report\); --trace shows the steps" \
  -- "$tb" report "$c" --trace "$work/x.json"
expect_error 2 "refusing to write --trace '$t': it is the input '$t' of this run" -- "$tb" report "$t" --trace "$t"
expect_error 2 "cannot write --trace '$work/nodir/x.json': directory '$work/nodir' does not exist" \
  -- "$tb" report "$t" --trace "$work/nodir/x.json"
expect_error 2 "cannot write --trace '$t/x.json': '$t' is not a directory" -- "$tb" report "$t" --trace "$t/x.json"
# An empty path: the flag parser's refusal of an empty value, or CheckWritable's.
expect_error 2 "--trace '': (an empty value|the path is empty)" -- "$tb" report "$t" --trace ''
expect_error 2 "--trace-dir '': (an empty value|the path is empty)" -- "$tb" report "$t" --trace-dir ''
expect_error 2 "cannot write --trace-dir '$work/nodir/per': directory '$work/nodir' does not exist" \
  -- "$tb" report "$t" --trace-dir "$work/nodir/per"
expect_error 2 "refusing to write --trace-dir '$t': it is not a directory" -- "$tb" report "$t" --trace-dir "$t"
mkdir "$work/stale" && echo '{}' >"$work/stale/old.json"
expect_error 2 "refusing to write --trace-dir '$work/stale': it holds 'old.json', which HTA would read as one more rank's" \
  -- "$tb" report "$t" --trace-dir "$work/stale"
mkdir "$work/clash" && cp "$t" "$work/clash/rank1.json"
expect_error_unchanged 2 "refusing to write --trace-dir '$work/clash/rank1.json': it is the input" "$work/clash/rank1.json" \
  -- "$tb" report "$work/clash/rank1.json" --trace-dir "$work/clash"
expect_error 2 "--trace-point 'k4': report '$t' has no training point of that name with steps \(it has k1, k2\)" \
  -- "$tb" report "$t" --trace "$work/x.json" --trace-point k4
expect_error 2 "--trace-point goes with --trace or --trace-dir \(not given\)" -- "$tb" report "$t" --trace-point k1
expect_error 2 "--trace and --trace-dir export one report's steps \(2 reports given\)" \
  -- "$tb" report "$t" "$t" --trace "$work/x.json"
[[ ! -e $work/x.json && ! -e $work/nodir && $(ls "$work/stale") == old.json && ! -e $work/clash/rank0.json ]] ||
  fail "a refused export wrote something: $(ls "$work" "$work/stale" "$work/clash")"

finish trace_cli_tests
