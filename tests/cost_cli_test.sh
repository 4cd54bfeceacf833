#!/usr/bin/env bash
# End-to-end tests of `trainbench cost` on real reports (a 2-rank CPU scaling sweep with and without checkpoints, a
# collectives sweep): cost per offering with the cheapest/fastest/deadline verdicts, text, CSV and JSON (both parse),
# --train-steps, --k, projection with its held-out error, the memory fit; every bad input gets one line and exit 2; projection onto each
# offering's fabric in its best layout (the layouts table, different layouts on an NVLink node and on PCIe nodes,
# measured fabrics) and bad fabrics.
#   cost_cli_test.sh TRAINBENCH MPIEXEC [MPIEXEC FLAGS...]
set -uo pipefail
tb=$1; shift; mpiexec=("$@")
work=$(mktemp -d); trap 'rm -rf "$work"' EXIT
source "$(dirname "${BASH_SOURCE[0]}")/cli_lib.sh"
export OPENBLAS_NUM_THREADS=1
prices=$(cd "$(dirname "${BASH_SOURCE[0]}")/../launch" && pwd)/prices.example.toml
h100=(--device-as "H100 SXM")  # the runs here are on CPUs: price them as H100 SXM nodes

# --- real reports --------------------------------------------------------------------------------------------------
small=(--model tiny --seq 32 --micro-batch 2 --warmup-steps 1 --steps 3 --scaling 1,2)
expect_ok "${mpiexec[@]}" -n 2 "$tb" train "${small[@]}" -o "$work/train.h5"
expect_ok "${mpiexec[@]}" -n 2 "$tb" train "${small[@]}" --checkpoint-dir "$work/ckpt" --checkpoint-every 2 \
  -o "$work/ckpt.h5"
expect_ok "${mpiexec[@]}" -n 2 "$tb" collectives -b 1K -e 4M -f 4 -n 5 -w 2 -o "$work/coll.h5"
expect_ok "${mpiexec[@]}" -n 2 "$tb" train "${small[@]}" --parallel fsdp -o "$work/fsdp.h5"
r=$work/train.h5

# --- cost ------------------------------------------------------------------------------------------------------------
# --html: the reports' plots and the cost per configuration in one page (when the plotting packages are here).
if /usr/bin/python3 -c 'import h5py, matplotlib' 2>/dev/null; then
  expect_ok "$tb" cost "$r" --prices "$prices" --train-tokens 1e9 --html "$work/cost.html" "${h100[@]}"
  checks=$((checks + 1))
  grep -q "Total task cost per configuration" "$work/cost.html" && grep -q "data:image/png;base64" "$work/cost.html" ||
    fail "cost --html: no cost plot in the page"
  [[ -z $(ls "$work"/cost.html.*tmp* 2>/dev/null) ]] || fail "cost --html left its temporary JSON behind"
else
  echo "SKIP: cost --html (needs python3-h5py and python3-matplotlib under /usr/bin/python3)"
fi
expect_ok "$tb" cost "$r" "$work/ckpt.h5" --prices "$prices" --train-tokens 1e9 --deadline-hours 1e9 "${h100[@]}"
expect_out "^# run $r: cpu, priced as H100 SXM \(--device-as\)"
expect_out "^#   checkpoint stall and Young/Daly interval: n/a: run with --checkpoint-every to measure"
expect_out "^#   checkpoint: stall [0-9.e+-]+ s \(mean of 4 rank-events at k=2\), [0-9.e+-]+ GB \(measured\)"
expect_out "^# cheapest: .* on (aws-p5.48xlarge|lambda-8x-h100-sxm|coreweave-hgx-h100): \\$"
expect_out "^# fastest: "
expect_out "^# cheapest within 1e\+09 h: "
# 2 runs x the 3 H100 SXM offerings of the example file.
checks=$((checks + 1))
[[ $(grep -cE " k2 1x2 +measured +(aws-p5.48xlarge|lambda-8x-h100-sxm|coreweave-hgx-h100) " "$work/out") -eq 6 ]] ||
  fail "want 6 cost rows: $(cat "$work/out")"

# Modes side by side: each run's line names its mode, the decision lines the winner's mode and exposed
# communication; the fsdp run projects its 1.5x dp's volume (ZeRO's) and fits its sharded memory.
expect_ok "$tb" cost "$r" "$work/fsdp.h5" --prices "$prices" --train-tokens 1e9 --project 2x8 --inter-node-gbps 100 "${h100[@]}"
expect_out "^# run $work/fsdp.h5: .*, --parallel fsdp$"
expect_out "^# run $r: .*, --parallel dp$"
expect_out "^# cheapest: .*; ((dp|fsdp), exposed communication [0-9.]+% of the step|[a-z0-9+]+ on fabric [^ ]+, the best of [0-9]+ layouts considered: )"
expect_out "^# projection of $work/fsdp.h5 .*"

# Comparability: dp and fsdp differ in their layout only (shown, not warned); a run of another sequence length is
# warned about above the results, in the JSON too, and refused by --require-comparable.
expect_ok "$tb" cost "$r" "$work/fsdp.h5" --prices "$prices" --train-tokens 1e9 --require-comparable "${h100[@]}"
expect_out "^ parallel +dp +fsdp +yes: compared$"
checks=$((checks + 1))
grep -q '^# warning' "$work/out" && fail "dp and fsdp runs warned about: $(grep '^# warning' "$work/out")"
expect_ok "${mpiexec[@]}" -n 2 "$tb" train "${small[@]/#32/64}" -o "$work/seq64.h5"
expect_ok "$tb" cost "$r" "$work/seq64.h5" --prices "$prices" --train-tokens 1e9 "${h100[@]}"
expect_out "^# warning: runs differ in seq \(32 vs 64\): throughput is not comparable$"
checks=$((checks + 1))
[[ $(grep -n '^# warning' "$work/out" | cut -d: -f1) -lt $(grep -n '^# cost per run' "$work/out" | cut -d: -f1) ]] ||
  fail "cost: the warning is not above the results"
expect_ok "$tb" cost "$r" "$work/seq64.h5" --prices "$prices" --train-tokens 1e9 --format json "${h100[@]}"
checks=$((checks + 1))
python3 -c '
import json, sys
c = json.load(sys.stdin)["comparability"]
assert c["warnings"] == ["runs differ in seq (32 vs 64): throughput is not comparable"], c["warnings"]' <"$work/out" ||
  fail "cost JSON: comparability warnings"
expect_error 2 "^trainbench: error: runs are not comparable \(--require-comparable\): runs differ in seq \(32 vs 64\)" -- \
  "$tb" cost "$r" "$work/seq64.h5" --prices "$prices" --train-tokens 1e9 --require-comparable "${h100[@]}"

expect_ok "$tb" cost "$r" --prices "$prices" --train-tokens 1e9 --deadline-hours 1e-9 "${h100[@]}"
expect_out "^# none meets the deadline of 1e-09 h \(the fastest takes [0-9.]+ h\)"

