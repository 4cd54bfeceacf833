#!/usr/bin/python3
"""Plots of trainbench reports in one self-contained HTML page.

    /usr/bin/python3 results/analysis/plots.py --out page.html [--cost cost.json | --export report.json] \
        report1.h5 [report2.h5 ...]

Runs under Debian's /usr/bin/python3, which is where python3-h5py and python3-matplotlib install (a pyenv or
virtualenv python3 on PATH usually lacks them). Reads the reports with h5py only (schema v1, results/README.md),
draws with matplotlib's Agg backend and writes one HTML file whose images are inline PNG data: URIs, with no
scripts, styles or fonts to fetch, so it opens offline. Plots, each only where the reports hold its data: busbw
against message size per collective, scaling efficiency against GPU count, the stall budget per rank, the p2p
unidirectional bandwidth matrix, and the cost per configuration from `trainbench cost --format json`. Above them,
when the JSON export (of `cost`, or of `report` through --export) compares several runs: the table of what the
runs held fixed, the differences that make them not comparable marked and warned about.

Exit codes: 0 written; 2 bad input (an unreadable report or cost file, an unwritable output; one line on stderr);
3 h5py or matplotlib missing.
"""
from __future__ import annotations

import argparse
import base64
import datetime
import html
import io
import json
import math
import os
import sys
import tempfile
from dataclasses import dataclass, field
from typing import Any, NoReturn

# Imported here but reported in main(), so that a missing package is one clear line and exit 3, and --help works.
try:
    import h5py
    import matplotlib
    import numpy as np
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib import ticker
    from matplotlib.patches import Rectangle
    MISSING_PACKAGE = ""
except ImportError as missing:
    MISSING_PACKAGE = missing.name or str(missing)

# The report's field names, generated from results/model/schema.h (this script's folder; tests/schema_doc_test.sh).
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import schema_names as S  # noqa: E402

PROG = "plots.py"
SCHEMA_NAME = "trainbench.report"
SCHEMA_VERSION = 1
# Stall budget components in stacking order: (column prefix in train/k<N>/stall_budget, legend label).
STALL_COMPONENTS = [
    ("compute", "compute (fwd+bwd+opt)"),
    ("comm_exposed", "comm_exposed"),
    ("data_wait", "data_wait (+h2d)"),
    ("checkpoint_stall", "checkpoint"),
    ("other", "other"),
]
# Cost parts stacked in the cost plot when the JSON gives them (key, label); their sum is the total.
COST_PARTS = [("gpu_usd", "GPU time"), ("provisioning_usd", "provisioning"), ("storage_usd", "storage"),
              ("transfer_usd", "transfer"), ("retry_usd", "retries")]
MAX_ANNOTATED_RANKS = 16  # beyond this the heatmap's cell labels become unreadable


class InputProblem(Exception):
    """A file the user gave cannot be used: exit 2 with this one line."""


@dataclass
class Collective:
    op: str
    n_ranks: int
    factor: float
    formula: str
    sizes: Any
    busbw_out_of_place: Any
    busbw_in_place: Any


@dataclass
class ScalingPoint:
    ranks: int
    efficiency: float
    tokens_per_s: float


@dataclass
class StallBudget:
    ranks_in_point: int
    rank_labels: list[str]
    shares_p50: dict[str, Any]  # component -> share of step time per rank (0..1)


@dataclass
class P2p:
    uni_GBps: Any  # (n, n), row = sender, NaN on the diagonal
    flagged: list[tuple[int, int]]
    median_GBps: float
    threshold: float


@dataclass
class Run:
    name: str
    command: str
    status: str
    n_ranks: int
    backend: str
    start_utc: str
    collectives: dict[str, Collective] = field(default_factory=dict)
    scaling_mode: str = ""
    scaling: list[ScalingPoint] = field(default_factory=list)
    stall: StallBudget | None = None
    p2p: P2p | None = None


@dataclass
class Section:
    title: str
    images: list[tuple[str, str]]  # (base64 PNG, alt text)
    caption: str
    missing: str = ""
    body: str = ""  # HTML of a table section (already escaped)


# --- command line and errors ----------------------------------------------------------------------------------------

def die(message: str, code: int = 2) -> NoReturn:
    print(f"{PROG}: {message}", file=sys.stderr)
    sys.exit(code)


