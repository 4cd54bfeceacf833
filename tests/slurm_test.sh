#!/usr/bin/env bash
# The Slurm scripts against a real Slurm: brings up a private one on this machine (tests/slurm_cluster.sh: munged,
# slurmctld, slurmd; one node), submits launch/slurm/node.sbatch with 2 CPU ranks through sbatch (srun --mpi=pmix
# and mpirun), waits for each job and reads its reports back with `trainbench report`; runs nightly.sbatch for three
# nights into one history and reads its outputs back (JUnit, Prometheus, JSON, history, the dry-run drain); bad
# parameters fail the job with one line and exit 2; drain.sh drains, resumes and leaves alone what it did not drain, against the real
# slurmctld. Everything is torn down afterwards, also when a check fails. Fails (never skips) when Slurm cannot
# start.
#   slurm_test.sh TRAINBENCH
# shellcheck disable=SC2015  # "check && check || fail" is meant: fail when any of the checks fails
set -uo pipefail
tb=$(realpath "$1")
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
repo=$(dirname "$here")
work=$(mktemp -d /tmp/trainbench-slurm-test.XXXXXX)
cluster=$(mktemp -d /tmp/trainbench-slurm.XXXXXX)
# shellcheck source=tests/cli_lib.sh
source "$here/cli_lib.sh"
# shellcheck source=tests/slurm_cluster.sh
source "$here/slurm_cluster.sh"
cleanup() { slurm_cluster_down "$cluster"; rm -rf "$work" "$cluster"; }
trap cleanup EXIT
trap 'exit 143' TERM INT

slurm_cluster_up "$cluster" || { echo "FAIL: the private Slurm did not start (reason above)"; exit 1; }
node1=${SLURM_CLUSTER_NODES[0]} node2=${SLURM_CLUSTER_NODES[1]}
drain=$repo/launch/slurm/drain.sh

