#!/usr/bin/env bash
# GPU health and energy end to end without a GPU: collectives and train on the CPU backend load a fake
# libnvidia-ml.so.1 (tests/fake_nvml, through LD_LIBRARY_PATH) whose GPUs a text file describes. The report's
# gpu_health table holds what the fake said; validate fails on uncorrected ECC and a power brake and warns on a
# downtrained link, naming host and GPU in its text, JUnit and Prometheus outputs; train's points carry their
# energy; cost prices it where the price file gives usd_per_kwh. An older driver (entry points missing) gives NaN,
# never 0; without NVML, and with an NVML that fails to start, the group says why.
#   gpu_health_cli_test.sh TRAINBENCH FAKE_NVML_DIR FAKE_NVML_OLD_DIR MPIEXEC...
set -uo pipefail
tb=$(realpath "$1"); fake=$(realpath "$2"); fake_old=$(realpath "$3"); shift 3; mpi=("$@")
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
work=$(mktemp -d); trap 'rm -rf "$work"' EXIT
source "$here/cli_lib.sh"
cd "$work"
host=$(hostname)

# GPU 0: two uncorrected ECC errors, a PCIe gen 3 link of a gen 5 slot, the power brake; energy grows at 350 W.
# GPU 1: healthy, at its power cap.
cat >trouble.txt <<'EOF'
device
name NVIDIA H100 80GB HBM3
uuid GPU-00000000-0000-0000-0000-000000000000
pci_bus_id 00000000:1B:00.0
ecc_corrected 0
ecc_uncorrected 2
retired_pages_single_bit 0
retired_pages_double_bit 0
retired_pages_pending 0
remapped_rows 0 0 0 0
pcie_gen 3
pcie_gen_max 5
pcie_width 16
pcie_width_max 16
sm_clock_MHz 1755
sm_clock_max_MHz 1980
clock_event_reasons 128
power_mW 350000
power_limit_mW 700000
temperature_C 65
energy_mJ 5000000
energy_mJ_per_s 350000
device
name NVIDIA H100 80GB HBM3
uuid GPU-11111111-1111-1111-1111-111111111111
pci_bus_id 00000000:2B:00.0
ecc_corrected 0
ecc_uncorrected 0
retired_pages_single_bit 0
retired_pages_double_bit 0
retired_pages_pending 0
remapped_rows 0 0 0 0
pcie_gen 5
pcie_gen_max 5
pcie_width 16
pcie_width_max 16
sm_clock_MHz 1980
sm_clock_max_MHz 1980
clock_event_reasons 4
power_mW 700000
power_limit_mW 700000
temperature_C 70
energy_mJ 9000000
energy_mJ_per_s 700000
EOF
# One GPU whose only trouble is a downtrained link (x8 of x16); and one whose power reading fails.
head -22 trouble.txt | sed 's/^ecc_uncorrected 2/ecc_uncorrected 0/; s/^pcie_gen 3/pcie_gen 5/;
  s/^pcie_width 16/pcie_width 8/; s/^clock_event_reasons 128/clock_event_reasons 4/' >downtrained.txt
{ head -22 trouble.txt; echo "fail nvmlDeviceGetPowerUsage 15"; } >lost.txt
printf 'init_error 9\n' >no_driver.txt

# fake DIR FILE: `with` becomes the prefix that runs a command against the fake library in DIR describing FILE.
fake() { with=(env "LD_LIBRARY_PATH=$1${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" "TRAINBENCH_FAKE_NVML=$work/$2"); }
# py SCRIPT ARGS...: Debian's python with h5py; a failed assertion fails the check, naming what it saw.
py() {
  checks=$((checks + 1))
  /usr/bin/python3 - "$@" >"$work/py" 2>&1 || fail "$(tail -3 "$work/py")"
}

collectives=(collectives -b 8 -e 1K -n 2 -w 1 --quiet)
train=(train --model tiny --seq 32 --micro-batch 2 --warmup-steps 1 --steps 3 --quiet)