class OneLineParser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        die(f"{message} (usage: {PROG} --out PAGE.html [--cost COST.json | --export REPORT.json] REPORT.h5 ...)")


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = OneLineParser(prog=PROG, description="Plots of trainbench reports in one self-contained HTML page.")
    parser.add_argument("--out", required=True, help="the HTML page to write")
    parser.add_argument("--cost", help="JSON written by `trainbench cost --format json`")
    parser.add_argument("--export", help="JSON written by `trainbench report --format json` (its comparability)")
    parser.add_argument("--history", help="a `trainbench validate --history` directory: draw its trends instead")
    parser.add_argument("reports", nargs="*", help="trainbench HDF5 reports (schema v1)")
    return parser.parse_args(argv)


# --- reading reports ------------------------------------------------------------------------------------------------

def text(value: Any) -> str:
    return value.decode("utf-8") if isinstance(value, bytes) else str(value)


def column(table: Any, name: str) -> Any:
    if name not in (table.dtype.names or ()):
        raise KeyError(f"table '{table.name}' lacks column '{name}'")
    return table[name]


def parent_path(path: str) -> str:
    """The group above a repeated group: "train" for "train/<point>"."""
    return path.rsplit("/", 1)[0]


def open_report(path: str) -> Any:
    if not os.path.exists(path):
        raise InputProblem(f"cannot read report '{path}': no such file")
    if os.path.isdir(path) or not os.access(path, os.R_OK):
        raise InputProblem(f"cannot read report '{path}': not a readable file")
    if not h5py.is_hdf5(path):
        raise InputProblem(f"cannot read report '{path}': not an HDF5 file")
    try:
        f = h5py.File(path, "r", locking=False)
    except OSError as e:
        raise InputProblem(f"cannot read report '{path}': the HDF5 file is damaged or truncated (HDF5: {e})")
    schema = text(f.attrs.get(S.root.schema, ""))
    if schema != SCHEMA_NAME:
        f.close()
        raise InputProblem(f"cannot read report '{path}': not a trainbench report (root attribute schema is "
                           f"'{schema}', want '{SCHEMA_NAME}')")
    version = int(f.attrs.get(S.root.schema_version, -1))
    if version != SCHEMA_VERSION:
        f.close()
        raise InputProblem(f"cannot read report '{path}': schema version {version} is not supported "
                           f"(this script reads {SCHEMA_VERSION})")
    return f


def read_collectives(f: Any) -> dict[str, Collective]:
    found = {}
    op_group, results_table = S.collectives_op, S.collectives_op.results
    for op, group in sorted(f.get(parent_path(op_group.path), {}).items()):
        results = group[results_table.table][:]
        if len(results) == 0:
            continue
        found[op] = Collective(
            op=op, n_ranks=int(group.attrs[op_group.n_ranks]), factor=float(group.attrs[op_group.bus_factor]),
            formula=text(group.attrs[op_group.bus_factor_formula]), sizes=column(results, results_table.size_bytes),
            busbw_out_of_place=column(results, S.name(results_table.busbw_GBps, "out_of_place")),
            busbw_in_place=column(results, S.name(results_table.busbw_GBps, "in_place")))
    return found


def train_points(f: Any) -> list[tuple[int, Any]]:
    """(ranks, group) of every scaling point, by rank count."""
    points = []
    for name, group in f.get(parent_path(S.train_point.path), {}).items():
        ranks = S.point_ranks(name)  # storage-sweep groups (k<N>_throttle<r>) are not scaling points
        if ranks is not None and isinstance(group, h5py.Group):
            points.append((ranks, group))
    return sorted(points, key=lambda p: p[0])


def read_stall(ranks_in_point: int, group: Any) -> StallBudget | None:
    budget = S.train_point.stall_budget
    if budget.table not in group:
        return None
    table = group[budget.table][:]
    if len(table) == 0:
        return None
    labels = [f"{int(r)}\n{text(h)}" for r, h in zip(column(table, budget.rank), column(table, budget.host))]
    shares = {key: column(table, S.name(budget.p50, key)) for key, _ in STALL_COMPONENTS}
    return StallBudget(ranks_in_point, labels, shares)


