#!/usr/bin/env bash
# collectives --ops moe_alltoall on the MPI backend at 2 and 4 ranks: verified dispatch and combine (0 wrong), and the
# report's moe_alltoall group read with h5py against a routing recomputed here in Python from its definition
# (splitmix64 draws, Floyd's sampling of top-k experts, each token once per rank holding one: collectives/README.md):
# bytes per rank, the busiest sender and receiver, the share that stays local, and GB/s = bytes per rank / time;
# `report` shows its rows. Every bad input is one line and exit 2 before any work.
#   moe_alltoall_cli_test.sh TRAINBENCH MPIEXEC...
set -uo pipefail
tb=$(realpath "$1"); shift; mpi=("$@")
work=$(mktemp -d); trap 'rm -rf "$work"' EXIT
source "$(dirname "${BASH_SOURCE[0]}")/cli_lib.sh"
cd "$work"

moe=(collectives --ops moe_alltoall -n 3 -w 1)

# check_report FILE RANKS TOKENS HIDDEN TOP_K EXPERTS SEED: the report's group against the routing recomputed here.
check_report() {
  checks=$((checks + 1))
  /usr/bin/python3 - "$@" <<'PY' || fail "$1: the moe_alltoall group does not match the routing (see above)"
import math, sys, h5py
path, ranks, tokens_list, hidden, top_k, experts, seed = sys.argv[1:8]
ranks, hidden, top_k, experts, seed = int(ranks), int(hidden), int(top_k), int(experts), int(seed)
tokens_list = [int(t) for t in tokens_list.split(",")]
M, INC = (1 << 64) - 1, 0x9E3779B97F4A7C15

def mix(x):
    x = (x + INC) & M
    x = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) & M
    x = ((x ^ (x >> 27)) * 0x94D049BB133111EB) & M
    return x ^ (x >> 31)

