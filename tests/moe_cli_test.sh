#!/usr/bin/env bash
# train with mixture-of-experts blocks (issue 39) on the CPU backend: --expert-parallel 4 on 4 ranks gives the losses of
# one rank running the four ranks' batches as --grad-accum 4 (moe-tiny, top-2, --data), and so does expert parallel 2
# with top-1 and dropped tokens; zero1 and fsdp give dp's; the report holds the load balance, the dropped share, the
# aux loss, the all-to-all bytes next to theory and their rate, the all-to-all's share of the stall budget (also on the
# HTML page's plot), --op-times' comm_model and MLP rows, and the model's active parameters (h5py); --experts turns a
# dense preset's MLPs into experts. A checkpoint of expert parallel holds a part per expert rank and resumes
# bit-exactly; another layout or MoE shape is refused. cost prices the run on an NVLink and a PCIe offering with
# expert parallel layouts and names the all-to-all in its decision. Bad values: one line, exit 2, no report.
#   moe_cli_test.sh TRAINBENCH MPIEXEC...
set -uo pipefail
tb=$(realpath "$1"); shift; mpi=("$@")
work=$(mktemp -d); trap 'rm -rf "$work"' EXIT
source "$(dirname "${BASH_SOURCE[0]}")/cli_lib.sh"
prices=$(realpath "$(dirname "${BASH_SOURCE[0]}")/../launch/prices.example.toml")
analysis=$(realpath "$(dirname "${BASH_SOURCE[0]}")/../results/analysis")
cd "$work"

train=(train --model moe-tiny --seq 32 --warmup-steps 1 --steps 3 --lr 0.01 --micro-batch 2 --data tokens)
expect_ok "$tb" data generate --dir tokens --tokens 200K --vocab 4096 --distribution zipf --quiet

# same_losses A.h5 B.h5: the mean over ranks of each measured step's loss agrees within 1e-4 (relative), with the
# same tokens per step and the same routing: the same choices, and the same drops but for a few (weights that differ
# by rounding after a step, the gradients summed in another order, can tip a near tie between two experts).
same_losses() {
  checks=$((checks + 1))
  /usr/bin/python3 - "$@" >"$work/py" 2>&1 <<'PY' || fail "$1 vs $2: $(cat "$work/py")"
import sys, h5py, numpy as np
def figures(path):
    with h5py.File(path, "r") as f:
        point = f["train"][sorted(k for k in f["train"] if k.startswith("k"))[-1]]
        s = point["steps"][()]
        s = s[s["warmup"] == 0]
        steps = sorted(set(s["step"]))
        losses = np.array([s[s["step"] == i]["loss"].mean() for i in steps])
        routed = [(int(s[s["step"] == i]["moe_choices"].sum()), int(s[s["step"] == i]["moe_dropped"].sum())) for i in steps]
        return losses, int(point.attrs["tokens_per_step"]), routed
(la, ta, ra), (lb, tb, rb) = figures(sys.argv[1]), figures(sys.argv[2])
assert ta == tb, f"tokens per step {ta} vs {tb}"
assert all(a[0] == b[0] and abs(a[1] - b[1]) <= max(2, 0.01 * a[0]) for a, b in zip(ra, rb)), f"routing {ra} vs {rb}"
worst = np.max(np.abs(la - lb) / np.abs(lb))
assert worst < 1e-4, f"losses {la} vs {lb}: {worst:.3g} apart"
PY
}

# --- expert parallel 4 = one rank, every rank's batch a micro-batch ----------------------------------------------------
expect_ok "${mpi[@]}" -n 4 "$tb" "${train[@]}" --expert-parallel 4 -o ep4.h5
expect_out "^#   experts: busiest over mean [0-9.]+ .* expert parallel 4: all-to-all [0-9.]+ MB sent per rank per step \(theory"
expect_ok "$tb" "${train[@]}" --grad-accum 4 -o one.h5
expect_out "^# mixture of experts: 2 of 2 blocks with 4 experts of width 512, top-2"
same_losses ep4.h5 one.h5

