#!/usr/bin/env bash
# End-to-end tests of `trainbench report` on real reports (collectives, p2p and train with the loader and a
# checkpoint, at 2 ranks; info): runs side by side in text, JSON and CSV that parse and carry the report's exact
# numbers (checked against h5dump), --sections, and every bad input: one line, exit 2, nothing printed before it.
#   report_cli_test.sh TRAINBENCH H5DUMP MPIEXEC [MPIEXEC FLAGS...]
set -uo pipefail
tb=$1; h5dump=$2; shift 2; mpiexec=("$@")
work=$(mktemp -d); trap 'rm -rf "$work"' EXIT
source "$(dirname "${BASH_SOURCE[0]}")/cli_lib.sh"
export OPENBLAS_NUM_THREADS=1
# Any Python 3 parses JSON and CSV; the reports are written with h5py from Debian's python3-h5py (launch/setup).
py=python3
h5py=/usr/bin/python3

# --- real reports -----------------------------------------------------------------------------------------------
c=$work/c.h5 p=$work/p.h5 t=$work/t.h5 i=$work/i.h5
expect_ok "${mpiexec[@]}" -n 2 "$tb" collectives -b 1K -e 64K -f 8 --ops all_reduce,all_gather -n 3 -w 1 -o "$c"
expect_ok "${mpiexec[@]}" -n 2 "$tb" p2p --size 64K -n 3 --latency-iters 10 -o "$p"
expect_ok "$tb" data generate --dir "$work/tokens" --tokens 50K --shard-tokens 20K --vocab 4096 --quiet
expect_ok "${mpiexec[@]}" -n 2 "$tb" train --model tiny --seq 32 --micro-batch 2 --warmup-steps 1 --steps 2 \
  --scaling 1,2 --data "$work/tokens" --checkpoint-dir "$work/ckpt" --checkpoint-every 2 -o "$t"
expect_ok "$tb" info -o "$i"
for r in "$c" "$p" "$t" "$i"; do [[ -s $r ]] || { fail "no report $r"; finish report_cli_tests; exit; }; done

# exact MEMBER: the attribute as h5dump prints it with every digit.
exact() { "$h5dump" -m %.17g -A -a "$1" "$2" | sed -n 's/^ *(0): //p'; }
train_tokens=$(exact /summary/train_tokens_per_s "$t")
[[ -n $train_tokens ]] || fail "h5dump cannot read /summary/train_tokens_per_s"

# --- text: headline figures side by side, details run by run --------------------------------------------------------
expect_ok "$tb" report "$c" "$t"
out=$work/out
grep -qx "#   run 1: $c" "$out" && grep -qx "#   run 2: $t" "$out" || fail "text: runs not listed: $(head -3 "$out")"
grep -qE '^# +field +run 1 +run 2$' "$out" || fail "text: no side-by-side header"
# tokens/s: nothing for the collectives run, the train run's largest point for the other.
grep -qE '^ +tokens_per_s +\(tokens/s\) +- +[0-9]+$' "$out" || fail "text: tokens_per_s row: $(grep ^tokens_per_s "$out")"
grep -qE '^ +all_reduce_peak_busbw_GBps +\(GB/s\) +[0-9.]+ +-$' "$out" || fail "text: all_reduce peak busbw row"
grep -qE '^ +command +collectives +train$' "$out" || fail "text: config row command"
for heading in "collectives.results: .*, run 1 \($c\)" "train.points: .*, run 2 \($t\)" "train.stall_budget: .*, run 2" \
               "io.checkpoints: .*, run 2" "io.loader: .*, run 2" "topology.summary: " "config.options: .*, run 1"; do
  grep -qE "^# $heading" "$out" || fail "text: no table /$heading/"
done
grep -qE "^ +k2 +0 +[^ ]+ +cpu \(1 BLAS threads\)" "$out" || fail "text: stall budget row of rank 0 at k2 missing"

