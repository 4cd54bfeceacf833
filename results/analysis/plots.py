#!/usr/bin/python3
"""Plots of trainbench reports in one self-contained HTML page.

    /usr/bin/python3 results/analysis/plots.py --out page.html [--cost cost.json [--decision LINE ...] |
        --export report.json] report1.h5 [report2.h5 ...]
    /usr/bin/python3 results/analysis/plots.py --out page.html --history DIR --bands warn=0.05,fail=0.1,...

Runs under Debian's /usr/bin/python3, which is where python3-h5py and python3-matplotlib install (a pyenv or
virtualenv python3 on PATH usually lacks them). Reads the reports with h5py only (schema v1, results/README.md),
draws with matplotlib's Agg backend and writes one HTML file whose images are inline PNG data: URIs, with no
scripts, styles or fonts to fetch, so it opens offline. Plots, each only where the reports hold its data: busbw
against message size per collective, scaling efficiency against GPU count, the stall budget per rank, the p2p
unidirectional bandwidth matrix, and the cost per configuration from `trainbench cost --format json`. With --cost
the page opens with the decision in words: the `--decision` lines `trainbench cost --html` hands over (its
console's `# cheapest: ... why: ...` lines), else the cost file's own decision. Above the plots, when the JSON
export (of `cost`, or of `report` through --export) compares several runs: the table of what the runs held fixed,
the differences that make them not comparable marked and warned about. Runs are named by their file names, with
as many parent folders as tell two of the same name apart.

--history draws a `validate --history` directory instead: per configuration, one small panel per figure family
(collectives, p2p, train, storage, ...) of its figures over the nights' dates, the band validate judges the next
night by shaded (the median of the last passing nights, and the policy bands that `--bands` gives), the nights not
counted in it (failed or interrupted runs, regressions) marked.

Exit codes: 0 written; 2 bad input (an unreadable report, cost file or history entry, an unwritable output; one
line on stderr); 3 h5py or matplotlib missing.
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
    from matplotlib import dates as mdates
    from matplotlib import ticker
    from matplotlib.lines import Line2D
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
# comm_exposed's kinds (they add up to it), stacked in its place where a report has them and any is not zero.
COMM_KINDS = [
    ("comm_gradient_sync", "comm: gradient sync"),
    ("comm_param_gather", "comm: parameter gather"),
    ("comm_activation", "comm: activation (TP)"),
    ("comm_pipeline", "comm: pipeline"),
    ("comm_alltoall", "comm: all-to-all (EP)"),
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
    components: list[tuple[str, str]]  # what the bars stack, in order: (key, legend label)


@dataclass
class P2p:
    uni_GBps: Any  # (n, n), row = sender, NaN on the diagonal
    flagged: list[tuple[int, int]]
    median_GBps: float
    threshold: float


@dataclass
class Run:
    name: str  # on the page (short_names)
    path: str
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
        die(f"{message} (usage: {PROG} --out PAGE.html [--cost COST.json | --export REPORT.json] REPORT.h5 ... | "
            f"{PROG} --out PAGE.html --history DIR --bands warn=W,fail=F,...)")


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = OneLineParser(prog=PROG, description="Plots of trainbench reports in one self-contained HTML page.")
    parser.add_argument("--out", required=True, help="the HTML page to write")
    parser.add_argument("--cost", help="JSON written by `trainbench cost --format json`")
    parser.add_argument("--export", help="JSON written by `trainbench report --format json` (its comparability)")
    parser.add_argument("--decision", action="append", default=[],
                        help="a decision line of `trainbench cost` (repeatable; `cost --html` passes its console's)")
    parser.add_argument("--history", help="a `trainbench validate --history` directory: draw its trends instead")
    parser.add_argument("--bands", help="with --history: validate's policy bands, warn=W,fail=F,share_warn=W,"
                                        "share_fail=F,nights=N,min_nights=M,max_widening=X (`history --html` "
                                        "passes the defaults)")
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


def short_names(paths: list[str]) -> dict[str, str]:
    """Each path's name on the page: its file name, with as many parent folders as tell it apart from the others
    ("node-a/train.h5" beside "node-b/train.h5"); a directory path only where the names alone cannot."""
    parts = {path: os.path.normpath(path).split(os.sep) for path in paths}
    depth = dict.fromkeys(parts, 1)
    while True:
        names = {path: "/".join(p[-depth[path]:]) for path, p in parts.items()}
        taken: dict[str, int] = {}
        for name in names.values():
            taken[name] = taken.get(name, 0) + 1
        clashing = [path for path, name in names.items() if taken[name] > 1 and depth[path] < len(parts[path])]
        if not clashing:
            return names
        for path in clashing:
            depth[path] += 1


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
    kinds = [(key, label) for key, label in COMM_KINDS if S.name(budget.kind_p50, key) in (table.dtype.names or ())]
    for key, _ in kinds:
        shares[key] = column(table, S.name(budget.kind_p50, key))
    kinds = [(key, label) for key, label in kinds if np.any(np.asarray(shares[key], dtype=float) > 0)]
    components = list(STALL_COMPONENTS)
    if kinds:  # comm_exposed by kind
        at = [key for key, _ in components].index("comm_exposed")
        components[at:at + 1] = kinds
    return StallBudget(ranks_in_point, labels, shares, components)


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
            run = Run(name=os.path.basename(path), path=path, command=text(f.attrs.get(root.command, "")),
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


@dataclass
class Cost:
    rows: list[dict[str, Any]]  # every run's `cost.rows`, each with its `run`
    deadline_hours: Any
    decision: dict[str, Any]  # `cost.decision` (one row), {} when the file has none


def read_cost(path: str) -> Cost:
    """The `cost.rows` of every run and the decision of `trainbench cost --format json` (layout: results/README.md,
    "Output of cost")."""
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
    return Cost(rows, decision.get("deadline_hours"), decision)


def decision_of_cost_file(decision: dict[str, Any]) -> list[str]:
    """The decision as the cost file states it (its winners' names and reasons), for a page drawn from the file
    alone; `trainbench cost --html` passes its console's fuller lines instead (--decision)."""
    def line(what: str, name_key: str, reason_key: str) -> list[str]:
        name, reason = decision.get(name_key), decision.get(reason_key)
        if not isinstance(name, str):
            return []
        return [f"{what}: {name}" + (f"; why: {reason}" if isinstance(reason, str) else "")]
    lines = line("cheapest", "cheapest", "cheapest_reason") + line("fastest", "fastest", "fastest_reason")
    deadline = decision.get("deadline_hours")
    if is_number(deadline):
        lines += (line(f"cheapest within {deadline:g} h", "cheapest_within_deadline", "deadline_reason")
                  or [f"none meets the deadline of {deadline:g} h"])
    return lines


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
        for i, (key, label) in enumerate(stall.components):
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
               "comm_exposed = communication the step waited for (what overlap did not hide), shown by kind where "
               "the report has them: gradient sync (all-reduce buckets, reduce-scatters), parameter gather, "
               "activation (tensor parallel's all-reduces), pipeline (stage exchanges and bubble), all-to-all "
               "(expert parallel's dispatch and combine); "
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


def cost_label(row: dict[str, Any], names: dict[str, str]) -> str:
    """A bar's label: the run's short name, the configuration (layout) and the offering."""
    run = str(row.get("run") or "")
    config = " ".join(part for part in (names.get(run, run), str(row.get("config") or "")) if part)
    if row.get("projected"):
        config += " (projected)"
    offering = str(row.get("offering") or "")
    return f"{config} on {offering}" if config and offering else config or offering or "configuration"


def cost_note(row: dict[str, Any]) -> str:
    """The text beside a bar: total, time to train, which decision the row wins and where its time goes."""
    note = f" ${row['total_usd']:,.0f}"
    if is_number(row.get("total_usd_low")) and is_number(row.get("total_usd_high")):
        note += f" (${row['total_usd_low']:,.0f}-${row['total_usd_high']:,.0f})"
    if is_number(row.get("time_to_train_hours")):
        note += f", {row['time_to_train_hours']:.3g} h"
    if row.get("marks"):
        note += f" [{row['marks']}]"
    if row.get("dominant_time_part") and is_number(row.get("dominant_time_share")):
        note += f"; {row['dominant_time_part']} {100 * row['dominant_time_share']:.0f}%"
    return note


def fit_notes(fig: Any, ax: Any, totals: Any, notes: list[Any]) -> None:
    """Sets the x axis so that each bar's note, written after its end, stays inside the axes."""
    fig.canvas.draw()
    renderer = fig.canvas.get_renderer()
    width = ax.get_window_extent(renderer).width
    needed = 0.0
    for total, note in zip(totals, notes):
        room = 1 - (note.get_window_extent(renderer).width + 8) / width  # the share of the axes left for the bar
        needed = max(needed, total / max(room, 0.2))
    ax.set_xlim(0, needed if needed > 0 else 1)


def legend_below(fig: Any, ax: Any, **options: Any) -> None:
    """The key under the axes, below their x label: off the lines and bars it explains."""
    fig.canvas.draw()
    renderer = fig.canvas.get_renderer()
    box = ax.get_window_extent(renderer)
    below = [ax.xaxis.label, ax.xaxis.get_offset_text()] + ax.get_xticklabels()
    bottom = min([box.y0] + [t.get_window_extent(renderer).y0 for t in below if t.get_text()])
    ax.legend(loc="upper center", bbox_to_anchor=(0.5, (bottom - 4 - box.y0) / box.height), frameon=False,
              fontsize="small", **options)


def cost_section(cost: Cost | None, names: dict[str, str]) -> Section:
    title = "Total task cost per configuration"
    if cost is None:
        return Section(title, [], "", missing="No cost file given (pass --cost with the output of "
                                              "`trainbench cost --format json`).")
    rows = cost.rows
    if not rows:
        return Section(title, [], "", missing="The cost file lists no configurations.")
    totals = np.array([float(r["total_usd"]) for r in rows])
    labels = [cost_label(r, names) for r in rows]
    positions = np.arange(len(rows))
    fig, ax = plt.subplots(figsize=(11, 1.2 + 0.32 * len(rows)))
    parts = [(k, label) for k, label in COST_PARTS if all(is_number(r.get(k)) for r in rows)]
    # Energy is priced only where a report measured it and the offering gives a price: 0 elsewhere.
    if parts and any(is_number(r.get("energy_usd")) for r in rows):
        parts.append(("energy_usd", "energy"))
    left = np.zeros(len(rows))
    for i, (key, label) in enumerate(parts):
        values = np.array([float(r[key]) if is_number(r.get(key)) else 0.0 for r in rows])
        ax.barh(positions, values, left=left, height=0.7, color=f"C{i}", label=label)
        left += values
    if not parts:
        ax.barh(positions, totals, height=0.7, color="C0", label="total")
    notes = [ax.text(total, y, cost_note(row), va="center", fontsize="small") for y, (total, row) in
             enumerate(zip(totals, rows))]
    ax.set_yticks(positions, labels, fontsize="small")
    for tick, row in zip(ax.get_yticklabels(), rows):
        if row.get("marks"):  # the rows the decision names
            tick.set_fontweight("bold")
    ax.invert_yaxis()
    ax.set_xlabel("total task cost (USD)")
    ax.xaxis.set_major_formatter(ticker.StrMethodFormatter("${x:,.0f}"))
    ax.grid(True, axis="x", alpha=0.3)
    deadline = f"; deadline {cost.deadline_hours:g} h" if is_number(cost.deadline_hours) else ""
    ax.set_title(f"Total task cost per configuration (beside each bar: total, time to train, marks{deadline})",
                 fontsize="medium")
    fit_notes(fig, ax, totals, notes)
    legend_below(fig, ax, ncol=len(parts) or 1, title="parts of the total")
    caption = ("Total = GPU cost (price per hour of the whole nodes × run time) + storage + transfer + expected "
               "retry cost (failures expected from the nodes' MTBF × (restart + work lost since the last "
               "checkpoint) × hourly price) + energy (the measured joules per token at the offering's price per "
               "kWh, where both exist); run time from the measured (or projected) throughput and start-up "
               "time for the target. Bars are split into those parts when every row gives them. Rows: run (file "
               "name), configuration (k<ranks> and nodes x GPUs measured, or the projected layout), offering. "
               "Marks (bold rows): cheapest, fastest, and deadline = cheapest within the deadline; the part after "
               "';' is where most of the training time goes. USD as in the price file.")
    alt = "Total task cost per configuration, one bar per row: " + "; ".join(
        f"{label}: ${total:,.0f}" for label, total in zip(labels, totals))
    return Section(title, [(png_base64(fig), alt)], caption)


def decision_section(lines: list[str], from_file: bool) -> Section:
    """The decision in words, first on the page: each of `trainbench cost`'s decision lines ("# cheapest: ...;
    why: ..."), its subject in bold and its reason on a line of its own."""
    items = []
    for line in lines:
        line = line[2:] if line.startswith("# ") else line  # the console's comment mark
        head, why_mark, why = line.partition("; why: ")
        subject, colon, rest = head.partition(": ")
        body = (f"<strong>{html.escape(subject)}:</strong> {html.escape(rest)}" if colon
                else f"<strong>{html.escape(head)}</strong>")
        if why_mark:
            body += f'<br><span class="why"><strong>why:</strong> {html.escape(why)}</span>'
        items.append(f"<li>{body}</li>")
    source = ("As the cost file's decision states it (`trainbench cost --html` gives its console's fuller lines)."
              if from_file else "As `trainbench cost` prints it: the winner, its total and time to train, where "
                                "its time and cost go, and why it beats the runner-up.")
    return Section("Decision", [], source, body=f'<ul class="decision">{"".join(items)}</ul>')


def comparability_section(comparison: dict[str, Any], names: dict[str, str]) -> Section:
    """What the runs held fixed: a row per variable, the differences that make figures not comparable marked."""
    runs = comparison["runs"]
    head = "".join(f"<th>run {i + 1}: {html.escape(names.get(str(r), str(r)))}</th>" for i, r in enumerate(runs))
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
ul.decision { padding-left: 1.2em; font-size: 1.05em; }
ul.decision li { margin-bottom: 0.7em; }
ul.decision .why { color: #333; }
.panels { display: flex; flex-wrap: wrap; gap: 0.5em 1.5em; }
figure.panel { margin: 0; }
figure.panel figcaption { font-size: 0.85em; color: #444; max-width: 36em; }
.band { background: #f4f4f4; padding: 0.5em 0.8em; max-width: 60em; }
tr.failed td { background: #fbe3e3; }
tr.regression td { background: #fdf0dc; }
"""


def runs_table(runs: list[Run]) -> str:
    rows = "".join(
        f"<tr><td>{html.escape(r.name)}</td><td>{html.escape(r.command)}</td><td>{html.escape(r.status)}</td>"
        f"<td>{r.n_ranks}</td><td>{html.escape(r.backend)}</td><td>{html.escape(r.start_utc)}</td>"
        f"<td>{html.escape(r.path)}</td></tr>"
        for r in runs)
    return ("<table><tr><th>run</th><th>command</th><th>status</th><th>ranks</th><th>backend</th>"
            f"<th>started (UTC)</th><th>file</th></tr>{rows}</table>")


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


def page_html(title: str, summary: str, sections: list[Section], lead: list[Section] | None = None,
              runs: list[Run] | None = None) -> str:
    """The page: its title, the `lead` sections (the answer, in words), what it was drawn from, the runs, then
    the sections."""
    generated = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
    parts = [section_html(s) for s in lead or []]
    parts.append(f'<p class="summary">Generated {generated} from {html.escape(summary)}. GB = 1e9 bytes.</p>')
    if runs:
        parts.append(runs_table(runs))
    parts += [section_html(s) for s in sections]
    body = "\n".join(parts)
    return (f'<!DOCTYPE html>\n<html lang="en">\n<head>\n<meta charset="utf-8">\n'
            f"<title>{html.escape(title)}</title>\n<style>{STYLE}</style>\n</head>\n<body>\n"
            f"<h1>{html.escape(title)}</h1>\n{body}\n</body>\n</html>\n")


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


@dataclass
class Bands:
    """validate's policy for history (ValidatePolicy's defaults, handed over by `trainbench history --html`)."""
    warn: float          # relative shortfall of a rate that warns
    fail: float          # ... that fails
    share_warn: float    # excess of a share of step time, in absolute points (0.02 = 2 points), that warns
    share_fail: float    # ... that fails
    nights: int          # the expectation is the median of the last `nights` passing nights ...
    min_nights: int      # ... once there are this many
    max_widening: float  # validate widens the fail band by the nights' noise, at most to this many times


def read_bands(text: str | None) -> Bands:
    if text is None:
        die("--history needs --bands warn=W,fail=F,share_warn=W,share_fail=F,nights=N,min_nights=M,max_widening=X "
            "(`trainbench history --html` passes validate's defaults)")
    fields = {f.name: f.type for f in Bands.__dataclass_fields__.values()}
    given: dict[str, Any] = {}
    for item in text.split(","):
        key, _, value = item.partition("=")
        key = key.strip()
        if key not in fields:
            die(f"--bands: unknown key '{key}' (keys: {', '.join(fields)})")
        try:
            number = int(value) if fields[key] == "int" else float(value)
        except ValueError:
            die(f"--bands: {key} = '{value}' is not a number")
        if not math.isfinite(number) or number < 0:
            die(f"--bands: {key} = {value} must be a finite number >= 0")
        given[key] = number
    missing = [key for key in fields if key not in given]
    if missing:
        die(f"--bands lacks {', '.join(missing)}")
    return Bands(**given)


# The figures history keeps are validate's (results/README.md, "Validation"): its shares of step time
# (`train.*_share`, validate_figures.cc ShareFigure) are fractions where lower is better, banded in absolute points;
# every other number is a rate (GB/s, MB/s, tokens/s, MFU) where higher is better, banded relative to the expectation.
def is_share(key: str) -> bool:
    return key.endswith("_share")


FAMILY_ORDER = ["collectives", "p2p", "train", "storage"]  # then any other family, alphabetically
SIZE_BANDS = {"small": (":", "v"), "medium": ("--", "s"), "large": ("-", "o")}  # collectives' size bands
RATE_CLIP = 200.0  # % of the expectation: higher points are drawn at the edge, so that the band stays readable


def night_date(night: dict[str, Any]) -> datetime.datetime | None:
    try:
        return datetime.datetime.strptime(str(night.get("start_utc", "")), "%Y-%m-%dT%H:%M:%SZ")
    except ValueError:
        return None


def not_counted(night: dict[str, Any]) -> str:
    """Why a night is not in the expectation of the nights after it ("" when it is): its run failed or was
    interrupted, or validate found a regression (the entry's `counted` false)."""
    status = str(night.get("status", "complete"))
    if status in ("failed", "interrupted"):
        return f"run {status}"
    return "regression" if night.get("counted", True) is False else ""


def expectation(key: str, nights: list[dict[str, Any]], bands: Bands) -> tuple[float, int] | None:
    """What validate would expect of `key` tomorrow (FromHistory, without its widening): the median over the last
    `bands.nights` counted nights of the configuration, once `bands.min_nights` of them hold the figure; and how
    many did."""
    counted = [n for n in nights if n.get("counted", True) is not False][-bands.nights:]
    values = [n["values"][key] for n in counted if is_number(n.get("values", {}).get(key))]
    return (float(np.median(values)), len(values)) if len(values) >= bands.min_nights else None


def figure_style(family: str, key: str) -> tuple[str, str, str]:
    """(colour group, line style, marker) of a figure: a collective's size bands share their operation's colour."""
    rest = key[len(family) + 1:]
    group, _, last = rest.rpartition(".")
    if family == "collectives" and last in SIZE_BANDS:
        return group.replace(".busbw_GBps", ""), *SIZE_BANDS[last]
    return rest, "-", "o"


def shade_band(ax: Any, share: bool, bands: Bands) -> None:
    """pass / warn / fail zones around the expectation: below it for a rate (% of it), above for a share (points)."""
    if share:
        warn, fail, far = 100 * bands.share_warn, 100 * bands.share_fail, 1e3
        zones = [(-far, warn, "#2ca02c"), (warn, fail, "#ff9f1c"), (fail, far, "#d62728")]
        ax.axhline(0, color="#2ca02c", linewidth=1)
    else:
        warn, fail, far = 100 * (1 - bands.warn), 100 * (1 - bands.fail), 1e4
        zones = [(warn, far, "#2ca02c"), (fail, warn, "#ff9f1c"), (-far, fail, "#d62728")]
        ax.axhline(100, color="#2ca02c", linewidth=1)
    for low, high, colour in zones:
        ax.axhspan(low, high, color=colour, alpha=0.3 if colour == "#ff9f1c" else 0.13, linewidth=0, zorder=0)


def draw_figures(ax: Any, family: str, keys: list[str], nights: list[dict[str, Any]], dates: list[Any],
                 bands: Bands, share: bool) -> tuple[list[Any], int, list[tuple[str, bool]]]:
    """Each figure's nights against its expectation on `ax`, and the band where one applies. Returns the legend
    handles, how many points were clipped and, per figure, its expectation in words and whether it is validate's
    (else the median of all its nights, with no band)."""
    groups: dict[str, str] = {}  # colour group -> colour
    styles: dict[str, tuple[str, str]] = {}  # collectives' size band -> (line style, marker)
    lines, expected_words, drawn, clipped, banded = [], [], [], 0, False
    for key in keys:
        values = [n.get("values", {}).get(key) for n in nights]
        expected = expectation(key, nights, bands)
        finite = [v for v in values if is_number(v)]
        # Without an expectation the figure is drawn against the median of all its nights, and no band applies.
        centre = expected[0] if expected else (float(np.median(finite)) if finite else math.nan)
        banded = banded or expected is not None
        if share:
            ys = [100 * (v - centre) if is_number(v) else math.nan for v in values]
        else:
            ys = [100 * v / centre if is_number(v) and centre else math.nan for v in values]
            clipped += sum(1 for y in ys if y > RATE_CLIP)
            ys = [min(y, RATE_CLIP) for y in ys]
        drawn += [y for y in ys if math.isfinite(y)]
        group, style, marker = figure_style(family, key)
        colour = groups.setdefault(group, f"C{len(groups) % 10}")
        if family == "collectives":
            styles[key.rpartition(".")[2]] = (style, marker)
        name = key[len(family) + 1:]
        line, = ax.plot(dates, ys, linestyle=style, marker=marker, markersize=4, color=colour, label=name)
        lines.append(line)
        expected_words.append((f"{name} {100 * centre:.3g}%" if share else f"{name} {centre:.4g}", bool(expected)))
        missed = [(d, y) for d, y, n in zip(dates, ys, nights) if not_counted(n) and math.isfinite(y)]
        if missed:
            ax.scatter([d for d, _ in missed], [y for _, y in missed], marker="X", s=70, color=colour,
                       edgecolors="black", linewidths=0.8, zorder=5)
    if banded:
        shade_band(ax, share, bands)
    # The axes hold every point and the whole warn zone with a little of the fail zone beyond it.
    edges = [-2, 100 * bands.share_fail + 2] if share else [100 * (1 - bands.fail) - 3, 102]
    low, high = min(drawn + edges), max(drawn + edges)
    pad = 0.05 * (high - low)
    ax.set_ylim(low - pad if share else max(low - pad, 0), high + pad)
    against = "expected" if banded else "the median of all nights"
    ax.set_ylabel(f"points above {against}" if share else f"% of {against}")
    if styles:  # collectives: a colour per operation, a line style per size band, keyed apart
        handles = [Line2D([], [], color=colour, label=group) for group, colour in groups.items()]
        handles += [Line2D([], [], color="grey", linestyle=style, marker=marker, markersize=4, label=f"{band} sizes")
                    for band, (style, marker) in sorted(styles.items(), key=lambda b: list(SIZE_BANDS).index(b[0])
                                                        if b[0] in SIZE_BANDS else 0)]
        return handles, clipped, expected_words
    return lines, clipped, expected_words


def mark_nights_not_counted(ax: Any, dates: list[Any], nights: list[dict[str, Any]]) -> list[Any]:
    """A dotted line at each night not counted (red: its run failed or was interrupted; orange: a regression);
    their legend handles."""
    colours = {"run": "#d62728", "regression": "#ff7f0e"}
    for date, night in zip(dates, nights):
        why = not_counted(night)
        if why:
            ax.axvline(date, color=colours["run" if why.startswith("run") else "regression"], linestyle=":",
                       linewidth=1.3, zorder=1)
    whys = {not_counted(n).split(" ")[0] for n in nights} - {""}
    words = {"run": "night not counted: run failed or interrupted", "regression": "night not counted: regression"}
    return [Line2D([], [], color=colours[why], linestyle=":", marker="X", markerfacecolor="white",
                   markeredgecolor="black", label=words[why]) for why in sorted(whys)]


def family_panel(family: str, keys: list[str], nights: list[dict[str, Any]], bands: Bands) -> tuple[str, str, str]:
    """One family's figures over the nights as a PNG: rates in % of their expectation, shares of step time in
    points above it, each on an axes of its own; the nights not counted marked. Returns (PNG, alt text, caption)."""
    dated = [(d, n) for n in nights if (d := night_date(n)) is not None]
    dates, nights = [d for d, _ in dated], [n for _, n in dated]
    kinds = [(share, [k for k in keys if is_share(k) == share]) for share in (False, True)]
    kinds = [(share, ks) for share, ks in kinds if ks]
    fig, axes = plt.subplots(1, len(kinds), figsize=(5.2 * len(kinds), 2.9), squeeze=False,
                             gridspec_kw={"wspace": 0.3})
    expected_words = []
    for ax, (share, ks) in zip(axes[0], kinds):
        handles, clipped, words = draw_figures(ax, family, ks, nights, dates, bands, share)
        expected_words += words
        handles += mark_nights_not_counted(ax, dates, nights)
        title = family + (": shares of step time" if share else ": rates" if len(kinds) > 1 else "")
        if clipped:
            title += f"\n({clipped} point(s) above {RATE_CLIP:g}% drawn at the top edge)"
        ax.set_title(title, fontsize="medium")
        if len(set(dates)) == 1:  # one night: a day either side, not matplotlib's default of years
            ax.set_xlim(dates[0] - datetime.timedelta(days=1), dates[0] + datetime.timedelta(days=1))
        locator = mdates.AutoDateLocator(minticks=3, maxticks=6)
        ax.xaxis.set_major_locator(locator)
        ax.xaxis.set_major_formatter(mdates.ConciseDateFormatter(locator))  # the nights' start dates, UTC
        ax.grid(True, alpha=0.25)
        legend_below(fig, ax, ncol=2 if len(handles) > 3 else 1, handles=handles)
    missed = [f"{n.get('start_utc')} ({not_counted(n)})" for n in nights if not_counted(n)]
    alt = (f"{family}: {len(keys)} figure(s) over {len(nights)} night(s)"
           + (f"; nights not counted, marked X and a dotted line: {', '.join(missed)}" if missed else ""))
    counts = [e[1] for k in keys if (e := expectation(k, nights, bands))]
    expected = [words for words, banded in expected_words if banded]
    unbanded = [words for words, banded in expected_words if not banded]
    caption = f"{family}: "
    if expected:
        caption += f"band around the median of the last {max(counts)} passing night(s). Expected: {'; '.join(expected)}."
    if unbanded:
        caption += (f"{' ' if expected else ''}No band (fewer than {bands.min_nights} passing nights hold them), drawn "
                    f"against the median of all their nights: {'; '.join(unbanded)}.")
    return png_base64(fig), alt, caption


def family_of(key: str) -> str:
    return key.split(".", 1)[0]


def configuration_section(identity: str, nights: list[dict[str, Any]], bands: Bands) -> Section:
    """A configuration's nights: one panel per figure family, then the nights not counted."""
    keys = sorted({k for n in nights for k, v in n.get("values", {}).items() if is_number(v)})
    families = sorted({family_of(k) for k in keys},
                      key=lambda f: (FAMILY_ORDER.index(f) if f in FAMILY_ORDER else len(FAMILY_ORDER), f))
    dates = [n.get("start_utc", "?") for n in nights]
    missed = [n for n in nights if not_counted(n)]
    failed = sum(1 for n in missed if not_counted(n).startswith("run"))
    span = f"from {dates[0]} to {dates[-1]}" if len(nights) > 1 else f"on {dates[0]}"
    summary = (f"{len(nights)} night(s) {span}: {len(nights) - len(missed)} counted (the expectation's), {failed} "
               f"failed or interrupted, {len(missed) - failed} regression(s).")
    body = [f"<p>{html.escape(summary)}</p>"]
    undated = sum(1 for n in nights if night_date(n) is None)
    if undated:
        body.append(f'<p class="missing">{undated} night(s) without a start time (start_utc) are not drawn.</p>')
    panels = []
    for family in families:
        data, alt, caption = family_panel(family, [k for k in keys if family_of(k) == family], nights, bands)
        panels.append(f'<figure class="panel" data-family="{html.escape(family)}">'
                      f'<img alt="{html.escape(alt)}" src="data:image/png;base64,{data}">'
                      f"<figcaption>{html.escape(caption)}</figcaption></figure>")
    if panels:
        body.append(f'<div class="panels">{"".join(panels)}</div>')
    else:
        body.append('<p class="missing">No numeric figures: these nights measured nothing validate keeps (a run '
                    "that failed before its first phase finished).</p>")
    if missed:
        rows = "".join(
            f'<tr class="{"failed" if not_counted(n).startswith("run") else "regression"}">'
            f"<td>{html.escape(str(n.get('start_utc', '?')))}</td><td>{html.escape(not_counted(n))}</td>"
            f"<td>{html.escape(os.path.basename(str(n.get('run', ''))))}</td></tr>" for n in missed)
        body.append("<h3>Nights not counted in the expectation</h3><table><tr><th>night (start, UTC)</th>"
                    f'<th>why</th><th>run</th></tr>{rows}</table>')
    return Section(f"Configuration: {identity}", [], "", body="\n".join(body))


def band_statement(bands: Bands) -> Section:
    text = (f"Each panel draws a family's figures over the nights against the expectation validate would judge the "
            f"next night by: the median of the configuration's last {bands.nights} passing (counted) nights, once "
            f"{bands.min_nights} hold the figure. Rates are in % of it, shares of step time in points above it. "
            f"Shaded: the policy's default bands — pass (green) within {100 * bands.warn:g}% below the expectation "
            f"for a rate, {100 * bands.share_warn:g} points above it for a share; warn (amber) to "
            f"{100 * bands.fail:g}% / {100 * bands.share_fail:g} points; fail (red) beyond. validate widens these "
            f"bands where the nights vary (2 and 3 sigma of their MAD; the fail band at most {bands.max_widening:g} "
            f"times the policy's), and a --policy file may set others: neither is drawn here. Nights not counted "
            f"(a failed or interrupted run: red dotted line; a regression validate failed: orange) are marked X. "
            f"x: the nights' start dates (UTC).")
    return Section("How to read the panels", [], "", body=f'<p class="band">{html.escape(text)}</p>')


def history_page(directory: str, bands: Bands) -> str:
    nights = read_history(directory)
    identities = sorted({str(n.get("identity", "")) for n in nights})
    summary = (f"{len(nights)} night(s) of {len(identities)} configuration(s) in {directory}"
               + (f", {sum(1 for n in nights if not_counted(n))} not counted" if nights else ""))
    if not nights:
        return page_html("trainbench history", summary, [Section(
            "History", [], "", missing="The history directory holds no nights yet (run `trainbench validate RUN.h5 "
                                      "--history DIR`).")])
    sections = [band_statement(bands)]
    sections += [configuration_section(identity, [n for n in nights if str(n.get("identity", "")) == identity], bands)
                 for identity in identities]
    return page_html("trainbench history", summary, sections)


def reports_page(args: argparse.Namespace) -> str:
    """The page of reports (and of a cost file): the decision first where there is one, then the plots."""
    runs = [read_run(path) for path in args.reports]
    cost = read_cost(args.cost) if args.cost else None
    names = short_names([r.path for r in runs] + [str(row["run"]) for row in (cost.rows if cost else [])])
    for run in runs:
        run.name = names[run.path]
    export, what = (args.cost, "cost file") if args.cost else (args.export, "export file")
    comparison = read_comparability(read_json(export, what), export, what) if export else None
    comparability = [comparability_section(comparison, names)] if comparison else []
    plots = [busbw_section(runs), scaling_section(runs), stall_section(runs), p2p_section(runs)]
    summary = f"{len(runs)} report(s)"
    if cost is None:
        return page_html("trainbench plots", summary, comparability + plots + [cost_section(None, names)], runs=runs)
    decision = args.decision or decision_of_cost_file(cost.decision)
    lead = [decision_section(decision, from_file=not args.decision)] if decision else []
    return page_html("trainbench cost", summary + " and their cost",
                     [cost_section(cost, names)] + comparability + plots, lead=lead, runs=runs)


def main(argv: list[str]) -> int:
    args = parse_args(argv)
    if MISSING_PACKAGE:
        die(f"{sys.executable} lacks the Python package '{MISSING_PACKAGE}': install python3-h5py "
            "python3-matplotlib (Debian packages, for /usr/bin/python3)", code=3)
    try:
        if args.history is not None:
            if args.reports or args.cost or args.export:
                die("--history draws a history directory alone (no reports, no --cost or --export)")
            write_atomically(args.out, history_page(args.history, read_bands(args.bands)))
            return 0
        if not args.reports:
            die(f"no reports given (usage: {PROG} --out PAGE.html [--cost COST.json | --export REPORT.json] "
                "REPORT.h5 ...)")
        if args.cost and args.export:
            die("--cost and --export are two kinds of the same input: give one")
        if args.decision and not args.cost:
            die("--decision goes with --cost (the decision of that cost file)")
        if args.bands:
            die("--bands goes with --history")
        write_atomically(args.out, reports_page(args))
    except InputProblem as e:
        die(str(e))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