# The report: routing figures equal to one rank's, the all-to-all against theory, its share of the stall budget.
checks=$((checks + 1))
/usr/bin/python3 - ep4.h5 one.h5 >"$work/py" 2>&1 <<'PY' || fail "ep4.h5's MoE figures: $(cat "$work/py")"
import sys, h5py, math
with h5py.File(sys.argv[1], "r") as ep, h5py.File(sys.argv[2], "r") as one:
    p, q = ep["train/k4"].attrs, one["train/k1"].attrs
    assert p["expert_parallel"] == 4 and q["expert_parallel"] == 1, (p["expert_parallel"], q["expert_parallel"])
    for key in ("moe_max_over_mean", "moe_dropped_share"):  # a near tie may tip (same_losses)
        assert abs(p[key] - q[key]) < 0.01 * q[key], (key, p[key], q[key])
    assert p["moe_max_over_mean"] >= 1 and 0 <= p["moe_dropped_share"] < 1, dict(p)
    assert abs(p["moe_aux_loss"] - q["moe_aux_loss"]) < 1e-3 * q["moe_aux_loss"], (p["moe_aux_loss"], q["moe_aux_loss"])
    # 4 all-to-alls x 2 MoE blocks x 2 x 32 tokens x top-2 x 128 x 4 B x 3/4, routing balanced and nothing dropped.
    theory = 4 * 2 * 64 * 2 * 128 * 4 * 3 / 4
    assert p["alltoall_bytes_theory"] == theory, p["alltoall_bytes_theory"]
    assert 0.5 * theory < p["alltoall_bytes"] < 1.5 * theory, (p["alltoall_bytes"], theory)
    assert p["comm_alltoall_s"] > 0 and p["alltoall_GBps"] > 0, (p["comm_alltoall_s"], p["alltoall_GBps"])
    assert p["alltoall_dispatch_GBps"] > 0 and p["alltoall_combine_GBps"] > 0, dict(p)
    assert math.isclose(p["alltoall_GBps"], p["alltoall_bytes"] / p["comm_alltoall_s"] / 1e9, rel_tol=1e-9)
    assert q["alltoall_bytes"] == 0 and math.isnan(q["alltoall_GBps"])
    steps = ep["train/k4/steps"][()]
    measured = steps[steps["warmup"] == 0]
    assert (measured["alltoall_dispatch_bytes"] > 0).all() and (measured["comm_alltoall_s"] > 0).all()
    parts = measured["alltoall_dispatch_s"] + measured["alltoall_combine_s"]
    assert (abs(parts - measured["comm_alltoall_s"]) <= 1e-9 * measured["comm_alltoall_s"]).all(), parts
    budget = ep["train/k4/stall_budget"][()]
    assert (budget["comm_alltoall_p50"] > 0).all(), budget["comm_alltoall_p50"]
    m, n = ep["model"].attrs, one["model"].attrs
    assert m["experts"] == 4 and m["top_k"] == 2 and m["moe_layers"] == 2, dict(m)
    assert m["active_parameters"] < m["parameters"], (m["active_parameters"], m["parameters"])
    assert "N_active_matmul" in m["flops_convention"], m["flops_convention"]
PY
# The HTML page's stall budget (plots.py) stacks comm_exposed by kind, the all-to-all among them.
checks=$((checks + 1))
/usr/bin/python3 - ep4.h5 "$analysis" >"$work/py" 2>&1 <<'PY' || fail "plots.py's stall budget of ep4.h5: $(cat "$work/py")"
import sys, h5py
sys.path.insert(0, sys.argv[2])
import plots
if plots.MISSING_PACKAGE:  # plots_cli_tests checks plots.py's message for that
    print(f"SKIP: plots.py lacks {plots.MISSING_PACKAGE}"); sys.exit(0)
with h5py.File(sys.argv[1], "r") as f:
    keys = [key for key, _ in plots.read_stall(4, f["train/k4"]).components]
assert "comm_alltoall" in keys and "comm_exposed" not in keys, keys
PY

# --- top-1 with dropped tokens, over 2 ranks: still one rank's losses; a dense preset made MoE by --experts ----------
drops=(--top-k 1 --capacity-factor 0.5)
expect_ok "${mpi[@]}" -n 2 "$tb" "${train[@]}" "${drops[@]}" --expert-parallel 2 --op-times -o ep2.h5
expect_out "^ +comm_model +step +[0-9.]+ "
expect_ok "$tb" "${train[@]}" "${drops[@]}" --grad-accum 2 -o one2.h5
same_losses ep2.h5 one2.h5
# --op-times: the all-to-alls inside forward and backward are comm_model's (at least the seconds the report gives
# them); the MLP rows count the router and the K experts per token, dropped tokens as routed (the MFU convention).
checks=$((checks + 1))
/usr/bin/python3 - ep2.h5 >"$work/py" 2>&1 <<'PY' || fail "ep2.h5's op_times: $(cat "$work/py")"
import sys, h5py
with h5py.File(sys.argv[1], "r") as f:
    t = {(r["kind"].decode(), r["phase"].decode()): r for r in f["train/k2/op_times"][()]}
    steps = f["train/k2/steps"][()]
    m = dict(f["model"].attrs)
