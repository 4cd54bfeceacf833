#!/usr/bin/env bash
# Ranks that must share CPUs, end to end: 2 ranks bound to one CPU (mpirun --cpu-set 0 --bind-to core) print the
# placement warning in every command's header, record each rank's CPU affinity and the warning in the report (read
# with h5py) and get validate's environment.placement warn; 2 ranks with a CPU each (--bind-to core) and 2 unbound
# ranks on two CPUs get none of it and a pass; 3 unbound ranks on two CPUs share them; a report from before the
# affinities is unknown. Needs 2 CPUs.
#   placement_cli_test.sh TRAINBENCH MPIEXEC...
set -uo pipefail
tb=$(realpath "$1"); shift; mpi=("$@")
old_reports=$(cd "$(dirname "${BASH_SOURCE[0]}")/data/reports-v1" && pwd)
work=$(mktemp -d); trap 'rm -rf "$work"' EXIT
source "$(dirname "${BASH_SOURCE[0]}")/cli_lib.sh"
cd "$work"

[[ $(nproc) -ge 2 ]] || { echo "FAIL: placement_cli_test needs 2 CPUs, this process may use $(nproc)"; exit 1; }
host=$("${mpi[@]}" -n 1 hostname) || { echo "FAIL: cannot run hostname under ${mpi[*]}"; exit 1; }
warning_re="^# warning: ranks 0,1 on $host share CPUs 0: figures measure the placement, not the cluster \(.*--cpu-bind=cores"
small=(-b 8 -e 8 -n 5 -w 1)

# report_has FILE AFFINITY... WARNING_PREFIX: topology/ranks' cpu_affinity is AFFINITY per rank and topology's
# placement_warning starts with WARNING_PREFIX ("" means it is empty), as h5py reads them.
report_has() {
  checks=$((checks + 1))
  /usr/bin/python3 - "$@" >"$work/py" 2>&1 <<'PY' || fail "$1: $(cat "$work/py")"
import sys, h5py
path, *affinity, warning = sys.argv[1:]
with h5py.File(path, "r") as f:
    ranks = f["topology/ranks"][()]
    got = [value.decode() for value in ranks["cpu_affinity"]]
    assert got == affinity, f"cpu_affinity {got}, want {affinity}"
    text = f["topology"].attrs["placement_warning"]
    text = text.decode() if isinstance(text, bytes) else text
    assert (text.startswith(warning) and warning) or (text == "" and not warning), f"placement_warning {text!r}"
PY
}

# Both ranks bound to CPU 0: the warning heads collectives' output and info's, the report has it, validate warns.
bound_to_0=("${mpi[@]}" -n 2 --cpu-set 0 --bind-to core)
expect_ok "${bound_to_0[@]}" "$tb" collectives "${small[@]}" -o shared.h5
expect_out "$warning_re"
head -1 "$work/out" | grep -cE >/dev/null "$warning_re" || fail "the warning is not the header's first line: $(head -3 "$work/out")"
report_has shared.h5 0 0 "ranks 0,1 on $host share CPUs 0: figures measure the placement, not the cluster ("
expect_ok "$tb" validate shared.h5
expect_out "^ +warn +[a-z]+ +environment +environment.placement +0,1 +$host .* 2 +0 +ranks( |$)"
expect_out "ranks 0,1 on $host share CPUs 0: figures measure the placement, not the cluster"
expect_ok "$tb" report shared.h5 --sections topology
expect_out "^ cpu_affinity +ranks 0,1: 0$"
expect_ok "${bound_to_0[@]}" "$tb" info
expect_out "$warning_re"

# A CPU each: no warning, the affinities recorded, validate passes the check.
expect_ok "${mpi[@]}" -n 2 --bind-to core "$tb" collectives "${small[@]}" -o own.h5
checks=$((checks + 1))
! grep -q "^# warning: ranks" "$work/out" || fail "ranks with a CPU each warned: $(grep '^# warning' "$work/out")"
report_has own.h5 0 1 ""
expect_ok "$tb" validate own.h5
expect_out "^ +pass +ok +environment +environment.placement .* 0 +0 +ranks( |$)"
# Unbound on two CPUs: each can have one; three unbound ranks cannot.
expect_ok taskset -c 0,1 "${mpi[@]}" -n 2 --bind-to none "$tb" collectives "${small[@]}" -o unbound.h5
checks=$((checks + 1))
! grep -q "^# warning: ranks" "$work/out" || fail "2 unbound ranks on 2 CPUs warned: $(grep '^# warning' "$work/out")"
report_has unbound.h5 0-1 0-1 ""
expect_ok taskset -c 0,1 "${mpi[@]}" -n 3 --bind-to none "$tb" collectives "${small[@]}" -o three.h5
expect_out "^# warning: ranks 0-2 on $host share CPUs 0-1: figures measure the placement"
report_has three.h5 0-1 0-1 0-1 "ranks 0-2 on $host share CPUs 0-1: "

# A report from before the affinities (tests/data/reports-v1): unknown, never a pass.
expect_ok "$tb" validate "$old_reports/collectives.h5"
expect_out "^ +unknown +[a-z]+ +environment +environment.placement "
finish placement_cli_test
