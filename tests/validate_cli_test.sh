#!/usr/bin/env bash
# trainbench validate end to end: a run against itself and its history passes, a run whose storage is throttled far
# below what it needs fails (exit 3) naming the figure, JUnit parses with junitparser and the textfile with
# prometheus_client's parser, and every bad input is one line and exit 2.
#   validate_cli_test.sh TRAINBENCH MPIEXEC...
set -uo pipefail
tb=$(realpath "$1"); shift; mpi=("$@")
work=$(mktemp -d); trap 'rm -rf "$work"' EXIT
source "$(dirname "${BASH_SOURCE[0]}")/cli_lib.sh"
cd "$work"

small=(--model tiny --seq 32 --micro-batch 2 --warmup-steps 1 --steps 3 --data tokens --record-bytes 4K --quiet)
expect_ok "$tb" data generate --dir tokens --tokens 100000 --vocab 4096 --quiet
for run in a b c d; do expect_ok "${mpi[@]}" -n 2 "$tb" train "${small[@]}" -o $run.h5; done
# 0.01 MB/s per rank against 8 KB per step: each step waits about 0.8 s for data where it computes in milliseconds.
expect_ok "${mpi[@]}" -n 2 "$tb" train "${small[@]}" --io-throttle 0.01 -o slow.h5
expect_ok "$tb" collectives -b 8 -e 1K -n 2 -w 1 -o coll.h5 --quiet

# Two ranks sharing two busy cores can differ in step time by any factor: the straggler rule is tested in
# validate_tests (and with injected slow ranks); here its floor (100 = 10000% slower) is out of the way.
printf '[straggler]\nfloor = 100\nfloor_cpu = 100\n' >calm.toml
printf '[tolerance]\nwarn = 0.99\nfail = 0.999\nshare_warn = 0.5\nshare_fail = 0.9\n[straggler]\nfloor = 100\nfloor_cpu = 100\n' >wide.toml

# A run against itself: every figure equal, so every check passes.
expect_ok "$tb" validate a.h5 --baseline a.h5 --json self.json --policy calm.toml
grep -q '^# verdict: pass' "$work/out" || fail "a run against itself: $(grep -E '^ +(fail|warn|unknown) ' "$work/out")"

# The throttled run against a clean baseline: data_wait (+90 points) and throughput fail; exit 3.
checks=$((checks + 1))
"$tb" validate slow.h5 --baseline a.h5 --policy calm.toml --junit slow.xml --prometheus slow.prom --json slow.json \
  >"$work/out" 2>"$work/err"
rc=$?
[[ $rc -eq 3 ]] || fail "throttled run: exit $rc, want 3: $(cat "$work/err")"
grep -qE '^ +fail +[a-z]+ +train +train.data_wait_share ' "$work/out" || fail "throttled run: no failing data_wait_share: $(cat "$work/out")"
grep -qE '^ +fail +[a-z]+ +train +train.tokens_per_s ' "$work/out" || fail "throttled run: no failing tokens_per_s"
grep -q '^# verdict: fail (exit 3)' "$work/out" || fail "throttled run: no verdict line"

# JUnit and Prometheus, read by their standard parsers, say the same as the JSON.
checks=$((checks + 1))
/usr/bin/python3 - slow.xml slow.prom slow.json <<'EOF' || fail "JUnit/Prometheus/JSON disagree or do not parse"
import json, sys
from junitparser import JUnitXml, Failure
from prometheus_client.parser import text_string_to_metric_families
xml, prom, js = sys.argv[1:]
rows = json.load(open(js))["runs"][0]["validate"]["checks"]
failed = {r["check"] for r in rows if r["verdict"] == "fail"}
junit_failed = {case.name for suite in JUnitXml.fromfile(xml) for case in suite
                if any(isinstance(r, Failure) for r in case.result)}
