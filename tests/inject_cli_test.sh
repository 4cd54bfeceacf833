#!/usr/bin/env bash
# --inject (a test feature of collectives, p2p and train): every bad spec is one line naming --inject and exit 2
# before any work; each fault's effect shows in the report by a margin machine load cannot break (a sleep is a
# lower bound on time; the clean figures are never held to a bound); an injected run is marked as such.
#   inject_cli_test.sh TRAINBENCH MPIEXEC [MPIEXEC FLAGS...]
set -uo pipefail
tb=$(realpath "$1"); shift; mpi=("$@")
work=$(mktemp -d); trap 'rm -rf "$work"' EXIT
source "$(dirname "${BASH_SOURCE[0]}")/cli_lib.sh"
cd "$work"

# check REPORT PYTHON-EXPRESSION MESSAGE: the expression, over h5py's File `f`, must be true.
check() {
  checks=$((checks + 1))
  /usr/bin/python3 - "$1" "$2" >"$work/py" 2>&1 <<'PY' || fail "$3: $(cat "$work/py")"
import sys, h5py, numpy as np
with h5py.File(sys.argv[1], "r") as f:
    def attr(path, name):
        value = f[path].attrs[name]
        return value.decode() if isinstance(value, bytes) else value
    def rows(path):
        return f[path][()]
    ok = eval(sys.argv[2])
    if not ok:
        print("false:", sys.argv[2])
        sys.exit(1)
PY
}

# --- bad specs: one line naming --inject, exit 2, no work and no report ----------------------------------------
train=(train --model tiny --seq 32 --micro-batch 2 --warmup-steps 1 --quiet)
expect_error 2 "--inject 'slow-disk=1': unknown kind 'slow-disk'" -- "$tb" collectives --inject slow-disk=1
expect_error 2 "--inject 'hang=2': rank 2 is outside this launch's 2 ranks \(0..1\)" -- \
  "${mpi[@]}" -n 2 "$tb" collectives --inject hang=2 -o bad.h5
expect_error 2 "--inject 'slow-rank=0:-5': '-5' is out of range" -- "$tb" "${train[@]}" --inject slow-rank=0:-5
expect_error 2 "--inject 'slow-rank=0:0x10': '0x10' is not a decimal number" -- "$tb" "${train[@]}" --inject slow-rank=0:0x10
expect_error 2 "--inject 'slow-link=1-1:50': a link joins two different ranks" -- \
  "${mpi[@]}" -n 2 "$tb" p2p --inject slow-link=1-1:50 -o bad.h5
expect_error 2 "--inject 'hang=0,': empty item" -- "$tb" collectives --inject hang=0,
expect_error 2 "--inject 'wrong-value=1': train cannot inject wrong-value \(it applies to collectives, suite\)" -- \
  "${mpi[@]}" -n 2 "$tb" "${train[@]}" --inject wrong-value=1 -o bad.h5
expect_error 2 "--inject 'io-stall=5': collectives cannot inject io-stall" -- "$tb" collectives --inject io-stall=5
expect_error 2 "--inject 'slow-rank=0:5': p2p cannot inject slow-rank" -- "$tb" p2p --inject slow-rank=0:5
expect_error 2 "--inject 'io-stall=5' delays the data loader's reads: give --data or --data-raw" -- \
  "$tb" "${train[@]}" --inject io-stall=5
checks=$((checks + 1))
[[ ! -e bad.h5 ]] || fail "a refused --inject wrote a report"
for command in collectives p2p train; do
  checks=$((checks + 1))
  "$tb" "$command" --help | grep -c >/dev/null -- "--inject arg .*test feature" || fail "$command --help lacks --inject"
done

# --- slow-rank: rank 1 sleeps 400 ms in each step; its steps are the slow ones and the sleep is its 'other' ---
expect_ok "${mpi[@]}" -n 2 "$tb" "${train[@]}" --steps 4 --inject slow-rank=1:400 -o slow.h5
checks=$((checks + 1))
grep -q "warning: faults injected on purpose (--inject slow-rank=1:400): this run's figures are not a real measurement" \
  "$work/err" || fail "no warning line for --inject: $(cat "$work/err")"
check slow.h5 'attr("/", "injected_faults") == "slow-rank=1:400"' "slow-rank run not marked"
check slow.h5 'attr("/config", "inject") == "slow-rank=1:400"' "config/inject"
sb='rows("/train/k2/stall_budget")'
check slow.h5 "$sb['median_step_s'][1] >= 0.4 and $sb['median_step_s'][1] >= $sb['median_step_s'][0] + 0.2" \
  "rank 1's median step is not the largest by 200 ms"
check slow.h5 "$sb['other_p50'][1] >= 0.5" "rank 1's sleep is not the larger part of its step ('other')"
expect_ok "${mpi[@]}" -n 2 "$tb" "${train[@]}" --steps 4 -o clean.h5
check clean.h5 'attr("/", "injected_faults") == "" and attr("/config", "inject") == ""' "a clean run is marked"
checks=$((checks + 1))
! grep -q "faults injected" "$work/err" || fail "a clean run warns of injected faults"

# Collectives: rank 1 sleeps 300 ms before each timed batch of 5, so rank 0 waits >= 60 ms per operation.
expect_ok "${mpi[@]}" -n 2 "$tb" collectives -b 1K -e 1K -n 5 -w 1 --inject slow-rank=1:300 -o slowc.h5 --quiet
check slowc.h5 'min(rows("/collectives/all_reduce/results")["out_of_place_time_us"]) >= 30000' "slow-rank did not slow the batch"