def read_p2p(f: Any) -> P2p | None:
    p2p = S.p2p
    group = f.get(p2p.path)
    if group is None or p2p.uni_bw_GBps not in group:
        return None
    flagged = []
    if p2p.flagged.table in group:
        table = group[p2p.flagged.table][:]
        flagged = [(int(s), int(d))
                   for s, d in zip(column(table, p2p.flagged.src_rank), column(table, p2p.flagged.dst_rank))]
    return P2p(uni_GBps=group[p2p.uni_bw_GBps][:], flagged=flagged,
               median_GBps=float(group.attrs.get(p2p.median_uni_GBps, math.nan)),
               threshold=float(group.attrs.get(p2p.threshold_fraction, math.nan)))


def read_run(path: str) -> Run:
    f = open_report(path)
    try:
        with f:
            root = S.root
            run = Run(name=os.path.basename(path), command=text(f.attrs.get(root.command, "")),
                      status=text(f.attrs.get(root.status, "")), n_ranks=int(f.attrs.get(root.n_ranks, 0)),
                      backend=text(f.attrs.get(root.backend, "")), start_utc=text(f.attrs.get(root.start_utc, "")))
            run.collectives = read_collectives(f)
            points = train_points(f)
            if points:
                run.scaling_mode = text(f[S.train.path].attrs.get(S.train.scaling_mode, ""))
                run.scaling = [ScalingPoint(k, float(g.attrs.get(S.train_point.scaling_efficiency, math.nan)),
                                            float(g.attrs.get(S.train_point.tokens_per_s, math.nan)))
                               for k, g in points]
                run.stall = read_stall(*points[-1])
            run.p2p = read_p2p(f)
            return run
    except (KeyError, ValueError, TypeError, OSError) as e:
        raise InputProblem(f"cannot read report '{path}': the HDF5 file is damaged or not laid out as schema v1 "
                           f"describes ({e})")


# --- reading the cost JSON ------------------------------------------------------------------------------------------

def is_number(value: Any) -> bool:
    """JSON numbers only (not booleans); trainbench writes NaN and infinities as null."""
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def cost_tables(data: Any, name: str) -> list[tuple[str, Any]]:
    """(run file, table) for each run of the export that has table `cost.<name>`."""
    runs = data.get("runs") if isinstance(data, dict) else None
    if not isinstance(runs, list):
        return []
    return [(run.get("file"), run["cost"][name]) for run in runs
            if isinstance(run, dict) and isinstance(run.get("cost"), dict) and name in run["cost"]]


def read_json(path: str, what: str) -> Any:
    try:
        with open(path, encoding="utf-8") as f:
            return json.load(f)
    except FileNotFoundError:
        raise InputProblem(f"cannot read {what} '{path}': no such file")
    except (OSError, UnicodeDecodeError) as e:
        raise InputProblem(f"cannot read {what} '{path}': {e}")
    except json.JSONDecodeError as e:
        raise InputProblem(f"cannot read {what} '{path}': not JSON ({e})")


def read_comparability(data: Any, path: str, what: str) -> dict[str, Any] | None:
    """The export's `comparability` object (several runs only; layout: results/README.md), checked."""
    comparison = data.get("comparability") if isinstance(data, dict) else None
    if comparison is None:
        return None
    runs = comparison.get("runs") if isinstance(comparison, dict) else None
    variables = comparison.get("variables") if isinstance(comparison, dict) else None
    if not isinstance(runs, list) or not isinstance(variables, list):
        raise InputProblem(f"cannot read {what} '{path}': 'comparability' lacks its 'runs' and 'variables' lists")
    for i, v in enumerate(variables):
        if (not isinstance(v, dict) or not isinstance(v.get("name"), str) or not isinstance(v.get("values"), list)
                or len(v["values"]) != len(runs)):
            raise InputProblem(f"cannot read {what} '{path}': comparability.variables[{i}] needs a 'name' and one "
                               "value per run")
    return comparison


def read_cost(path: str) -> tuple[list[dict[str, Any]], Any, list[str]]:
    """The `cost.rows` of every run (each with its `run`), the decision's `deadline_hours` and its reasons of
    `trainbench cost --format json` (layout: results/README.md, "Output of cost")."""
    data = read_json(path, "cost file")
    tables = cost_tables(data, "rows")
    if not tables or not all(isinstance(table, list) for _, table in tables):
        raise InputProblem(f"cannot read cost file '{path}': no run with a 'cost.rows' list (want the output of "
                           "`trainbench cost --prices ... --format json`)")
    rows = []
    for file, table in tables:
        for i, row in enumerate(table):
            if not isinstance(row, dict) or not is_number(row.get("total_usd")):
                raise InputProblem(f"cannot read cost file '{path}': run '{file}' cost.rows[{i}] lacks a numeric "
                                   "'total_usd'")
            rows.append({"run": file, **row})
    decisions = cost_tables(data, "decision")
    decision = decisions[0][1] if decisions and isinstance(decisions[0][1], dict) else {}
    reasons = [f"{what}: {decision[key]}" for what, key in
               (("cheapest", "cheapest_reason"), ("fastest", "fastest_reason"), ("deadline", "deadline_reason"))
               if isinstance(decision.get(key), str)]
    return rows, decision.get("deadline_hours"), reasons