assert failed and failed == junit_failed, (failed, junit_failed)
status = {}
for family in text_string_to_metric_families(open(prom).read()):
    for sample in family.samples:
        if sample.name == "trainbench_check_status":
            status[sample.labels["check"]] = sample.value
assert {k for k, v in status.items() if v == 2} == failed, status
assert len(status) == len(rows), (len(status), len(rows))
EOF

# History: three clean nights, then a clean run passes against them (bands wide enough that load cannot matter:
# on CI's loaded machine a timing figure of one run once fell over 95% below the other nights' and failed)
# and the throttled one still fails on data_wait with the default share bands.
mkdir history
for run in a b c; do expect_ok "$tb" validate $run.h5 --history history --policy wide.toml; done
[[ $(ls history | wc -l) -eq 3 ]] || fail "history holds $(ls history | wc -l) nights, want 3"
expect_ok "$tb" validate d.h5 --history history --policy wide.toml
with_notes "$work/out" | grep -c >/dev/null 'history: median of 3 passing nights' || fail "no expectation from history: $(cat "$work/out")"
grep -qE '^ +pass +[a-z]+ +train +train.tokens_per_s ' "$work/out" || fail "clean run against history: tokens_per_s not pass"
checks=$((checks + 1))
"$tb" validate slow.h5 --history history --policy calm.toml >"$work/out" 2>&1
[[ $? -eq 3 ]] || fail "throttled run against history: not exit 3: $(tail -5 "$work/out")"
# The failing night is kept (for cost's failure rate), marked as not counted: the expectation stays the 4 passing.
[[ $(ls history | wc -l) -eq 5 ]] || fail "history holds $(ls history | wc -l) entries, want 5 (4 passing, the failing one)"
grep -q 'a regression: kept for the failure rate, not for the expectation' "$work/out" || fail "failing night: no history line"
[[ $(grep -l '"counted": false' history/*.json | wc -l) -eq 1 ]] || fail "want one entry not counted"
grep -q '"node_hours": [0-9]' history/*.json && grep -q '"status": "complete"' history/*.json || fail "entries lack status or node_hours"
# a.h5 again: the other 3 passing nights are its expectation (not 4: the failing one is not counted).
expect_ok "$tb" validate a.h5 --history history --policy wide.toml
with_notes "$work/out" | grep -c >/dev/null 'history: median of 3 passing nights' || fail "the failing night joined the expectation: $(grep history "$work/out")"

# History is a shared directory (nightly jobs of several configurations validate into one). 15 validates at once
# (12 runs of one configuration and 3 of another, all started in the same second: copies with their own run_id):
# each added once, none lost; all again at once: none doubled; a pruning validate beside readers: no error.
mkdir shared
copies=()
for i in $(seq 1 15); do
  source_run=a.h5; [[ $i -le 12 ]] || source_run=coll.h5
  copies+=("run$i.h5")
  cp "$source_run" "run$i.h5"
done
/usr/bin/python3 - "${copies[@]}" <<'PY' || fail "cannot set run_id with h5py"
import sys, h5py
for n, path in enumerate(sys.argv[1:]):
    with h5py.File(path, "r+") as f:
        f.attrs["run_id"] = "%032x" % (n + 1)
PY
concurrent_validates() {  # concurrent_validates EXTRA_ARGS...: every copy validated at once into shared/
  local pids=() i=0
  for run in "${copies[@]}"; do
    "$tb" validate "$run" --history shared --policy calm.toml "$@" >"$work/conc$i.out" 2>&1 &
    pids+=($!); i=$((i + 1))
  done
  local bad=0
  for pid in "${pids[@]}"; do wait "$pid" || bad=$((bad + 1)); done
  checks=$((checks + 1))
  [[ $bad -eq 0 ]] || fail "$bad of ${#pids[@]} concurrent validates failed: $(grep -h trainbench: "$work"/conc*.out | head -3)"
}
concurrent_validates
[[ $(ls shared | wc -l) -eq 15 ]] || fail "15 concurrent validates left $(ls shared | wc -l) nights, want 15"
[[ $(cat "$work"/conc*.out | grep -c '# history: added') -eq 15 ]] || fail "not every concurrent validate said added"
[[ $(grep -h '"run_key"' shared/*.json | sort -u | wc -l) -eq 15 ]] || fail "concurrent validates: run keys not distinct"
concurrent_validates
[[ $(ls shared | wc -l) -eq 15 ]] || fail "validating the same 15 runs again left $(ls shared | wc -l) nights, want 15"
[[ $(cat "$work"/conc*.out | grep -c 'is already in') -eq 15 ]] || fail "the same runs again: not every one 'already in'"
rm shared/*.json
concurrent_validates --history-keep 3
[[ $(ls shared | wc -l) -eq 6 ]] || fail "pruning to 3 per configuration left $(ls shared | wc -l) nights, want 6: $(ls shared)"

# --strict: unknown checks (nothing to compare with) are a regression too.
expect_error_rc() {
  local code=$1; shift
  checks=$((checks + 1))
  "$@" >"$work/out" 2>"$work/err"; local rc=$?
  [[ $rc -eq $code ]] || fail "$* -> exit $rc, want $code: $(tail -3 "$work/err")"
}
expect_error_rc 3 "$tb" validate a.h5 --strict --policy calm.toml
expect_error_rc 0 "$tb" validate a.h5 --policy calm.toml

# Injected faults (--inject): validate fails each one and names where it is.
# rank 1 sleeps 400 ms in every step where a step takes milliseconds; the floor of 100% stays clear of load noise.
printf '[straggler]\nfloor_cpu = 1.0\n' >straggler.toml
expect_ok "${mpi[@]}" -n 2 "$tb" train "${small[@]}" --inject slow-rank=1:400 -o slowrank.h5
expect_error_rc 3 "$tb" validate slowrank.h5 --policy straggler.toml
# Of two ranks, nothing tells whether rank 1 is slow or rank 0 fast: the check fails naming both, and their host.
grep -qE '^ +fail +[a-z]+ +train +train.step_s.rank1 +0,1 +[^ -]' "$work/out" || fail "slow rank 1 not failed: $(grep -E 'step_s' "$work/out")"
with_notes "$work/out" | grep -c >/dev/null 'two ranks cannot tell which of them is off' || fail "no two-rank straggler message: $(cat "$work/out")"
# 0-2's messages wait 200 ms each among three ranks: p2p flags the pair, validate names both ends.
expect_ok "${mpi[@]}" -n 3 "$tb" p2p --size 256K -n 2 --latency-iters 2 --inject slow-link=0-2:200000 -o slowlink.h5 --quiet
expect_error_rc 3 "$tb" validate slowlink.h5 --policy calm.toml --prometheus slowlink.prom --junit slowlink.xml
grep -qE '^ +fail +[a-z]+ +p2p +p2p.weak_links +(0->2|2->0) ' "$work/out" || fail "weak link 0->2 not named: $(grep p2p "$work/out")"
with_notes "$work/out" | grep -c >/dev/null 'weak link .*(.*ranks 0->2)' || fail "weak link 0->2 not in the message: $(grep p2p "$work/out")"
# Dashboards key on names: a clean night and a failing one give the same checks and series (the outcome and the
# report's path are in values and bounded labels, never in a check's name or a series' identity).
expect_ok "${mpi[@]}" -n 3 "$tb" p2p --size 256K -n 2 --latency-iters 2 -o cleanlink.h5 --quiet
cp cleanlink.h5 "night-$RANDOM.h5" && "$tb" validate night-*.h5 --policy calm.toml --prometheus cleanlink.prom \
  --junit cleanlink.xml >/dev/null 2>&1
checks=$((checks + 1))
/usr/bin/python3 - slowlink.prom cleanlink.prom slowlink.xml cleanlink.xml <<'PY' || fail "check names or series differ between a failing and a clean night"
import sys
from junitparser import JUnitXml
from prometheus_client.parser import text_string_to_metric_families
def series(path):
    out = set()
    for family in text_string_to_metric_families(open(path).read()):
        for s in family.samples:
            labels = {k: v for k, v in s.labels.items() if k in ("check", "family")}
            if labels.get("check") != "run.injected_faults":  # the --inject that made the failing night
                out.add((s.name, tuple(sorted(labels.items()))))
            assert "run" not in s.labels, s
    return out
slow, clean = series(sys.argv[1]), series(sys.argv[2])
assert slow == clean, (slow ^ clean)
def names(path):
    xml = JUnitXml.fromfile(path)
    assert ".h5" not in (xml.name or ""), xml.name
    return {(suite.name, case.name) for suite in xml for case in suite if case.name != "run.injected_faults"}
assert names(sys.argv[3]) == names(sys.argv[4]), names(sys.argv[3]) ^ names(sys.argv[4])
PY
# rank 1 corrupts its input: the sweep counts wrong elements and fails; validate fails the run and the elements.
checks=$((checks + 1))
"${mpi[@]}" -n 2 "$tb" collectives -b 1K -e 4K -n 2 -w 1 --ops all_reduce --inject wrong-value=1 -o wrong.h5 --quiet \
  >/dev/null 2>&1 && fail "collectives with a wrong value exited 0"
expect_error_rc 3 "$tb" validate wrong.h5 --policy calm.toml
grep -qE '^ +fail +[a-z]+ +collectives +collectives.all_reduce.wrong_elements ' "$work/out" || fail "wrong elements not failed"
grep -qE '^ +fail +[a-z]+ +run +run.status ' "$work/out" || fail "a failed run not failed: $(grep run.status "$work/out")"
# rank 1 hangs in a collective: the watchdog ends the run, the report says why, validate fails it with that reason.
checks=$((checks + 1))
timeout 120 "${mpi[@]}" -n 2 "$tb" train "${small[@]}" --inject hang=1 --timeout 5 -o hang.h5 >/dev/null 2>&1 &&
  fail "a hanging run exited 0"
expect_error_rc 3 "$tb" validate hang.h5 --policy calm.toml
with_notes "$work/out" | grep -cE >/dev/null '^ +fail +[a-z]+ +run +run.status .*timeout' || fail "the hang's reason not shown: $(grep run.status "$work/out")"

# Each read waits 2 s more: data_wait fails against the clean baseline.
expect_ok "${mpi[@]}" -n 2 "$tb" train "${small[@]}" --inject io-stall=2000 -o iostall.h5
expect_error_rc 3 "$tb" validate iostall.h5 --baseline a.h5 --policy calm.toml
grep -qE '^ +fail +[a-z]+ +train +train.data_wait_share ' "$work/out" || fail "io-stall: data_wait not failed"

# Bad input: one line, exit 2, nothing written.
printf '[tolerance]\nwran = 0.1\n' >bad.toml
expect_error 2 "bad.toml:2: \[tolerance\] unknown key 'wran'" -- "$tb" validate a.h5 --policy bad.toml
expect_error 2 "--baseline 'coll.h5' is another configuration" -- "$tb" validate a.h5 --baseline coll.h5
echo hello >history/notes.txt
expect_error 2 "history 'history/notes.txt': not a history entry" -- "$tb" validate a.h5 --history history
rm history/notes.txt
expect_error 2 "refusing to write --junit 'history/x.xml'" -- "$tb" validate a.h5 --history history --junit history/x.xml
expect_error 2 "one report at a time" -- "$tb" validate a.h5 b.h5
expect_error 2 "no report given" -- "$tb" validate
expect_error 2 "--record-anyway goes with --history" -- "$tb" validate a.h5 --record-anyway
expect_error 2 "cannot read report 'none.h5'" -- "$tb" validate none.h5
expect_error 2 "history" -- "$tb" validate a.h5 --history missing-dir
[[ ! -e history/x.xml ]] || fail "a refused --junit was written"
# Outputs are checked before the verdict: a missing directory, a place no file can be made, the history directory
# (for every command that takes one); a directory above the history is fine.
expect_error 2 "cannot write --json 'nodir/v.json': directory 'nodir' does not exist" -- "$tb" validate a.h5 --json nodir/v.json
expect_error 2 "cannot write --prometheus '/proc/v.prom'" -- "$tb" validate a.h5 --prometheus /proc/v.prom
grep -q '# verdict' "$work/out" && fail "validate printed a verdict before refusing its output"
expect_error 2 "refusing to write --html 'history/h.html': it is inside the history directory 'history'" -- \
  "$tb" history history --html history/h.html
expect_error 2 "refusing to write --html 'history/c.html': it is inside --history 'history'" -- \
  "$tb" cost a.h5 --prices "$(dirname "$0")/../launch/prices.example.toml" --device-as "H100 SXM" --train-tokens 1e9 \
  --history history --html history/c.html
[[ -z $(ls history | grep -v '\.json$') ]] || fail "a refused output was written into the history: $(ls history)"
mkdir -p site/nightly
for run in a b c; do expect_ok "$tb" validate $run.h5 --history site/nightly --policy wide.toml; done
(cd site && "$tb" validate ../d.h5 --history nightly --policy ../wide.toml --json d.json --junit d.xml >"$work/out" 2>"$work/err") ||
  fail "an output in the directory above --history was refused: $(cat "$work/err")"
# An empty value names nothing: refused, not read as "not given".
expect_error 2 "--history '': an empty value" -- "$tb" validate a.h5 --history ''
expect_error 2 "--baseline '': an empty value" -- "$tb" validate a.h5 --baseline ''
expect_error 2 "an empty file name" -- "$tb" validate ''
expect_error 2 "--data '': an empty value" -- "$tb" train --model tiny --data ''
expect_error 2 "--html '': an empty value" -- "$tb" history history --html ''
# History entries with a wrong-typed field: one line naming the file and the field (the library's text never).
cp history/"$(ls history | head -1)" keep.json
sed -i 's/"node_hours": [0-9.e-]*/"node_hours": -1/' history/"$(ls history | head -1)"
expect_error 2 "history 'history/.*json': damaged entry: \"node_hours\" must be a number >= 0 or null, got number -1" -- \
  "$tb" validate a.h5 --history history
cp keep.json history/"$(ls history | head -1)"

# The console's width (nccl-tests' 120 characters): a row per check, its key whole, and its message on the '#' lines
# under the row (with the tolerance, where the expectation came from, and text too wide for its column).
checks=$((checks + 1))
for night in a.h5 slow.h5 coll.h5 wrong.h5 hang.h5 iostall.h5; do
  "$tb" validate "$night" --policy calm.toml >"$work/out" 2>"$work/err"
  grep -q '^# verdict: ' "$work/out" || fail "validate $night: no verdict: $(cat "$work/err")"
  wide=$(awk 'length($0) > 120 { printf "%d characters: %.60s...\n", length($0), $0 }' "$work/out" | head -2)
  [[ -z $wide ]] || fail "validate $night: lines wider than 120 characters: $wide"
done
"$tb" validate hang.h5 --policy calm.toml >"$work/out" 2>&1
under=$(grep -A1 -E '^ +fail +degraded +run +run.status +[0-9]+ +[^ ]+ +failed +0 +- *$' "$work/out" | tail -1)
[[ $under =~ ^#\ +failed:\ timeout:\  ]] || fail "hang: the reason is not under the run.status row: $(grep -A2 run.status "$work/out")"
grep -qE '^ +fail +[a-z]+ +run +run.status .*timeout.*\(tolerance: 0.000; source: the report.s status[;)]' <(with_notes "$work/out") ||
  fail "hang: the row and its lines do not read as one: $(with_notes "$work/out" | grep run.status)"
finish validate_cli_test