# The cheapest of the three H100 offerings at the same throughput is the lowest $/GPU-hour: Lambda's $2.99.
expect_ok "$tb" cost "$r" --prices "$prices" --train-steps 1000 "${h100[@]}"
expect_out "^# cheapest: $r (k2 1x2 \(measured\)|1x2 [a-z0-9+]+ \(projected\)) on lambda-8x-h100-sxm"
expect_out "target 1000 steps"
expect_ok "$tb" cost "$r" --prices "$prices" --train-tokens 1e9 --k 1 "${h100[@]}"
expect_out " k1 1x1 +measured +lambda-8x-h100-sxm "

# An offering's provisioning time (instance start, image pull, data staging): its own columns, billed and added to
# the time to train; without one the table has no such columns.
sed 's/^restart_hours = 0.5 .*/&\nprovisioning_hours = 0.5/' "$prices" >"$work/prov.toml"
expect_ok "$tb" cost "$r" --prices "$work/prov.toml" --train-tokens 1e9 --format json "${h100[@]}"
/usr/bin/python3 - "$work/out" <<'PY' || fail "provisioning: $(head -c 300 "$work/out")"
import json, sys
rows = [row for run in json.load(open(sys.argv[1]))["runs"] for row in run["cost"].get("rows", [])]
priced = [r for r in rows if r["provisioning_hours"] == 0.5]
assert priced, "no row with the file's 0.5 h of provisioning"
for r in priced:
    assert abs(r["provisioning_usd"] - r["job_usd_per_hour"] * 0.5) < 1e-6 * r["provisioning_usd"], r
    parts = r["gpu_usd"] + r["provisioning_usd"] + r["storage_usd"] + r["transfer_usd"] + r["retry_usd"]
    assert abs(parts + (r["energy_usd"] or 0) - r["total_usd"]) < 1e-6 * r["total_usd"], r
PY
expect_ok "$tb" cost "$r" --prices "$work/prov.toml" --train-tokens 1e9 "${h100[@]}"
expect_out "^# +run +config +source +offering +gpus +nodes +time +gpu +prov +prov "
expect_ok "$tb" cost "$r" --prices "$prices" --train-tokens 1e9 "${h100[@]}"
grep -q " prov " "$work/out" && fail "provisioning columns without any provisioning time"

# JSON parses, with the numbers the rows imply; CSV parses to the same totals.
expect_ok "$tb" cost "$r" "$work/ckpt.h5" --prices "$prices" --train-tokens 1e9 --deadline-hours 100000 \
  --format json "${h100[@]}"
cp "$work/out" "$work/cost.json"
checks=$((checks + 1))
python3 - "$work/cost.json" <<'EOF' || fail "cost JSON: $(head -c 2000 "$work/cost.json")"
import json, sys
d = json.load(open(sys.argv[1]))
runs = {run["file"]: run["cost"] for run in d["runs"]}
rows = [dict(row, run=file) for file, cost in runs.items() for row in cost.get("rows", [])]
# 2 runs x 3 H100 SXM offerings (each with a fabric): the measured point, and its projection onto the fabric.
assert len(rows) == 12, len(rows)
assert sorted(r["projected"] for r in rows) == [0] * 6 + [1] * 6, rows
for row in rows:
    parts = row["gpu_usd"] + row["provisioning_usd"] + row["storage_usd"] + row["transfer_usd"] + row["retry_usd"]
    assert abs(parts - row["total_usd"]) <= 1e-9 * row["total_usd"], row
    assert abs(row["usd_per_million_tokens"] - row["total_usd"] / 1e3) <= 1e-9 * row["total_usd"], row
    assert row["target_tokens"] == 1e9
assert d["units"]["cost.rows"]["total_usd"] == "USD"
cheapest = [r for r in rows if "cheapest" in r["marks"].split(",")]
assert len(cheapest) == 1 and cheapest[0]["total_usd"] == min(r["total_usd"] for r in rows)
decision = [cost["decision"] for cost in runs.values() if "decision" in cost]
assert len(decision) == 1 and decision[0]["cheapest"].endswith(" on " + cheapest[0]["offering"]), decision
assert decision[0]["deadline_hours"] == 100000 and decision[0]["deadline_met"] == 1
stalls = [cost["run"]["checkpoint_stall_s"] for cost in runs.values() if "run" in cost]
assert stalls[0] is None and stalls[1] > 0, stalls
EOF
expect_ok "$tb" cost "$r" "$work/ckpt.h5" --prices "$prices" --train-tokens 1e9 --format csv "${h100[@]}"
checks=$((checks + 1))
python3 - "$work/out" "$work/cost.json" <<'EOF' || fail "cost CSV: $(head -c 2000 "$work/out")"
import csv, json, sys
blocks = {}  # table -> rows: the blocks of the report exports ("# table", "# units,...", a header, rows)
for block in open(sys.argv[1]).read().split("\n\n"):
    lines = block.strip("\n").split("\n")
    blocks[lines[0][2:]] = list(csv.DictReader(lines[2:]))
rows = blocks["cost.rows"]
d = json.load(open(sys.argv[2]))
costs = [dict(row, run=run["file"]) for run in d["runs"] for row in run["cost"].get("rows", [])]
assert len(rows) == len(costs) == 12
for a, b in zip(rows, costs):
    assert a["offering"] == b["offering"] and a["run"] == b["run"]
    assert abs(float(a["total_usd"]) - b["total_usd"]) <= 1e-9 * b["total_usd"], (a, b)
assert len(blocks["cost.run"]) == 2 and len(blocks["cost.decision"]) == 1
EOF

# --- projection ------------------------------------------------------------------------------------------------------
expect_ok "$tb" cost "$r" --project 4,2x2,16 --collectives "$work/coll.h5" --inter-node-gbps 100
expect_out "^#   fit: [0-9]+ samples \([0-9]+ collective sizes"
expect_out "^#   intra-node: alpha [0-9.e+-]+ us, beta 1/\([0-9.e+-]+ GB/s\) \(fitted, [1-3] of 3 size bands fitted on their own\)"
expect_out "^#     band small \(< 64 KiB\)(: [^:]+)?: alpha [0-9.e+-]+ us, beta 1/\([0-9.e+-]+ GB/s\), [0-9]+ samples"
expect_out "^#   inter-node: .*bandwidth from --inter-node-gbps 100, latency 5 us assumed"
expect_out "^#   held out k=2 \(1x2\): predicted step [0-9.e+-]+ s, measured [0-9.e+-]+ s: error [0-9.]+%"
expect_out "^ +2x8 +16 .* projected$"
expect_out "^ +1x2 +2 .* measured$"
expect_ok "$tb" cost "$r" --project 4 --collectives "$work/coll.h5" --format json
checks=$((checks + 1))
python3 -c 'import json,sys; c=json.load(sys.stdin)["runs"][0]["cost"]; assert c["run"]["held_out_relative_error"] >= 0; assert [p["layout"] for p in c["points"] if p["source"] == "projected"] == ["1x4"]' \
  <"$work/out" || fail "projection JSON: $(head -c 2000 "$work/out")"
