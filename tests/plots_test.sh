#!/usr/bin/env bash
# End-to-end test of results/analysis/plots.py: real reports from the built trainbench (collectives, p2p, a train scaling
# sweep at 2 ranks) and `trainbench cost --format json`; the page drawn from them by the script and by `trainbench
# report --html`, then rendered in headless Chromium: every plot an <img> with an inline PNG that the browser
# decoded (natural width and height > 0), the PNGs themselves sound, the screenshot not blank. `cost --html`: the
# decision first, in the console's words, bars labelled by short run names. `history --html` over real validated
# nights (clean, stalled, hung): the header counts nights and configurations, one panel per figure family, the
# nights not counted marked. Bad inputs: one line on stderr and exit 2 (missing, not HDF5, foreign HDF5,
# truncated, bad cost JSON, unwritable output, --history without its bands; no script or interpreter behind
# `report --html`). Without h5py/matplotlib only the exit-3 message is checked; without Chromium the rendering
# checks are skipped with a message.
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

# --- the cost page: the decision first, in the console's words; short row labels ----------------------------------
# Two runs of the same file name in two folders, as a user comparing two machines keeps them: each bar's label is
# the file name and the one folder that tells them apart, never the directory path.
mkdir -p "$work/nvlink" "$work/pcie"
cp "$work/train.h5" "$work/nvlink/train.h5" && cp "$work/train.h5" "$work/pcie/train.h5"
cost_args=(--prices "$source_dir/launch/prices.example.toml" --train-tokens 1e9 --deadline-hours 72
           --device-as "H100 SXM" --project 4)
expect_ok "$tb" cost "$work/nvlink/train.h5" "$work/pcie/train.h5" "${cost_args[@]}" --html "$work/cost.html"
cp "$work/out" "$work/cost.txt"
expect_ok "$tb" cost "$work/nvlink/train.h5" "$work/pcie/train.h5" "${cost_args[@]}" --format json
cp "$work/out" "$work/cost2.json"
# page_check CHECK PAGE ARGS...: what a reader of PAGE must find there.
#   decision-first PAGE [COST.txt]: the first section is the decision, before any table or plot; with the console
#     output of the same `cost`, its items are the console's `# cheapest/fastest/...` lines, in order.
#   short-labels PAGE COST.json DIR NAME...: one bar label per cost row (the image's alt text lists them), each the
#     run's NAME then its configuration, none holding DIR or starting at /.
#   history PAGE HISTORY_DIR: the header counts the directory's nights and configurations; each configuration has
#     one panel per family its nights measured; each night not counted (a failed or interrupted run, a regression)
#     is in its configuration's table and named on every one of its panels, and no counted night is.
page_check() {
  checks=$((checks + 1))
  "$python" - "$@" >"$work/check.out" 2>&1 <<'PY' || fail "page check $1 of $2: $(tail -5 "$work/check.out")"
import glob, html, json, os, re, sys

check, page = sys.argv[1], open(sys.argv[2], encoding="utf-8").read()
args = sys.argv[3:]

def words(fragment):
    return " ".join(html.unescape(re.sub(r"<[^>]+>", " ", fragment)).split())

if check == "decision-first":
    first = re.search(r"<h2>([^<]*)</h2>", page)
    assert first and first.group(1) == "Decision", f"first section: {first and first.group(1)}"
    assert first.start() < page.index("<table") and first.start() < page.index("<img"), "decision after the tables"
    block = re.search(r'<ul class="decision">(.*?)</ul>', page, re.S)
    items = [words(li) for li in re.findall(r"<li>(.*?)</li>", block.group(1), re.S)] if block else []
    if args:
        console = [" ".join(line[2:].replace("; why: ", " why: ").split()) for line in open(args[0])
                   if re.match(r"# (cheapest|fastest|none meets)", line)]
        assert console and items == console, f"page {items}\nconsole {console}"
    else:
        assert items and items[0].startswith("cheapest: "), items
elif check == "short-labels":
    cost, directory, names = json.load(open(args[0])), args[1], args[2:]
    rows = sum(len(run["cost"]["rows"]) for run in cost["runs"] if "rows" in run.get("cost", {}))
    alt = re.search(r'alt="Total task cost per configuration, one bar per row: ([^"]*)"', page)
    assert alt, "no cost plot listing its bars"
    labels = [item.rpartition(": $")[0] for item in html.unescape(alt.group(1)).split("; ")]
    assert len(labels) == rows, f"{len(labels)} labels for {rows} rows"
    for label in labels:
        assert directory not in label and not label.startswith("/"), f"a directory path in the label '{label}'"
        assert any(label.startswith(name + " ") for name in names), f"label '{label}' does not start with {names}"
    assert all(any(label.startswith(name + " ") for label in labels) for name in names), labels
elif check == "history":
    nights = [json.load(open(path)) for path in sorted(glob.glob(os.path.join(args[0], "*.json")))]
    identities = sorted({n["identity"] for n in nights})
    header = f"from {len(nights)} night(s) of {len(identities)} configuration(s)"
    assert header in page, f"header lacks '{header}': {re.search(r'Generated [^<]*', page).group(0)}"
    sections = re.split(r"<h2>Configuration: ", page)[1:]
    assert len(sections) == len(identities), f"{len(sections)} configurations drawn of {len(identities)}"
    not_counted_seen = 0
    for identity in identities:
        section = next(s for s in sections if s.startswith(html.escape(identity) + "</h2>"))
        mine = [n for n in nights if n["identity"] == identity]
        families = sorted({k.split(".")[0] for n in mine for k, v in n["values"].items() if v is not None})
        panels = re.findall(r'<figure class="panel" data-family="([^"]+)">', section)
        assert sorted(panels) == families, f"{identity}: panels {panels}, families {families}"
        table = section.split("Nights not counted", 1)[1] if "Nights not counted" in section else ""
        alts = re.findall(r'<figure class="panel"[^>]*><img alt="([^"]*)"', section)
        for n in mine:
            missed = n.get("counted") is False or n.get("status") in ("failed", "interrupted")
            not_counted_seen += missed
            assert (n["start_utc"] in table) == missed, f"{identity}: night {n['start_utc']} counted={not missed}"
            for alt in alts:
                assert (n["start_utc"] in alt) == missed, f"{identity}: panel '{alt}' and night {n['start_utc']}"
    assert not_counted_seen, "no night of the history is not counted: nothing to see marked"
else:
    sys.exit(f"unknown check {check}")
PY
}
page_check decision-first "$work/cost.html" "$work/cost.txt"
page_check short-labels "$work/cost.html" "$work/cost2.json" "$work" nvlink/train.h5 pcie/train.h5
# A page drawn from a cost file alone (plots.py --cost): the file's own decision first, labels the file name.
page_check decision-first "$page"
page_check short-labels "$page" "$work/cost.json" "$work" train.h5