# --- JSON: parses; the numbers are the report's, to the last bit ------------------------------------------------------
checks=$((checks + 1))
if "$tb" report "$c" "$p" "$t" "$i" --format json >"$work/all.json" 2>"$work/err"; then
  "$py" - "$work/all.json" "$train_tokens" "$c" "$p" "$t" "$i" <<'EOF' || fail "JSON checks failed"
import json, sys
doc = json.load(open(sys.argv[1]))
want_tokens = float(sys.argv[2])
runs = doc["runs"]
assert [r["file"] for r in runs] == sys.argv[3:], [r["file"] for r in runs]
c, p, t, i = runs
summary = t["train"]["summary"]
assert summary["tokens_per_s"] == want_tokens, (summary["tokens_per_s"], want_tokens)
assert summary["mfu_peak"] is None, "NaN (no peak for a CPU) must be null"
assert summary["ranks"] == 2 and isinstance(summary["ranks"], int)
assert [pt["point"] for pt in t["train"]["points"]] == ["k1", "k2"]
assert len(t["train"]["stall_budget"]) == 3
assert t["io"]["summary"]["checkpoints"] == 1, t["io"]["summary"]
assert [(k["point"], k["ranks"], k["ok"]) for k in t["io"]["checkpoints"]] == [("k1", 1, 1), ("k2", 2, 1)]
assert {"train", "io"}.isdisjoint(c) and "collectives" in c and "p2p" in p and "topology" in i
assert c["collectives"]["peak"]["wrong_elements_total"] == 0
assert len(c["collectives"]["results"]) == 6, len(c["collectives"]["results"])
assert p["p2p"]["summary"]["median_uni_GBps"] > 0
assert doc["units"]["train.summary"]["tokens_per_s"] == "tokens/s"
assert i["config"]["run"]["command"] == "info"
EOF
else
  fail "report --format json -> exit $?: $(cat "$work/err")"
fi
# Every double of the JSON equals h5py's reading of the same attribute (when python3-h5py is there).
checks=$((checks + 1))
if "$h5py" -c 'import h5py' 2>/dev/null; then
  "$h5py" - "$work/all.json" "$c" "$t" <<'EOF' || fail "JSON numbers differ from the HDF5 attributes"
import json, sys, math, h5py
doc = json.load(open(sys.argv[1]))
c, t = doc["runs"][0], doc["runs"][2]
with h5py.File(sys.argv[3], "r") as f:
    for pt in t["train"]["points"]:
        attrs = f["train/" + pt["point"]].attrs
        for name in ("tokens_per_s", "step_s", "overlap", "mfu_measured_gemm", "scaling_efficiency"):
            a = float(attrs[name])
            assert (pt[name] is None and math.isnan(a)) or pt[name] == a, (pt["point"], name, pt[name], a)
with h5py.File(sys.argv[2], "r") as f:
    rows = [r for r in c["collectives"]["results"] if r["op"] == "all_reduce"]
    table = f["collectives/all_reduce/results"][:]
    assert [r["out_of_place_busbw_GBps"] for r in rows] == [float(x) for x in table["out_of_place_busbw_GBps"]]
EOF
else
  echo "note: $h5py has no h5py; JSON checked against h5dump only"
fi

# --- CSV: every block parses, every row as wide as its header, the numbers read back -----------------------------------
checks=$((checks + 1))
if "$tb" report "$c" "$t" --format csv >"$work/all.csv" 2>"$work/err"; then
  "$py" - "$work/all.csv" "$train_tokens" "$c" "$t" <<'EOF' || fail "CSV checks failed"
import csv, io, sys
text = open(sys.argv[1]).read()
want_tokens, files = float(sys.argv[2]), set(sys.argv[3:])
blocks = {}
for block in text.split("\n\n"):
    lines = block.strip("\n").split("\n")
    assert lines[0].startswith("# ") and lines[1].startswith("# units,"), lines[:2]
    rows = list(csv.reader(io.StringIO("\n".join(lines[1:]) + "\n")))
    units, header, data = rows[0], rows[1], rows[2:]
    assert header[0] == "run" and len(units) == len(header), (lines[0], header)
    for row in data:
        assert len(row) == len(header), (lines[0], row)
        assert row[0] in files, row[0]
    blocks[lines[0][2:]] = [dict(zip(header, row)) for row in data]