# --- drawing --------------------------------------------------------------------------------------------------------

def png_base64(fig: Any) -> str:
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=100, bbox_inches="tight")
    plt.close(fig)
    return base64.b64encode(buffer.getvalue()).decode("ascii")


def binary_size(value: float, _position: int = 0) -> str:
    for unit, scale in (("G", 2**30), ("M", 2**20), ("K", 2**10)):
        if value >= scale:
            return f"{value / scale:g}{unit}"
    return f"{value:g}"


def busbw_section(runs: list[Run]) -> Section:
    title = "Bus bandwidth against message size"
    ops = sorted({op for run in runs for op in run.collectives})
    if not ops:
        return Section(title, [], "", missing="No report holds collectives results (run `trainbench collectives`).")
    images, factors = [], []
    for op in ops:
        fig, ax = plt.subplots(figsize=(8, 4.5))
        for i, run in enumerate(r for r in runs if op in r.collectives):
            c = run.collectives[op]
            color = f"C{i}"
            ax.plot(c.sizes, c.busbw_out_of_place, "o-", color=color, label=f"{run.name} ({c.n_ranks} ranks)")
            if np.isfinite(c.busbw_in_place).any():  # --modes out-of-place leaves the in-place columns unmeasured
                ax.plot(c.sizes, c.busbw_in_place, "--", color=color, alpha=0.6, label=f"{run.name} in-place")
            factors.append(f"{op} {c.formula} = {c.factor:.4g} at n = {c.n_ranks} ({run.name})")
        ax.set_xscale("log", base=2)
        ax.xaxis.set_major_formatter(ticker.FuncFormatter(binary_size))
        ax.set_xlabel("message size S (bytes per rank buffer, K = 1024)")
        ax.set_ylabel("busbw (GB/s, GB = 1e9 B)")
        ax.set_title(f"{op}: bus bandwidth against message size")
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize="small")
        images.append((png_base64(fig), f"{op} busbw against message size"))
    caption = ("busbw = algbw × factor, algbw = S / t: S is the bytes per rank buffer as nccl-tests counts it, t the "
               "time per operation (each rank's mean over the timed iterations, maximum over ranks). The factor is "
               "2(n−1)/n for all_reduce; (n−1)/n for reduce_scatter, all_gather and alltoall; 1 for broadcast, "
               "reduce and sendrecv (n ranks), which makes busbw comparable with the link's bandwidth. Solid: "
               "out-of-place; dashed: in-place. Here: " + "; ".join(factors) + ".")
    return Section(title, images, caption)


def scaling_section(runs: list[Run]) -> Section:
    title = "Scaling efficiency against GPU count"
    swept = [r for r in runs if sum(math.isfinite(p.efficiency) for p in r.scaling) >= 2]
    if not swept:
        return Section(title, [], "", missing="No report holds a training scaling sweep with two or more points "
                                              "(run `trainbench train --scaling 1,2,4`).")
    fig, (eff_ax, tput_ax) = plt.subplots(1, 2, figsize=(11, 4.5))
    for i, run in enumerate(swept):
        ks = [p.ranks for p in run.scaling]
        label = f"{run.name} ({run.scaling_mode})"
        eff_ax.plot(ks, [100 * p.efficiency for p in run.scaling], "o-", color=f"C{i}", label=label)
        tput_ax.plot(ks, [p.tokens_per_s for p in run.scaling], "o-", color=f"C{i}", label=label)
    eff_ax.axhline(100, color="grey", linestyle=":", label="ideal")
    eff_ax.set_ylim(0, max(110, eff_ax.get_ylim()[1]))
    eff_ax.set_ylabel("scaling efficiency (%)")
    eff_ax.set_title("Scaling efficiency")
    tput_ax.set_ylabel("throughput (tokens/s, all ranks)")
    tput_ax.set_title("Training throughput")
    for ax in (eff_ax, tput_ax):
        ax.set_xscale("log", base=2)
        ax.xaxis.set_major_formatter(ticker.FuncFormatter(lambda v, _p: f"{v:g}"))
        ax.set_xlabel("GPUs (ranks, k)")
        ax.grid(True, alpha=0.3)
        ax.legend(fontsize="small")
    caption = ("One point per scaling point k (the first k ranks of the launch). Weak scaling (per-rank batch "
               "fixed): E(k) = throughput(k) / (k/k0 · throughput(k0)); strong scaling (global batch fixed): "
               "E(k) = T(k0)·k0 / (k·T(k)), T = step time; k0 = the smallest point run, whose efficiency is 100%. "
               "Throughput = tokens per step over all ranks ÷ the mean step time of the slowest rank.")
    return Section(title, [(png_base64(fig), "scaling efficiency and throughput against GPU count")], caption)


