#!/usr/bin/env bash
# trainbench train against its PyTorch peer (tests/perf/pytorch_gpt2.py) on one GPU, side by side (issue 37, item 4;
# tests/perf/README.md, "gpu_vs_pytorch.sh"). Two shapes:
#   124m  gpt2-124m, micro-batch 16, seq 1024                 trainbench 2+20 steps, peer 3+20 steps per variant
#   1.5b  gpt2-1.5b, micro-batch 8, seq 1024, grad-accum 8    trainbench 1+4 steps,  peer 2+4 steps per variant
# Each round runs, per shape, trainbench (--backend cuda) and one peer process (eager, then torch.compile: "PyTorch's
# best"): trainbench first in odd rounds, the peer first (compiled, then eager) in even ones. The 1.5B peer compiles
# block by block
# (--compile-scope blocks: one compile serves all 48 blocks; the whole model's would take minutes); 124m compiles
# the whole model. Without --grad-accum in `trainbench train --help`, the 1.5B shape runs at grad-accum 1 on both
# sides, 2+10 steps, and says so. A run that would not fit the time left (--budget) is skipped, and says so.
# Printed last: tokens/s (median over rounds), ms/step, MFU of the device's dense bf16 peak (trainbench's table),
# trainbench's tokens/s over each peer's and over llm.c's published figures, and the targets (met or not: a slow
# figure never fails the script). Exit status: 0 when every run finished with a first loss near ln V, 1 otherwise,
# 2 on a usage error.
#
#   tests/perf/gpu_vs_pytorch.sh [--rounds N] [--budget SECONDS] [--shapes 124m,1.5b] [--dry-run] BUNDLE OUT_DIR
# BUNDLE: the packed folder of tests/perf/gpu_prepare.sh (.gpu) or its .tar.gz; OUT_DIR gets each run's log and
# report, and gpu_vs_pytorch.log. --dry-run prints the planned commands, limits and estimates and runs nothing
# (BUNDLE need not exist). Environment: TB_PEER_PYTHON (default python3, the one with PyTorch).
set -uo pipefail
usage() {
  echo "usage: tests/perf/gpu_vs_pytorch.sh [--rounds N] [--budget SECONDS] [--shapes 124m,1.5b] [--dry-run]" \
    "BUNDLE OUT_DIR" >&2
  exit 2
}
bad() { echo "gpu_vs_pytorch: $*" >&2; exit 2; }
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
python=${TB_PEER_PYTHON:-python3}
rounds=2 budget=420 shapes=124m,1.5b dry_run=0 positional=()
while [[ $# -gt 0 ]]; do
  case $1 in
    --rounds) [[ ${2:-} =~ ^[1-9][0-9]*$ ]] || bad "--rounds '${2:-}' must be a positive integer"
      rounds=$2; shift 2 ;;
    --budget) [[ ${2:-} =~ ^[1-9][0-9]*$ ]] || bad "--budget '${2:-}' must be seconds (a positive integer)"
      budget=$2; shift 2 ;;
    --shapes) [[ ${2:-} =~ ^(124m|1\.5b)(,(124m|1\.5b))*$ ]] || bad "--shapes '${2:-}': accepted: 124m,1.5b"
      shapes=$2; shift 2 ;;
    --dry-run) dry_run=1; shift ;;
    -h|--help) sed -n '2,/^set -uo/p' "${BASH_SOURCE[0]}" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
    -*) echo "gpu_vs_pytorch: unknown option $1" >&2; usage ;;
    *) positional+=("$1"); shift ;;
  esac