train = blocks["train.summary"]
assert len(train) == 1 and float(train[0]["tokens_per_s"]) == want_tokens, train
assert train[0]["mfu_peak"] == "nan"
assert {row["run"] for row in blocks["config.run"]} == files
assert len(blocks["collectives.results"]) == 6
EOF
else
  fail "report --format csv -> exit $?: $(cat "$work/err")"
fi

# --- --sections ----------------------------------------------------------------------------------------------------
expect_ok "$tb" report "$c" "$t" --sections train,io
grep -q '^# train.summary' "$out" && grep -q '^# io.summary' "$out" || fail "--sections train,io: train or io missing"
grep -qE '^# (config|topology|collectives|p2p)\.' "$out" && fail "--sections train,io shows other sections"
expect_ok "$tb" report "$t" --sections collectives --format json
"$py" -c 'import json,sys; r = json.load(sys.stdin)["runs"][0]; assert set(r) == {"file"}, set(r)' <"$out" ||
  fail "--sections collectives on a train report should give the run and no tables"
expect_ok "$tb" report "$i" --format csv --sections topology
[[ $(grep -c '^# topology.summary$' "$out") -eq 1 && $(grep -c '^#' "$out") -eq 2 ]] || fail "info report, topology only"

# --- --html: the page of plots is written (when matplotlib is there to draw it) ----------------------------------------
if "$h5py" -c 'import h5py, matplotlib' 2>/dev/null; then
  expect_ok "$tb" report "$c" "$t" --html "$work/r.html"
  grep -q "^# HTML report: $work/r.html" "$out" || fail "--html: no line naming the page"
  [[ -s $work/r.html ]] || fail "--html: no page written"
fi

# --- comparability: two runs that differ in one variable -------------------------------------------------------------
s32=$work/s32.h5 s32b=$work/s32b.h5 s64=$work/s64.h5
for run in "s32 32" "s32b 32" "s64 64"; do
  set -- $run
  expect_ok "$tb" train --model tiny --seq "$2" --micro-batch 2 --warmup-steps 1 --steps 2 --quiet -o "$work/$1.h5"
done
expect_ok "$tb" report "$s32" "$s64"
[[ $(grep -c '^# warning: ' "$out") -eq 1 ]] && grep -qx '# warning: runs differ in seq (32 vs 64): throughput is not comparable' "$out" ||
  fail "runs differing in seq: want the one warning: $(grep '^# warning' "$out")"
[[ $(grep -n '^# warning: ' "$out" | cut -d: -f1) -lt $(grep -n '^# config.run' "$out" | cut -d: -f1) ]] ||
  fail "the warning comes after the results"
grep -qE '^ seq +32 +64 +yes: not comparable$' "$out" || fail "comparability table lacks the seq row: $(grep '^ seq' "$out")"
grep -qE '^ micro_batch +2 +2 +no$' "$out" || fail "comparability table lacks the micro_batch row"
expect_ok "$tb" report "$s32" "$s32b" --require-comparable
grep -q '^# warning' "$out" && fail "identical runs warned: $(grep '^# warning' "$out")"
grep -q '^# comparability' "$out" || fail "no comparability table for two runs"
expect_ok "$tb" report "$s32"
grep -q '^# comparability' "$out" && fail "a comparability table for one run"
expect_error 2 "runs are not comparable \(--require-comparable\): runs differ in seq \(32 vs 64\): throughput is not comparable$" -- \
  "$tb" report "$s32" "$s64" --require-comparable