def stall_section(runs: list[Run]) -> Section:
    title = "Stall budget per rank"
    with_stall = [r for r in runs if r.stall is not None]
    if not with_stall:
        return Section(title, [], "", missing="No report holds a training stall budget (run `trainbench train`).")
    images = []
    for run in with_stall:
        stall = run.stall
        positions = np.arange(len(stall.rank_labels))
        fig, ax = plt.subplots(figsize=(max(6, 0.6 * len(positions) + 3), 4.5))
        bottom = np.zeros(len(positions))
        for i, (key, label) in enumerate(STALL_COMPONENTS):
            share = 100 * np.asarray(stall.shares_p50[key], dtype=float)
            ax.bar(positions, share, bottom=bottom, color=f"C{i}", label=label)
            bottom += share
        ax.set_xticks(positions, stall.rank_labels, fontsize="small")
        ax.set_xlabel("rank (host)")
        ax.set_ylabel("share of step time, p50 (%)")
        ax.set_ylim(0, max(105, bottom.max() + 5))
        ax.set_title(f"{run.name}: stall budget at k = {stall.ranks_in_point}")
        ax.legend(fontsize="small", loc="upper left", bbox_to_anchor=(1.01, 1))
        images.append((png_base64(fig), f"{run.name} stall budget per rank"))
    caption = ("Each bar is one rank at the largest scaling point of the run: the median (p50) over measured steps "
               "of each part's share of that rank's step time. compute = forward + backward + optimizer; "
               "comm_exposed = waiting for gradient all-reduce buckets after backward (what overlap did not hide); "
               "data_wait = waiting for the batch plus the host-to-device copy; checkpoint = time the loop was "
               "blocked by checkpointing; other = the rest of the step. Medians are taken per part, so a bar need "
               "not add up to exactly 100%.")
    return Section(title, images, caption)


def heatmap(run: Run) -> str:
    p2p = run.p2p
    n = p2p.uni_GBps.shape[0]
    fig, ax = plt.subplots(figsize=(max(5, 0.5 * n + 3), max(4, 0.5 * n + 2)))
    cmap = plt.get_cmap("viridis").copy()
    cmap.set_bad("lightgrey")  # the diagonal (NaN): a rank does not send to itself
    image = ax.imshow(np.ma.masked_invalid(p2p.uni_GBps), cmap=cmap, origin="upper")
    fig.colorbar(image, ax=ax, label="unidirectional bandwidth (GB/s)")
    if n <= MAX_ANNOTATED_RANKS:
        for (src, dst), value in np.ndenumerate(p2p.uni_GBps):
            if math.isfinite(value):
                # viridis is dark at the low end and yellow at the top: dark text on the bright cells
                color = "black" if image.norm(value) > 0.6 else "white"
                ax.text(dst, src, f"{value:.3g}", ha="center", va="center", fontsize="small", color=color)
    for src, dst in p2p.flagged:
        ax.add_patch(Rectangle((dst - 0.5, src - 0.5), 1, 1, fill=False, edgecolor="red", linewidth=2.5))
    ticks = range(n)
    ax.set_xticks(ticks)
    ax.set_yticks(ticks)
    ax.set_xlabel("receiver rank")
    ax.set_ylabel("sender rank")
    ax.set_title(f"{run.name}: p2p unidirectional bandwidth, median {p2p.median_GBps:.3g} GB/s, "
                 f"{len(p2p.flagged)} flagged")
    return png_base64(fig)


