#!/usr/bin/env bash
# End-to-end test of results/analysis/plots.py: real reports from the built trainbench (collectives, p2p, a train scaling
# sweep at 2 ranks) and `trainbench cost --format json`; the page drawn from them by the script and by `trainbench
# report --html`, then rendered in headless Chromium: every plot an <img> with an inline PNG that the browser
# decoded (natural width and height > 0), the PNGs themselves sound, the screenshot not blank. Bad inputs: one line
# on stderr and exit 2 (missing, not HDF5, foreign HDF5, truncated, bad cost JSON, unwritable output; no script or
# interpreter behind `report --html`). Without h5py/matplotlib only the exit-3 message is checked; without
# Chromium the rendering checks are skipped with a message.
#   plots_test.sh TRAINBENCH MPIEXEC [MPIEXEC FLAGS...]
set -uo pipefail
tb=$1; shift; mpiexec=("$@")
work=$(mktemp -d); trap 'rm -rf "$work"' EXIT
source "$(dirname "${BASH_SOURCE[0]}")/cli_lib.sh"
source_dir=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
plots=$source_dir/results/analysis/plots.py
python=/usr/bin/python3  # Debian's python3-h5py and python3-matplotlib belong to this interpreter
export OPENBLAS_NUM_THREADS=1

# expect_plots_error CODE PATTERN -- ARGS...: plots.py exits CODE with exactly one stderr line matching PATTERN,
# and leaves no page behind.
expect_plots_error() {
  local code=$1 pattern=$2; shift 3
  checks=$((checks + 1))
  rm -f "$work/bad.html"
  timeout 300 "$python" "$plots" --out "$work/bad.html" "$@" >"$work/out" 2>"$work/err"; local rc=$?
  if [[ $rc -ne $code ]]; then fail "plots.py $* -> exit $rc, want $code; stderr: $(cat "$work/err")"; return; fi
  [[ $(wc -l <"$work/err") -eq 1 ]] || { fail "plots.py $* -> stderr is not one line: $(cat "$work/err")"; return; }
  grep -qE -- "$pattern" "$work/err" || fail "plots.py $* -> stderr lacks /$pattern/: $(cat "$work/err")"
  [[ ! -e $work/bad.html ]] || fail "plots.py $* -> wrote a page despite the error"
}

# png_count HTML: the inline PNG images of a page.
png_count() { grep -o 'src="data:image/png;base64,' "$1" | wc -l; }

if ! "$python" -c 'import h5py, matplotlib' 2>/dev/null; then
  expect_plots_error 3 "install python3-h5py python3-matplotlib" -- "$work/any.h5"
  echo "SKIP: $python lacks h5py or matplotlib (apt-get install python3-h5py python3-matplotlib): only the" \
       "missing-package message was checked"
  finish plots_test; exit
fi

# --- reports from real runs ---------------------------------------------------------------------------------------
expect_ok "${mpiexec[@]}" -n 2 "$tb" collectives -b 1K -e 1M --quiet -o "$work/coll.h5"
expect_ok "${mpiexec[@]}" -n 2 "$tb" p2p --size 64K --quiet -o "$work/p2p.h5"
expect_ok "${mpiexec[@]}" -n 2 "$tb" train --model tiny --seq 32 --micro-batch 2 --warmup-steps 1 --steps 3 \
  --scaling 1,2 --quiet -o "$work/train.h5"
# Total task cost of the training run on the example price offerings (a CPU run, priced as if it ran on H100s).
expect_ok "$tb" cost "$work/train.h5" --prices "$source_dir/launch/prices.example.toml" --train-tokens 1e9 \
  --deadline-hours 72 --device-as "H100 SXM" --format json
cp "$work/out" "$work/cost.json"

# --- the page -----------------------------------------------------------------------------------------------------
# all_reduce busbw, scaling, stall budget, p2p heatmap, cost: five plots.
page=$work/page.html
expect_ok "$python" "$plots" --out "$page" --cost "$work/cost.json" "$work/coll.h5" "$work/p2p.h5" "$work/train.h5"
checks=$((checks + 1))
[[ $(png_count "$page") -eq 5 ]] || fail "want 5 inline PNGs in $page"
checks=$((checks + 1))
grep -qE '(src|href)="(https?:)?//' "$page" && fail "the page fetches something from the network"
grep -q "coll.h5" "$page" && grep -q "train.h5" "$page" || fail "run names missing from the page"
ls "$work"/page.html.*.tmp >/dev/null 2>&1 && fail "temporary file left behind"