# ---- the report's gpu_health table -------------------------------------------------------------------------
fake "$fake" trouble.txt; expect_ok "${with[@]}" "${mpi[@]}" -n 2 "$tb" "${collectives[@]}" -o trouble.h5
py trouble.h5 "$host" <<'EOF'
import math, sys, h5py
path, host = sys.argv[1:]
with h5py.File(path) as f:
    g = f["gpu_health"]
    assert g.attrs["source"] == "NVML (libnvidia-ml.so.1)", g.attrs["source"]
    assert g.attrs["samples"] >= 2 and g.attrs["interval_s"] == 1, dict(g.attrs)
    d = g["devices"][:]
    assert len(d) == 2, len(d)
    gpu0, gpu1 = d[0], d[1]
    assert gpu0["host"].decode() == host and gpu0["node"] == 0 and gpu0["index"] == 0, gpu0
    assert gpu0["pci_bus_id"] == b"00000000:1B:00.0" and gpu0["name"] == b"NVIDIA H100 80GB HBM3", gpu0
    assert gpu0["ranks"] == b"", gpu0["ranks"]  # the CPU backend binds no GPU
    assert gpu0["ecc_uncorrected_volatile"] == 2 and gpu0["ecc_corrected_volatile"] == 0, gpu0
    assert gpu0["pcie_gen_current"] == 3 and gpu0["pcie_gen_max"] == 5, gpu0
    assert gpu0["pcie_width_current"] == 16 and gpu0["pcie_width_max"] == 16, gpu0
    assert gpu0["clock_event_reasons"] == b"hw_power_brake_slowdown", gpu0["clock_event_reasons"]
    assert gpu0["sm_clock_median_MHz"] == 1755 and gpu0["sm_clock_max_supported_MHz"] == 1980, gpu0
    assert gpu0["power_mean_W"] == 350 and gpu0["power_limit_W"] == 700 and gpu0["temperature_max_C"] == 65, gpu0
    assert gpu0["samples"] == g.attrs["samples"] and gpu0["busy_samples"] == gpu0["samples"], gpu0
    assert gpu0["remap_pending"] == 0 and gpu0["retired_pages"] == 0, gpu0
    assert math.isfinite(gpu0["energy_J"]) and gpu0["energy_J"] > 0, gpu0["energy_J"]  # the counter grew
    assert gpu0["nvml_errors"] == b"", gpu0["nvml_errors"]
    assert gpu1["clock_event_reasons"] == b"sw_power_cap" and gpu1["ecc_uncorrected_volatile"] == 0, gpu1
EOF

# ---- validate: fails on ECC and the power brake, warns on the link, names host and GPU -----------------------
checks=$((checks + 1))
"$tb" validate trouble.h5 --junit trouble.xml --prometheus trouble.prom --json trouble.json >"$work/out" 2>"$work/err"
rc=$?
[[ $rc -eq 3 ]] || fail "validate on uncorrected ECC: exit $rc, want 3: $(cat "$work/err")"
line=$(with_notes "$work/out" | grep -E "^ +fail +[a-z]+ +gpu_health +gpu_health\.$host\.gpu0 ")
[[ -n $line ]] || fail "no failing gpu_health check for GPU 0: $(grep gpu_health "$work/out")"
for want in "$host GPU 0 NVIDIA H100 80GB HBM3 (00000000:1B:00.0)" "2 uncorrected ECC errors" \
    "clock event hw_power_brake_slowdown" "PCIe gen 3 of 5 while busy (downtrained)"; do
  [[ $line == *"$want"* ]] || fail "GPU 0's check does not say '$want': $line"
done
grep -qE "^ +pass +[a-z]+ +gpu_health +gpu_health\.$host\.gpu1 " "$work/out" || fail "the healthy GPU 1 does not pass"
py trouble.xml trouble.prom trouble.json "$host" <<'EOF'
import json, sys
from junitparser import JUnitXml, Failure
from prometheus_client.parser import text_string_to_metric_families
xml, prom, js, host = sys.argv[1:]
key = f"gpu_health.{host}.gpu0"
suites = {suite.name: suite for suite in JUnitXml.fromfile(xml)}
cases = {case.name: case for case in suites["gpu_health"]}
assert any(isinstance(r, Failure) for r in cases[key].result), cases[key]
assert cases[key].classname == host, cases[key].classname
status = {}
for family in text_string_to_metric_families(open(prom).read()):
    for s in family.samples:
        if s.name == "trainbench_check_status" and s.labels["family"] == "gpu_health":
            status[s.labels["check"]] = (s.value, s.labels["host"], s.labels["gpu"])