def p2p_section(runs: list[Run]) -> Section:
    title = "Point-to-point bandwidth matrix"
    with_p2p = [r for r in runs if r.p2p is not None]
    if not with_p2p:
        return Section(title, [], "", missing="No report holds a p2p matrix (run `trainbench p2p`).")
    images = [(heatmap(run), f"{run.name} p2p unidirectional bandwidth matrix") for run in with_p2p]
    thresholds = "; ".join(f"{r.name}: {r.p2p.threshold:g} × median" for r in with_p2p)
    caption = ("Row = sender, column = receiver. Unidirectional bandwidth = bytes × iterations / time of a one-way "
               "stream between the pair while the other ranks wait (time = the slower of sender and receiver); "
               "GB = 1e9 bytes. The diagonal is not measured (grey). Pairs outlined in red are flagged as weak "
               f"links: below the threshold fraction of the median ({thresholds}).")
    return Section(title, images, caption)


def cost_label(row: dict[str, Any]) -> str:
    config = " ".join(str(row[k]) for k in ("run", "config") if row.get(k))
    if row.get("projected"):
        config += " (projected)"
    return " · ".join(part for part in (config, str(row.get("offering") or "")) if part) or "configuration"


def cost_note(row: dict[str, Any]) -> str:
    """The text beside a bar: total, time to train, and which decision the row wins."""
    note = f" ${row['total_usd']:,.0f}"
    if is_number(row.get("total_usd_low")) and is_number(row.get("total_usd_high")):
        note += f" (${row['total_usd_low']:,.0f}-${row['total_usd_high']:,.0f} over the repeats)"
    if is_number(row.get("time_to_train_hours")):
        note += f", {row['time_to_train_hours']:.3g} h"
    if row.get("marks"):
        note += f" [{row['marks']}]"
    if row.get("dominant_time_part") and is_number(row.get("dominant_time_share")):
        note += f"; {row['dominant_time_part']} {100 * row['dominant_time_share']:.0f}% of the time"
    return note


def cost_section(cost: tuple[list[dict[str, Any]], Any, list[str]] | None) -> Section:
    title = "Total task cost per configuration"
    if cost is None:
        return Section(title, [], "", missing="No cost file given (pass --cost with the output of "
                                              "`trainbench cost --format json`).")
    rows, deadline_hours, reasons = cost
    if not rows:
        return Section(title, [], "", missing="The cost file lists no configurations.")
    totals = np.array([float(r["total_usd"]) for r in rows])
    positions = np.arange(len(rows))
    fig, ax = plt.subplots(figsize=(10, 1.5 + 0.5 * len(rows)))
    parts = [(k, label) for k, label in COST_PARTS if all(is_number(r.get(k)) for r in rows)]
    # Energy is priced only where a report measured it and the offering gives a price: 0 elsewhere.
    if parts and any(is_number(r.get("energy_usd")) for r in rows):
        parts.append(("energy_usd", "energy"))
    left = np.zeros(len(rows))
    for i, (key, label) in enumerate(parts):
        values = np.array([float(r[key]) if is_number(r.get(key)) else 0.0 for r in rows])
        ax.barh(positions, values, left=left, color=f"C{i}", label=label)
        left += values
    if not parts:
        ax.barh(positions, totals, color="C0", label="total")
    for y, (total, row) in enumerate(zip(totals, rows)):
        ax.text(total, y, cost_note(row), va="center", fontsize="small")
    ax.set_yticks(positions, [cost_label(r) for r in rows], fontsize="small")
    ax.invert_yaxis()
    ax.set_xlim(0, totals.max() * 1.45 if totals.max() > 0 else 1)
    ax.set_xlabel("total task cost (USD)")
    deadline = f", deadline {deadline_hours:g} h" if is_number(deadline_hours) else ""
    ax.set_title(f"Total task cost per configuration (labels: total, time to train{deadline})")
    ax.legend(fontsize="small", loc="upper left", bbox_to_anchor=(1.01, 1))
    caption = ("Total = GPU cost (price per hour of the whole nodes × run time) + storage + transfer + expected "
               "retry cost (failures expected from the nodes' MTBF × (restart + work lost since the last "
               "checkpoint) × hourly price) + energy (the measured joules per token at the offering's price per "
               "kWh, where both exist); run time from the measured (or projected) throughput and start-up "
               "time for the target. Bars are split into those parts when every row gives them. Marks: cheapest, "
               "fastest, and deadline = cheapest within the deadline. USD as in the price file." +
               "".join(f" Why {reason}." for reason in reasons))
    return Section(title, [(png_base64(fig), "total task cost per configuration")], caption)