# A report export comparing two runs (--export): the comparability table first, the warned row marked.
cat >"$work/export.json" <<'EOF'
{"comparability": {"runs": ["a.h5", "b.h5"], "warnings": ["runs differ in seq (32 vs 64): throughput is not comparable"],
 "variables": [{"name": "seq", "values": ["32", "64"], "differs": true, "warned": true},
               {"name": "device", "values": ["cpu", null], "differs": false, "warned": false}]}}
EOF
expect_ok "$python" "$plots" --out "$work/cmp.html" --export "$work/export.json" "$work/coll.h5" "$work/train.h5"
checks=$((checks + 1))
grep -q '<li>runs differ in seq (32 vs 64): throughput is not comparable</li>' "$work/cmp.html" &&
  grep -q '<tr class="warned"><td>seq</td><td>32</td><td>64</td><td>yes: not comparable</td></tr>' "$work/cmp.html" &&
  grep -q '<td>device</td><td>cpu</td><td>-</td><td>no</td>' "$work/cmp.html" || fail "--export: comparability table"
[[ $(grep -o '<h2>[^<]*</h2>' "$work/cmp.html" | head -1) == '<h2>Comparability of the runs</h2>' ]] ||
  fail "--export: the comparability table is not first"
grep -q 'Comparability' "$page" && fail "one run's cost file gave a comparability table"

# Only a collectives report: one plot, and a line for each thing it lacks.
expect_ok "$python" "$plots" --out "$work/coll.html" "$work/coll.h5"
checks=$((checks + 1))
[[ $(png_count "$work/coll.html") -eq 1 ]] || fail "want 1 inline PNG in coll.html"
[[ $(grep -c 'class="missing"' "$work/coll.html") -eq 4 ]] || fail "want 4 missing-data lines in coll.html"

# Through `trainbench report --html` (WriteHtmlReport): the same four report plots, and no cost without a cost file.
expect_ok "$tb" report "$work/coll.h5" "$work/p2p.h5" "$work/train.h5" --html "$work/report.html"
checks=$((checks + 1))
[[ $(png_count "$work/report.html") -eq 4 ]] || fail "want 4 inline PNGs in report.html"
grep -q "^# HTML report: $work/report.html" "$work/out" || fail "report did not name the page: $(tail -3 "$work/out")"
TRAINBENCH_PLOTS_SCRIPT=/nonexistent/plots.py expect_error 2 "plotting script '/nonexistent/plots.py' is missing" -- \
  "$tb" report "$work/coll.h5" --html "$work/report2.html"
TRAINBENCH_PYTHON=/nonexistent/python3 expect_error 2 "cannot run '/nonexistent/python3'.*install python3-h5py" -- \
  "$tb" report "$work/coll.h5" --html "$work/report2.html"

# check_pngs HTML: every inline PNG decodes, has a PNG header with width and height > 0 and is not a stub.
check_pngs() {
  checks=$((checks + 1))
  "$python" - "$1" <<'PY' || fail "inline PNGs of $1 are not sound"
import base64, re, struct, sys
sources = re.findall(r'src="data:image/png;base64,([^"]*)"', open(sys.argv[1], encoding="utf-8").read())
for data in sources:
    png = base64.b64decode(data, validate=True)
    assert png[:8] == b"\x89PNG\r\n\x1a\n" and png[12:16] == b"IHDR", "not a PNG"
    width, height = struct.unpack(">II", png[16:24])
    assert width > 100 and height > 100 and len(png) > 5000, f"{width}x{height}, {len(png)} bytes"
sys.exit(0 if sources else 1)
PY
}
check_pngs "$page"

# --- rendered in headless Chromium --------------------------------------------------------------------------------
chromium=$(command -v chromium || command -v chromium-browser || true)
if [[ -z $chromium ]]; then
  echo "SKIP: chromium not installed (apt-get install chromium): the page was not rendered in a browser"
else
  browser=(timeout 180 "$chromium" --headless --no-sandbox --disable-gpu --no-first-run --hide-scrollbars
           --user-data-dir="$work/chromium-profile")
  # A probe page loads the report page in a frame and lists what the browser made of each image; the report page
  # itself carries no script. File pages may read each other only with --allow-file-access-from-files.
  cat >"$work/probe.html" <<'EOF'
