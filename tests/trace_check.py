"""Reads the traces of `trainbench report --trace/--trace-dir` back and compares them with the steps table.

    trace_check.py STEPS.json TRACE.json TRACE_DIR

STEPS.json: the traced point's steps table and stall budget as h5py read them (trace_cli_test.sh writes it with
Debian's /usr/bin/python3). Three readers, each checked against the table: this script's own reading of the JSON
(nesting, no overlap on a track, names, every duration to the nanosecond); Holistic Trace Analysis on the per-rank
directory (slices per rank and iteration, durations to its microsecond rounding); Perfetto's trace processor on the
single file (slices per process and track, durations in nanoseconds), when its binary can be had. Prints one line
per reader ("ok: ...", or "SKIP: ..." saying why a reader could not run) and exits 1 on the first mismatch.
"""
import json
import math
import os
import sys
from collections import defaultdict

PHASES = ["data_wait", "h2d", "forward", "backward", "comm_exposed", "optimizer", "checkpoint_stall"]


def ns(microseconds):
    return round(microseconds * 1000)


def expected_slices(rows):
    """(rank, name) -> [(step, seconds)] of every slice the table asks for, in step order."""
    want = defaultdict(list)
    for row in sorted(rows, key=lambda r: (r["rank"], r["step"])):
        want[(row["rank"], "ProfilerStep#%d" % row["step"])].append((row["step"], row["step_s"]))
        for phase in PHASES:
            value = row[phase + "_s"]
            if not math.isnan(value) and value > 0:
                want[(row["rank"], phase)].append((row["step"], value))
    return want


def check_own_reading(table, trace):
    rows = table["steps"]
    events = trace["traceEvents"]
    other = trace["otherData"]
    assert other["point"] == table["point"], (other["point"], table["point"])
    assert "laid end to end" in other["timeline"], other["timeline"]
    names = {(e["pid"], e.get("tid"), e["name"]): e["args"] for e in events if e["ph"] == "M"}
    for rank, host, device in table["places"]:
        got = names[(rank, 1, "process_name")]["name"]
        assert got == "%s:%d:%s" % (host, rank, device), got
        for tid, track in enumerate(["steps"] + PHASES, start=1):
            assert names[(rank, tid, "thread_name")]["name"] == track, (rank, tid, names[(rank, tid, "thread_name")])
    slices = [e for e in events if e["ph"] == "X"]
    got = defaultdict(list)
    for e in slices:
        if e["cat"] in ("step", "phase"):
            got[(e["pid"], e["name"])].append((e["args"]["step"], e["dur"]))
    want = expected_slices(rows)
    assert set(got) == set(want), sorted(set(got) ^ set(want))
    for key, expected in want.items():
        seen = sorted(got[key])
        assert [s for s, _ in seen] == [s for s, _ in expected], (key, seen, expected)
        for (step, dur), (_, seconds) in zip(seen, expected):
            assert abs(ns(dur) - seconds * 1e9) <= 1.5, (key, step, dur, seconds)  # whole nanoseconds
    # Steps end to end per rank; each phase inside its step, the step's phases one after another; no overlap on a
    # track; comm_total ends with comm_exposed.
    steps = {(e["pid"], e["args"]["step"]): (ns(e["ts"]), ns(e["ts"]) + ns(e["dur"])) for e in slices if e["cat"] == "step"}
    for rank in {r["rank"] for r in rows}:
        mine = sorted((step, span) for (pid, step), span in steps.items() if pid == rank)
        assert mine[0][1][0] == 0, mine[0]
        for (_, a), (_, b) in zip(mine, mine[1:]):
            assert a[1] == b[0], (rank, a, b)
    by_step = defaultdict(list)
    for e in slices:
        start, end = ns(e["ts"]), ns(e["ts"]) + ns(e["dur"])
        step_start, step_end = steps[(e["pid"], e["args"]["step"])]
        assert step_start <= start <= end <= step_end, ("not inside its step", e)
        by_step[(e["pid"], e["args"]["step"])].append((start, end, e["name"], e["cat"]))
    for key, parts in by_step.items():
        phases = sorted((PHASES.index(n), s, t) for s, t, n, c in parts if c == "phase")
        assert phases and phases[0][1] == steps[key][0], (key, phases)
        for (_, _, end), (_, start, _) in zip(phases, phases[1:]):
            assert end == start, ("phases not one after another", key, phases)
        comm = [p for p in parts if p[3] == "comm_total"]
        exposed = [p for p in parts if p[2] == "comm_exposed"]
        if comm and exposed:
            assert comm[0][1] == exposed[0][1], ("comm_total does not end with comm_exposed", key)
    tracks = defaultdict(list)
    for e in slices:
        tracks[(e["pid"], e["tid"])].append((ns(e["ts"]), ns(e["ts"]) + ns(e["dur"])))
    for track, spans in tracks.items():
        spans.sort()
        for a, b in zip(spans, spans[1:]):
            assert a[1] <= b[0], ("overlap on a track", track, a, b)
    counts = {rank: sum(1 for pid, _ in steps if pid == rank) for rank in sorted({pid for pid, _ in steps})}
    return "ok: own reading: %d slices; steps per rank %s; nested, no overlap, durations to 1 ns" % (len(slices), counts)