# --- slow-link: every message between ranks 0 and 2 waits 200 ms: p2p flags that pair, the slowest two ---------
# (A loaded machine may flag another pair too, so the check is that 0-2 is flagged and slowest, not alone.)
# 3 ranks on 2 cores under load moved 256 KiB in 3 ms (0.08 GB/s), 0.2 s a message is still 50x slower.
expect_ok "${mpi[@]}" -n 3 "$tb" p2p --size 256K -n 10 -w 1 --latency-iters 2 --threshold 0.1 \
  --inject slow-link=0-2:200000 -o link.h5 --quiet
check link.h5 '{(0, 2), (2, 0)} <= {(int(r["src_rank"]), int(r["dst_rank"])) for r in rows("/p2p/flagged")}' \
  "p2p did not flag the pair 0-2"
check link.h5 'sorted(np.argsort(np.nan_to_num(rows("/p2p/uni_bw_GBps").ravel(), nan=np.inf))[:2].tolist()) == [2, 6]' \
  "the pair 0-2 is not the slowest in the uni matrix"
check link.h5 'f["/p2p/latency_us"][0, 2] >= 200000' "slow-link latency"

# --- wrong-value: rank 1's input is corrupted before each verified run: wrong elements, exit 1 -----------------
checks=$((checks + 1))
timeout 120 "${mpi[@]}" -n 2 "$tb" collectives -b 1K -e 4K -n 2 -w 1 --ops all --inject wrong-value=1 -o wrong.h5 \
  --quiet >"$work/out" 2>"$work/err"
rc=$?
[[ $rc -eq 1 ]] || fail "wrong-value=1: exit $rc, want 1: $(cat "$work/err")"
grep -qE "^trainbench: error: [0-9]+ elements failed verification" "$work/err" || fail "wrong-value=1: $(cat "$work/err")"
check wrong.h5 'attr("/summary", "wrong_elements_total") > 0 and attr("/", "status") == "failed"' "wrong-value not caught"
check wrong.h5 'attr("/", "injected_faults") == "wrong-value=1"' "wrong-value run not marked"
expect_ok "${mpi[@]}" -n 2 "$tb" collectives -b 1K -e 4K -n 2 -w 1 --ops all -o right.h5 --quiet
check right.h5 'attr("/summary", "wrong_elements_total") == 0' "a clean sweep has wrong elements"

# --- hang: rank 1 blocks in its first operation; the watchdog names the operation, rank 0's probe names rank 1 as
# the one the others wait for (outside communication, where rank 0 waits inside it), and the job ends within
# --timeout + 30 s ----------------------------------------------------------------------------------------------
expect_hang() {  # expect_hang WATCHDOG-MESSAGE COMMAND...
  local message=$1; shift
  checks=$((checks + 1))
  local start; start=$(date +%s)
  timeout 120 "${mpi[@]}" -n 2 "$tb" "$@" --inject hang=1 --timeout 3 -o hang.h5 >"$work/out" 2>"$work/err"
  local rc=$? elapsed=$(( $(date +%s) - start ))
  [[ $rc -eq 1 ]] || fail "$1 hang=1: exit $rc, want 1 (124 = hung): $(cat "$work/err")"
  grep -q "timeout: $message" "$work/err" || fail "$1 hang=1: no watchdog message '$message': $(cat "$work/err")"
  [[ $elapsed -le 33 ]] || fail "$1 hang=1: took ${elapsed}s, more than --timeout + 30 s"
  check hang.h5 'attr("/", "status") == "failed" and "timeout" in attr("/", "status_reason")' "$1 hang=1: report status"
  checks=$((checks + 1))
  grep -qE "rank 0 .*error: timeout: .*; stuck: rank 1 \([^)]+\) outside communication for [0-9.]+ s, in the same operation; 1 of 2 ranks wait in communication" \
    "$work/err" || fail "$1 hang=1: rank 1 not named as stuck: $(cat "$work/err")"
  check hang.h5 'attr("/", "stuck_ranks") == "1" and "stuck: rank 1 (" in attr("/", "status_reason")' "$1 hang=1: stuck_ranks"
}
expect_hang "all_reduce out-of-place, 1024 B, float, 1 warm-up iterations" collectives -b 1K -e 1K -w 1 --quiet
expect_hang "p2p unidirectional 0->1" p2p --size 64K --quiet
expect_hang "training step 0 on 2 ranks" "${train[@]}" --steps 2

# --- io-stall: every loader read waits 2 s, one read a step: data_wait is most of the step, even loaded ---------
expect_ok "$tb" data generate --dir tokens --tokens 100000 --vocab 4096 --quiet
io=(train --model tiny --seq 32 --micro-batch 1 --warmup-steps 1 --steps 4 --quiet --data tokens --loader-workers 1
    --prefetch 1 --skip-data-verify)
expect_ok "$tb" "${io[@]}" --inject io-stall=2000 -o stall.h5
expect_ok "$tb" "${io[@]}" -o flow.h5
clean_share=$(/usr/bin/python3 -c 'import sys, h5py; print(h5py.File(sys.argv[1])["/io/k1"].attrs["data_wait_share"])' flow.h5)
check stall.h5 "attr('/io/k1', 'data_wait_share') >= 0.5 and attr('/io/k1', 'data_wait_share') >= ${clean_share:-1} + 0.3" \
  "io-stall: data_wait share not most of the step and far above the clean run's (${clean_share:-none})"
check stall.h5 'attr("/", "injected_faults") == "io-stall=2000"' "io-stall run not marked"

finish inject_cli_test
