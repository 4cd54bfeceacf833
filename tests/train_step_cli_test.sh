#!/usr/bin/env bash
# train's step options (issue 37): --grad-accum N gives the losses of one batch of N x micro-batch sequences (one rank
# and two, dp and zero1 and fsdp and tensor parallel), records grad_accum and the step's tokens, and divides strong scaling's global batch
# by it; tensor parallel with --data reads the group's batches on both ranks (the losses of one rank, the io group);
# --op-times writes a table per point whose rows add up to the step (h5py), prints it within the console width,
# gives a pipeline's ranks their stages' work (half of dp's with 2 stages) and a comm_pipeline row, and a tensor
# parallel rank half of the matmuls' FLOPs with its all-reduces (and fsdp's gathers) in a comm_model row taken out of
# the kinds that waited. Bad values: one line, exit 2, no report.
#   train_step_cli_test.sh TRAINBENCH MPIEXEC...
set -uo pipefail
tb=$(realpath "$1"); shift; mpi=("$@")
work=$(mktemp -d); trap 'rm -rf "$work"' EXIT
source "$(dirname "${BASH_SOURCE[0]}")/cli_lib.sh"
cd "$work"

train=(train --model tiny --seq 32 --warmup-steps 1 --steps 3 --lr 0.01)

# losses A.h5 B.h5 TOLERANCE: the measured steps' mean losses of two reports agree within TOLERANCE (relative), and
# both record the same tokens per step.
same_losses() {
  checks=$((checks + 1))
  /usr/bin/python3 - "$@" >"$work/py" 2>&1 <<'PY' || fail "$1 vs $2: $(cat "$work/py")"
import sys, h5py, numpy as np
a, b, tolerance = sys.argv[1], sys.argv[2], float(sys.argv[3])
def losses(path):
    with h5py.File(path, "r") as f:
        point = f["train"][sorted(k for k in f["train"] if k.startswith("k"))[-1]]
        steps = point["steps"][()]
        rows = steps[(steps["rank"] == 0)]
        return rows["loss"], int(point.attrs["tokens_per_step"])
(la, ta), (lb, tb) = losses(a), losses(b)
assert ta == tb, f"tokens per step {ta} vs {tb}"
assert len(la) == len(lb) == 4, (la, lb)
worst = np.max(np.abs(la - lb) / np.abs(lb))
assert worst < tolerance, f"losses {la} vs {lb}: {worst:.3g} apart"
PY
}

# --- one batch of 4, or 2 micro-batches of 2, or 4 of 1: the same losses -------------------------------------------
expect_ok "$tb" "${train[@]}" --micro-batch 4 -o big.h5
expect_ok "$tb" "${train[@]}" --micro-batch 2 --grad-accum 2 -o ga2.h5
expect_out "^# gradient accumulation: 2 micro-batches of 2 sequences per rank per optimizer step"
expect_ok "$tb" "${train[@]}" --micro-batch 1 --grad-accum 4 -o ga4.h5
same_losses ga2.h5 big.h5 1e-4
same_losses ga4.h5 big.h5 1e-4
checks=$((checks + 1))
/usr/bin/python3 -c '
import sys, h5py
with h5py.File(sys.argv[1], "r") as f:
    assert f["config"].attrs["grad_accum"] == 4, dict(f["config"].attrs)
    assert f["train/k1"].attrs["micro_batch"] == 1
' ga4.h5 2>"$work/py" || fail "ga4.h5 does not record grad_accum 4 and micro_batch 1: $(cat "$work/py")"

# Two ranks, each mode: the same losses as each mode's one batch.
for mode in dp zero1 fsdp; do
  expect_ok "${mpi[@]}" -n 2 "$tb" "${train[@]}" --parallel "$mode" --micro-batch 2 -o "big-$mode.h5"
  expect_ok "${mpi[@]}" -n 2 "$tb" "${train[@]}" --parallel "$mode" --micro-batch 1 --grad-accum 2 -o "ga-$mode.h5"
  same_losses "ga-$mode.h5" "big-$mode.h5" 1e-4
done

# Tensor parallel over the 2 ranks: the same losses as its one batch.
expect_ok "${mpi[@]}" -n 2 "$tb" "${train[@]}" --tensor-parallel 2 --micro-batch 2 -o big-tp.h5
expect_ok "${mpi[@]}" -n 2 "$tb" "${train[@]}" --tensor-parallel 2 --micro-batch 1 --grad-accum 2 -o ga-tp.h5
same_losses ga-tp.h5 big-tp.h5 1e-4