[[ -s $work/out ]] && fail "--require-comparable printed before its error: $(head -2 "$work/out")"
expect_ok "$tb" report "$s32" "$s64" --format json
"$py" -c '
import json, sys
c = json.load(sys.stdin)["comparability"]
assert c["warnings"] == ["runs differ in seq (32 vs 64): throughput is not comparable"], c["warnings"]
seq = next(v for v in c["variables"] if v["name"] == "seq")
assert seq["values"] == ["32", "64"] and seq["differs"] and seq["warned"], seq' <"$out" || fail "JSON comparability"
if "$h5py" -c 'import h5py, matplotlib' 2>/dev/null; then
  expect_ok "$tb" report "$s32" "$s64" --html "$work/cmp.html"
  grep -q '<h2>Comparability of the runs</h2>' "$work/cmp.html" && grep -q '<li>runs differ in seq (32 vs 64)' "$work/cmp.html" ||
    fail "--html: no comparability table or warning"
  ls "$work"/cmp.html.export.json.tmp 2>/dev/null && fail "--html left its export behind"
fi

# --- bad input: one line naming the file, exit 2, no table before it --------------------------------------------------
printf 'not hdf5\n' >"$work/text.h5"
cp "$t" "$work/truncated.h5"; truncate -s $(($(stat -c %s "$t") / 2)) "$work/truncated.h5"
expect_error 2 "cannot read report '$work/none.h5': no such file" -- "$tb" report "$work/none.h5"
expect_error 2 "cannot read report '$work/text.h5': not an HDF5 file" -- "$tb" report "$work/text.h5"
expect_error 2 "cannot read report '$work/truncated.h5': the HDF5 file is damaged or truncated" -- \
  "$tb" report "$work/truncated.h5"
expect_error 2 "cannot read report '$work': it is a directory" -- "$tb" report "$work"
# A good file first: still nothing printed, the bad one named.
expect_error 2 "cannot read report '$work/none.h5'" -- "$tb" report "$t" "$work/none.h5"
[[ -s $out ]] && fail "a bad second file: output printed before the error"
checks=$((checks + 1))
if "$h5py" -c 'import h5py' 2>/dev/null; then
  "$h5py" - "$work/foreign.h5" "$t" "$work/v99.h5" <<'EOF' || fail "cannot write the h5py test files"
import shutil, sys, h5py, numpy
with h5py.File(sys.argv[1], "w") as f:                 # someone else's HDF5: data, no trainbench identity
    f["temperature"] = numpy.arange(10.0)
    f.attrs["instrument"] = "thermometer"
shutil.copyfile(sys.argv[2], sys.argv[3])
with h5py.File(sys.argv[3], "r+") as f:                # ours, from a future schema
    f.attrs["schema_version"] = numpy.int64(99)
EOF
  expect_error 2 "cannot read report '$work/foreign.h5': not a trainbench report" -- "$tb" report "$work/foreign.h5"
  expect_error 2 "cannot read report '$work/v99.h5': schema version 99 is not supported \(this build reads 1\)" -- \
    "$tb" report "$work/v99.h5"
else
  fail "$h5py lacks h5py (Debian's python3-h5py, installed by launch/setup): foreign and v99 files not tested"
fi
# Damaged: the report lacks what its own summary or root attributes name (a deleted point, io group, sweep, status).
without "$t" "$work/no_k2.h5" train/k2
expect_error_unchanged 2 "cannot read report '$work/no_k2.h5': damaged: summary/train_points lists the training point k2, but group /train/k2 is missing" \
  "$work/no_k2.h5" -- "$tb" report "$work/no_k2.h5"
without "$t" "$work/no_io.h5" io/k1
expect_error_unchanged 2 "'$work/no_io.h5': damaged: .* the training point k1 of a run with --data, checkpoints or --resume, but group /io/k1 is missing" \
  "$work/no_io.h5" -- "$tb" report "$c" "$work/no_io.h5"