def destinations(rank, token):
    state = mix(seed) ^ mix(((rank << 40) ^ token) & M)
    chosen = []
    for j in range(experts - top_k, experts):
        draw = mix(state) % (j + 1)
        state = (state + INC) & M
        chosen.append(j if draw in chosen else draw)
    return sorted({e // (experts // ranks) for e in chosen})

problems = []
with h5py.File(path, "r") as f:
    g = f["moe_alltoall"]
    fixed = (("n_ranks", ranks), ("nodes", 1), ("hidden", hidden), ("top_k", top_k), ("experts", experts), ("seed", seed))
    for name, want in fixed:
        if int(g.attrs[name]) != want:
            problems.append(f"{name} {g.attrs[name]} != {want}")
    dtype = g.attrs["dtype"]
    if (dtype.decode() if isinstance(dtype, bytes) else dtype) != "bfloat16":
        problems.append(f"dtype {dtype}")
    t = g["results"]
    if list(t["tokens"]) != tokens_list:
        problems.append(f"tokens {list(t['tokens'])} != {tokens_list}")
    for i, tokens in enumerate(tokens_list):
        rows = [[0] * ranks for _ in range(ranks)]
        for r in range(ranks):
            for token in range(tokens):
                for d in destinations(r, token):
                    rows[r][d] += 1
        row_bytes = hidden * 2
        sent = [sum(rows[r]) * row_bytes for r in range(ranks)]
        received = [sum(rows[s][r] for s in range(ranks)) * row_bytes for r in range(ranks)]
        want = {"bytes_per_rank": sum(sent) / ranks, "max_sent_bytes": max(sent), "max_received_bytes": max(received),
                "local_fraction": sum(rows[r][r] for r in range(ranks)) / (sum(sent) / row_bytes)}
        want["inter_node_fraction"] = 0.0  # one host
        for name, value in want.items():
            if abs(float(t[name][i]) - value) > 1e-9 * max(1.0, abs(value)):
                problems.append(f"{tokens} tokens: {name} {t[name][i]} != {value}")
        for phase in ("dispatch", "combine"):
            time_us, rate = float(t[f"{phase}_time_us"][i]), float(t[f"{phase}_GBps"][i])
            if not time_us > 0 or abs(rate - want["bytes_per_rank"] / (time_us * 1e-6) / 1e9) > 1e-9 * rate:
                problems.append(f"{tokens} tokens: {phase} {rate} GB/s at {time_us} us")
            if not math.isnan(float(t[f"{phase}_inter_node_GBps"][i])):
                problems.append(f"{tokens} tokens: {phase} inter-node rate on one node")
            if int(t[f"{phase}_wrong"][i]) != 0:
                problems.append(f"{tokens} tokens: {phase} wrong {t[f'{phase}_wrong'][i]}")
            if not float(t[f"{phase}_time_rank_min_us"][i]) <= float(t[f"{phase}_time_rank_avg_us"][i]) <= time_us:
                problems.append(f"{tokens} tokens: {phase} min <= avg <= max broken")
for p in problems:
    print(p)
sys.exit(1 if problems else 0)
PY
}

# --- 2 ranks: DeepEP's default experts (256), top-4, two points; 4 ranks: every token on every rank, and uneven ------
expect_ok "${mpi[@]}" -n 2 "$tb" "${moe[@]}" --moe-tokens 64,200 --moe-hidden 96 --moe-top-k 4 -o moe2.h5
expect_out "^# moe_alltoall: 2 ranks, 256 experts \(128 per rank\), top-4 per token, hidden 96, bfloat16"
expect_out "# Out of bounds values : 0 OK"
checks=$((checks + 1))
[[ $(grep -cE '^ +[0-9]+ ' "$work/out") -eq 2 ]] || fail "want 2 rows (2 points): $(cat "$work/out")"
check_report moe2.h5 2 64,200 96 4 256 1
# `report` shows the points beside the sweep's tables: a row per tokens value, the figures as the group holds them.
expect_ok "$tb" report moe2.h5 --sections collectives --format csv
expect_out "^run,ranks,nodes,hidden,top_k,experts,tokens,bytes_per_rank,local_fraction,inter_node_fraction,dispatch_time_us"
expect_out "^moe2.h5,2,1,96,4,256,200,"

# 8 experts, top-8 of them: every token goes to every rank once, a quarter of the rows stay local.
expect_ok "${mpi[@]}" -n 4 "$tb" "${moe[@]}" --moe-tokens 32 --moe-hidden 40 --moe-top-k 8 --moe-experts 8 -o moe4.h5
check_report moe4.h5 4 32 40 8 8 1
checks=$((checks + 1))
/usr/bin/python3 -c '
import sys, h5py
t = h5py.File("moe4.h5", "r")["moe_alltoall/results"]
sys.exit(0 if t["local_fraction"][0] == 0.25 and t["bytes_per_rank"][0] == 32 * 40 * 2 * 4 else 1)' ||
  fail "top-8 of 8 experts on 4 ranks: want local 0.25 and every token to every rank"

# Uneven counts, some ranks receiving little, another seed; with the sweep's ops in the same run.
expect_ok "${mpi[@]}" -n 4 "$tb" collectives --ops all_reduce,moe_alltoall -b 1K -e 1K -n 2 -w 1 --moe-tokens 5 \
  --moe-hidden 33 --moe-top-k 1 --moe-experts 4 --moe-seed 7 -o mixed.h5
expect_out "# Out of bounds values : 0 OK"
check_report mixed.h5 4 5 33 1 4 7
checks=$((checks + 1))
/usr/bin/python3 -c 'import h5py; f = h5py.File("mixed.h5"); f["collectives/all_reduce/results"]; f["moe_alltoall"]' ||
  fail "a run of all_reduce and moe_alltoall lacks one of their groups"

# --- bad input: one line, exit 2, before any work ------------------------------------------------------------------
expect_error 2 "--moe-tokens '0': out of range" -- "$tb" "${moe[@]}" --moe-tokens 0
expect_error 2 "--moe-tokens 'x'" -- "$tb" "${moe[@]}" --moe-tokens 64,x
expect_error 2 "--moe-top-k 9 is more than the 8 experts" -- "$tb" "${moe[@]}" --moe-top-k 9 --moe-experts 8
expect_error 2 "--moe-experts 6 does not divide over the 4 ranks" -- "${mpi[@]}" -n 4 "$tb" "${moe[@]}" --moe-experts 6 \
  --moe-top-k 2
expect_error 2 "--moe-hidden '0': out of range" -- "$tb" "${moe[@]}" --moe-hidden 0
expect_error 2 "--moe-tokens goes with --ops moe_alltoall" -- "$tb" collectives --moe-tokens 64
expect_error 2 "--ops moe_alltoall runs on every rank at once: it cannot go with --split intra" -- \
  "${mpi[@]}" -n 2 "$tb" "${moe[@]}" --split intra
expect_error 2 "beyond MPI_Alltoallv's int counts" -- "${mpi[@]}" -n 2 "$tb" "${moe[@]}" --moe-tokens 300000 \
  --moe-hidden 8192
expect_error 2 "unknown operation 'moe' for --ops \(accepted: .*moe_alltoall, all\)" -- "$tb" collectives --ops moe
checks=$((checks + 1))
# Into a file first: grep -q ends a pipe early, and pipefail would count trainbench's SIGPIPE as a failure.
"$tb" collectives --help >"$work/help"
grep -q -- "--moe-tokens" "$work/help" || fail "collectives --help lacks --moe-tokens"

finish moe_alltoall_cli_test