# Tensor parallel with --data: both ranks of the group read its batches, the losses of one rank reading them.
tokens=$work/tokens
expect_ok "$tb" data generate --dir "$tokens" --tokens 100K --shard-tokens 40K --vocab 4096 --distribution zipf --quiet
expect_ok "$tb" "${train[@]}" --micro-batch 2 --data "$tokens" -o one-data.h5
expect_ok "${mpi[@]}" -n 2 "$tb" "${train[@]}" --tensor-parallel 2 --micro-batch 2 --data "$tokens" -o tp-data.h5
same_losses tp-data.h5 one-data.h5 1e-4
checks=$((checks + 1))
/usr/bin/python3 -c '
import sys, h5py
with h5py.File(sys.argv[1], "r") as tp, h5py.File(sys.argv[2], "r") as one:
    a, rows = tp["io/k2"].attrs, tp["io/k2/loader"][()]
    assert list(rows["rank"]) == [0, 1] and list(rows["replica"]) == [0, 0], rows
    assert a["loader_ranks"] == 2 and a["loader_ranks_per_batch"] == 2, dict(a)
    assert a["loader_bytes"] == 2 * one["io/k1"].attrs["loader_bytes"] > 0
' tp-data.h5 one-data.h5 2>"$work/py" || fail "tp-data.h5: $(cat "$work/py")"

# Strong scaling divides the global batch over the ranks and the micro-batches.
expect_ok "${mpi[@]}" -n 2 "$tb" "${train[@]}" --scaling-mode strong --global-batch 8 --grad-accum 2 -o strong.h5
checks=$((checks + 1))
/usr/bin/python3 -c '
import sys, h5py
with h5py.File(sys.argv[1], "r") as f:
    p = f["train/k2"].attrs
    assert p["micro_batch"] == 2 and p["tokens_per_step"] == 8 * 32, dict(p)
' strong.h5 2>"$work/py" || fail "strong scaling with --grad-accum 2: $(cat "$work/py")"
expect_error 2 "the global batch 6 does not divide over 2 ranks x 2 micro-batches" -- \
  "${mpi[@]}" -n 2 "$tb" "${train[@]}" --scaling-mode strong --global-batch 6 --grad-accum 2 -o refused.h5

# --- --op-times ----------------------------------------------------------------------------------------------------
expect_ok "$tb" "${train[@]}" --micro-batch 2 --grad-accum 2 --op-times -o ops.h5
expect_out "^# op times: mean per measured step"
expect_out "^ +attention +backward +[0-9.]+ "
expect_out "^ +optimizer +step "
checks=$((checks + 1))
too_wide=$(awk '/^# op times/ {on = 1} /^# k=/ {on = 0} (on || /^# gradient accumulation/) && length > 120' "$work/out" |
           head -2)
[[ -z $too_wide ]] || fail "--op-times lines wider than 120 columns: $too_wide"
checks=$((checks + 1))
/usr/bin/python3 - ops.h5 >"$work/py" 2>&1 <<'PY' || fail "ops.h5's op_times: $(cat "$work/py")"
import sys, h5py, numpy as np
with h5py.File(sys.argv[1], "r") as f:
    t = f["train/k1/op_times"][()]
    steps = f["train/k1/steps"][()]
    assert f["train"].attrs["copy_bytes_per_s"] > 0
kinds = [k.decode() for k in t["kind"]]
for kind in ["embedding", "layernorm", "attention", "mlp", "lm_head", "optimizer", "comm_exposed", "other"]:
    assert kind in kinds, kinds
measured = steps[steps["warmup"] == 0]
# The rows add up to the mean step, and every kind of work took time.
assert abs(t["seconds"].sum() - measured["step_s"].mean()) < 1e-9, (t["seconds"].sum(), measured["step_s"].mean())
assert abs(t["share"].sum() - 1) < 1e-9
work = t[[k not in ("comm_exposed", "other") for k in kinds]]
assert (work["seconds"] > 0).all(), work
# Matmul kinds have a FLOP rate, memory kinds a byte rate.
for row in t:
    kind = row["kind"].decode()
    if kind in ("attention", "mlp", "lm_head"):
        assert row["flops"] > 0 and row["tflops"] > 0 and np.isnan(row["GBps"]), row
    if kind in ("layernorm", "embedding", "optimizer"):
        assert row["bytes"] > 0 and row["GBps"] > 0 and np.isnan(row["tflops"]), row
PY
# With pipeline stages a rank works on its stage's layers: the rows' work is the mean over the point's ranks (half of
# dp's over the same replicas with 2 stages), the pipeline's exchanges have their row, and the rows still add up.
expect_ok "${mpi[@]}" -n 2 "$tb" "${train[@]}" --micro-batch 2 --grad-accum 4 --op-times -o ops-dp.h5
expect_ok "${mpi[@]}" -n 4 "$tb" "${train[@]}" --micro-batch 2 --pipeline-parallel 2 --micro-batches 4 --op-times \
  -o ops-pp.h5
expect_out "^ +comm_pipeline +step +[0-9.]+ "
checks=$((checks + 1))
/usr/bin/python3 - ops-dp.h5 ops-pp.h5 >"$work/py" 2>&1 <<'PY' || fail "ops-pp.h5's op_times: $(cat "$work/py")"
import sys, h5py, numpy as np
def table(path, point):
    with h5py.File(path, "r") as f:
        t = f[f"train/{point}/op_times"][()]
        steps = f[f"train/{point}/steps"][()]
    return {(r["kind"].decode(), r["phase"].decode()): r for r in t}, t, steps[steps["warmup"] == 0]