measured = steps[steps["warmup"] == 0]
alltoall = measured["comm_alltoall_s"].mean()
assert alltoall > 0 and t[("comm_model", "step")]["seconds"] >= 0.99 * alltoall, (t[("comm_model", "step")], alltoall)
c, e, k, ffn, layers = m["d_model"], m["experts"], m["top_k"], m["expert_ffn"], m["moe_layers"]
tokens = 2 * 32  # a rank's micro-batch
forward = tokens * layers * (2 * c * e + k * 4 * c * ffn)
assert abs(t[("mlp", "forward")]["flops"] - forward) < 1e-9 * forward, (t[("mlp", "forward")]["flops"], forward)
assert abs(t[("mlp", "backward")]["flops"] - 2 * forward) < 1e-9 * forward
PY
checks=$((checks + 1))
/usr/bin/python3 -c '
import sys, h5py
with h5py.File(sys.argv[1], "r") as f:
    assert f["train/k2"].attrs["moe_dropped_share"] > 0.1, f["train/k2"].attrs["moe_dropped_share"]
' ep2.h5 2>"$work/py" || fail "capacity factor 0.5 dropped nothing: $(cat "$work/py")"
expect_ok "$tb" train --model tiny --experts 4 --top-k 1 --expert-ffn 64 --seq 32 --steps 2 --warmup-steps 0 -o dense-moe.h5
expect_out "^# mixture of experts: 2 of 2 blocks with 4 experts of width 64, top-1"

# --- the experts under zero1 and fsdp (every expert on every rank): dp's losses ---------------------------------------
for mode in dp zero1 fsdp; do
  expect_ok "${mpi[@]}" -n 2 "$tb" "${train[@]}" --parallel $mode -o mode-$mode.h5
done
same_losses mode-zero1.h5 mode-dp.h5
same_losses mode-fsdp.h5 mode-dp.h5

# --- cost: the run priced on an NVLink and a PCIe offering, the all-to-all named in each decision ----------------------
cost=(cost ep4.h5 --prices "$prices" --device-as "H100 SXM,H100 PCIe" --project 16 --train-tokens 1e9)
expect_ok "$tb" "${cost[@]}" --format json
cp "$work/out" cost.json
expect_ok "$tb" "${cost[@]}"
for offering in coreweave-hgx-h100 h100-pcie-8x-ethernet; do
  checks=$((checks + 1))
  awk -v o="$offering" '/^#   on / {on = index($0, "on " o " ") > 0} on && /^#     chosen: / {print; exit}' "$work/out" \
    >"$work/chosen"
  grep -q "all-to-all" "$work/chosen" || fail "$offering: the decision does not name the all-to-all: $(cat "$work/chosen")"
done
expect_out "^ +2x8 ep4\+dp "
checks=$((checks + 1))
/usr/bin/python3 - cost.json >"$work/py" 2>&1 <<'PY' || fail "cost.layouts: $(cat "$work/py")"
import json, sys
rows = [r for run in json.load(open(sys.argv[1]))["runs"] for r in run["cost"].get("layouts", [])]
ep = [r for r in rows if r["expert_parallel"] == 4 and r["alltoall_s"] not in (None, "")]
assert ep and all(r["alltoall_s"] > 0 for r in ep), ep[:2]
pcie = [r for r in ep if r["offering"] == "h100-pcie-8x-ethernet"]
nvl = [r for r in ep if r["offering"] == "coreweave-hgx-h100"]
assert pcie and nvl and pcie[0]["alltoall_s"] > nvl[0]["alltoall_s"], (pcie[:1], nvl[:1])
PY

