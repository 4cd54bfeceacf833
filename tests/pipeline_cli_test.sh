#!/usr/bin/env bash
# train --pipeline-parallel P --micro-batches M (issue 38): Megatron's 1F1B over P stages gives the losses of data
# parallel over the same replicas with --grad-accum M (2 stages on 4 ranks, dp and zero1 across the pipelines; 3 stages
# on 3 ranks; tensor parallel 2 inside 2 stages), with synthetic tokens and with --data (the first and last stage
# read each replica's batches, a middle stage none: the io group's loader rows, h5py; --data-raw and a storage sweep),
# and reports the bubble next to (P-1)/(M+P-1), the bytes sent between stages next to theory, a row per stage and the
# pipeline's share of the stall budget (h5py). Bad values: one line, exit 2, no report.
#   pipeline_cli_test.sh TRAINBENCH MPIEXEC...
set -uo pipefail
tb=$(realpath "$1"); shift; mpi=("$@")
work=$(mktemp -d); trap 'rm -rf "$work"' EXIT
source "$(dirname "${BASH_SOURCE[0]}")/cli_lib.sh"
cd "$work"

train=(train --model tiny --seq 32 --warmup-steps 1 --steps 3 --lr 0.01 --micro-batch 2)

# same_losses A.h5 B.h5: rank 0's measured losses (a pipeline's rank 0 holds the loss its last stage broadcast) agree
# within 1e-4 (relative), and both runs train the same tokens per step.
same_losses() {
  checks=$((checks + 1))
  /usr/bin/python3 - "$@" >"$work/py" 2>&1 <<'PY' || fail "$1 vs $2: $(cat "$work/py")"
import sys, h5py, numpy as np
def losses(path):
    with h5py.File(path, "r") as f:
        point = f["train"][sorted(k for k in f["train"] if k.startswith("k"))[-1]]
        steps = point["steps"][()]
        return steps[steps["rank"] == 0]["loss"], int(point.attrs["tokens_per_step"])
(la, ta), (lb, tb) = losses(sys.argv[1]), losses(sys.argv[2])
assert ta == tb, f"tokens per step {ta} vs {tb}"
assert len(la) == len(lb) == 4, (la, lb)
worst = np.max(np.abs(la - lb) / np.abs(lb))
assert worst < 1e-4, f"losses {la} vs {lb}: {worst:.3g} apart"
PY
}

# --- 2 stages x 2 replicas against dp over 2 replicas, 4 micro-batches ----------------------------------------------
expect_ok "${mpi[@]}" -n 2 "$tb" "${train[@]}" --grad-accum 4 -o dp.h5
expect_ok "${mpi[@]}" -n 4 "$tb" "${train[@]}" --pipeline-parallel 2 --micro-batches 4 -o pp.h5
expect_out "^# pipeline: 2 stages of 1 layer"
expect_out "^#   pipeline 2 stages x 4 micro-batches \(1F1B\): bubble [0-9.]+% measured, 20.0% in theory"
same_losses pp.h5 dp.h5
checks=$((checks + 1))
/usr/bin/python3 - pp.h5 >"$work/py" 2>&1 <<'PY' || fail "pp.h5: $(cat "$work/py")"
import sys, h5py, numpy as np
with h5py.File(sys.argv[1], "r") as f:
    p = f["train/k4"]
    a = p.attrs
    assert a["pipeline_parallel"] == 2 and a["micro_batches"] == 4, dict(a)
    assert abs(a["bubble_theory"] - 1 / 5) < 1e-12, a["bubble_theory"]
    assert 0 < a["bubble_measured"] < 1, a["bubble_measured"]
    # Each stage sends 4 micro-batches of 2 x 32 x 128 fp32 to its one neighbour.
    edge = 4 * 2 * 32 * 128 * 4
    assert a["traffic_pipeline_bytes"] == a["traffic_pipeline_bytes_theory"] == edge, dict(a)
    stages = p["stages"][()]
    assert list(stages["stage"]) == [0, 1] and list(stages["first_layer"]) == [0, 1], stages
    assert list(stages["slots"]) == [2, 1], stages["slots"]
    assert (stages["pipeline_send_bytes"] == stages["pipeline_send_bytes_theory"]).all(), stages
    assert (stages["activations_bytes_theory"] > 0).all()
    steps = p["steps"][()]
    measured = steps[steps["warmup"] == 0]
    assert (measured["comm_pipeline_s"] > 0).all(), measured["comm_pipeline_s"]
    assert (measured["comm_pipeline_s"] <= measured["comm_exposed_s"] + 1e-12).all()
    # The tied embedding: wte's gradient all-reduced by both stages (the first and the last).
    assert (measured["embedding_allreduce_bytes"] == 4096 * 128 * 4).all(), measured["embedding_allreduce_bytes"]
    budget = p["stall_budget"][()]
    assert "comm_pipeline_p50" in budget.dtype.names, budget.dtype.names
    assert (budget["comm_pipeline_p50"] > 0).all()
