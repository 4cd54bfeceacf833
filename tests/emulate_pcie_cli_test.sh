#!/usr/bin/env bash
# --emulate-pcie (collectives, p2p, train) on a build or launch without the NCCL backend: one line, exit 2, before any
# work and with no report, alone and under mpiexec, whatever NCCL variables are set; every command's --help has it; a
# run without it records emulated_fabric and emulated_fabric_environment empty (h5py) and no label; `report` of a run
# marked emulated says so under the run and in config.run. The NCCL side (the environment reaching NCCL, its transport)
# needs GPUs: tests/perf/gpu_check.sh, part emulate.
#   emulate_pcie_cli_test.sh TRAINBENCH MPIEXEC...
set -uo pipefail
tb=$(realpath "$1"); shift; mpi=("$@")
work=$(mktemp -d); trap 'rm -rf "$work"' EXIT
source "$(dirname "${BASH_SOURCE[0]}")/cli_lib.sh"
cd "$work"

refusal="^trainbench: error: --emulate-pcie needs the NCCL backend \(a GPU build on GPUs\)$"
collectives=(collectives -b 8 -e 8 -n 2 -w 1)
p2p=(p2p --size 4K -n 2 --latency-iters 2)
train=(train --model tiny --seq 32 --micro-batch 2 --warmup-steps 1 --steps 1)

# --- refused without the NCCL backend: one line, exit 2, nothing written ------------------------------------------
for command in collectives p2p train; do
  case $command in collectives) args=("${collectives[@]}") ;; p2p) args=("${p2p[@]}") ;; train) args=("${train[@]}") ;; esac
  expect_error 2 "$refusal" -- "$tb" "${args[@]}" --emulate-pcie -o refused.h5
  expect_error 2 "$refusal" -- "${mpi[@]}" -n 2 "$tb" "${args[@]}" --emulate-pcie -o refused.h5
  expect_error 2 "$refusal" -- "$tb" "${args[@]}" --backend cpu --emulate-pcie -o refused.h5
  checks=$((checks + 1))
  "$tb" "$command" --help | tr -s ' \n' ' ' | grep -c >/dev/null -- "--emulate-pcie measure a PCIe node on an NVLink one: .*NCCL backend only" ||
    fail "$command --help lacks --emulate-pcie"
done
# A conflicting NCCL variable does not change what is wrong first: the backend.
expect_error 2 "$refusal" -- env NCCL_P2P_DISABLE=0 "$tb" "${collectives[@]}" --emulate-pcie -o refused.h5
checks=$((checks + 1))
[[ -z $(ls -A "$work" | grep -v -e '^out$' -e '^err$') ]] || fail "a refused --emulate-pcie left files: $(ls -A "$work")"
# suite and info do not take it.
expect_error 2 "unrecognised option '--emulate-pcie'" -- "$tb" info --emulate-pcie
expect_error 2 "unrecognised option '--emulate-pcie'" -- "$tb" suite --emulate-pcie -o refused.h5

# --- a run of the node's own fabric: the attributes empty, no label ------------------------------------------------
expect_ok "${mpi[@]}" -n 2 "$tb" "${collectives[@]}" -o own.h5
checks=$((checks + 1))
! grep -q "intra-node fabric" "$work/out" || fail "a run without --emulate-pcie has a fabric label: $(cat "$work/out")"
checks=$((checks + 1))
/usr/bin/python3 - own.h5 >"$work/py" 2>&1 <<'PY' || fail "own.h5: $(cat "$work/py")"
import sys, h5py
with h5py.File(sys.argv[1], "r") as f:
    def text(group, name):
        value = f[group].attrs[name]
        return value.decode() if isinstance(value, bytes) else value
    assert text("/", "emulated_fabric") == "", text("/", "emulated_fabric")
    assert text("/", "emulated_fabric_environment") == "", text("/", "emulated_fabric_environment")
    assert f["/config"].attrs["emulate_pcie"] == 0, f["/config"].attrs["emulate_pcie"]
PY
expect_ok "$tb" report own.h5
checks=$((checks + 1))
! grep -q "emulated on" "$work/out" || fail "report of a run without emulation says it emulated: $(cat "$work/out")"

# --- report of a run marked emulated (as a GPU run writes it): the label under the run, the fields in config.run ----
cp own.h5 marked.h5
checks=$((checks + 1))
/usr/bin/python3 - marked.h5 >"$work/py" 2>&1 <<'PY' || fail "cannot mark marked.h5: $(cat "$work/py")"
import sys, h5py
with h5py.File(sys.argv[1], "r+") as f:
    f.attrs["emulated_fabric"] = "pcie"
    f.attrs["emulated_fabric_environment"] = "NCCL_P2P_DISABLE=1, NCCL_NVLS_ENABLE=0"
PY
expect_ok "$tb" report marked.h5
expect_out "^#     intra-node fabric: PCIe emulated on no GPU pair \(one GPU per node\) \(NCCL_P2P_DISABLE=1, NCCL_NVLS_ENABLE=0\)$"
expect_ok "$tb" report marked.h5 --format json --sections config
checks=$((checks + 1))
/usr/bin/python3 -c '
import json, sys
row = json.load(open(sys.argv[1]))["runs"][0]["config"]["run"]
assert row["emulated_fabric"] == "pcie", row
assert row["emulated_fabric_environment"] == "NCCL_P2P_DISABLE=1, NCCL_NVLS_ENABLE=0", row
' "$work/out" >"$work/py" 2>&1 || fail "report --format json: $(cat "$work/py")"
# Side by side with the run of its own fabric: the interconnect differs, as a comparison is about.
expect_ok "$tb" report own.h5 marked.h5 --sections config
expect_out "^ interconnect +none recorded +\(below\) yes: compared$"
expect_out "^# interconnect, run 2: PCIe emulated on no GPU pair \(one GPU per node\)$"

finish emulate_pcie_cli_test