# Projected configurations are priced too: with the fitted links on offerings that name no fabric.
grep -v '^fabric = ' "$prices" >"$work/no_fabric.toml"
expect_ok "$tb" cost "$r" --project 16 --inter-node-gbps 400 --prices "$work/no_fabric.toml" --train-tokens 1e9 "${h100[@]}"
expect_out " 2x8 +projected +lambda-8x-h100-sxm "
expect_out "^# cost per run and offering \(source: measured = the run's priced point, projected = its projection; "

# A layout of N nodes rents N whole nodes (here of 8 and of 2 GPUs), and a layout with more GPUs on one node than an
# offering's nodes have is not priced on it, with a note saying why.
offering() {  # offering NAME GPUS_PER_NODE: an H100 SXM offering at $2 a GPU-hour, MTBF 1000 h per node
  printf '[[offering]]\nname = "%s"\ngpu = "H100 SXM"\ngpus_per_node = %d\nusd_per_gpu_hour = 2.0\n' "$1" "$2"
  printf 'storage_usd_per_gb_month = 0.1\negress_usd_per_gb = 0\nmtbf_node_hours = 1000\nrestart_hours = 0.5\n\n'
}
{ offering eight-per-node 8; offering two-per-node 2; } >"$work/nodes.toml"
offering one-per-node 1 >"$work/one.toml"
layouts=("$r" --project 2x1,4x2,1x4 --inter-node-gbps 100 --prices "$work/nodes.toml" --train-tokens 1e9 "${h100[@]}")
expect_ok "$tb" cost "${layouts[@]}" --format json
checks=$((checks + 1))
python3 - "$work/out" "$r" <<'EOF' || fail "layout JSON: $(head -c 3000 "$work/out")"
import json, sys
d = json.load(open(sys.argv[1]))
rows = {(row["config"], row["offering"]): row for run in d["runs"] for row in run["cost"].get("rows", [])}
want = {  # (config, offering): nodes, billed GPUs, projected
    ("k2 1x2", "eight-per-node"): (1, 8, 0), ("2x1", "eight-per-node"): (2, 16, 1),
    ("4x2", "eight-per-node"): (4, 32, 1), ("1x4", "eight-per-node"): (1, 8, 1),
    ("k2 1x2", "two-per-node"): (1, 2, 0), ("2x1", "two-per-node"): (2, 4, 1), ("4x2", "two-per-node"): (4, 8, 1),
}
assert set(rows) == set(want), sorted(rows)
for key, (nodes, billed, projected) in want.items():
    row = rows[key]
    assert (row["nodes"], row["billed_gpus"], row["projected"]) == (nodes, billed, projected), (key, row)
    assert abs(row["job_mtbf_hours"] - 1000 / nodes) < 1e-9, (key, row)
    assert abs(row["job_usd_per_hour"] - 2.0 * billed) < 1e-9, (key, row)
unpriced = [run["cost"]["decision"]["unpriced"] for run in d["runs"] if "decision" in run["cost"]]
note = sys.argv[2] + " 1x4: offering two-per-node has 2 GPUs per node; layout 1x4 needs 4 on one node"
assert unpriced == [note], unpriced
EOF
expect_ok "$tb" cost "${layouts[@]}"
expect_out "^ +$r +4x2 +projected +eight-per-node +8 +4 "
expect_out "^ +$r +k2 1x2 +measured +two-per-node +2 +1 "
expect_out "^# $r 1x4: offering two-per-node has 2 GPUs per node; layout 1x4 needs 4 on one node$"
expect_out "^# (cheapest|fastest): $r (k2 1x2 \(measured\)|[0-9]+x[0-9]+ \(projected\)) on "
checks=$((checks + 1))
[[ $(grep -cE "^ +$r .* two-per-node " "$work/out") -eq 3 ]] || fail "want 3 rows on two-per-node: $(cat "$work/out")"

# --- memory fit ------------------------------------------------------------------------------------------------------
expect_ok "$tb" cost --model gpt-13b --gpu-memory 80G
expect_out "^#   --gpu-memory 80G, 80.0 GiB: needs [0-9.]+ GiB: does NOT fit, short by"
# An MoE preset: every expert on every GPU (dp), or E/EP of them with --expert-parallel: the experts' states (93% of
# moe-mixtral-8x7b's parameters) divide by EP, the rest stays whole: 0.07 + 0.93/8 of the weights.
expect_ok "$tb" cost --model moe-mixtral-8x7b --gpu-memory 80G --format json
cp "$work/out" moe-dp.json
expect_ok "$tb" cost --model moe-mixtral-8x7b --gpu-memory 80G --ranks 8 --expert-parallel 8 --format json
checks=$((checks + 1))
/usr/bin/python3 - moe-dp.json "$work/out" <<'PY' 2>"$work/py" || fail "MoE memory fit: $(cat "$work/py")"
import json, sys
dp, ep = (json.load(open(p))["runs"][0]["cost"]["memory"][0] for p in sys.argv[1:])
ratio = ep["weights_bytes"] / dp["weights_bytes"]
assert 0.17 < ratio < 0.21 and dp["fits"] == 0, (ratio, dp["fits"])
PY
expect_error 2 "--expert-parallel 8 with --parallel zero1 is not built yet" -- \
  "$tb" cost --model moe-mixtral-8x7b --gpu-memory 80G --ranks 8 --expert-parallel 8 --parallel zero1
expect_error 2 "--expert-parallel 2 needs a model with experts" -- "$tb" cost --model gpt-13b --gpu-memory 80G --expert-parallel 2
expect_ok "$tb" cost --model gpt2-124m --micro-batch 1 --seq 512 --gpu-memory 80G --format json
checks=$((checks + 1))
python3 -c 'import json,sys; m=json.load(sys.stdin)["runs"][0]["cost"]["memory"][0]; assert m["fits"] == 1; assert abs(m["weights_bytes"]+m["gradients_bytes"]+m["optimizer_bytes"] - 16*(m["weights_bytes"]/2)) < 1' \
  <"$work/out" || fail "memory JSON: $(head -c 2000 "$work/out")"