PY

# zero1 across the pipelines.
expect_ok "${mpi[@]}" -n 2 "$tb" "${train[@]}" --parallel zero1 --grad-accum 2 -o dp-zero1.h5
expect_ok "${mpi[@]}" -n 4 "$tb" "${train[@]}" --parallel zero1 --pipeline-parallel 2 --micro-batches 2 -o pp-zero1.h5
same_losses pp-zero1.h5 dp-zero1.h5

# Tensor parallel 2 inside 2 stages: one replica, as one rank with 4 micro-batches.
expect_ok "$tb" "${train[@]}" --grad-accum 4 -o one.h5
expect_ok "${mpi[@]}" -n 4 "$tb" "${train[@]}" --tensor-parallel 2 --pipeline-parallel 2 --micro-batches 4 -o tp-pp.h5
same_losses tp-pp.h5 one.h5

# 3 stages on 3 ranks.
expect_ok "$tb" "${train[@]}" --layers 3 --grad-accum 3 -o one3.h5
expect_ok "${mpi[@]}" -n 3 "$tb" "${train[@]}" --layers 3 --pipeline-parallel 3 --micro-batches 3 -o pp3.h5
same_losses pp3.h5 one3.h5

# --- --data: the first and last stage of each replica read its batches, a middle stage none -------------------------
tokens=$work/tokens
# Zipf tokens: their losses are far from the uniform synthetic tokens', so a run that ignored the files would show.
expect_ok "$tb" data generate --dir "$tokens" --tokens 200K --shard-tokens 60K --vocab 4096 --distribution zipf --quiet
expect_ok "${mpi[@]}" -n 2 "$tb" "${train[@]}" --grad-accum 4 --data "$tokens" -o dp-data.h5
expect_ok "${mpi[@]}" -n 4 "$tb" "${train[@]}" --pipeline-parallel 2 --micro-batches 4 --data "$tokens" -o pp-data.h5
same_losses pp-data.h5 dp-data.h5
expect_ok "$tb" "${train[@]}" --grad-accum 4 --data "$tokens" -o one-data.h5
expect_ok "${mpi[@]}" -n 4 "$tb" "${train[@]}" --tensor-parallel 2 --pipeline-parallel 2 --micro-batches 4 \
  --data "$tokens" -o tp-pp-data.h5
same_losses tp-pp-data.h5 one-data.h5
expect_ok "$tb" "${train[@]}" --layers 3 --grad-accum 3 --data "$tokens" -o one3-data.h5
expect_ok "${mpi[@]}" -n 3 "$tb" "${train[@]}" --layers 3 --pipeline-parallel 3 --micro-batches 3 --data "$tokens" \
  -o pp3-data.h5
same_losses pp3-data.h5 one3-data.h5
# The io group: a row per rank that read, each replica's batches counted once per rank that read them.
checks=$((checks + 1))
/usr/bin/python3 - >"$work/py" 2>&1 <<'PY' || fail "io groups with --data: $(cat "$work/py")"
import h5py
def io(path, k):
    with h5py.File(path, "r") as f:
        g = f["io"][k]
        return dict(g.attrs), g["loader"][()]
def check(path, k, base, base_k, ranks, replicas, per_batch):
    a, rows = io(path, k)
    b, _ = io(base, base_k)
    assert list(rows["rank"]) == ranks and list(rows["replica"]) == replicas, rows
    assert a["loader_ranks"] == len(ranks) and a["loader_ranks_per_batch"] == per_batch, a
    assert a["loader_bytes"] == per_batch * b["loader_bytes"] > 0, (a["loader_bytes"], b["loader_bytes"])
    assert (rows["batches"] == rows["batches"][0]).all() and rows["batches"][0] > 0, rows["batches"]