# --- the history page: a panel per family, dates, the nights not counted marked -------------------------------------
# Real nights: four clean suite runs, one whose reads stall (a regression once three nights pass) and one that hangs
# (the run fails: another configuration, as it never reached training), each validated into the history.
printf '[straggler]\nfloor = 100\nfloor_cpu = 100\n' >"$work/calm.toml"
mkdir "$work/history"
for night in n1 n2 n3 stall hang n4; do
  inject=()
  [[ $night == stall ]] && inject=(--inject io-stall=300)
  [[ $night == hang ]] && inject=(--inject hang=1 --timeout 3)
  timeout 300 "${mpiexec[@]}" -n 2 "$tb" suite --profile quick --workdir "$work" --quiet "${inject[@]}" \
    -o "$work/$night.h5" >"$work/suite.out" 2>&1
  [[ -s $work/$night.h5 ]] || fail "suite ($night) wrote no report: $(tail -3 "$work/suite.out")"
  timeout 120 "$tb" validate "$work/$night.h5" --history "$work/history" --policy "$work/calm.toml" \
    >"$work/validate.out" 2>&1
  grep -q '^# history: added' "$work/validate.out" ||
    fail "validate ($night) added no night: $(tail -3 "$work/validate.out")"
done
expect_ok "$tb" history "$work/history" --html "$work/history.html"
page_check history "$work/history.html" "$work/history"
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
check_pngs "$work/cost.html"
check_pngs "$work/history.html"

# --- rendered in headless Chromium --------------------------------------------------------------------------------
chromium=$(command -v chromium || command -v chromium-browser || true)
if [[ -z $chromium ]]; then
  echo "SKIP: chromium not installed (apt-get install chromium): the page was not rendered in a browser"
else
  browser=(timeout 180 "$chromium" --headless --no-sandbox --disable-gpu --no-first-run --hide-scrollbars
           --user-data-dir="$work/chromium-profile")
  # A probe page loads a page in a frame and lists what the browser made of each image; the pages themselves carry
  # no script. File pages may read each other only with --allow-file-access-from-files.
  # browser_decodes PAGE COUNT: Chromium decoded COUNT inline PNGs of PAGE (a file in $work).
  browser_decodes() {
    cat >"$work/probe.html" <<EOF
<!DOCTYPE html><html><body>
<iframe id="page" src="$1" style="width:1200px;height:900px"></iframe>
<pre id="result">not loaded</pre>
<script>
document.getElementById("page").addEventListener("load", (event) => {
  const images = Array.from(event.target.contentDocument.images);
  document.getElementById("result").textContent = images.map((img) =>
    \`image \${img.src.startsWith("data:image/png;base64,") ? "png-data" : "other"} \` +
    \`\${img.complete ? "complete" : "incomplete"} \${img.naturalWidth}x\${img.naturalHeight}\`).join("\n");
});
</script></body></html>
EOF
    checks=$((checks + 1))
    "${browser[@]}" --allow-file-access-from-files --dump-dom "file://$work/probe.html" \
      >"$work/dom.html" 2>"$work/chromium.err" ||
      fail "chromium --dump-dom failed: $(tail -3 "$work/chromium.err")"
    local rendered; rendered=$(grep -oE 'image png-data complete [1-9][0-9]*x[1-9][0-9]*' "$work/dom.html" | wc -l)
    [[ $rendered -eq $2 ]] ||
      fail "Chromium decoded $rendered of $2 inline PNGs of $1: $(grep -A6 'id="result"' "$work/dom.html")"
  }
  browser_decodes page.html 5
  browser_decodes history.html "$(png_count "$work/history.html")"

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
expect_plots_error 2 "--history needs --bands" -- --history "$work/history"
expect_plots_error 2 "--bands: unknown key 'wran'" -- --history "$work/history" --bands wran=0.1
expect_plots_error 2 "--bands lacks fail, share_warn" -- --history "$work/history" --bands warn=0.1
expect_plots_error 2 "--decision goes with --cost" -- --decision "# cheapest: x" "$work/coll.h5"
expect_plots_error 2 "usage: plots.py" --

finish plots_test