dp, _, _ = table(sys.argv[1], "k2")
pp, t, measured = table(sys.argv[2], "k4")
assert ("comm_pipeline", "step") in pp and ("comm_pipeline", "step") not in dp, list(pp)
assert pp[("comm_pipeline", "step")]["seconds"] > 0
assert abs(t["seconds"].sum() - measured["step_s"].mean()) < 1e-9, (t["seconds"].sum(), measured["step_s"].mean())
for key, row in dp.items():
    if key[0] == "optimizer":
        # Each stage updates its own parameters, the last one also its copy of wte (tiny: V 4096 x C 128).
        vc = 4096 * 128
        total = row["bytes"] / 28
        assert abs(pp[key]["bytes"] / 28 - (total + vc) / 2) < 1e-6 * total, (pp[key]["bytes"], row["bytes"])
    elif row["flops"] > 0 or row["bytes"] > 0:
        assert abs(pp[key]["flops"] * 2 - row["flops"]) <= 1e-9 * row["flops"], (key, pp[key], row)
        assert abs(pp[key]["bytes"] * 2 - row["bytes"]) <= 1e-9 * row["bytes"], (key, pp[key], row)
PY
# Tensor parallel and fsdp: the communication inside forward and backward is comm_model's. Under tensor parallel a
# rank does half of each matmul kind's FLOPs and all of the rest; its all-reduces (8 per micro-batch and block, host
# timed as the report's comm_activation_s) are in comm_model, not in the kinds that waited. The rows still add up.
expect_ok "${mpi[@]}" -n 2 "$tb" "${train[@]}" --micro-batch 2 --grad-accum 2 --tensor-parallel 2 --op-times \
  -o ops-tp.h5
expect_out "^ +comm_model +step +[0-9.]+ "
expect_ok "${mpi[@]}" -n 2 "$tb" "${train[@]}" --micro-batch 2 --grad-accum 2 --parallel fsdp --op-times -o ops-fsdp.h5
expect_out "^ +comm_model +step +[0-9.]+ "
checks=$((checks + 1))
/usr/bin/python3 - ops.h5 ops-tp.h5 ops-fsdp.h5 >"$work/py" 2>&1 <<'PY' ||
  fail "ops-tp/fsdp.h5's op_times: $(cat "$work/py")"
import sys, h5py, numpy as np
def table(path):
    with h5py.File(path, "r") as f:
        point = sorted(k for k in f["train"] if k.startswith("k"))[-1]
        t = f[f"train/{point}/op_times"][()]
        steps = f[f"train/{point}/steps"][()]
    return {(r["kind"].decode(), r["phase"].decode()): r for r in t}, t, steps[steps["warmup"] == 0]
one, one_t, _ = table(sys.argv[1])
assert ("comm_model", "step") not in one, list(one)  # one rank of dp waits for nothing inside the model
for path in sys.argv[2:]:
    rows, t, measured = table(path)
    assert abs(t["seconds"].sum() - measured["step_s"].mean()) < 1e-9, (path, t["seconds"].sum())
    comm = rows[("comm_model", "step")]
    assert comm["seconds"] > 0 and comm["flops"] == 0 and comm["bytes"] == 0, (path, comm)
tp, _, measured = table(sys.argv[2])
# The op clock's comm_model holds every activation all-reduce the report times (each host interval lies inside its
# marks), so at least their seconds: they are no longer in the kinds that waited.
activation = measured["comm_activation_s"].mean()
comm = tp[("comm_model", "step")]
assert activation > 0 and comm["seconds"] >= 0.99 * activation, (comm, activation)
for key, row in one.items():
    if key[0] in ("attention", "mlp", "lm_head"):
        assert abs(tp[key]["flops"] * 2 - row["flops"]) <= 1e-9 * row["flops"], (key, tp[key], row)
    elif key[0] in ("layernorm", "embedding"):
        assert tp[key]["bytes"] == row["bytes"], (key, tp[key], row)
PY
# Without it: no table, no copy rate.
checks=$((checks + 1))
/usr/bin/python3 -c '
import sys, h5py
with h5py.File(sys.argv[1], "r") as f:
    assert "op_times" not in f["train/k1"] and "copy_bytes_per_s" not in f["train"].attrs
' big.h5 2>"$work/py" || fail "a run without --op-times has its table: $(cat "$work/py")"

# --- bad input: one line, exit 2, no report ------------------------------------------------------------------------
expect_error 2 "grad-accum" -- "$tb" "${train[@]}" --grad-accum 0 -o refused.h5
expect_error 2 "grad-accum" -- "$tb" "${train[@]}" --grad-accum two -o refused.h5
expect_error 2 "--cuda-graph applies to --backend cuda" -- "$tb" "${train[@]}" --cuda-graph -o refused.h5
checks=$((checks + 1))
[[ ! -e refused.h5 ]] || fail "a refused run left refused.h5"

finish train_step_cli_test