def hta_slices(trace_dir, exact):
    """Rank -> name -> [(iteration, dur in us)] as HTA reads the per-rank traces. HTA rounds each slice's start up and
    its end down to whole microseconds unless HTA_DISABLE_NS_ROUNDING=1 (`exact`)."""
    from hta.trace_analysis import TraceAnalysis
    os.environ["HTA_DISABLE_NS_ROUNDING"] = "1" if exact else "0"
    # PyTorch's last ProfilerStep is usually cut short and HTA leaves it out by default; ours are complete.
    trace = TraceAnalysis(trace_dir=trace_dir, include_last_profiler_step=True).t
    symbols = trace.symbol_table.get_sym_table()
    slices = {}
    for rank in trace.get_ranks():
        df = trace.get_trace(rank)
        got = defaultdict(list)
        for name, iteration, dur in zip(df["name"], df["iteration"], df["dur"]):
            got[symbols[name]].append((int(iteration), float(dur)))
        slices[rank] = (got, [int(i) for i in trace.get_iterations(rank)])
    return slices


def check_hta(table, trace_dir):
    try:
        import hta  # noqa: F401
    except ImportError as e:
        return "SKIP: Holistic Trace Analysis not installed (%s; launch/setup installs it with pip)" % e
    import logging
    logging.disable(logging.WARNING)
    rows = table["steps"]
    ranks = sorted({r["rank"] for r in rows})
    want = expected_slices(rows)
    counts = {}
    for exact in (False, True):
        slices = hta_slices(trace_dir, exact)
        assert sorted(slices) == ranks, (sorted(slices), ranks)
        for rank in ranks:
            got, iterations = slices[rank]
            assert iterations == sorted(r["step"] for r in rows if r["rank"] == rank), (rank, iterations)
            names = {name for r, name in want if r == rank}
            assert set(got) - {"comm_total"} == names, ("HTA", rank, sorted(set(got) ^ names))
            for (r, name), expected in want.items():
                if r != rank:
                    continue
                seen = sorted(got[name])
                assert [s for s, _ in seen] == [s for s, _ in expected], ("HTA", rank, name, seen, expected)
                for (step, dur), (_, seconds) in zip(seen, expected):
                    shrunk = seconds * 1e6 - dur  # rounded: up to 1 us off each end
                    ok = abs(shrunk) <= 0.0015 if exact else -1e-6 <= shrunk <= 2 + 1e-6
                    assert ok, ("HTA", "exact" if exact else "rounded", rank, name, step, dur, seconds)
            counts[rank] = sum(len(v) for name, v in got.items() if name.startswith("ProfilerStep#"))
    return ("ok: HTA: ranks %s, iterations (ProfilerStep#N) per rank %s, each phase's slices per rank as the table's; "
            "durations to 1 ns (HTA_DISABLE_NS_ROUNDING=1), and within HTA's whole-microsecond rounding" % (ranks, counts))