# Per mode (ZeRO's formulas): gpt-70b's 16 Psi of model states do not fit 80 GiB as dp; fsdp over 64 GPUs does,
# with its gathered layers shown; zero1 over 64 keeps 4 Psi of bf16 weights and gradients and does not.
expect_ok "$tb" cost --model gpt-70b --gpu-memory 80G --parallel fsdp --ranks 64
expect_out "^# memory fit, per GPU \(fsdp: .*fsdp over 64 ranks$"
expect_out "gathered layers [0-9.]+ GiB: total"
expect_out "^#   --gpu-memory 80G, 80.0 GiB: needs [0-9.]+ GiB: fits"
expect_ok "$tb" cost --model gpt-70b --gpu-memory 80G --parallel zero1 --ranks 64
expect_out "^#   --gpu-memory 80G, 80.0 GiB: needs [0-9.]+ GiB: does NOT fit"
# Tensor parallel 8 divides gpt-70b's model states by 8, and the split activations (30.2 GiB whole, of which the
# residual stream, LayerNorms and losses stay whole): 129 GiB, does not fit 80 GiB.
expect_ok "$tb" cost --model gpt-70b --gpu-memory 80G --ranks 16 --tensor-parallel 8
expect_out "tensor parallel 8 \(states and split activations over 8\)$"
expect_out "^#   weights 15.1 GiB, gradients 15.1 GiB, optimizer 90.6 GiB, activations 8.2 GiB: total 129.0 GiB"
# Pipeline stages on top: 4 stages hold a quarter of the states each (3.8 GiB of weights); 1F1B keeps 4 micro-batches of
# stage 0's 20 layers in flight, as many activations as one micro-batch of all 80 layers (8.1 GiB). zero1 over the 2
# replicas halves the optimizer state.
expect_ok "$tb" cost --model gpt-70b --gpu-memory 80G --ranks 32 --tensor-parallel 8 --pipeline-parallel 4
expect_out "tensor parallel 8 .*, 4 pipeline stages of 4 micro-batches: the largest stage's$"
expect_out "^#   weights 3.8 GiB, gradients 3.8 GiB, optimizer 23.1 GiB, activations 8.1 GiB: total 38.9 GiB"
expect_out "^#   --gpu-memory 80G, 80.0 GiB: needs 38.9 GiB: fits"
expect_ok "$tb" cost --model gpt-70b --gpu-memory 80G --ranks 64 --tensor-parallel 8 --pipeline-parallel 4 \
  --micro-batches 8 --parallel zero1
expect_out "^#   weights 3.8 GiB, gradients 3.8 GiB, optimizer 11.5 GiB, activations 8.1 GiB: total 27.4 GiB"
expect_error 2 "--pipeline-parallel 3 does not divide the 32 ranks" -- \
  "$tb" cost --model gpt-70b --gpu-memory 80G --ranks 32 --pipeline-parallel 3
expect_error 2 "--pipeline-parallel 4 needs --micro-batches of at least 4" -- \
  "$tb" cost --model gpt-70b --gpu-memory 80G --ranks 32 --pipeline-parallel 4 --micro-batches 2
expect_error 2 "--pipeline-parallel 2 with --parallel fsdp is not built" -- \
  "$tb" cost --model gpt-70b --gpu-memory 80G --ranks 32 --pipeline-parallel 2 --parallel fsdp
expect_error 2 "--micro-batches goes with --pipeline-parallel" -- \
  "$tb" cost --model gpt-70b --gpu-memory 80G --micro-batches 4
expect_error 2 "tensor parallel 8 does not divide 12 ranks" -- \
  "$tb" cost --model gpt-70b --gpu-memory 80G --ranks 12 --tensor-parallel 8
expect_error 2 "--ranks goes with --model" -- "$tb" cost "$r" --ranks 8 --project 4
expect_error 2 "--parallel 'tp': not one of the choices" -- "$tb" cost --model gpt-70b --gpu-memory 80G --parallel tp
expect_ok "$tb" cost --model gpt-70b --layers 8 --prices "$prices"
expect_out "^#   aws-p5.48xlarge \(H100 SXM\), 80.0 GiB: needs"
expect_ok "$tb" cost --help
expect_out "Young/Daly"

# --- bad input: one line, exit 2 ------------------------------------------------------------------------------------
run_cost=("$tb" cost)
expect_error 2 "cannot read report '$work/none.h5': no such file" -- "${run_cost[@]}" "$work/none.h5" --project 4
echo "not hdf5" >"$work/text.h5"
expect_error 2 "cannot read report '$work/text.h5': not an HDF5 file" -- "${run_cost[@]}" "$work/text.h5" --project 4
head -c 3000 "$r" >"$work/truncated.h5"
expect_error 2 "cannot read report '$work/truncated.h5': the HDF5 file is damaged or truncated" -- \
  "${run_cost[@]}" "$work/truncated.h5" --project 4
h5copy -i "$r" -o "$work/foreign.h5" -s /train -d /train
expect_error 2 "cannot read report '$work/foreign.h5': not a trainbench report" -- \
  "${run_cost[@]}" "$work/foreign.h5" --project 4
# Damaged: the report lacks a point its summary lists, or its root status; the --collectives report lacks its sweep.
without "$r" "$work/no_k2.h5" train/k2
expect_error_unchanged 2 "cannot read report '$work/no_k2.h5': damaged: summary/train_points lists the training point k2, but group /train/k2 is missing" \
  "$work/no_k2.h5" -- "${run_cost[@]}" "$work/no_k2.h5" --prices "$prices" --train-tokens 1e9 "${h100[@]}"
without "$r" "$work/no_status.h5" @status
expect_error_unchanged 2 "cannot read report '$work/no_status.h5': damaged: the root attribute 'status' \(written to every report\) is missing" \
  "$work/no_status.h5" -- "${run_cost[@]}" "$work/no_status.h5" --project 4
without "$work/ckpt.h5" "$work/no_io.h5" io/k2
expect_error_unchanged 2 "'$work/no_io.h5': damaged: .*, but group /io/k2 is missing" \
  "$work/no_io.h5" -- "${run_cost[@]}" "$r" "$work/no_io.h5" --prices "$prices" --train-tokens 1e9 "${h100[@]}"
without "$work/coll.h5" "$work/no_sweep.h5" collectives/all_reduce/results
expect_error_unchanged 2 "cannot read report '$work/no_sweep.h5': damaged: summary/all_reduce_peak_busbw_GBps reports a sweep of all_reduce, but /collectives/all_reduce/results is missing" \
  "$work/no_sweep.h5" -- "${run_cost[@]}" "$r" --collectives "$work/no_sweep.h5" --project 4
expect_error 2 "'$work/coll.h5': no training measurement" -- \
  "${run_cost[@]}" "$work/coll.h5" --prices "$prices" --train-tokens 1e9
expect_error 2 "no offering in '.*prices.example.toml' matches the device of any run .*device 'cpu' is no known GPU model" -- \
  "${run_cost[@]}" "$r" --prices "$prices" --train-tokens 1e9
# Every configuration wider than every offering's nodes: nothing to price, one line naming the first pair.
expect_error 2 "^trainbench: error: no offering in '$work/one.toml' has nodes for the layout of any configuration \($r k2 1x2: offering one-per-node has 1 GPU per node; layout 1x2 needs 2 on one node\)$" -- \
  "${run_cost[@]}" "$r" --prices "$work/one.toml" --train-tokens 1e9 "${h100[@]}"