# --- checkpoints of expert parallel: a part per expert rank, resumed bit-exactly; another layout refused ---------------
ckpt=(train --model moe-tiny --seq 32 --micro-batch 2 --lr 0.01 --warmup-steps 1 --steps 5 --data tokens)
expect_ok "${mpi[@]}" -n 4 "$tb" "${ckpt[@]}" --expert-parallel 2 --checkpoint-dir a --checkpoint-every 3 -o a.h5
expect_ok "${mpi[@]}" -n 4 "$tb" "${ckpt[@]}" --expert-parallel 2 --checkpoint-dir b --checkpoint-every 3 \
  --resume a/step-00000003 -o b.h5
expect_out "^# resumed from .*step-00000003: step 3"
checks=$((checks + 1))
# 2 expert ranks, each part held by 2 replicas: 4 slices, and a manifest naming the layout and the experts.
[[ $(cd a/step-00000006 && ls | tr '\n' ' ') == "manifest.txt part-00000-slice-00000.bin part-00000-slice-00001.bin part-00001-slice-00000.bin part-00001-slice-00001.bin " ]] ||
  fail "ep 2 x 2 replicas: files $(ls a/step-00000006)"
grep -q "^meta expert_parallel 2$" a/step-00000006/manifest.txt || fail "expert_parallel not recorded"
grep -q "experts=4,top_k=2" a/step-00000006/manifest.txt || fail "the MoE shape is not in the model fingerprint"
for f in a/step-00000006/*; do
  cmp -s "$f" "b/step-00000006/$(basename "$f")" || fail "resume not bit-exact: $f differs"
done
checks=$((checks + 1))
/usr/bin/python3 - a.h5 b.h5 >"$work/py" 2>&1 <<'PY' || fail "resumed losses: $(cat "$work/py")"
import sys, h5py
def losses(path):
    with h5py.File(path, "r") as f:
        s = f["train/k4/steps"][()]
        return {(int(r), int(t)): float(l) for r, t, l in zip(s["rank"], s["step"], s["loss"]) if t >= 3}
full, resumed = losses(sys.argv[1]), losses(sys.argv[2])
assert len(resumed) == 12 and full == resumed, (full, resumed)
PY
expect_error 2 "was written with --expert-parallel 2, this run has --expert-parallel 4; resume with the same value" -- \
  "${mpi[@]}" -n 4 "$tb" "${ckpt[@]}" --expert-parallel 4 --resume a/step-00000003 -o refused.h5
expect_error 2 "was written with --top-k 2, this run has --top-k 1; resume with the same value" -- \
  "${mpi[@]}" -n 4 "$tb" "${ckpt[@]}" --expert-parallel 2 --top-k 1 --resume a/step-00000003 -o refused.h5

# --- bad values: one line, exit 2, no report ---------------------------------------------------------------------------
expect_error 2 "--expert-parallel 2 does not divide the 3 experts" -- \
  "${mpi[@]}" -n 2 "$tb" "${train[@]}" --experts 3 --expert-parallel 2 -o refused.h5
expect_error 2 "--top-k 5 must lie in 1..4" -- "$tb" "${train[@]}" --top-k 5 -o refused.h5
expect_error 2 "--capacity-factor -1 must be a finite number above 0" -- "$tb" "${train[@]}" --capacity-factor -1 -o refused.h5
expect_error 2 "--expert-parallel 4 does not divide the 2-rank point" -- \
  "${mpi[@]}" -n 2 "$tb" "${train[@]}" --expert-parallel 4 -o refused.h5
expect_error 2 "--expert-parallel 2 needs a model with experts" -- \
  "${mpi[@]}" -n 2 "$tb" train --model tiny --expert-parallel 2 -o refused.h5
expect_error 2 "shape mixture-of-experts blocks: give --experts E" -- "$tb" train --model tiny --capacity-factor 1 -o refused.h5
expect_error 2 "--expert-parallel 2 with --parallel zero1 is not built yet" -- \
  "${mpi[@]}" -n 2 "$tb" "${train[@]}" --expert-parallel 2 --parallel zero1 -o refused.h5
expect_error 2 "--tensor-parallel or --pipeline-parallel they are not built yet" -- \
  "${mpi[@]}" -n 2 "$tb" "${train[@]}" --tensor-parallel 2 -o refused.h5
expect_error 2 "--allow-cross-node-ep.*--expert-parallel" -- "$tb" "${train[@]}" --allow-cross-node-ep -o refused.h5
checks=$((checks + 1))
[[ ! -e refused.h5 ]] || fail "a refused run left refused.h5"

finish moe_cli_test