without "$c" "$work/no_gather.h5" collectives/all_gather
expect_error_unchanged 2 "'$work/no_gather.h5': damaged: summary/all_gather_peak_busbw_GBps reports a sweep of all_gather, but /collectives/all_gather/results is missing" \
  "$work/no_gather.h5" -- "$tb" report "$work/no_gather.h5" --format json
without "$p" "$work/no_uni.h5" p2p/uni_bw_GBps
expect_error_unchanged 2 "'$work/no_uni.h5': damaged: summary/p2p_median_uni_GBps reports a p2p matrix, but /p2p/uni_bw_GBps is missing" \
  "$work/no_uni.h5" -- "$tb" report "$work/no_uni.h5"
without "$i" "$work/no_status.h5" @status
expect_error_unchanged 2 "cannot read report '$work/no_status.h5': damaged: the root attribute 'status' \(written to every report\) is missing" \
  "$work/no_status.h5" -- "${mpiexec[@]}" -n 2 "$tb" report "$work/no_status.h5"
without "$t" "$work/no_tps.h5" train/k2@tokens_per_s
expect_error_unchanged 2 "'$work/no_tps.h5': damaged: .* but attribute /train/k2 tokens_per_s is missing" \
  "$work/no_tps.h5" -- "$tb" report "$work/no_tps.h5"
expect_error 2 "no report files given" -- "$tb" report
expect_error 2 "no report files given" -- "$tb" report --format json
checks=$((checks + 1))
"$tb" report --help | grep -cF >/dev/null -- "--format text|csv|json (=text)" || fail "report --help does not show the choices of --format"
# The same line as cost's (tests/cost_cli_test.sh): one parser, one format for a value not among the choices.
expect_error 2 "^trainbench: error: --format 'xml': not one of the choices \(accepted: text\|csv\|json\) \(see 'trainbench report --help'\)$" -- \
  "$tb" report "$t" --format xml
expect_error 2 "unknown section 'bogus' for --sections \(accepted: config, topology, collectives, p2p, train, io, gpu_health\)" -- \
  "$tb" report "$t" --sections train,bogus
expect_error 2 "'trainbench report' has no -o: it writes to standard output" -- "$tb" report "$t" -o "$work/x.json"
expect_error 2 "has no --output" -- "$tb" report "$t" --output="$work/x.json"
expect_error 2 "unrecognised option '--bogus'" -- "$tb" report "$t" --bogus
# Under mpiexec: every rank sees the bad file, one line is printed, no rank hangs.
expect_error 2 "cannot read report '$work/truncated.h5'" -- "${mpiexec[@]}" -n 2 "$tb" report "$work/truncated.h5"
expect_ok "$tb" report --help
grep -q "Sections (--sections, comma-separated; all by default): config, topology, collectives, p2p, train, io, gpu_health" "$out" ||
  fail "--help does not list the sections"


# --- the console's width: every table within 120 characters (nccl-tests'), the columns left out named --------------
# fits_console WHAT: no line of the last output is wider than 120 characters.
fits_console() {
  checks=$((checks + 1))
  local wide; wide=$(awk 'length($0) > 120 { printf "line %d, %d characters: %.70s...\n", NR, length($0), $0 }' "$out" | head -3)
  [[ -z $wide ]] || fail "$1: wider than 120 characters: $wide"
}
# Beside the runs above: a suite (every phase and checkpoints), train with repeats and I/O, and a report whose path
# is longer than the console (a line of its own, wrapped; the tables' headings name the run by number).
expect_ok "${mpiexec[@]}" -n 2 "$tb" suite -o "$work/suite.h5" --quiet
expect_ok "${mpiexec[@]}" -n 2 "$tb" train --model tiny --seq 32 --micro-batch 2 --warmup-steps 1 --steps 2 --repeats 2 \
  --data "$work/tokens" --checkpoint-dir "$work/ckpt2" --checkpoint-every 2 -o "$work/repeats.h5" --quiet