bad_prices() {  # bad_prices NAME SED-EXPRESSION: the example file edited
  sed "$2" "$prices" >"$work/$1.toml"
}
bad_prices unknown_gpu 's/^gpu = "H100 PCIe"/gpu = "H100 SXN"/'
expect_error 2 "unknown_gpu.toml:[0-9]+: offering 'lambda-1x-h100-pcie': unknown GPU 'H100 SXN' \(known: B200, .*H100 SXM" -- \
  "${run_cost[@]}" "$r" --prices "$work/unknown_gpu.toml" --train-tokens 1e9
bad_prices negative 's/^usd_per_gpu_hour = 2.99/usd_per_gpu_hour = -2.99/'
expect_error 2 "negative.toml:[0-9]+: offering 'lambda-8x-h100-sxm': usd_per_gpu_hour must be > 0, got -2.99" -- \
  "${run_cost[@]}" "$r" --prices "$work/negative.toml" --train-tokens 1e9
bad_prices missing '/^usd_per_node_hour = 32.7726/d'
expect_error 2 "missing.toml:[0-9]+: offering 'aws-p4d.24xlarge': missing price: give usd_per_gpu_hour or usd_per_node_hour" -- \
  "${run_cost[@]}" "$r" --prices "$work/missing.toml" --train-tokens 1e9
bad_prices both 's/^usd_per_node_hour = 98.32/usd_per_node_hour = 98.32\nusd_per_gpu_hour = 12.29/'
expect_error 2 "offering 'aws-p5.48xlarge': give usd_per_gpu_hour or usd_per_node_hour, not both" -- \
  "${run_cost[@]}" "$r" --prices "$work/both.toml" --train-tokens 1e9
bad_prices no_storage '0,/^storage_usd_per_gb_month/{/^storage_usd_per_gb_month/d}'
expect_error 2 "no_storage.toml:[0-9]+: offering 'aws-p5.48xlarge': missing storage_usd_per_gb_month" -- \
  "${run_cost[@]}" "$r" --prices "$work/no_storage.toml" --train-tokens 1e9
first_line() { grep -n "$1" "$prices" | head -1 | cut -d: -f1; }
bad_prices malformed 's/^gpus_per_node = 8$/gpus_per_node = [8]/'
expect_error 2 "malformed.toml:$(first_line '^gpus_per_node = 8$'): offering 'aws-p5.48xlarge': gpus_per_node must be a whole number \(got an array\)" -- \
  "${run_cost[@]}" "$r" --prices "$work/malformed.toml" --train-tokens 1e9
bad_prices syntax 's/^usd_per_node_hour = 98.32$/usd_per_node_hour = 98.32 98.32/'
expect_error 2 "syntax.toml:$(first_line '^usd_per_node_hour = 98.32$'): not valid TOML: .* \(column [0-9]+\)" -- \
  "${run_cost[@]}" "$r" --prices "$work/syntax.toml" --train-tokens 1e9
expect_error 2 "cannot read price file '$work/none.toml'" -- "${run_cost[@]}" "$r" --prices "$work/none.toml" --train-tokens 1e9
expect_error 2 "--train-tokens and --train-steps cannot be given together" -- \
  "${run_cost[@]}" "$r" --prices "$prices" --train-tokens 1e9 --train-steps 10
expect_error 2 "--prices needs a training target: --train-tokens N or --train-steps N" -- "${run_cost[@]}" "$r" --prices "$prices"
# The same line as report's (tests/report_cli_test.sh): one parser, one format for a value not among the choices.
expect_error 2 "^trainbench: error: --format 'xml': not one of the choices \(accepted: text\|csv\|json\) \(see 'trainbench cost --help'\)$" -- \
  "${run_cost[@]}" "$r" --project 4 --format xml
expect_error 2 "--train-tokens" -- "${run_cost[@]}" "$r" --prices "$prices" --train-tokens lots
expect_error 2 "--k 3: '$r' measured k = 1,2" -- "${run_cost[@]}" "$r" --prices "$prices" --train-tokens 1e9 --k 3 "${h100[@]}"
expect_error 2 "cannot project '$r' to 2x8: no inter-node measurement \(give --inter-node-gbps" -- "${run_cost[@]}" "$r" --project 16
expect_error 2 "--project '12': not a multiple of --gpus-per-node 8" -- "${run_cost[@]}" "$r" --project 12
expect_error 2 "--device-as: unknown GPU 'H100' \(known: " -- "${run_cost[@]}" "$r" --project 4 --device-as H100
expect_error 2 "nothing to compute" -- "${run_cost[@]}" "$r"
expect_error 2 "they go with reports and --prices" -- "${run_cost[@]}" "$r" --project 4 --train-tokens 1e9
expect_error 2 "no reports given" -- "${run_cost[@]}"
expect_error 2 "--model needs --gpu-memory" -- "${run_cost[@]}" --model gpt-13b
expect_error 2 "gpt-14b" -- "${run_cost[@]}" --model gpt-14b --gpu-memory 80G
expect_error 2 "--gpu-memory" -- "${run_cost[@]}" --model gpt-13b --gpu-memory lots
expect_error 2 "--deadline-hours '-1': out of range" -- \
  "${run_cost[@]}" "$r" --prices "$prices" --train-tokens 1e9 --deadline-hours -1
expect_error 2 "--collectives goes with exactly one training report" -- \
  "${run_cost[@]}" "$r" "$r" --project 4 --collectives "$work/coll.h5"
expect_error 2 "unrecognised option '--bogus'" -- "${run_cost[@]}" "$r" --bogus