<!DOCTYPE html><html><body>
<iframe id="page" src="page.html" style="width:1200px;height:900px"></iframe>
<pre id="result">not loaded</pre>
<script>
document.getElementById("page").addEventListener("load", (event) => {
  const images = Array.from(event.target.contentDocument.images);
  document.getElementById("result").textContent = images.map((img) =>
    `image ${img.src.startsWith("data:image/png;base64,") ? "png-data" : "other"} ` +
    `${img.complete ? "complete" : "incomplete"} ${img.naturalWidth}x${img.naturalHeight}`).join("\n");
});
</script></body></html>
EOF
  checks=$((checks + 1))
  "${browser[@]}" --allow-file-access-from-files --dump-dom "file://$work/probe.html" \
    >"$work/dom.html" 2>"$work/chromium.err" ||
    fail "chromium --dump-dom failed: $(tail -3 "$work/chromium.err")"
  rendered=$(grep -oE 'image png-data complete [1-9][0-9]*x[1-9][0-9]*' "$work/dom.html" | wc -l)
  [[ $rendered -eq 5 ]] ||
    fail "Chromium decoded $rendered of 5 inline PNGs: $(grep -A6 'id="result"' "$work/dom.html")"

  checks=$((checks + 1))
  "${browser[@]}" --window-size=1200,2400 --screenshot="$work/shot.png" "file://$page" \
    >/dev/null 2>"$work/chromium.err" ||
    fail "chromium --screenshot failed: $(tail -3 "$work/chromium.err")"
  # Not blank: a white page with text has few colours; plots bring thousands and cover a good part of the page.
  "$python" - "$work/shot.png" <<'PY' || fail "the screenshot looks blank"
import sys
import matplotlib.image
import numpy as np
pixels = matplotlib.image.imread(sys.argv[1])[:, :, :3]
colours = len(np.unique((pixels * 255).astype(np.uint8).reshape(-1, 3), axis=0))
non_white = float((pixels.min(axis=2) < 0.9).mean())
print(f"screenshot: {colours} colours, {100 * non_white:.1f}% non-white")
sys.exit(0 if colours > 500 and non_white > 0.05 else 1)
PY
fi

# --- bad inputs ---------------------------------------------------------------------------------------------------
expect_plots_error 2 "cannot read report '.*missing.h5': no such file" -- "$work/missing.h5"
echo "not a report" >"$work/text.h5"
expect_plots_error 2 "cannot read report '.*text.h5': not an HDF5 file" -- "$work/text.h5"
"$python" -c 'import h5py, sys; h5py.File(sys.argv[1], "w").attrs["schema"] = "other"' "$work/foreign.h5"
expect_plots_error 2 "cannot read report '.*foreign.h5': not a trainbench report" -- "$work/foreign.h5"
head -c 3000 "$work/train.h5" >"$work/truncated.h5"
expect_plots_error 2 "cannot read report '.*truncated.h5': the HDF5 file is damaged" -- "$work/truncated.h5"
echo "{" >"$work/bad.json"
expect_plots_error 2 "cannot read cost file '.*bad.json': not JSON" -- --cost "$work/bad.json" "$work/coll.h5"
echo '{"runs": [{"file": "a.h5", "cost": {"rows": [{"total_usd": null}]}}]}' >"$work/nototal.json"
expect_plots_error 2 "run 'a.h5' cost.rows\[0\] lacks a numeric 'total_usd'" -- --cost "$work/nototal.json" "$work/coll.h5"
echo '{"runs": [{"file": "a.h5", "cost": {"points": []}}]}' >"$work/norows.json"
expect_plots_error 2 "no run with a 'cost.rows' list" -- --cost "$work/norows.json" "$work/coll.h5"
echo '{"comparability": {"runs": ["a.h5", "b.h5"], "variables": [{"name": "seq", "values": ["32"]}]}}' >"$work/cmp.json"
expect_plots_error 2 "cannot read export file '.*cmp.json': comparability.variables\[0\] needs a 'name' and one value per run" -- \
  --export "$work/cmp.json" "$work/coll.h5"
echo '{"comparability": {"runs": "a.h5"}}' >"$work/cmp2.json"
expect_plots_error 2 "'comparability' lacks its 'runs' and 'variables' lists" -- --export "$work/cmp2.json" "$work/coll.h5"
expect_plots_error 2 "give one" -- --export "$work/cmp2.json" --cost "$work/norows.json" "$work/coll.h5"
checks=$((checks + 1))
"$python" "$plots" --out "$work/no/such/dir/page.html" "$work/coll.h5" 2>"$work/err"; rc=$?
[[ $rc -eq 2 && $(wc -l <"$work/err") -eq 1 ]] && grep -q "cannot write '.*page.html'" "$work/err" ||
  fail "unwritable output -> exit $rc: $(cat "$work/err")"
expect_plots_error 2 "usage: plots.py" --

finish plots_test
