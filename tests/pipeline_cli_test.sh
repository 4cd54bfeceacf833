#!/usr/bin/env bash
# train --pipeline-parallel P --micro-batches M (issue 38): Megatron's 1F1B over P stages gives the losses of data
# parallel over the same replicas with --grad-accum M (2 stages on 4 ranks, dp and zero1 across the pipelines; 3 stages
# on 3 ranks; tensor parallel 2 inside 2 stages), with synthetic tokens and with --data (the first and last stage
# read each replica's batches, a middle stage none: the io group's loader rows, h5py; --data-raw and a storage sweep),
# and reports the bubble next to (P-1)/(M+P-1), the bytes sent between stages next to theory, a row per stage and the
# pipeline's share of the stall budget (h5py). Checkpoints of 2 stages (and of 2 stages x 2 tensor ranks) resume
# bit-exactly, sync and async, and a resume with another layout is refused. Bad values: one line, exit 2, no report.
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

# --- checkpoints of stages and tensor ranks: a resume is bit-exact ----------------------------------------------------
# 10 steps (2 warm-up and 8 measured, as train_io_cli_test.sh runs dp) with a checkpoint at 5, resumed from 5 to 10,
# equal 10 uninterrupted steps: the step-10 checkpoints hold the same bytes (every part's slices, one manifest) and
# rank 0's losses of steps 5..9 are the same numbers.
ckpt=(train --model tiny --seq 32 --micro-batch 2 --lr 0.01 --warmup-steps 2 --steps 8)
# same_resume A B A.h5 B.h5: the step-10 checkpoints of A and B are equal byte for byte, manifests included, and B's
# losses (steps 5..9) are A's.
same_resume() {
  checks=$((checks + 1))
  local f names
  names=$(cd "$1/step-00000010" && ls)
  [[ $names == "$(cd "$2/step-00000010" && ls)" ]] || { fail "$1 vs $2: other files: $names"; return; }
  for f in "$1"/step-00000010/*; do
    cmp -s "$f" "$2/step-00000010/$(basename "$f")" || { fail "resume not bit-exact: $f differs"; return; }
  done
  /usr/bin/python3 - "$3" "$4" >"$work/py" 2>&1 <<'PY' || fail "$3 vs $4: $(cat "$work/py")"
import sys, h5py
def losses(path):
    with h5py.File(path, "r") as f:
        steps = f["train/k4/steps"][()]
        mine = steps[steps["rank"] == 0]
        return {int(s): float(l) for s, l in zip(mine["step"], mine["loss"]) if s >= 5}
full, resumed = losses(sys.argv[1]), losses(sys.argv[2])
assert sorted(resumed) == [5, 6, 7, 8, 9] and full == resumed, (full, resumed)
PY
}
for layout in "pp --pipeline-parallel 2" "tp-pp --tensor-parallel 2 --pipeline-parallel 2"; do
  read -r name flags <<<"$layout"
  for mode in sync async; do
    a=$name-$mode-a b=$name-$mode-b
    # shellcheck disable=SC2086  # the layout's flags are words
    expect_ok "${mpi[@]}" -n 4 "$tb" "${ckpt[@]}" $flags --micro-batches 4 --checkpoint-dir $a --checkpoint-every 5 \
      --checkpoint-mode $mode -o $a.h5
    # shellcheck disable=SC2086
    expect_ok "${mpi[@]}" -n 4 "$tb" "${ckpt[@]}" $flags --micro-batches 4 --checkpoint-dir $b --checkpoint-every 5 \
      --checkpoint-mode $mode --resume $a/step-00000005 -o $b.h5
    expect_out "^# resumed from .*step-00000005: step 5"
    same_resume $a $b $a.h5 $b.h5
  done
done
# With --data the manifest keeps the loader's place (rank 0, on the first stage, reads) and the resume continues there.
expect_ok "${mpi[@]}" -n 4 "$tb" "${ckpt[@]}" --pipeline-parallel 2 --micro-batches 4 --data "$tokens" \
  --checkpoint-dir data-a --checkpoint-every 5 -o data-a.h5
expect_ok "${mpi[@]}" -n 4 "$tb" "${ckpt[@]}" --pipeline-parallel 2 --micro-batches 4 --data "$tokens" \
  --checkpoint-dir data-b --checkpoint-every 5 --resume data-a/step-00000005 -o data-b.h5
same_resume data-a data-b data-a.h5 data-b.h5
# The checkpoint's parts: 2 stages x 2 replicas (pp), 2 stages x 2 tensor ranks (tp-pp); one manifest for them all.
checks=$((checks + 1))
[[ $(cd pp-sync-a/step-00000010 && ls | tr '\n' ' ') == "manifest.txt part-00000-slice-00000.bin part-00000-slice-00001.bin part-00001-slice-00000.bin part-00001-slice-00001.bin " ]] ||
  fail "pp: files $(ls pp-sync-a/step-00000010)"
grep -q "^parts 2$" pp-sync-a/step-00000010/manifest.txt || fail "pp: no 'parts 2' in the manifest"
grep -q "^parts 4$" tp-pp-sync-a/step-00000010/manifest.txt || fail "tp-pp: no 'parts 4' in the manifest"
grep -q "^meta pipeline_parallel 2$" pp-sync-a/step-00000010/manifest.txt || fail "pp: pipeline_parallel not recorded"
# --checkpoint-keep prunes a pipeline's checkpoints as a dp run's.
expect_ok "${mpi[@]}" -n 4 "$tb" "${ckpt[@]}" --pipeline-parallel 2 --micro-batches 4 --checkpoint-dir kept \
  --checkpoint-keep 1 --checkpoint-every 2 --checkpoint-verify -o kept.h5
checks=$((checks + 1))
[[ $(ls kept) == step-00000010 ]] || fail "--checkpoint-keep 1: $(ls kept)"

# A resume with another layout is refused before any work, naming the flag.
expect_error 2 "checkpoint 'pp-sync-a/step-00000005' was written with --pipeline-parallel 2, this run has --pipeline-parallel 1; resume with the same value" -- \
  "${mpi[@]}" -n 4 "$tb" "${ckpt[@]}" --grad-accum 4 --resume pp-sync-a/step-00000005 -o refused.h5
expect_error 2 "was written with --tensor-parallel 2, this run has --tensor-parallel 1;" -- \
  "${mpi[@]}" -n 4 "$tb" "${ckpt[@]}" --pipeline-parallel 2 --micro-batches 4 --resume tp-pp-sync-a/step-00000005 \
  -o refused.h5
# A checkpoint of data parallel (one part), even one of a trainbench before this flag was recorded, is not a pipeline's.
expect_ok "${mpi[@]}" -n 4 "$tb" "${ckpt[@]}" --grad-accum 4 --checkpoint-dir dp --checkpoint-every 5 --quiet
grep -v '^meta pipeline_parallel \|^meta tensor_parallel \|^crc32c ' dp/step-00000005/manifest.txt | resign_manifest \
  >older-manifest.txt
mv older-manifest.txt dp/step-00000005/manifest.txt
expect_error 2 "was written with --pipeline-parallel 1, this run has --pipeline-parallel 2;" -- \
  "${mpi[@]}" -n 4 "$tb" "${ckpt[@]}" --pipeline-parallel 2 --micro-batches 4 --resume dp/step-00000005 -o refused.h5
expect_ok "${mpi[@]}" -n 4 "$tb" "${ckpt[@]}" --grad-accum 4 --resume dp/step-00000005 --quiet
checks=$((checks + 1))
grep -q "does not record" "$work/out" && fail "an older dp checkpoint's layout is known, not assumed: $(cat "$work/out")"

# --- bad input: one line, exit 2, no report ------------------------------------------------------------------------
expect_error 2 "--pipeline-parallel 3 does not divide the model's 2 layers" -- \
  "${mpi[@]}" -n 3 "$tb" "${train[@]}" --pipeline-parallel 3 --micro-batches 3 -o refused.h5
expect_error 2 "--pipeline-parallel 4 does not divide the 2 ranks" -- \
  "${mpi[@]}" -n 2 "$tb" "${train[@]}" --layers 4 --pipeline-parallel 4 --micro-batches 4 -o refused.h5
expect_error 2 "--pipeline-parallel 2 needs --micro-batches of at least 2" -- \
  "${mpi[@]}" -n 2 "$tb" "${train[@]}" --pipeline-parallel 2 -o refused.h5
expect_error 2 "--pipeline-parallel 2 with --parallel fsdp is not built yet" -- \
  "${mpi[@]}" -n 2 "$tb" "${train[@]}" --pipeline-parallel 2 --micro-batches 2 --parallel fsdp -o refused.h5
expect_error 2 "--micro-batches and --grad-accum both count" -- \
  "${mpi[@]}" -n 2 "$tb" "${train[@]}" --pipeline-parallel 2 --micro-batches 2 --grad-accum 2 -o refused.h5
expect_error 2 "micro-batches" -- "$tb" "${train[@]}" --micro-batches 2 -o refused.h5
checks=$((checks + 1))
[[ ! -e refused.h5 ]] || fail "a refused run left refused.h5"

finish pipeline_cli_test