# --- measured failure rates (--history DIR, --failure-rate measured) --------------------------------------------------
# history NAME STATUS:NODE_HOURS...: a validate history directory of nights with those statuses and node-hours.
history() {
  local dir=$work/$1 i=0; shift
  rm -rf "$dir"; mkdir "$dir"
  for night in "$@"; do
    i=$((i + 1))
    printf '{"format": "trainbench.history", "version": 1, "run": "n%d.h5", "start_utc": "2026-11-%02dT01:00:00Z", "identity": "train tiny", "values": {}, "texts": {}, "counted": %s, "status": "%s", "node_hours": %s}\n' \
      "$i" "$i" "$([[ ${night%%:*} == complete ]] && echo true || echo false)" "${night%%:*}" "${night##*:}" >"$dir/n$i.json"
  done
}
# Two failures in 40 node-hours: too few to measure; the assumed MTBF stays, measured or not.
history few complete:10 failed:10 complete:10 interrupted:10
expect_ok "$tb" cost "$r" --prices "$prices" --train-tokens 1e9 --history "$work/few" --failure-rate measured "${h100[@]}"
expect_out "^# failures: history $work/few: 2 failed or interrupted of 4 runs in 40 node-hours: too few failures to measure a rate \(2 of the 3 needed\); the retry cost takes the price file's MTBF of [0-9.e+-]+ h per node$"
# Four failures in 100 node-hours: MTBF 25 h per node, shown beside the assumed and, when asked, used.
history many complete:20 failed:10 failed:10 interrupted:20 failed:20 complete:20
expect_ok "$tb" cost "$r" --prices "$prices" --train-tokens 1e9 --history "$work/many" --format json "${h100[@]}"
cp "$work/out" "$work/assumed.json"
expect_ok "$tb" cost "$r" --prices "$prices" --train-tokens 1e9 --history "$work/many" "${h100[@]}"
expect_out "^# failures: history $work/many: 4 failed or interrupted of 6 runs in 100 node-hours: MTBF 25 h per node measured, against [0-9.e+-]+ h assumed by the price file \(used; --failure-rate measured takes the history's\)$"
expect_ok "$tb" cost "$r" --prices "$prices" --train-tokens 1e9 --history "$work/many" --failure-rate measured "${h100[@]}"
expect_out "^# failures: .*: MTBF 25 h per node measured, used for every offering \(--failure-rate measured\)$"
expect_ok "$tb" cost "$r" --prices "$prices" --train-tokens 1e9 --history "$work/many" --failure-rate measured --format json "${h100[@]}"
checks=$((checks + 1))
python3 - "$work/assumed.json" "$work/out" <<'EOF' || fail "--failure-rate measured: the decision's fields or the retry cost"
import json, sys
assumed, measured = (json.load(open(p))["runs"] for p in sys.argv[1:])
d = measured[-1]["cost"]["decision"]
assert d["failure_rate"] == "measured" and d["measured_mtbf_node_hours"] == 25 and d["history_failures"] == 4, d
assert d["history_node_hours"] == 100 and assumed[-1]["cost"]["decision"]["failure_rate"] == "assumed"
a, m = assumed[0]["cost"]["rows"][0], measured[0]["cost"]["rows"][0]
assert m["job_mtbf_hours"] == 25 / m["nodes"], m["job_mtbf_hours"]
assert m["expected_failures"] > a["expected_failures"] and m["retry_usd"] > a["retry_usd"], (a["retry_usd"], m["retry_usd"])
EOF
echo hello >"$work/many/notes.txt"
expect_error 2 "history '$work/many/notes.txt': not a history entry" -- \
  "${run_cost[@]}" "$r" --prices "$prices" --train-tokens 1e9 --history "$work/many" "${h100[@]}"
expect_error 2 "--failure-rate needs --history|--failure-rate.*--history" -- \
  "${run_cost[@]}" "$r" --prices "$prices" --train-tokens 1e9 --failure-rate measured "${h100[@]}"
expect_error 2 "--history needs --prices|--history.*--prices" -- "${run_cost[@]}" "$r" --project 4 --history "$work/few"
expect_error 2 "--history '$work/none': not a directory" -- \
  "${run_cost[@]}" "$r" --prices "$prices" --train-tokens 1e9 --history "$work/none" "${h100[@]}"

# --- projection onto each offering's fabric ---------------------------------------------------------------------------
# One invocation prices the run on the NVLink offerings and on the 8-GPU PCIe nodes over Ethernet, each at 8 and 32
# GPUs in its best layout; a fabric without a network is not projected onto several nodes, with the reason.
both=(--device-as "H100 SXM,H100 PCIe")
expect_ok "$tb" cost "$r" --prices "$prices" --train-tokens 1e9 --project 8,32 "${both[@]}"
expect_out "^# run $r: cpu, priced as H100 SXM, H100 PCIe \(--device-as\)"
expect_out "^# projection of $r onto each offering's fabric: compute [0-9.e+-]+ s per step \(the priced k=2, dp, T=1"
expect_out "^#   on coreweave-hgx-h100 \(fabric hgx-h100-nvswitch-8x400g-ib, nvswitch\), 32 GPUs:$"
expect_out "^#     links: intra-node nvswitch, all_reduce busbw 370 GB/s, latency 1 us, p2p 370 GB/s \(nccl-tests issue 212, .*; inter-node 8 x 400 Gbit/s NICs per node, 400 Gbit/s per rank with 8 ranks per node"
expect_out "^#   on h100-pcie-8x-ethernet \(fabric pcie-gen5-8gpu-2x100g-ethernet, pcie\), 32 GPUs:$"
expect_out "^#     chosen: [a-z0-9+]+ is the fastest that fits"
expect_out "^# $r at 32 GPUs on lambda-8x-h100-sxm \(fabric lambda-h100-nvswitch-single-node\): not projected: fabric 'lambda-h100-nvswitch-single-node' declares no nics_per_node"
expect_out "^ +$r +4x8 [a-z0-9+]+ +projected +h100-pcie-8x-ethernet +32 +4 "
expect_out "^ +$r +1x8 [a-z0-9+]+ +projected +coreweave-hgx-h100 +8 +1 "
expect_out "^# cheapest: .* on fabric [^ ]+, the best of [0-9]+ layouts considered: "
too_wide=$(awk '/onto each offering.s fabric/ {on = 1} /^# cost per run/ {on = 0} on && length > 120 && !/^#/' "$work/out" | head -3)
checks=$((checks + 1))
[[ -z $too_wide ]] || fail "fabric tables wider than 120 columns: $too_wide"

# Offerings of another GPU model are not priced with this run's compute unless --device-as says so; one note names them.
expect_ok "$tb" cost "$r" --prices "$prices" --train-tokens 1e9 --project 8 "${h100[@]}"
expect_out "^# $r: not priced on .*h100-pcie-8x-ethernet \(H100 PCIe\).*: measured on H100 SXM; give a run on that GPU model"

# A count that --gpus-per-node cannot lay out is still projected onto each fabric on that offering's nodes (12 GPUs:
# three 4-GPU L4 nodes), and not onto the 8-GPU ones, saying why; without a price file it stays an error.
expect_ok "$tb" cost "$r" --prices "$prices" --train-tokens 1e9 --project 12 --device-as "L4,H100 SXM"
expect_out "^ +$r +3x4 [a-z0-9+]+ +projected +aws-g6.12xlarge +12 +3 "
expect_out "^# $r at 12 GPUs on coreweave-hgx-h100 \(fabric hgx-h100-nvswitch-8x400g-ib\): not projected: 12 GPUs are not a whole number of 8-GPU nodes"
expect_error 2 "--project '12': not a multiple of --gpus-per-node 8" -- "${run_cost[@]}" "$r" --project 12