# A node's state and reason as slurmctld has them.
node_state() { local r; r=$(scontrol -o show node "$1"); [[ $r =~ State=([^ ]*) ]] && echo "${BASH_REMATCH[1]}"; }
node_reason() { local r; r=$(scontrol -o show node "$1"); [[ $r =~ \ Reason=(.*)\ \[ ]] && echo "${BASH_REMATCH[1]}"; }
# expect_node NODE DRAINED(0|1) REASON WHAT: the node's state has DRAIN or not, and its reason
expect_node() {
  local state reason
  checks=$((checks + 1))
  state=$(node_state "$1") reason=$(node_reason "$1")
  if [[ $2 -eq 1 && ( $state != *DRAIN* || $reason != "$3" ) ]] || [[ $2 -eq 0 && $state == *DRAIN* ]]; then
    fail "$4: $1 is $state, reason '$reason'"
  fi
}

# submit NAME SCRIPT [VAR=VALUE...] [-- SBATCH ARGS...]: submits launch/slurm/SCRIPT with CPU ranks (2 on one node
# unless the sbatch arguments say otherwise), the tiny model and small sizes (VAR=VALUE overriding them) and
# prints the job id; the job's output goes to $work/NAME.out.
submit() {
  local name=$1 script=$2 vars=() args=(--ntasks-per-node=2); shift 2
  while [[ $# -gt 0 && $1 != -- ]]; do vars+=("$1"); shift; done
  [[ $# -eq 0 ]] || { shift; args=("$@"); }
  env TRAINBENCH="$tb" TB_OUT="$work/reports" TB_BACKEND=cpu TB_MODEL=tiny TB_STEPS=3 TB_MAXBYTES=64K \
      TMPDIR="$cluster/tmp" "${vars[@]}" \
    sbatch --parsable --job-name="$name" --gpus-per-node=0 --output="$work/$name.out" "${args[@]}" \
      "$repo/launch/slurm/$script"
}

# wait_job ID: until the job leaves squeue (at most 300 s); then job_state and job_exit from scontrol show job.
wait_job() {
  local id=$1 deadline=$((SECONDS + 300)) record
  while [[ -n $(squeue -h -j "$id" 2>/dev/null) ]]; do
    if [[ $SECONDS -ge $deadline ]]; then fail "job $id still in squeue after 300 s"; scancel "$id"; break; fi
    sleep 1
  done
  record=$(scontrol -o show job "$id")
  [[ $record =~ JobState=([^ ]*) ]] && job_state=${BASH_REMATCH[1]} || job_state="?"
  [[ $record =~ ExitCode=([^ ]*) ]] && job_exit=${BASH_REMATCH[1]} || job_exit="?"
}

# good_job NAME SCRIPT LAUNCHER NODES NODES_RE [-- SBATCH ARGS...]: the job completes with exit 0 on NODES nodes
# (names matching NODES_RE), 2 ranks; both reports complete and readable with `trainbench report`.
good_job() {
  local name=$1 script=$2 launcher=$3 nodes=$4 nodes_re=$5 id dir f; shift 5
  checks=$((checks + 1))
  id=$(submit "$name" "$script" TB_LAUNCHER="$launcher" "$@") || { fail "sbatch of $name failed"; return; }
  wait_job "$id"
  dir=$work/reports/job-$id
  if [[ $job_state != COMPLETED || $job_exit != 0:0 ]]; then
    fail "$name: job $id $job_state, exit $job_exit; output: $(tail -20 "$work/$name.out")"
    return
  fi
  for f in collectives.h5 train.h5 job.txt collectives.log train.log; do
    [[ -s $dir/$f ]] || fail "$name: $dir/$f missing"
  done
  grep -qx "tasks=2" "$dir/job.txt" && grep -qx "num_nodes=$nodes" "$dir/job.txt" && grep -qxE "nodes=$nodes_re" "$dir/job.txt" &&
    grep -qx "exit=0" "$dir/job.txt" && grep -qx "exit_train=0" "$dir/job.txt" && grep -qx "exit_collectives=0" "$dir/job.txt" ||
    fail "$name: job.txt: $(cat "$dir/job.txt")"
  grep -q "^launcher=$launcher" "$dir/job.txt" || fail "$name: job.txt names another launcher: $(grep launcher "$dir/job.txt")"
  grep -q "^$script: train: exit 0$" "$work/$name.out" || fail "$name: the job output lacks '$script: train: exit 0'"
  expect_ok "$tb" report "$dir/train.h5"
  grep -qE '^ status +complete$' "$work/out" && grep -q '^# train.summary' "$work/out" &&
    grep -qE '^ model +tiny$' "$work/out" && grep -qE '^ ranks +\(ranks\) +2$' "$work/out" &&
    grep -qE "^ n_nodes +\(nodes\) +$nodes$" "$work/out" && grep -qE '^ tokens_per_s +\(tokens/s\) +[1-9]' "$work/out" ||
    fail "$name: train report incomplete: $(head -40 "$work/out")"
  expect_ok "$tb" report "$dir/collectives.h5" --sections config,collectives
  grep -qE '^ status +complete$' "$work/out" && grep -qE '^ all_reduce_peak_busbw_GBps .* [0-9.]+$' "$work/out" ||
    fail "$name: collectives report incomplete: $(head -30 "$work/out")"
}

# node.sbatch on one node and multinode.sbatch on both (1 rank each), through srun --mpi=pmix and mpirun.
for launcher in srun mpirun; do
  good_job "node-$launcher" node.sbatch "$launcher" 1 "tbnode[12]"
  good_job "multinode-$launcher" multinode.sbatch "$launcher" 2 "$node1,$node2" -- --nodes=2 --ntasks-per-node=1
done

# A failing trainbench (an unknown model) fails the job with its exit code, the collectives report still written.
checks=$((checks + 1))
if id=$(submit bad-model node.sbatch TB_MODEL=gpt-9000); then
  wait_job "$id"
  [[ $job_state == FAILED && $job_exit == 2:0 ]] || fail "bad-model: job $id $job_state, exit $job_exit, want FAILED 2:0"
  grep -q "^node.sbatch: train: exit 2$" "$work/bad-model.out" || fail "bad-model: no 'train: exit 2': $(tail -5 "$work/bad-model.out")"
  grep -q "gpt-9000" "$work/bad-model.out" || fail "bad-model: trainbench's error does not name the model"
  [[ -s $work/reports/job-$id/collectives.h5 ]] || fail "bad-model: the collectives report is missing"
else
  fail "sbatch of bad-model failed"
fi

# nightly.sbatch with 2 CPU ranks on the quick profile, three nights into one history. The profile is a copy of
# quick.toml whose [cpu.p2p] flags a link only under 5% of the median, not 10%: on a busy 2-core test machine one
# preemption of a rank stretches a pair's copies many times over, and such a weak link would fail night 1.
# Night 1 has no history:
# validate passes the job with the figures unknown (verdict warn), writes every output and adds the night to
# the history. Night 2 has a wrong element injected: a regression (exit 3), kept in the history as not counted; all_gather's
# check names the rank whose data arrived wrong and its host, which the dry-run drain names without draining it. Night 3 has a rank 500 ms slower per step (a profile of
# train alone, to stay short): a straggler on the job's node, which the dry-run drain names without draining it;
# TB_KEEP_NIGHTS=2 removes the older night directories and nothing else. The policy's straggler floor is 100%:
# healthy CPU ranks on a busy test machine differ by less, the injected rank by 4x.
history=$work/history
sed -e 's/^threshold = 0\.1$/threshold = 0.05/' "$repo/launch/suite/quick.toml" >"$work/quick.toml"
grep -qx "threshold = 0.05" "$work/quick.toml" || fail "launch/suite/quick.toml has no [cpu.p2p] threshold = 0.1 to relax"
printf '[straggler]\nfloor_cpu = 1\n' >"$work/policy.toml"
printf '%s\n' '[suite]' 'phases = ["train"]' '[train]' 'model = "tiny"' 'seq = 64' 'micro_batch = 2' 'steps = 6' \
  'warmup_steps = 1' '[data]' 'tokens = "200K"' 'shard_tokens = "50K"' >"$work/straggler.toml"
night_dir() { compgen -G "$work/reports/nightly/*-job$1"; }  # night_dir ID: the night directory of job ID
history_nights() { find "$history" -maxdepth 1 -name '*.json' | wc -l; }
# history_counted: the nights the expectation is made of (a regression is kept for cost's failure rate, not counted).
history_counted() { grep -L '"counted": false' "$history"/*.json 2>/dev/null | wc -l; }
# night NAME STATE EXIT [VAR=VALUE...]: submits nightly.sbatch (that profile, this test's history and policy),
# waits, and checks the job's state, its exit code and its night directory's name; sets night (the directory)
# and night_node (the job's node). Returns 1 when a check failed.
night() {
  local name=$1 state=$2 code=$3 id; shift 3
  checks=$((checks + 1))
  night='' night_node=''
  id=$(submit "$name" nightly.sbatch TB_PROFILE="$work/quick.toml" TB_HISTORY="$history" TB_POLICY="$work/policy.toml" "$@") ||
    { fail "sbatch of $name failed"; return 1; }
  wait_job "$id"
  night=$(night_dir "$id") || { fail "$name: no night directory for job $id: $(tail -20 "$work/$name.out")"; return 1; }
  [[ ${night##*/} =~ ^[0-9]{8}T[0-9]{6}Z-job$id$ ]] || fail "$name: night directory named ${night##*/}"
  night_node=$(sed -n 's/^nodes=//p' "$night/job.txt")
  if [[ $job_state != "$state" || $job_exit != "$code:0" ]]; then
    fail "$name: job $id $job_state, exit $job_exit, want $state $code:0; output: $(tail -30 "$work/$name.out")"
    return 1
  fi
}

# A suite that refuses its flags writes no report: its exit code is the job's, nothing after it runs. On the other
# node, beside night 1.
bad_suite_id=$(submit nightly-bad-suite nightly.sbatch TB_PROFILE=quick TB_OUT="$work/reports-bad-suite" \
  TB_SUITE_ARGS="--no-such-flag") || fail "sbatch of nightly-bad-suite failed"

mkdir -p "$work/textfile"
if night night1 COMPLETED 0 TB_PROMETHEUS="$work/textfile"; then
  for f in suite.h5 suite.log validate.log validate.json validate.xml history.log trend.html drain.log job.txt; do
    [[ -s $night/$f ]] || fail "night1: $night/$f missing"
  done
  grep -qx "exit_suite=0" "$night/job.txt" && grep -qx "exit_validate=0" "$night/job.txt" &&
    grep -qx "exit_history=0" "$night/job.txt" && grep -qx "exit_drain=0" "$night/job.txt" && grep -qx "exit=0" "$night/job.txt" &&
    grep -qx "profile=$work/quick.toml" "$night/job.txt" && grep -qx "drain=dry-run" "$night/job.txt" && grep -qx "tasks=2" "$night/job.txt" ||
    fail "night1: job.txt: $(cat "$night/job.txt")"
  grep -qx "prometheus=$work/textfile/trainbench.prom" "$night/job.txt" ||
    fail "night1: TB_PROMETHEUS, a directory, not used as DIR/trainbench.prom: $(grep prometheus "$night/job.txt")"
  expect_ok "$tb" report "$night/suite.h5"
  grep -qE '^ status +complete$' "$work/out" || fail "night1: suite.h5 not complete: $(head -20 "$work/out")"
  # No history yet: figures unknown, never a pass; the verdict warn, exit 0; the night added to the history.
  grep -q "^# verdict: warn$" "$night/validate.log" && grep -q "^# history: added " "$night/validate.log" &&
    grep -qE '^ +unknown +missing +train +train.tokens_per_s ' "$night/validate.log" ||
    fail "night1: validate.log: $(grep -E '^# |tokens_per_s' "$night/validate.log")"
  grep -q "nothing to drain" "$night/drain.log" || fail "night1: drain.log: $(cat "$night/drain.log")"
  checks=$((checks + 1))
  /usr/bin/python3 - "$night/validate.xml" "$work/textfile/trainbench.prom" "$night/validate.json" >"$work/out" 2>&1 <<'PY' ||
import json, sys
from junitparser import JUnitXml
from prometheus_client.parser import text_string_to_metric_families
xml = JUnitXml.fromfile(sys.argv[1])
assert isinstance(xml, JUnitXml), f"validate.xml's root is <{xml._tag}>, not <testsuites>"
suites = list(xml)
assert suites and all(len(list(suite)) > 0 for suite in suites), "validate.xml: no testsuite, or an empty one"
with open(sys.argv[2], encoding="utf-8") as f:
    metrics = {family.name: family.samples for family in text_string_to_metric_families(f.read())}
for name in ("trainbench_check_status", "trainbench_info", "trainbench_validate_verdict"):
    assert metrics.get(name), f"{sys.argv[2]}: no {name} samples (has {sorted(metrics)})"
with open(sys.argv[3], encoding="utf-8") as f:
    assert json.load(f)["runs"][0]["validate"]["checks"], "validate.json: no checks"
PY
    fail "night1: the outputs do not parse: $(cat "$work/out")"
  [[ $(history_nights) -eq 1 ]] || fail "night1: the history has $(history_nights) nights, want 1"
  grep -qi "<html" "$night/trend.html" || fail "night1: trend.html is no HTML page"
fi

checks=$((checks + 1))
if [[ -n ${bad_suite_id:-} ]]; then
  wait_job "$bad_suite_id"
  bad_night=$(compgen -G "$work/reports-bad-suite/nightly/*-job$bad_suite_id") || bad_night=/nonexistent
  if [[ $job_state != FAILED || $job_exit != 2:0 ]]; then
    fail "nightly-bad-suite: job $bad_suite_id $job_state, exit $job_exit, want FAILED 2:0: $(tail -5 "$work/nightly-bad-suite.out")"
  elif ! grep -qx "exit_suite=2" "$bad_night/job.txt" || ! grep -qx "exit=2" "$bad_night/job.txt" ||
       [[ -e $bad_night/validate.log || -e $bad_night/suite.h5 ]]; then
    fail "nightly-bad-suite: want exit_suite=2, exit=2 and no validate: $(ls "$bad_night"; cat "$bad_night/job.txt")"
  fi
  grep -q -- "--no-such-flag" "$work/nightly-bad-suite.out" || fail "nightly-bad-suite: the suite's error does not name the flag"
fi

if night night2 FAILED 3 TB_SUITE_ARGS="--inject wrong-value=1"; then
  grep -qx "exit_suite=1" "$night/job.txt" && grep -qx "exit_validate=3" "$night/job.txt" && grep -qx "exit=3" "$night/job.txt" ||
    fail "night2: job.txt: $(cat "$night/job.txt")"
  grep -q "^# verdict: fail (exit 3)$" "$night/validate.log" &&
    grep -qE '^ +fail .* collectives.all_reduce.wrong_elements ' "$night/validate.log" ||
    fail "night2: validate.log: $(grep -E '^# | fail ' "$night/validate.log")"
  [[ -s $night/trainbench.prom && -s $night/trend.html ]] || fail "night2: no trainbench.prom or trend.html"
  grep -qE '^ +fail .* collectives.all_gather.wrong_elements +1 ' "$night/validate.log" ||
    fail "night2: all_gather does not name rank 1: $(grep wrong_elements "$night/validate.log")"
  grep -qF "drain.sh: $night_node: would drain: scontrol update 'nodename=$night_node' 'state=drain'" "$night/drain.log" &&
    grep -q "dry run, nothing changed" "$night/drain.log" || fail "night2: drain.log: $(cat "$night/drain.log")"
  [[ $(sinfo -h -n "$night_node" -o %T) != *drain* ]] || fail "night2: the dry run drained $night_node"
  [[ $(history_nights) -eq 2 && $(history_counted) -eq 1 ]] ||
    fail "night2: the history has $(history_nights) nights ($(history_counted) counted), want 2 (1 counted: a regression is kept, not counted)"
fi

# Older night directories (two, named as nights are) and a directory of someone else's beside them.
mkdir -p "$work/reports/nightly/20000101T020000Z-job1" "$work/reports/nightly/20000102T020000Z-job2" "$work/reports/nightly/notes"
if night night3 FAILED 3 TB_PROFILE="$work/straggler.toml" TB_SUITE_ARGS="--inject slow-rank=1:500" TB_KEEP_NIGHTS=2; then
  grep -qx "exit_suite=0" "$night/job.txt" && grep -qx "exit_validate=3" "$night/job.txt" && grep -qx "exit_drain=0" "$night/job.txt" ||
    fail "night3: job.txt: $(cat "$night/job.txt")"
  grep -qE '^ +fail .* train.step_s.rank1 ' "$night/validate.log" || fail "night3: no straggler: $(grep -E '^# |step_s' "$night/validate.log")"
  grep -qF "drain.sh: $night_node: would drain: scontrol update 'nodename=$night_node' 'state=drain' 'reason=trainbench: failed train.step_s.rank1'" "$night/drain.log" &&
    grep -q "dry run, nothing changed" "$night/drain.log" || fail "night3: drain.log: $(cat "$night/drain.log")"
  [[ $(sinfo -h -n "$night_node" -o %T) != *drain* ]] || fail "night3: the dry run drained $night_node: $(sinfo -h -n "$night_node" -o '%T %E')"
  expect_node "$night_node" 0 "" "night3's dry-run drain"
  mapfile -t kept < <(find "$work/reports/nightly" -mindepth 1 -maxdepth 1 -printf '%f\n' | LC_ALL=C sort)
  [[ ${#kept[@]} -eq 3 && ${kept[0]} != 2000* && ${kept[1]} == "${night##*/}" && ${kept[2]} == notes ]] ||
    fail "night3: TB_KEEP_NIGHTS=2 left: ${kept[*]}"
fi

# Bad input (SCRIPT|VAR=VALUE;...|SBATCH ARG;...|message): the job fails with exit 2 and one line naming what is
# wrong; nothing run, no report directory.
bad_cases=(
  "node.sbatch|TRAINBENCH=/nonexistent/trainbench||TRAINBENCH='/nonexistent/trainbench' is not an executable file"
  "node.sbatch|TB_BACKEND=gpu||TB_BACKEND='gpu' is not one of: auto cpu cuda"
  "node.sbatch|TB_LAUNCHER=ssh||TB_LAUNCHER='ssh' is not one of: srun mpirun"
  "node.sbatch|TB_SRUN_MPI=nompi||TB_SRUN_MPI='nompi' is not an MPI plugin of this srun"
  "node.sbatch|TB_STEPS=0||TB_STEPS='0' is not a positive integer"
  "node.sbatch|TB_MICRO_BATCH=4x||TB_MICRO_BATCH='4x' is not a positive integer"
  "node.sbatch|TB_TIMEOUT=-1||TB_TIMEOUT='-1' is not a whole number of seconds (0 = no watchdog)"
  "node.sbatch|TB_COLLECTIVES=yes||TB_COLLECTIVES='yes' must be 0 or 1"
  "node.sbatch|TB_SCALING=1,,2||TB_SCALING='1,,2' is not empty, pow2 or a comma-separated list"
  "node.sbatch|TB_OPS=all reduce||TB_OPS='all reduce' is not a comma-separated list"
  "node.sbatch|TB_OUT=/proc/nope||cannot create the report directory /proc/nope/job-"
  "node.sbatch|TB_COLLECTIVES=0;TB_TRAIN=0||TB_COLLECTIVES=0 and TB_TRAIN=0: nothing to run"
  "node.sbatch||--nodes=2;--ntasks-per-node=1|the allocation has 2 nodes; node.sbatch is for one node (use multinode.sbatch)"
  "multinode.sbatch||--nodes=2;--ntasks=3;--ntasks-per-node=2|3 tasks on 2 nodes (2(x2)) are not the same number on every node"
  "nightly.sbatch|TB_PROFILE=quick&&x||TB_PROFILE='quick&&x' is neither a profile name (quick, nightly) nor a readable TOML file"
  "nightly.sbatch|TB_PROFILE=/nonexistent/p.toml||TB_PROFILE='/nonexistent/p.toml' is neither a profile name"
  "nightly.sbatch|TB_DRAIN=maybe||TB_DRAIN='maybe' is not one of: off dry-run apply"
  "nightly.sbatch|TB_KEEP_NIGHTS=0||TB_KEEP_NIGHTS='0' is not a positive integer"
  "nightly.sbatch|TB_POLICY=/nonexistent.toml||TB_POLICY='/nonexistent.toml' is not a readable file"
  "nightly.sbatch|TB_HISTORY=$work/reports||TB_HISTORY='$work/reports' and the night directories ($work/reports/nightly) overlap"
  "nightly.sbatch|TB_PROMETHEUS=/nonexistent/x.prom||TB_PROMETHEUS='/nonexistent/x.prom' is neither a directory nor a file in an existing directory"
  "nightly.sbatch|TB_PROMETHEUS=$work/reports/x.prom||TB_PROMETHEUS='$work/reports/x.prom': its directory and TB_HISTORY='$work/reports/history' overlap"
  "nightly.sbatch|TB_LAUNCHER=ssh||TB_LAUNCHER='ssh' is not one of: srun mpirun"
)
bad_ids=()
for i in "${!bad_cases[@]}"; do
  IFS='|' read -r script vars args _ <<<"${bad_cases[$i]}"
  IFS=';' read -r -a vars <<<"$vars"
  IFS=';' read -r -a args <<<"$args"
  [[ ${#args[@]} -gt 0 ]] || args=(--ntasks-per-node=2)
  bad_ids[i]=$(submit "bad-$i" "$script" "${vars[@]}" -- "${args[@]}") || fail "sbatch of bad case '${bad_cases[$i]}' failed"
done
for i in "${!bad_cases[@]}"; do
  [[ -n ${bad_ids[i]:-} ]] || continue
  IFS='|' read -r script _ _ message <<<"${bad_cases[$i]}"
  checks=$((checks + 1))
  wait_job "${bad_ids[i]}"
  if [[ $job_state != FAILED || $job_exit != 2:0 ]]; then
    fail "${bad_cases[$i]}: job ${bad_ids[i]} $job_state, exit $job_exit, want FAILED 2:0"
  elif [[ $(wc -l <"$work/bad-$i.out") -ne 1 ]] || ! grep -qF "$script: $message" "$work/bad-$i.out"; then
    fail "${bad_cases[$i]}: want one line '$script: $message', got: $(cat "$work/bad-$i.out")"
  elif [[ -e $work/reports/job-${bad_ids[i]} ]] || night_dir "${bad_ids[i]}" >/dev/null; then
    fail "${bad_cases[$i]}: a report directory was made"
  fi
done
# Outside an allocation: one line, exit 2.
checks=$((checks + 1))
env -u SLURM_JOB_ID -u SLURM_NTASKS TRAINBENCH="$tb" bash "$repo/launch/slurm/node.sbatch" >"$work/out" 2>&1; rc=$?
[[ $rc -eq 2 && $(wc -l <"$work/out") -eq 1 ]] && grep -q "^node.sbatch: not inside a Slurm allocation" "$work/out" ||
  fail "node.sbatch outside an allocation -> exit $rc: $(cat "$work/out")"

# drain.sh against the real slurmctld.
drain_ok() {  # drain_ok PATTERN ARGS...: drain.sh ARGS exits 0 and prints PATTERN
  local pattern=$1; shift
  expect_ok "$drain" "$@"
  grep -qE -- "$pattern" "$work/out" || fail "drain.sh $* -> output lacks /$pattern/: $(cat "$work/out" "$work/err")"
}
drain_error() {  # drain_error PATTERN ARGS...: exit 2 and one line matching PATTERN
  local pattern=$1 rc; shift
  checks=$((checks + 1))
  "$drain" "$@" >"$work/out" 2>&1; rc=$?
  [[ $rc -eq 2 && $(wc -l <"$work/out") -eq 1 ]] && grep -qE -- "$pattern" "$work/out" ||
    fail "drain.sh $* -> exit $rc, want 2 and one line /$pattern/: $(cat "$work/out")"
}

drain_ok "$node1: would drain: scontrol update 'nodename=$node1' 'state=drain' 'reason=trainbench: failed trainbench checks'" "$node1"
grep -q "dry run, nothing changed" "$work/out" || fail "drain.sh dry run does not say so"
expect_node "$node1" 0 "" "dry-run drain"
# From validate's JSON: the hosts of the failing checks (both ends of a weak link), the checks in the reason.
printf '{"runs": [{"file": "r.h5", "validate": {"checks": [%s]}}]}\n' \
  "{\"verdict\": \"fail\", \"check\": \"train.step_s.rank3\", \"host\": \"$node1\"}, {\"verdict\": \"pass\", \"check\": \"train.tokens_per_s\", \"host\": null}" \
  >"$work/validate.json"
drain_ok "$node1: would drain: .*reason=trainbench: failed train.step_s.rank3" --from-validate "$work/validate.json"
# Many failing checks: the reason is cut at a check (never mid-word) within 200 characters and counts the rest.
rows=$(for i in $(seq 10 39); do printf '{"verdict": "fail", "check": "collectives.all_reduce.busbw_GBps.r%s", "host": "%s"},' "$i" "$node1"; done)
printf '{"runs": [{"file": "r.h5", "validate": {"checks": [%s]}}]}\n' "${rows%,}" >"$work/many.json"
drain_ok "$node1: would drain: .*reason=trainbench: failed collectives.all_reduce.busbw_GBps.r10, .*r13 \(\+26 more\)'$" \
  --from-validate "$work/many.json"
reason=$(sed -n "s/.*'reason=trainbench: \(.*\)'$/\1/p" "$work/out" | head -1)
checks=$((checks + 1))
[[ ${#reason} -le 200 ]] || fail "drain reason is ${#reason} characters, want <= 200: $reason"
# A host that is no node name (both nodes here run on this host, as NodeHostname): the nodes on that host, or with
# --within only those of the list (nightly.sbatch passes its job's nodes).
printf '{"runs": [{"file": "r.h5", "validate": {"checks": [{"verdict": "fail", "check": "train.step_s.rank1", "host": "%s"}]}}]}\n' \
  "$(hostname -s)" >"$work/on-host.json"
drain_ok "$node1: would drain: .*reason=trainbench: failed train.step_s.rank1" --from-validate "$work/on-host.json"
grep -q "$node2: would drain" "$work/out" || fail "drain.sh --from-validate of a host does not name both its nodes: $(cat "$work/out")"
drain_ok "$node2: would drain" --from-validate "$work/on-host.json" --within "$node2"
! grep -q "$node1" "$work/out" || fail "drain.sh --within $node2 names $node1: $(cat "$work/out")"
drain_error "drain.sh: --within applies to --from-validate's hosts" --within "$node1" "$node1"
printf '{"runs": [{"file": "r.h5", "validate": {"checks": []}}]}\n' >"$work/clean.json"
drain_ok "no failing check names a host: nothing to drain" --from-validate "$work/clean.json"
echo '{"not": "validate"}' >"$work/other.json"
drain_error "drain.sh: --from-validate '.*other.json': not the JSON of trainbench validate --json" --from-validate "$work/other.json"
drain_ok "$node1: drained \(trainbench: slow all_reduce on slurm_test\)" --apply --reason "slow all_reduce on slurm_test" "$node1"
expect_node "$node1" 1 "trainbench: slow all_reduce on slurm_test" "drain --apply"
drain_ok "$node1: already drained by trainbench" --apply "$node1"
expect_node "$node1" 1 "trainbench: slow all_reduce on slurm_test" "drain --apply of a node it drained"
drain_ok "$node1: would resume" --resume
expect_node "$node1" 1 "trainbench: slow all_reduce on slurm_test" "dry-run resume"
scontrol update nodename="$node2" state=drain reason="maintenance by hand" || fail "cannot drain $node2 by hand"
drain_ok "$node2: left alone: already out of service" --apply "$node2"
expect_node "$node2" 1 "maintenance by hand" "drain --apply of a node drained by hand"
drain_ok "$node2: left alone: drained by someone else" --resume --apply
grep -q "$node1: resumed" "$work/out" || fail "drain.sh --resume --apply did not resume $node1: $(cat "$work/out")"
expect_node "$node1" 0 "" "resume --apply"
expect_node "$node2" 1 "maintenance by hand" "resume --apply of all nodes"
scontrol update nodename="$node1" state=drain reason="trainbench-like but not ours" || fail "cannot drain $node1 by hand"
drain_ok "$node1: left alone: drained by someone else" --resume --apply "$node1"
expect_node "$node1" 1 "trainbench-like but not ours" "resume --apply of a node drained by hand"
drain_ok "$node2: left alone" --resume --apply "$node2,$node1"
expect_node "$node2" 1 "maintenance by hand" "resume --apply of a listed node drained by hand"
scontrol update nodename="$node1" state=resume || fail "cannot resume $node1 by hand"
drain_error "drain.sh: unknown node 'nosuch'" nosuch
drain_error "drain.sh: 'tb\[node,spare\]' is not a node name or host list" 'tb[node,spare]'
drain_error "drain.sh: no node given to drain"
drain_error "drain.sh: unknown option '--force'" --force "$node1"
drain_error "drain.sh: --reason applies to draining" --resume --reason x
expect_node "$node1" 0 "" "bad drain.sh arguments"

# Teardown leaves nothing: no process of the cluster, no directory.
slurm_cluster_down "$cluster"
checks=$((checks + 1))
left=$(_slurm_cluster_marked_pids "$cluster")
[[ -z $left && ! -e $cluster ]] || fail "teardown left processes '$left' or $cluster"
finish slurm_test
