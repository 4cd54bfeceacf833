// `trainbench report --trace`: one training point's steps table as Chrome trace-event JSON, the format Perfetto,
// chrome://tracing and Holistic Trace Analysis (HTA) read. A process per rank (pid = rank, named host:rank:device),
// a track per phase, an "X" slice per step and per phase, each phase inside its step. The steps table holds
// durations, not start times, so the steps are laid end to end: the layout and what it cannot show are in
// results/README.md ("Timeline: --trace and --trace-dir") and in each trace's otherData.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "json.h"
#include "report.h"

namespace tb {

// The training point a trace shows.
struct TracedPoint {
  std::string name;            // "k2", "k2_throttle800"
  std::vector<int64_t> ranks;  // the ranks of its steps table, ascending
  int64_t world_size = 0;      // the point's `ranks` attribute (else the ranks above)
  size_t steps = 0;            // the most steps any rank ran (warm-up included)
};

// The point `requested` names ("k2"), or, when it is empty, the largest: the last of summary/train_points (the one
// `report`'s train.summary shows; in reports before train_points, k<train_ranks>). Throws InputError naming `file`
// when the report has no training steps, when `requested` is no point of it with steps (the message lists those it
// has), or when its steps table lacks rank, step or step_s.
TracedPoint ChooseTracePoint(const Report& report, const std::string& file, const std::string& requested);

// Every rank of `point` in one trace (Perfetto, chrome://tracing). `file` names the report in the trace's otherData.
Json PointTrace(const Report& report, const std::string& file, const TracedPoint& point);

// One trace per rank of `point`, in rank order, each with distributedInfo {"rank", "world_size"} first, as HTA reads
// a directory of per-rank traces; written to RankTraceFileName(rank) in that directory.
std::vector<Json> PointTracesPerRank(const Report& report, const std::string& file, const TracedPoint& point);
std::string RankTraceFileName(int64_t rank);  // "rank0.json"

// InputError "refusing to write <flag> '<dir>': ..." when `dir` may not receive PointTracesPerRank's files: it is
// not a directory, or it holds a .json or .gz file other than those files (HTA would read it as one more rank's
// trace). A missing `dir` is fine (created when written).
void CheckTraceDirectory(const std::string& dir, const std::string& flag, const TracedPoint& point);

// The text of a trace file (DumpJson's): one event per line, the other top-level members indented, so that HTA's
// line scan finds distributedInfo's `"rank": R`.
std::string TraceText(const Json& trace);

}  // namespace tb