assert status[key] == (2, host, "GPU 0 NVIDIA H100 80GB HBM3 (00000000:1B:00.0)"), status
assert status[f"gpu_health.{host}.gpu1"][0] == 0, status
rows = {r["check"]: r for r in json.load(open(js))["runs"][0]["validate"]["checks"]}
assert rows[key]["verdict"] == "fail" and rows[key]["host"] == host, rows[key]
EOF

# A downtrained link alone warns (exit 0, the run's verdict warn).
fake "$fake" downtrained.txt; expect_ok "${with[@]}" "$tb" "${collectives[@]}" -o downtrained.h5
expect_ok "$tb" validate downtrained.h5
with_notes "$work/out" | grep -cE >/dev/null "^ +warn +[a-z]+ +gpu_health +gpu_health\.$host\.gpu0 .*PCIe x8 of x16 while busy \(downtrained\)" ||
  fail "a downtrained link does not warn: $(grep gpu_health "$work/out")"

# A query that fails (GPU is lost) is recorded and warns; its figure is NaN.
fake "$fake" lost.txt; expect_ok "${with[@]}" "$tb" "${collectives[@]}" -o lost.h5
py lost.h5 <<'EOF'
import math, sys, h5py
d = h5py.File(sys.argv[1])["gpu_health/devices"][0]
assert d["nvml_errors"] == b"nvmlDeviceGetPowerUsage: GPU is lost", d["nvml_errors"]
assert math.isnan(d["power_mean_W"]) and math.isnan(d["power_max_W"]), d
EOF
checks=$((checks + 1))
"$tb" validate lost.h5 >"$work/out" 2>&1
with_notes "$work/out" | grep -c >/dev/null "NVML errors: nvmlDeviceGetPowerUsage: GPU is lost" || fail "validate does not name the NVML error"

# ---- train: energy per point, and cost's energy ------------------------------------------------------------
fake "$fake" trouble.txt; expect_ok "${with[@]}" "${mpi[@]}" -n 2 "$tb" "${train[@]}" --scaling 1,2 -o train.h5
py train.h5 <<'EOF'
import math, sys, h5py
with h5py.File(sys.argv[1]) as f:
    for point in ("k1", "k2"):
        a = f["train"][point].attrs
        e, steps, tokens = a["energy_J"], a["measured_steps"], a["tokens_per_step"]
        assert math.isfinite(e) and e > 0, (point, e)
        assert math.isclose(a["energy_per_step_J"], e / steps, rel_tol=1e-12), (point, dict(a))
        assert math.isclose(a["joules_per_token"], e / (steps * tokens), rel_tol=1e-12), (point, dict(a))
EOF
expect_ok "$tb" "${train[@]}" -o no_energy.h5  # no NVML here (or a real one: then energy may exist)
cp "$here/../launch/prices.example.toml" prices.toml
sed -i 's/^name = "lambda-8x-h100-sxm"$/name = "lambda-8x-h100-sxm"\nusd_per_kwh = 0.25/' prices.toml
grep -q '^usd_per_kwh = 0.25' prices.toml || fail "could not add usd_per_kwh to the example price file"
cost=(cost --prices prices.toml --train-tokens 1e9 --device-as "H100 SXM")
expect_ok "$tb" "${cost[@]}" train.h5
grep -qE '^#   energy: measured [0-9.e+-]+ J/token at k=2 \(the driver.s energy counter' "$work/out" ||
  fail "cost does not say the energy is measured: $(grep energy "$work/out")"
expect_ok "$tb" "${cost[@]}" train.h5 --format json
cp "$work/out" energy.json
py energy.json train.h5 <<'EOF'
import json, math, sys, h5py
cost, report = sys.argv[1:]
jpt = h5py.File(report)["train/k2"].attrs["joules_per_token"]
rows = {r["offering"]: r for run in json.load(open(cost))["runs"] for r in run["cost"].get("rows", [])}
priced, unpriced = rows["lambda-8x-h100-sxm"], rows["aws-p5.48xlarge"]
assert math.isclose(priced["energy_usd"], priced["energy_kwh"] * 0.25, rel_tol=1e-12), priced
parts = sum(priced[k] for k in ("gpu_usd", "storage_usd", "transfer_usd", "retry_usd"))
assert math.isclose(priced["total_usd"], parts + priced["energy_usd"], rel_tol=1e-12), priced
assert unpriced["energy_usd"] is None and unpriced["energy_kwh"] is not None, unpriced
assert math.isclose(unpriced["total_usd"], sum(unpriced[k] for k in ("gpu_usd", "storage_usd", "transfer_usd",
                                                                     "retry_usd")), rel_tol=1e-12), unpriced