def comparability_section(comparison: dict[str, Any]) -> Section:
    """What the runs held fixed: a row per variable, the differences that make figures not comparable marked."""
    runs = comparison["runs"]
    head = "".join(f"<th>run {i + 1}: {html.escape(str(r))}</th>" for i, r in enumerate(runs))
    rows = []
    for v in comparison["variables"]:
        kind = "warned" if v.get("warned") else "compared" if v.get("differs") else ""
        cells = "".join(f"<td>{html.escape('-' if value is None else str(value))}</td>" for value in v["values"])
        differs = ("yes: not comparable" if kind == "warned" else "yes: compared" if kind == "compared" else "no")
        rows.append(f'<tr class="{kind}"><td>{html.escape(v["name"])}</td>{cells}<td>{differs}</td></tr>')
    warnings = "".join(f'<li>{html.escape(str(w))}</li>' for w in comparison.get("warnings") or [])
    body = (f'<ul class="warnings">{warnings}</ul>' if warnings else "<p>The runs held every variable fixed.</p>")
    body += f"<table><tr><th>variable</th>{head}<th>differs</th></tr>{''.join(rows)}</table>"
    caption = ("The variables a fair comparison holds fixed, per run. 'yes: not comparable' (red) is a difference "
               "that makes the runs' figures not comparable; 'yes: compared' (blue) is what a comparison is about: "
               "device, nodes, interconnect, parallel layout. '-': the run does not record it.")
    return Section("Comparability of the runs", [], caption, body=body)


# --- the page -------------------------------------------------------------------------------------------------------

STYLE = """
body { font-family: sans-serif; margin: 2em auto; max-width: 1150px; color: #222; }
table { border-collapse: collapse; margin-bottom: 1em; }
th, td { border: 1px solid #ccc; padding: 0.25em 0.6em; text-align: left; }
img { display: block; max-width: 100%; margin: 0.5em 0; }
.caption { font-size: 0.9em; color: #444; max-width: 60em; }
.missing { color: #a15c00; }
tr.warned td { background: #fbe3e3; }
tr.compared td { background: #e3ecfb; }
.warnings li { color: #a11c1c; }
"""


def runs_table(runs: list[Run]) -> str:
    rows = "".join(
        f"<tr><td>{html.escape(r.name)}</td><td>{html.escape(r.command)}</td><td>{html.escape(r.status)}</td>"
        f"<td>{r.n_ranks}</td><td>{html.escape(r.backend)}</td><td>{html.escape(r.start_utc)}</td></tr>"
        for r in runs)
    return ("<table><tr><th>run (file)</th><th>command</th><th>status</th><th>ranks</th><th>backend</th>"
            f"<th>started (UTC)</th></tr>{rows}</table>")


def section_html(section: Section) -> str:
    parts = [f"<h2>{html.escape(section.title)}</h2>"]
    if section.missing:
        parts.append(f'<p class="missing">{html.escape(section.missing)}</p>')
    if section.body:
        parts.append(section.body)
    for data, alt in section.images:
        parts.append(f'<img alt="{html.escape(alt)}" src="data:image/png;base64,{data}">')
    if section.caption:
        parts.append(f'<p class="caption">{html.escape(section.caption)}</p>')
    return "\n".join(parts)


def page_html(runs: list[Run], sections: list[Section]) -> str:
    generated = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
    body = "\n".join(section_html(s) for s in sections)
    return (f'<!DOCTYPE html>\n<html lang="en">\n<head>\n<meta charset="utf-8">\n'
            f"<title>trainbench plots: {html.escape(', '.join(r.name for r in runs))}</title>\n"
            f"<style>{STYLE}</style>\n</head>\n<body>\n<h1>trainbench plots</h1>\n"
            f"<p>Generated {generated} from {len(runs)} report(s). GB = 1e9 bytes.</p>\n"
            f"{runs_table(runs)}\n{body}\n</body>\n</html>\n")