done
[[ ${#positional[@]} -eq 2 ]] || usage
bundle=$(realpath -m "${positional[0]}") out=$(realpath -m "${positional[1]}")
IFS=, read -r -a shape_list <<<"$shapes"
deadline=$((SECONDS + budget))

# Published llm.c figures per H100 (issue 37): tokens/s.
declare -A llmc=([124m]=471000 [1.5b]=46800)
# Targets (issue 37): trainbench's MFU of the dense bf16 peak.
declare -A mfu_target=([124m]=0.42 [1.5b]=0.50)
declare -A model=([124m]=gpt2-124m [1.5b]=gpt2-1.5b) micro=([124m]=16 [1.5b]=8) accum=([124m]=1 [1.5b]=8)
declare -A tb_steps=([124m]="--warmup-steps 2 --steps 20" [1.5b]="--warmup-steps 1 --steps 4")
declare -A peer_steps=([124m]="--warmup-steps 3 --steps 20" [1.5b]="--warmup-steps 2 --steps 4")
declare -A scope=([124m]=model [1.5b]=blocks)
# Seconds: each run's limit, and the estimate it needs left to start (no GPU has run these yet: guesses from the
# 2026-12-04 H200 figures, 37 ms and 200 ms steps, and torch.compile's usual cold start; the peer's second round
# finds the compiled kernels in the inductor cache).
declare -A tb_limit=([124m]=60 [1.5b]=90) tb_estimate=([124m]=15 [1.5b]=30)
declare -A peer_limit=([124m]=180 [1.5b]=240) peer_estimate=([124m]=100 [1.5b]=110) peer_warm=([124m]=45 [1.5b]=70)

grad_accum_flag=unknown
if [[ $dry_run -eq 1 && -f $bundle ]]; then
  bundle=SCRATCH/.gpu  # unpacked there at run time
elif [[ $dry_run -eq 0 ]]; then
  scratch=$(mktemp -d)
  trap 'rm -rf "$scratch"' EXIT
  if [[ -f $bundle ]]; then
    tar -xzf "$bundle" -C "$scratch" || bad "cannot unpack $bundle"
    bundle=$scratch/.gpu
  fi
  [[ -x $bundle/run ]] || bad "$bundle/run missing (tests/perf/gpu_prepare.sh packs it)"
  mkdir -p "$out"
fi
if [[ -x $bundle/run ]]; then
  if "$bundle/run" trainbench train --help 2>&1 | grep -c -- '--grad-accum' >/dev/null; then grad_accum_flag=yes
  else grad_accum_flag=no; fi
fi
log=$out/gpu_vs_pytorch.log
say() { if [[ $dry_run -eq 1 ]]; then echo "$*"; else echo "$*" | tee -a "$log"; fi; }

if [[ $grad_accum_flag == no ]]; then
  accum[1.5b]=1 tb_steps[1.5b]="--warmup-steps 2 --steps 10" peer_steps[1.5b]="--warmup-steps 3 --steps 10"
  say "# NOTE: trainbench train --help lacks --grad-accum: the 1.5b shape runs at grad-accum 1 on both sides" \
    "(the MFU target is set at grad-accum 8)"
elif [[ $grad_accum_flag == unknown ]]; then
  say "# NOTE: no bundle to ask: whether trainbench has --grad-accum is decided at run time" \
    "(without it, 1.5b runs at grad-accum 1, 2+10 steps)"
fi

shape_args() { echo "--model ${model[$1]} --micro-batch ${micro[$1]} --seq 1024"; }
tb_command() {  # tb_command SHAPE ROUND
  local accum_args=""
  [[ ${accum[$1]} -gt 1 ]] && accum_args=" --grad-accum ${accum[$1]}"
  echo "$bundle/run mpirun -np 1 --bind-to none trainbench train --backend cuda $(shape_args "$1")$accum_args" \
    "${tb_steps[$1]} -o $out/vs_tb_$1_r$2.h5"
}
peer_command() {  # peer_command SHAPE ROUND: eager first in odd rounds, compiled first in even ones
  local variants=eager,compiled
  [[ $(($2 % 2)) -eq 0 ]] && variants=compiled,eager
  echo "$python $here/pytorch_gpt2.py --device cuda $(shape_args "$1") --grad-accum ${accum[$1]} ${peer_steps[$1]}" \
    "--variants $variants --compile-scope ${scope[$1]}"
}

failures=0
run_one() {  # run_one NAME LIMIT ESTIMATE COMMAND: under a time limit, skipped when the estimate does not fit
  local name=$1 limit=$2 estimate=$3 command=$4 left=$((deadline - SECONDS))
  if [[ $dry_run -eq 1 ]]; then
    printf '%-20s limit %3d s, estimate %3d s: %s\n' "$name" "$limit" "$estimate" "$command"
    planned=$((planned + estimate))
    return
  fi
  if [[ $left -lt $estimate ]]; then
    say "$(printf '%-20s SKIPPED: %d s left of the budget, ~%d s needed' "$name" "$left" "$estimate")"
    return
  fi
  [[ $limit -gt $left ]] && limit=$left
  echo "=== $name: $command (limit ${limit}s)" >>"$log"
  local start=$SECONDS
  # shellcheck disable=SC2086  # the command is words by design: paths here hold no spaces
  PYTHONUNBUFFERED=1 timeout "$limit" $command >"$out/$name.log" 2>&1
  local rc=$?
  cat "$out/$name.log" >>"$log"
  if [[ $rc -eq 0 ]]; then say "$(printf '%-20s ok (%d s)' "$name" $((SECONDS - start)))"
  else
    say "$(printf '%-20s FAILED: exit %d after %d s: %s' "$name" "$rc" $((SECONDS - start)) \
      "$(grep -m1 -iE 'error|Traceback' "$out/$name.log")")"
    failures=$((failures + 1))
  fi
}

planned=0
say "# gpu_vs_pytorch $(date -u +%Y-%m-%dT%H:%M:%SZ) on $(hostname): rounds $rounds, shapes $shapes, budget $budget s"
[[ $dry_run -eq 1 ]] || nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm,power.limit \
  --format=csv,noheader 2>&1 | sed 's/^/# GPU: /' | tee -a "$log"
for ((round = 1; round <= rounds; round++)); do
  for shape in "${shape_list[@]}"; do
    tb="run_one vs_tb_${shape}_r$round ${tb_limit[$shape]} ${tb_estimate[$shape]}"
    estimate=${peer_estimate[$shape]}
    [[ $round -gt 1 ]] && estimate=${peer_warm[$shape]}  # the inductor cache holds round 1's kernels
    peer="run_one vs_peer_${shape}_r$round ${peer_limit[$shape]} $estimate"
    # Odd rounds trainbench first: with one round (gpu_check's peer part) its runs, the figures the targets are
    # about, come before the peer's compiles use up the budget.
    if [[ $((round % 2)) -eq 1 ]]; then
      $tb "$(tb_command "$shape" "$round")"; $peer "$(peer_command "$shape" "$round")"
    else
      $peer "$(peer_command "$shape" "$round")"; $tb "$(tb_command "$shape" "$round")"
    fi
  done
done
if [[ $dry_run -eq 1 ]]; then
  echo "# planned: ~$planned s estimated of the $budget s budget (runs that do not fit are skipped at run time)"
  exit 0
fi

# The table: trainbench's figures from its reports (h5py), the peer's from its peer_result lines.
summary_args=()
for shape in "${shape_list[@]}"; do
  summary_args+=("$shape" "${model[$shape]}" "${micro[$shape]}" "${accum[$shape]}" "${llmc[$shape]}" \
    "${mfu_target[$shape]}")
done
"$python" - "$out" "$grad_accum_flag" "${summary_args[@]}" <<'EOF' 2>&1 | tee -a "$log"
import glob, json, math, os, statistics, sys

out, grad_accum_flag, rest = sys.argv[1], sys.argv[2], sys.argv[3:]
shapes = [rest[i:i + 6] for i in range(0, len(rest), 6)]
bad = 0


def trainbench_runs(shape):
    import h5py
    runs = []
    for path in sorted(glob.glob(f"{out}/vs_tb_{shape}_r*.h5")):
        try:  # a run cut short leaves a report without its training point
            with h5py.File(path, "r") as f:
                a = f["train/k1"].attrs
                runs.append({"tokens_per_s": float(a["tokens_per_s"]), "ms_per_step": 1e3 * float(a["step_s"]),
                             "mfu": float(a["mfu_peak"]), "first_loss": float(a["loss_first"]),
                             "ln_vocab": math.log(int(f["model"].attrs["vocab"]))})
        except (KeyError, OSError) as error:
            print(f"# {os.path.basename(path)}: no training figures ({error})")
    return runs


def peer_runs(shape):
    runs = {}
    for path in sorted(glob.glob(f"{out}/vs_peer_{shape}_r*.log")):
        for line in open(path):
            if line.startswith("peer_result "):
                r = json.loads(line.split(" ", 1)[1])
                runs.setdefault(r["variant"], []).append(r)
            elif line.startswith("peer_failed "):
                r = json.loads(line.split(" ", 1)[1])
                print(f"# {os.path.basename(path)}: pytorch {r['variant']} failed: {r['error'][:300]}")
    return runs


def median(runs, key):
    values = [r[key] for r in runs if r.get(key) is not None and not math.isnan(r[key])]
    return statistics.median(values) if values else float("nan")


print("\n# gpu_vs_pytorch summary: medians over the rounds that ran; MFU of the device's dense bf16 peak "
      "(trainbench's table: 989 TFLOP/s on an H100 SXM or H200); the first loss must lie within ln V - 0.1 .. + 1.0 "
      "(ln 50257 = 10.825)")
peer_by_shape = {shape[0]: peer_runs(shape[0]) for shape in shapes}
devices = sorted({r["device"] for by_variant in peer_by_shape.values() for runs in by_variant.values() for r in runs})
print(f"# device: {', '.join(devices) or 'unknown (no peer run finished)'}; llm.c's figures are an H100's")
print(f"{'shape':<30} {'program':<34} {'runs':>4} {'tokens/s':>10} {'ms/step':>9} {'MFU':>6} {'first loss':>10}")
verdicts = []
for shape, name, micro, accum, llmc, target in shapes:
    label = f"{name} b{micro} x1024 ga{accum}"
    tb = trainbench_runs(shape)
    peers = peer_by_shape[shape]
    rows = [("trainbench", tb)] + [(f"pytorch {v}" + (f" ({runs[0]['compile']})" if v == "compiled" and runs else ""),
                                    runs) for v in ("eager", "compiled") for runs in [peers.get(v, [])]]
    tps = {}
    for program, runs in rows:
        tps[program.split(" (")[0]] = median(runs, "tokens_per_s")
        if not runs:
            print(f"{label:<30} {program:<34} {0:>4}   (no run finished)")
            continue
        loss = median(runs, "first_loss")
        print(f"{label:<30} {program:<34} {len(runs):>4} {median(runs, 'tokens_per_s'):>10,.0f} "
              f"{median(runs, 'ms_per_step'):>9.2f} {100 * median(runs, 'mfu'):>5.1f}% {loss:>10.4f}")
        for r in runs:
            if not (r["ln_vocab"] - 0.1 < r["first_loss"] < r["ln_vocab"] + 1.0):
                print(f"FAILED: {label} {program}: first loss {r['first_loss']:.4f} is not within ln V - 0.1 .. + 1.0")
                bad += 1
    ours = tps["trainbench"]
    ratios = [f"/ pytorch {v} {ours / tps['pytorch ' + v]:.3f}x" for v in ("eager", "compiled")
              if tps["pytorch " + v] == tps["pytorch " + v]]
    ratios.append(f"/ llm.c {ours / float(llmc):.3f}x ({float(llmc):,.0f} tokens/s per H100, published)")
    print(f"# {label}: trainbench " + ", ".join(ratios))
    mfu = median(tb, "mfu")
    verdicts.append(f"{name} MFU >= {100 * float(target):.0f}%: {100 * mfu:.1f}% "
                    + ("met" if mfu >= float(target) else "NOT MET"))
    compiled = tps["pytorch compiled"]
    if compiled == compiled and ours == ours:
        verdicts.append(f"{name} >= 1.0x PyTorch compiled: {ours / compiled:.3f}x "
                        + ("met" if ours >= compiled else "NOT MET"))
    else:
        verdicts.append(f"{name} >= 1.0x PyTorch compiled: n/a (a run is missing)")
    if grad_accum_flag == "no" and int(accum) == 1 and name == "gpt2-1.5b":
        verdicts.append("gpt2-1.5b ran at grad-accum 1 (trainbench lacks --grad-accum): its MFU target is set at 8")
print("# targets (issue 37; a benchmark: not met is reported, never a failure):")
for v in verdicts:
    print("#   " + v)
sys.exit(1 if bad else 0)
EOF
[[ ${PIPESTATUS[0]} -eq 0 ]] || failures=$((failures + 1))
echo "# gpu_vs_pytorch: $failures failed" | tee -a "$log"
[[ $failures -eq 0 ]]