long=$work/$(printf 'a-directory-name-%.0s' {1..8}); mkdir -p "$long"; cp "$t" "$long/t.h5"
for runs in "$c" "$p" "$t" "$i" "$work/suite.h5" "$work/repeats.h5" "$c $p $t $i $work/suite.h5 $work/repeats.h5 $s32 $s64" \
            "$long/t.h5 $t"; do
  expect_ok "$tb" report $runs
  fits_console "report $runs"
done
[[ $(sed -n '/^#   run 1: /{N;s/^#   run 1: //;s/\n#     //;p}' "$out") == "$long/t.h5" ]] ||
  fail "a long path: not on its own lines, whole: $(grep -A1 '^#   run 1' "$out")"
# Left out on the console and named there; shown by --all-columns (as wide as it is) and in CSV and JSON.
expect_ok "$tb" report "$t" --sections train,io
fits_console "report --sections train,io"
grep -qE '^# [0-9]+ more columns \(--all-columns, or --format csv\|json\): micro_batch, tokens_per_step, ' <(grep -A1 '^# train.points: ' "$out") ||
  fail "train.points: no line naming the columns left out: $(grep -A2 '^# train.points' "$out")"
grep -qE '^# point .* step_s$' "$out" && ! grep -qE '^# point .*tokens_per_step' "$out" ||
  fail "train.points: headline columns, or tokens_per_step on the console: $(grep -A3 '^# train.points' "$out")"
grep -qE '^# 4 more columns \(.*\): copy_s, crc_s, write_calls_s, commit_s$' <(grep -A1 '^# io.checkpoints: ' "$out") ||
  fail "io.checkpoints: the stages are not named as left out: $(grep -A2 '^# io.checkpoints' "$out")"
expect_ok "$tb" report "$t" --sections train,io --all-columns
grep -qE '^# point .* tokens_per_step .* worst_rank_device' "$out" && grep -qE '^# point .* copy_s .* commit_s ' "$out" ||
  fail "--all-columns: columns missing: $(grep '^# point' "$out")"
grep -q ' more column' "$out" && fail "--all-columns still leaves columns out: $(grep ' more column' "$out")"
[[ -n $(awk 'length($0) > 120' "$out") ]] || fail "--all-columns: the train.points table is not the wide one"
expect_ok "$tb" report "$t" --sections train --format csv
grep -qE '^run,point,ranks,.*,tokens_per_step,.*,worst_rank_device$' "$out" || fail "CSV: train.points lacks its details"
# Collectives: nccl-tests' columns, each mode's under its heading; the columns left out named.
expect_ok "$tb" report "$c" --sections collectives
grep -qE '^# +out_of_place +in_place$' "$out" && grep -qE '^# +op +size_bytes +count +time_us +algbw_GBps +busbw_GBps +wrong +time_us ' "$out" ||
  fail "collectives.results: no nccl-tests header: $(grep -A4 '^# collectives.results' "$out")"
grep -qE '^# [0-9]+ more columns \(.*\): dtype, ranks, split, ' "$out" || fail "collectives.results: dtype, ranks not named as left out"

# --- a group's attributes carry their units: `units`, one "name=unit" per attribute declared with a unit (h5py) -----
expect_ok "${mpiexec[@]}" -n 2 "$tb" train --model tiny --seq 32 --micro-batch 2 --steps 3 --warmup-steps 1 \
  -o "$work/units.h5" --quiet
checks=$((checks + 1))
"$h5py" - "$work/units.h5" >"$work/py" 2>&1 <<'EOF' || fail "a group's units: $(tail -3 "$work/py")"
import sys, h5py
with h5py.File(sys.argv[1], "r") as f:
    def units(group):
        return dict(s.decode().split("=", 1) for s in f[group].attrs["units"])
    point, summary = units("train/k2"), units("summary")
    assert point["tokens_per_s"] == "tokens/s" and point["step_s"] == "s", point
    assert "micro_batch" not in point, point  # declared without a unit
    assert summary["train_tokens_per_s"] == "tokens/s" and summary["train_scaling_efficiency"] == "fraction", summary
EOF

finish report_cli_tests