# Measured at the priced point: energy per token within the stall-free throughput's difference of the report's.
assert 0 < priced["energy_J_per_token"] <= jpt * 1.000001, (priced["energy_J_per_token"], jpt)
EOF
# Bad energy prices: one line naming the file, line and key, exit 2.
sed 's/^usd_per_kwh = 0.25/usd_per_kwh = -0.25/' prices.toml >negative.toml
expect_error 2 "negative.toml:[0-9]+: offering 'lambda-8x-h100-sxm': usd_per_kwh must be >= 0" -- \
  "$tb" cost train.h5 --prices negative.toml --train-tokens 1e9 --device-as "H100 SXM"
sed 's/^usd_per_kwh = 0.25/usd_per_kwh = "cheap"/' prices.toml >text.toml
expect_error 2 "text.toml:[0-9]+: offering 'lambda-8x-h100-sxm': usd_per_kwh must be a number" -- \
  "$tb" cost train.h5 --prices text.toml --train-tokens 1e9 --device-as "H100 SXM"

# report shows the GPUs and the energy per point.
expect_ok "$tb" report train.h5 --sections gpu_health
grep -q '^# gpu_health.devices: GPU health per GPU' "$work/out" || fail "report shows no gpu_health.devices table"
grep -q '^# gpu_health.energy: energy per training point' "$work/out" || fail "report shows no energy per point"

# ---- an older driver: the fallback query, and NaN where entry points are missing ---------------------------
fake "$fake_old" trouble.txt; expect_ok "${with[@]}" "${mpi[@]}" -n 2 "$tb" "${train[@]}" -o old.h5
py old.h5 <<'EOF'
import math, sys, h5py
with h5py.File(sys.argv[1]) as f:
    d = f["gpu_health/devices"][0]
    assert d["clock_event_reasons"] == b"hw_power_brake_slowdown", d  # through ...ThrottleReasons
    for column in ("energy_J", "remap_pending", "remap_failure", "remapped_rows_corrected"):
        assert math.isnan(d[column]), (column, d[column])  # not in this driver: NaN, not 0
    a = f["train/k2"].attrs
    assert math.isnan(a["energy_J"]) and math.isnan(a["joules_per_token"]), dict(a)
EOF

# ---- NVML that fails to start, and none at all -------------------------------------------------------------
fake "$fake" no_driver.txt; expect_ok "${with[@]}" "$tb" "${collectives[@]}" -o no_driver.h5
py no_driver.h5 <<'EOF'
import sys, h5py
g = h5py.File(sys.argv[1])["gpu_health"]
assert g.attrs["source"] == "NVML not available: nvmlInit_v2 failed: Driver Not Loaded", g.attrs["source"]
assert len(g["devices"]) == 0 and g.attrs["samples"] == 0, (len(g["devices"]), g.attrs["samples"])
EOF
if /usr/bin/python3 -c 'import ctypes; ctypes.CDLL("libnvidia-ml.so.1")' 2>/dev/null; then
  echo "SKIP: a real libnvidia-ml.so.1 is installed here: the run without NVML is not possible"
else
  expect_ok "$tb" "${collectives[@]}" -o none.h5
  py none.h5 <<'EOF'
import sys, h5py
g = h5py.File(sys.argv[1])["gpu_health"]
source = g.attrs["source"]
assert source.startswith("NVML not available: ") and "libnvidia-ml.so.1" in source, source
assert len(g["devices"]) == 0, len(g["devices"])
EOF
  # A CPU run without GPU health data has nothing to judge: no gpu_health check at all.
  checks=$((checks + 1))
  "$tb" validate none.h5 >"$work/out" 2>&1
  ! grep -q gpu_health "$work/out" || fail "a CPU run without NVML got gpu_health checks: $(grep gpu_health "$work/out")"
  expect_ok "$tb" "${cost[@]}" no_energy.h5
  grep -q '^#   energy: not measured (the report has no joules_per_token' "$work/out" ||
    fail "cost does not say the energy is not measured: $(grep energy "$work/out")"
fi

finish gpu_health_cli_tests