check("pp-data.h5", "k4", "dp-data.h5", "k2", [0, 1, 2, 3], [0, 1, 0, 1], 2)
check("tp-pp-data.h5", "k4", "one-data.h5", "k1", [0, 1, 2, 3], [0, 0, 0, 0], 4)
check("pp3-data.h5", "k3", "one3-data.h5", "k1", [0, 2], [0, 0], 2)  # the middle stage (rank 1) reads nothing
def losses(path):
    with h5py.File(path, "r") as f:
        steps = f["train/k4/steps"][()]
        return steps[steps["rank"] == 0]["loss"]
assert abs(losses("pp-data.h5")[-1] - losses("pp.h5")[-1]) > 0.1, (losses("pp-data.h5"), losses("pp.h5"))
PY
# --data-raw and a storage sweep over the stages: every point reads on every stage.
expect_ok "${mpi[@]}" -n 4 "$tb" "${train[@]}" --pipeline-parallel 2 --micro-batches 4 --data "$tokens" --data-raw \
  --io-throttle 1000,500 -o pp-sweep.h5
checks=$((checks + 1))
/usr/bin/python3 -c '
import sys, h5py
with h5py.File(sys.argv[1], "r") as f:
    assert len(f["io/throttle_sweep"][()]) == 2
    points = [k for k in f["io"] if isinstance(f["io"][k], h5py.Group) and "loader" in f["io"][k]]
    assert len(points) == 2, list(f["io"])
    for k in points:
        assert f["io"][k].attrs["loader_ranks"] == 4 and list(f["io"][k]["loader"]["replica"]) == [0, 1, 0, 1], k
' pp-sweep.h5 2>"$work/py" || fail "pp-sweep.h5: $(cat "$work/py")"

# Tokens that do not divide over the stages: the ranks' shares still add up to the step's 3 x 33.
expect_ok "${mpi[@]}" -n 2 "$tb" train --model tiny --seq 33 --micro-batch 1 --warmup-steps 1 --steps 2 \
  --pipeline-parallel 2 --micro-batches 3 -o uneven.h5
checks=$((checks + 1))
/usr/bin/python3 -c '
import sys, h5py
with h5py.File(sys.argv[1], "r") as f:
    p = f["train/k2"]
    assert p.attrs["tokens_per_step"] == 99, p.attrs["tokens_per_step"]
    steps = p["steps"][()]
    assert sorted(set(steps["tokens"])) == [49, 50], set(steps["tokens"])
' uneven.h5 2>"$work/py" || fail "uneven.h5: $(cat "$work/py")"

# --- bad input: one line, exit 2, no report ------------------------------------------------------------------------
expect_error 2 "--pipeline-parallel 3 does not divide the model's 2 layers" -- \
  "${mpi[@]}" -n 3 "$tb" "${train[@]}" --pipeline-parallel 3 --micro-batches 3 -o refused.h5
expect_error 2 "--pipeline-parallel 4 does not divide the 2 ranks" -- \
  "${mpi[@]}" -n 2 "$tb" "${train[@]}" --layers 4 --pipeline-parallel 4 --micro-batches 4 -o refused.h5
expect_error 2 "--pipeline-parallel 2 needs --micro-batches of at least 2" -- \
  "${mpi[@]}" -n 2 "$tb" "${train[@]}" --pipeline-parallel 2 -o refused.h5
expect_error 2 "--pipeline-parallel 2 with --parallel fsdp is not built yet" -- \
  "${mpi[@]}" -n 2 "$tb" "${train[@]}" --pipeline-parallel 2 --micro-batches 2 --parallel fsdp -o refused.h5
expect_error 2 "--pipeline-parallel 2 with checkpoints is not built yet" -- \
  "${mpi[@]}" -n 2 "$tb" "${train[@]}" --pipeline-parallel 2 --micro-batches 2 --checkpoint-every 1 \
  --checkpoint-dir ckpt -o refused.h5
expect_error 2 "--micro-batches and --grad-accum both count" -- \
  "${mpi[@]}" -n 2 "$tb" "${train[@]}" --pipeline-parallel 2 --micro-batches 2 --grad-accum 2 -o refused.h5
expect_error 2 "micro-batches" -- "$tb" "${train[@]}" --micro-batches 2 -o refused.h5
checks=$((checks + 1))
[[ ! -e refused.h5 && ! -e ckpt ]] || fail "a refused run left refused.h5 or ckpt"

finish pipeline_cli_test
