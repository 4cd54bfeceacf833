#!/usr/bin/env bash
# The projection checked against a measured run on test hosts (tests/multihost/netns_hosts.sh): 4 hosts x 2 ranks,
# every host's link shaped to RATE Mbit/s with tc, `train --scaling 1x2,2x2,4x2` in one launch (one layout per
# point, the hierarchical all-reduce across hosts), then `cost --project` fits alpha-beta on the 1-host and 2-host
# points, predicts the 4-host point and prints its error against the measured one (the held-out check). Repeated
# ROUNDS times: this VM's speed changes from moment to moment. Not a test: the error is a measurement.
#
#   tests/perf/projection_multihost.sh BUILD_DIR [RATE_MBIT] [ROUNDS]      (as root; defaults 100 and 3)
#
# The tiny model's 3.8 MB of gradients per step at RATE = 100 Mbit/s keep the step communication-bound, so that the
# 2 cores' sharing among 2 to 8 ranks (compute per rank grows with the ranks here, unlike on separate GPUs) is a
# small part of the step; the step's rest is taken as measured at the largest fitted point (cost's step model).
set -euo pipefail
build=$(realpath "$1"); rate=${2:-100}; rounds=${3:-3}
tb=$build/trainbench
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
hosts=$here/../multihost/netns_hosts.sh
work=$(mktemp -d)
set_name=perfpj
trap '"$hosts" down "$set_name"; rm -rf "$work"' EXIT
[[ -x $tb ]] || { echo "projection_multihost: no trainbench in $build" >&2; exit 2; }
"$hosts" up "$set_name" 4
for i in 0 1 2 3; do "$hosts" rate "$set_name" "node$i" "$rate"; done
chmod 755 "$work"
echo "# projection against a measured 4-host run: 4 test hosts x 2 ranks, every link at $rate Mbit/s (tbf), $(date -u +%F)"
printf '%6s %10s %10s %10s %10s %8s\n' round step_1x2 step_2x2 measured predicted error
for ((r = 1; r <= rounds; r++)); do
  TB_NETNS_SLOTS=2 "$hosts" mpirun "$set_name" -np 8 "$tb" train --model tiny --seq 32 --micro-batch 2 --steps ${TB_PERF_STEPS:-10} \
    --warmup-steps 1 --scaling 1x2,2x2,4x2 --quiet -o "$work/run$r.h5" >/dev/null
  "$tb" cost "$work/run$r.h5" --project 16 --format json >"$work/cost$r.json"
  /usr/bin/python3 - "$work/run$r.h5" "$work/cost$r.json" "$r" <<'EOF'
import json, sys, h5py
run, cost, r = sys.argv[1], sys.argv[2], sys.argv[3]
f = h5py.File(run, "r")
steps = [f["train/k%d" % k].attrs["step_s"] for k in (2, 4)]
held = json.load(open(cost))["runs"][0]["cost"]["run"]
if held.get("held_out_relative_error") is None:
    sys.exit("no held-out check in cost's output")
print("%6s %10.4f %10.4f %10.4f %10.4f %7.1f%%" % (r, steps[0], steps[1], held["held_out_measured_step_s"],
                                                   held["held_out_predicted_step_s"],
                                                   100 * held["held_out_relative_error"]))
EOF
done