# The layouts table (JSON): every candidate of each offering and target, exactly one chosen where any fits, and the
# chosen one is the configuration priced.
expect_ok "$tb" cost "$r" --prices "$prices" --train-tokens 1e9 --project 8,32 "${both[@]}" --format json
cp "$work/out" "$work/fabric.json"
checks=$((checks + 1))
python3 - "$work/fabric.json" <<'EOF2' || fail "fabric JSON: $(head -c 2000 "$work/fabric.json")"
import json, sys, collections
cost = json.load(open(sys.argv[1]))["runs"][0]["cost"]
layouts, rows = cost["layouts"], cost["rows"]
groups = collections.defaultdict(list)
for l in layouts:
    groups[(l["offering"], l["target"])].append(l)
assert ("coreweave-hgx-h100", "32") in groups and ("h100-pcie-8x-ethernet", "8") in groups, groups.keys()
for key, group in groups.items():
    chosen = [l for l in group if l["chosen"] == 1]
    if key == ("lambda-8x-h100-sxm", "32"):
        assert not chosen and "declares no nics_per_node" in group[0]["why_not"], group
        continue
    assert len(chosen) == 1, (key, group)
    c = chosen[0]
    assert all(l["tokens_per_s"] is None or l["memory_fits"] == 0 or l["tokens_per_s"] <= c["tokens_per_s"] for l in group)
    priced = [r for r in rows if r["offering"] == key[0] and r["config"] == c["layout"] + " " + c["candidate"]]
    assert len(priced) == 1 and abs(priced[0]["tokens_per_s"] - c["tokens_per_s"]) < 1e-9 * c["tokens_per_s"], (c, priced)
    assert c["step_s"] > 0 and abs(c["step_s"] - (c["compute_s"] + c["optimizer_s"] + c["activation_s"] + c["exposed_s"])) < 1e-9
EOF2

# Different fabrics, different layouts, one invocation: the GPUs' memory set between what zero1 needs over 8 ranks
# and over 32 (the run's own estimate, from the layouts above), one NVLink node must split the model (tensor parallel)
# where four PCIe nodes shard AdamW's state over 32 ranks; the decision lines say why.
limit=$(python3 - "$work/fabric.json" <<'EOF2'
import json, sys
layouts = json.load(open(sys.argv[1]))["runs"][0]["cost"]["layouts"]
need = {l["target"]: l["memory_required_bytes"] for l in layouts
        if l["offering"] == "coreweave-hgx-h100" and l["candidate"] == "zero1"}
print((need["8"] + need["32"]) / 2 / 2**30)
EOF2
)
{
  sed -n '/^\[\[fabric\]\]/,/^\[\[offering\]\]/p' "$prices" | sed '$d'
  for o in nvlink-node:"H100 SXM":hgx-h100-nvswitch-8x400g-ib:4.76 pcie-nodes:"H100 PCIe":pcie-gen5-8gpu-2x100g-ethernet:2.49; do
    IFS=: read -r name gpu fabric price <<<"$o"
    printf '[[offering]]\nname = "%s"\ngpu = "%s"\ngpus_per_node = 8\ngpu_memory_gib = %s\nusd_per_gpu_hour = %s\n' \
      "$name" "$gpu" "$limit" "$price"
    printf 'storage_usd_per_gb_month = 0\negress_usd_per_gb = 0\nmtbf_node_hours = 6335\nrestart_hours = 0.5\nfabric = "%s"\n\n' "$fabric"
  done
} >"$work/two_fabrics.toml"
expect_ok "$tb" cost "$r" --prices "$work/two_fabrics.toml" --train-tokens 1e9 --project 1x8,4x8 "${both[@]}"
expect_out "^ +$r +1x8 tp[0-9]+\+(zero1|dp|fsdp) +projected +nvlink-node "
expect_out "^ +$r +4x8 (zero1|fsdp) +projected +pcie-nodes "
expect_out "^ +1x8 zero1 .* does not fit: needs [0-9.]+ GiB of [0-9.]+ GiB$"

# A single GPU measured alone (no communication) takes the overlap of a run of the same model and mode given with it.
expect_ok "$tb" train --model tiny --seq 32 --micro-batch 2 --warmup-steps 1 --steps 3 -o "$work/one.h5"
expect_ok "$tb" cost "$work/one.h5" --prices "$prices" --train-tokens 1e9 --project 8 "${both[@]}"
expect_out "^# projection of $work/one.h5 onto each offering's fabric: .* overlap 0.00 no point communicated: assumed 0"
expect_ok "$tb" cost "$work/one.h5" "$r" --prices "$prices" --train-tokens 1e9 --project 8 "${both[@]}"
expect_out "^# projection of $work/one.h5 onto each offering's fabric: .* overlap [0-9.]+ measured at k=2 \(dp\), [0-9.e+-]+ s hidden per step in $r \(the same model and mode"

# A measured intra-node fabric: a collectives report of one node, fitted per message-size band; a p2p report gives
# the p2p rate only (layouts of several GPUs per node then say what is missing).
measured_fabric() {  # measured_fabric FILE REPORT: a price file with one offering on a fabric measured by REPORT
  printf '[[fabric]]\nname = "node"\nintra = "measured"\nintra_report = "%s"\n' "$2"
  printf 'nics_per_node = 1\nnic_gbps = 100\nnetwork_latency_us = 10\nnetwork_source = "assumed, 2026"\n\n'
  printf '[[offering]]\nname = "own"\ngpu = "H100 PCIe"\ngpus_per_node = 4\nusd_per_gpu_hour = 2\n'
  printf 'storage_usd_per_gb_month = 0\negress_usd_per_gb = 0\nmtbf_node_hours = 6335\nrestart_hours = 0.5\nfabric = "node"\n'
} 
measured_fabric "$work/measured.toml" coll.h5 >"$work/measured.toml"
expect_ok "$tb" cost "$r" --prices "$work/measured.toml" --train-tokens 1e9 --project 4,8 --device-as "H100 PCIe"
expect_out "^#     links: intra-node measured: all_reduce sweep of 'coll.h5', fitted per size band; inter-node 1 x 100 Gbit/s"
# A collectives report run with --emulate-pcie (marked here with h5py: the CPU backend refuses the flag) is labelled
# as such where the link is used.
cp "$work/coll.h5" "$work/coll_emulated.h5"
/usr/bin/python3 -c 'import h5py, sys; f = h5py.File(sys.argv[1], "r+"); f.attrs["emulated_fabric"] = "pcie"' \
  "$work/coll_emulated.h5" || fail "cannot mark coll_emulated.h5 (needs /usr/bin/python3 with h5py)"
measured_fabric x coll_emulated.h5 >"$work/measured_emulated.toml"
expect_ok "$tb" cost "$r" --prices "$work/measured_emulated.toml" --train-tokens 1e9 --project 4 --device-as "H100 PCIe"
expect_out "^#     links: intra-node measured: all_reduce sweep of 'coll_emulated.h5' \(pcie emulated\), fitted per size band"
expect_ok "${mpiexec[@]}" -n 2 "$tb" p2p --size 1M -o "$work/p2p.h5"
measured_fabric x p2p.h5 >"$work/measured_p2p.toml"
expect_ok "$tb" cost "$r" --prices "$work/measured_p2p.toml" --train-tokens 1e9 --project 4 --device-as "H100 PCIe"
expect_out "not projected: fabric 'node': its report 'p2p.h5' measured no usable all_reduce sweep"