def quietly(call):
    """call() with file descriptors 1 and 2 on /dev/null: the package's download prints its progress there."""
    sys.stdout.flush()
    sys.stderr.flush()
    saved = [os.dup(1), os.dup(2)]
    null = os.open(os.devnull, os.O_WRONLY)
    try:
        os.dup2(null, 1)
        os.dup2(null, 2)
        return call()
    finally:
        os.dup2(saved[0], 1)
        os.dup2(saved[1], 2)
        for fd in saved + [null]:
            os.close(fd)


def trace_processor_shell():
    """The trace_processor_shell binary: $TRAINBENCH_TRACE_PROCESSOR, or the perfetto package's (downloaded on first
    use); (None, why) when there is none."""
    if os.environ.get("TRAINBENCH_TRACE_PROCESSOR"):
        return os.environ["TRAINBENCH_TRACE_PROCESSOR"], ""
    try:
        from perfetto.prebuilts.manifests.trace_processor_shell import TRACE_PROCESSOR_SHELL_MANIFEST
        from perfetto.prebuilts.perfetto_prebuilts import get_perfetto_prebuilt
    except ImportError as e:
        return None, "the perfetto package is not installed (%s; launch/setup installs it with pip)" % e
    try:
        return quietly(lambda: get_perfetto_prebuilt(TRACE_PROCESSOR_SHELL_MANIFEST)), ""
    except Exception as e:  # the download: no network, or its host unreachable
        status = " %d" % e.returncode if hasattr(e, "returncode") else ""
        return None, ("the perfetto package could not download its trace_processor_shell binary on first use (%s%s); "
                      "set TRAINBENCH_TRACE_PROCESSOR to one" % (type(e).__name__, status))


def check_perfetto(table, trace_file):
    shell, why = trace_processor_shell()
    if shell is None:
        return "SKIP: Perfetto trace processor: " + why
    from perfetto.trace_processor import TraceProcessor, TraceProcessorConfig
    processor = TraceProcessor(trace=trace_file, config=TraceProcessorConfig(bin_path=shell))
    query = """select p.pid as pid, p.name as process, t.name as track, s.name as name, s.dur as dur, s.depth as depth,
                      extract_arg(s.arg_set_id, 'args.step') as step
               from slice s join thread_track tt on s.track_id = tt.id join thread t using (utid)
               join process p using (upid)"""
    got = defaultdict(list)
    processes = {}
    for row in processor.query(query):
        assert row.depth == 0, ("Perfetto nested a slice inside another on its track", row)
        got[(row.pid, row.name)].append((row.step, row.dur))
        processes[row.pid] = row.process
    processor.close()
    for rank, host, device in table["places"]:
        assert processes[rank] == "%s:%d:%s" % (host, rank, device), processes
    want = expected_slices(table["steps"])
    for key, expected in want.items():
        seen = sorted(got.get(key, []))
        assert [s for s, _ in seen] == [s for s, _ in expected], ("Perfetto", key, seen, expected)
        for (step, dur), (_, seconds) in zip(seen, expected):
            assert abs(dur - seconds * 1e9) <= 1.5, ("Perfetto", key, step, dur, seconds)
    return "ok: Perfetto trace processor: %d slices, every duration to 1 ns" % sum(len(v) for v in got.values())


def main():
    table_file, trace_file, trace_dir = sys.argv[1:]
    table = json.load(open(table_file))
    trace = json.load(open(trace_file))
    rows_per_rank = defaultdict(int)
    for row in table["steps"]:
        rows_per_rank[row["rank"]] += 1
    print("steps table of %s (h5py): rows per rank %s" % (table["point"], dict(sorted(rows_per_rank.items()))))
    for check in (lambda: check_own_reading(table, trace), lambda: check_hta(table, trace_dir),
                  lambda: check_perfetto(table, trace_file)):
        print(check())


if __name__ == "__main__":
    main()