def write_atomically(path: str, content: str) -> None:
    """A temporary file in the destination's directory, renamed onto it: readers never see half a page."""
    directory = os.path.dirname(os.path.abspath(path))
    try:
        fd, tmp = tempfile.mkstemp(prefix=os.path.basename(path) + ".", suffix=".tmp", dir=directory)
    except OSError as e:
        raise InputProblem(f"cannot write '{path}': {e.strerror}")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(content)
            f.flush()
            os.fsync(f.fileno())
        os.chmod(tmp, 0o644)
        os.replace(tmp, path)
    except OSError as e:
        os.unlink(tmp)
        raise InputProblem(f"cannot write '{path}': {e.strerror}")


# --- history (`trainbench history DIR --html`) ------------------------------------------------------------------

def read_history(directory: str) -> list[dict[str, Any]]:
    """The nights of a validate --history directory (JSON files, format trainbench.history), oldest first."""
    if not os.path.isdir(directory):
        raise InputProblem(f"--history '{directory}': not a directory")
    nights = []
    for name in sorted(os.listdir(directory)):
        path = os.path.join(directory, name)
        if ".json.tmp." in name:
            continue
        try:
            with open(path, encoding="utf-8") as f:
                night = json.load(f)
        except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
            raise InputProblem(f"history '{path}': not a history entry ({e})")
        if not isinstance(night, dict) or night.get("format") != "trainbench.history":
            raise InputProblem(f"history '{path}': not a history entry (no \"format\": \"trainbench.history\")")
        nights.append(night)
    return sorted(nights, key=lambda n: (str(n.get("start_utc", "")), str(n.get("run", ""))))


def history_sections(nights: list[dict[str, Any]]) -> list[Section]:
    """Per configuration, every numeric figure over the nights as a ratio to its median (1 = typical)."""
    if not nights:
        return [Section("History", [], "", missing="The history directory holds no nights yet "
                        "(run `trainbench validate RUN.h5 --history DIR`).")]
    sections = []
    for identity in sorted({str(n.get("identity", "")) for n in nights}):
        mine = [n for n in nights if n.get("identity") == identity]
        keys = sorted({k for n in mine for k, v in n.get("values", {}).items() if is_number(v)})
        fig, ax = plt.subplots(figsize=(9, 4.5))
        for key in keys:
            values = [n["values"].get(key) for n in mine]
            finite = [v for v in values if is_number(v)]
            median = float(np.median(finite)) if finite else math.nan
            ratios = [v / median if is_number(v) and median else math.nan for v in values]
            ax.plot(range(1, len(mine) + 1), ratios, marker="o", label=key)
        ax.axhline(1.0, color="grey", linewidth=0.8)
        ax.set_xlabel("night (oldest first)")
        ax.set_ylabel("figure / its median over the nights")
        ax.set_title(identity, fontsize=9)
        ax.legend(fontsize=7, loc="center left", bbox_to_anchor=(1.01, 0.5))
        first, last = mine[0].get("start_utc", "?"), mine[-1].get("start_utc", "?")
        sections.append(Section(f"History: {identity}", [(png_base64(fig), identity)],
                                f"{len(mine)} nights from {first} to {last}; each figure divided by its median over "
                                "these nights, so a drop below 1 is a figure getting worse when higher is better "
                                "(rates) and better when lower is better (shares, times)."))
    return sections


def main(argv: list[str]) -> int:
    args = parse_args(argv)
    if MISSING_PACKAGE:
        die(f"{sys.executable} lacks the Python package '{MISSING_PACKAGE}': install python3-h5py "
            "python3-matplotlib (Debian packages, for /usr/bin/python3)", code=3)
    try:
        if args.history is not None:
            if args.reports or args.cost or args.export:
                die("--history draws a history directory alone (no reports, no --cost or --export)")
            write_atomically(args.out, page_html([], history_sections(read_history(args.history))))
            return 0
        if not args.reports:
            die(f"no reports given (usage: {PROG} --out PAGE.html [--cost COST.json | --export REPORT.json] "
                "REPORT.h5 ...)")
        runs = [read_run(path) for path in args.reports]
        if args.cost and args.export:
            die("--cost and --export are two kinds of the same input: give one")
        cost = read_cost(args.cost) if args.cost else None
        export, what = (args.cost, "cost file") if args.cost else (args.export, "export file")
        comparison = read_comparability(read_json(export, what), export, what) if export else None
        sections = [comparability_section(comparison)] if comparison else []
        sections += [busbw_section(runs), scaling_section(runs), stall_section(runs), p2p_section(runs),
                    cost_section(cost)]
        write_atomically(args.out, page_html(runs, sections))
    except InputProblem as e:
        die(str(e))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