# Pipeline stages: a 4-rank run of 2 stages x 4 micro-batches (2 replicas) is priced as measured, with its stages
# (the largest stage's memory), projected with its fitted links to 8 GPUs and onto each fabric, where pipeline
# candidates are considered (pp4 is not possible for the 2-layer model, with train's reason); a --project count its
# stages do not divide is bad input.
expect_ok "${mpiexec[@]}" -n 4 "$tb" train --model tiny --seq 32 --micro-batch 2 --steps 3 --warmup-steps 1 \
  --pipeline-parallel 2 --micro-batches 4 -o "$work/pp.h5"
expect_ok "$tb" cost "$work/pp.h5" --prices "$prices" --train-tokens 1e9 --project 8,32 "${h100[@]}"
expect_out "^# run $work/pp.h5: .*, --parallel dp --pipeline-parallel 2 --micro-batches 4 \(1F1B: bubble [0-9.]+% measured, 20.0% in theory"
expect_out "^ +4x8 pp2\+zero1 +[0-9.e+-]+ "
expect_out "^#     pp4: not possible: --pipeline-parallel 4 does not divide the model's 2 layers into stages of equal depth"
expect_out "^#     assumed: M = 4 micro-batches of the run's 64 tokens per pipeline and step"
expect_ok "$tb" cost "$work/pp.h5" --prices "$prices" --train-tokens 1e9 --project 8,32 --format json "${h100[@]}"
checks=$((checks + 1))
python3 - "$work/out" <<'EOF' || fail "cost JSON of a pipeline run: $(head -c 3000 "$work/out")"
import json, sys
d = json.load(open(sys.argv[1]))
cost = [run["cost"] for run in d["runs"] if run["file"].endswith("pp.h5")][0]
run, rows, layouts = cost["run"], cost["rows"], cost["layouts"]
assert run["pipeline_parallel"] == 2 and run["micro_batches"] == 4, run
assert abs(run["bubble_theory"] - 0.2) < 1e-12 and run["comm_pipeline_s"] > 0, run
measured = [r for r in rows if r["projected"] == 0]
assert measured and all(r["config"] == "k4 1x4" and r["pipeline_parallel"] == 2 for r in measured), measured
# Priced as measured: the priced point's own tokens/s.
assert all(abs(r["tokens_per_s"] - run["tokens_per_s"]) <= 1e-9 * run["tokens_per_s"] for r in measured), measured
assert all(r["memory_fits"] == 1 and r["total_usd"] > 0 for r in rows), rows
pp = [c for c in layouts if (c["candidate"] or "").startswith("pp")]
assert pp and all(c["pipeline_parallel"] > 1 for c in pp), layouts
modelled = [c for c in pp if c["step_s"] is not None]
assert modelled and all(c["micro_batches"] == 4 and c["bubble_s"] > 0 for c in modelled), modelled
for c in modelled:
    parts = sum(c[k] for k in ("compute_s", "optimizer_s", "activation_s", "exposed_s", "pipeline_s", "bubble_s",
                               "embedding_s"))
    assert abs(parts - c["step_s"]) <= 1e-9 * c["step_s"], c
    pipelined = c["compute_s"] + c["activation_s"] + c["pipeline_s"] + c["bubble_s"]
    assert abs(c["bubble_s"] / pipelined - 1 / 5) < 1e-9, c  # (P-1)/(M+P-1) at P = 2, M = 4
assert any("does not divide the model's 2 layers" in c["why_not"] for c in pp), [c["why_not"] for c in pp]
EOF
expect_error 2 "cannot project '$work/pp.h5' to 1x3: its 2 pipeline stages x tensor parallel 1 do not divide 3 GPUs" -- \
  "$tb" cost "$work/pp.h5" --project 3 --gpus-per-node 4

# Bad fabrics: one line naming the file, line and key, exit 2, before any work.
bad_prices zero_busbw '0,/^intra_allreduce_busbw_GBps = 370$/s//intra_allreduce_busbw_GBps = 0/'
expect_error 2 "zero_busbw.toml:$(first_line '^intra_allreduce_busbw_GBps = 370$'): fabric 'hgx-h100-nvswitch-8x400g-ib': intra_allreduce_busbw_GBps must be > 0, got 0" -- \
  "${run_cost[@]}" "$r" --prices "$work/zero_busbw.toml" --train-tokens 1e9 "${both[@]}"
bad_prices negative_nic '0,/^nic_gbps = 400$/s//nic_gbps = -400/'
expect_error 2 "negative_nic.toml:[0-9]+: fabric 'hgx-h100-nvswitch-8x400g-ib': nic_gbps must be > 0, got -400" -- \
  "${run_cost[@]}" "$r" --prices "$work/negative_nic.toml" --train-tokens 1e9 "${both[@]}"
bad_prices nan_latency '0,/^intra_latency_us = 1$/s//intra_latency_us = "fast"/'
expect_error 2 "nan_latency.toml:[0-9]+: fabric 'hgx-h100-nvswitch-8x400g-ib': intra_latency_us must be a number \(got a string\)" -- \
  "${run_cost[@]}" "$r" --prices "$work/nan_latency.toml" --train-tokens 1e9 "${both[@]}"
bad_prices undeclared 's/^fabric = "aws-p5-nvswitch-efa"$/fabric = "aws-p5"/'
expect_error 2 "undeclared.toml:[0-9]+: offering 'aws-p5.48xlarge': fabric 'aws-p5' is not declared \(declared: hgx-h100" -- \
  "${run_cost[@]}" "$r" --prices "$work/undeclared.toml" --train-tokens 1e9 "${both[@]}"
measured_fabric x train.h5 >"$work/measured_train.toml"
expect_error 2 "measured_train.toml:1: fabric 'node': intra_report 'train.h5' is a report of 'train': a measured intra-node link comes from a collectives or p2p run of one node" -- \
  "${run_cost[@]}" "$r" --prices "$work/measured_train.toml" --train-tokens 1e9 --device-as "H100 PCIe"
measured_fabric x none.h5 >"$work/measured_none.toml"
expect_error 2 "measured_none.toml:1: fabric 'node': intra_report: cannot read report '$work/none.h5'" -- \
  "${run_cost[@]}" "$r" --prices "$work/measured_none.toml" --train-tokens 1e9 --device-as "H100 PCIe"
expect_error 2 "--device-as: unknown GPU 'H100 SXN'" -- \
  "${run_cost[@]}" "$r" --prices "$prices" --train-tokens 1e9 --device-as "H100 SXM,H100 SXN"

finish cost_cli_tests
