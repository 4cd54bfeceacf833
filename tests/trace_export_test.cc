// `trainbench report --trace` on hand-built reports: the point chosen, the process and track names, and the layout:
// steps end to end per rank, each phase inside its step in loop order, no two slices of a track overlapping,
// comm_total ending with comm_exposed; phases past a step's end cut and counted; the per-rank traces HTA reads.
#include "trace_export.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <limits>
#include <map>
#include <stdexcept>
#include <string>
#include <vector>

#include "error.h"

namespace tb {
namespace {

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

// One rank's step as the steps table holds it.
struct StepRow {
  int64_t rank, step, warmup;
  double data_wait, h2d, forward, backward, comm_total, comm_exposed, optimizer, checkpoint_stall, step_s;
};

void AddPoint(Report& report, const std::string& name, int64_t ranks, const std::vector<StepRow>& rows,
              const std::string& parallel = "dp") {
  Group& point = report.root.Child("train").Child(name);
  point.Set("ranks", ranks);
  point.Set("parallel", parallel);
  point.Set("tensor_parallel", int64_t{1});
  auto column = [&](auto get) {
    std::vector<decltype(get(rows.front()))> values;
    for (const StepRow& row : rows) values.push_back(get(row));
    return values;
  };
  point.tables["steps"]
      .Add("rank", "", column([](const StepRow& r) { return r.rank; }))
      .Add("step", "", column([](const StepRow& r) { return r.step; }))
      .Add("warmup", "", column([](const StepRow& r) { return r.warmup; }))
      .Add("data_wait_s", "s", column([](const StepRow& r) { return r.data_wait; }))
      .Add("h2d_s", "s", column([](const StepRow& r) { return r.h2d; }))
      .Add("forward_s", "s", column([](const StepRow& r) { return r.forward; }))
      .Add("backward_s", "s", column([](const StepRow& r) { return r.backward; }))
      .Add("comm_total_s", "s", column([](const StepRow& r) { return r.comm_total; }))
      .Add("comm_exposed_s", "s", column([](const StepRow& r) { return r.comm_exposed; }))
      .Add("optimizer_s", "s", column([](const StepRow& r) { return r.optimizer; }))
      .Add("checkpoint_stall_s", "s", column([](const StepRow& r) { return r.checkpoint_stall; }))
      .Add("step_s", "s", column([](const StepRow& r) { return r.step_s; }))
      .Add("tokens", "tokens", column([](const StepRow&) { return int64_t{64}; }))
      .Add("loss", "nats", column([](const StepRow&) { return 8.25; }));
  std::vector<int64_t> budget_ranks;
  std::vector<std::string> hosts, devices;
  for (int64_t r = 0; r < ranks; ++r) {
    budget_ranks.push_back(r);
    hosts.push_back(r < 2 ? "node-a" : "node-b");
    devices.push_back("NVIDIA H100 (GPU " + std::to_string(r % 2) + ")");
  }
  point.tables["stall_budget"].Add("rank", "", budget_ranks).Add("host", "", hosts).Add("device", "", devices);
}

Report TrainReport() {
  Report report;
  report.root.Set("command", std::string("train"));
  report.root.Set("command_line", std::string("trainbench train --scaling 1,2"));
  report.root.Set("start_utc", std::string("2024-05-01T12:00:00Z"));
  // k1: one rank, two steps. k2: two ranks, three steps (one warm-up); rank 1's rows come first and out of order,
  // its step 1 checkpoints, and its step 2's comm_total is longer than backward and comm_exposed together; rank 0's
  // step 2 has no data_wait (NaN), and its phases add up to more than the step (clocks disagreeing: cut).
  AddPoint(report, "k1", 1,
           {{0, 0, 1, 0.001, 0.001, 0.01, 0.02, 0, 0.0001, 0.003, 0, 0.04},
            {0, 1, 0, 0.001, 0.001, 0.01, 0.02, 0, 0.0001, 0.003, 0, 0.04}});
  AddPoint(report, "k2", 2,
           {{1, 2, 0, 0.002, 0.001, 0.010, 0.020, 0.030, 0.005, 0.002, 0, 0.040},
            {0, 0, 1, 0.001, 0.001, 0.012, 0.022, 0.015, 0.005, 0.003, 0, 0.050},
            {0, 1, 0, 0.001, 0.001, 0.011, 0.021, 0.015, 0.006, 0.003, 0, 0.045},
            {0, 2, 0, kNaN, 0.001, 0.011, 0.021, 0.015, 0.006, 0.003, 0, 0.040},
            {1, 0, 1, 0.001, 0.001, 0.012, 0.022, 0.015, 0.005, 0.003, 0, 0.050},
            {1, 1, 0, 0.001, 0.001, 0.011, 0.021, 0.015, 0.006, 0.003, 0.2, 0.245}});
  return report;
}

// An "X" slice in integer nanoseconds (the trace's microseconds carry whole nanoseconds).
struct Slice {
  std::string name, cat;
  int64_t pid, tid, start, end;
  Json args;
};

int64_t Ns(const Json& microseconds) { return std::llround(microseconds.get<double>() * 1000); }

std::vector<Slice> Slices(const Json& trace) {
  std::vector<Slice> slices;
  for (const Json& e : trace.at("traceEvents")) {
    if (e.at("ph") != "X") continue;
    const int64_t start = Ns(e.at("ts"));
    slices.push_back({e.at("name"), e.at("cat"), e.at("pid"), e.at("tid"), start, start + Ns(e.at("dur")), e.at("args")});
  }
  return slices;
}

// The metadata event `name` of (pid, tid): its args' `key`.
std::string MetadataName(const Json& trace, const std::string& name, int64_t pid, int64_t tid) {
  for (const Json& e : trace.at("traceEvents")) {
    if (e.at("ph") == "M" && e.at("name") == name && e.at("pid") == pid && e.at("tid") == tid) {
      return e.at("args").at("name");
    }
  }
  return "(none)";
}

TracedPoint Choose(const Report& report, const std::string& requested = "") {
  return ChooseTracePoint(report, "run.h5", requested);
}

TEST(TraceExport, ChoosesTheLargestPointOrTheOneAsked) {
  const Report report = TrainReport();
  const TracedPoint largest = Choose(report);
  EXPECT_EQ(largest.name, "k2");
  EXPECT_EQ(largest.ranks, (std::vector<int64_t>{0, 1}));
  EXPECT_EQ(largest.world_size, 2);
  EXPECT_EQ(largest.steps, 3u);
  EXPECT_EQ(Choose(report, "k1").name, "k1");
  try {
    Choose(report, "k4");
    FAIL() << "no error for a point the report lacks";
  } catch (const InputError& e) {
    EXPECT_STREQ(e.what(), "--trace-point 'k4': report 'run.h5' has no training point of that name with steps (it has "
                           "k1, k2)");
  }
}

TEST(TraceExport, RefusesAReportWithoutSteps) {
  Report collectives;
  collectives.root.Set("command", std::string("collectives"));
  try {
    Choose(collectives);
    FAIL() << "no error for a report without training steps";
  } catch (const InputError& e) {
    EXPECT_STREQ(e.what(), "cannot trace report 'run.h5': it has no training steps (a collectives report); --trace "
                           "shows the steps of a train or suite run");
  }
  Report empty = TrainReport();
  empty.root.Child("train").Release("k1");
  empty.root.Child("train").Release("k2");
  AddPoint(empty, "k2", 2, {});  // a run stopped before its first step: the table is there, without rows
  EXPECT_THROW(Choose(empty), InputError);
}

TEST(TraceExport, NamesProcessesAndTracks) {
  const Report report = TrainReport();
  const Json trace = PointTrace(report, "run.h5", Choose(report));
  EXPECT_EQ(MetadataName(trace, "process_name", 0, 1), "node-a:0:NVIDIA H100 (GPU 0)");
  EXPECT_EQ(MetadataName(trace, "process_name", 1, 1), "node-a:1:NVIDIA H100 (GPU 1)");
  const std::vector<std::string> tracks = {"steps",        "data_wait", "h2d",         "forward", "backward",
                                           "comm_exposed", "optimizer", "checkpoint_stall", "comm_total (overlaps backward)"};
  for (int64_t pid : {0, 1}) {
    for (size_t i = 0; i < tracks.size(); ++i) {  // tid from 1: Perfetto reads thread 0 of process 0 as swapper
      EXPECT_EQ(MetadataName(trace, "thread_name", pid, static_cast<int64_t>(i + 1)), tracks[i]) << pid << " " << i;
    }
  }
  EXPECT_EQ(trace.at("otherData").at("point"), "k2");
  EXPECT_EQ(trace.at("otherData").at("report"), "run.h5");
  EXPECT_NE(trace.at("otherData").at("timeline").get<std::string>().find("laid end to end"), std::string::npos);
}

TEST(TraceExport, StepsEndToEndWithTheirPhasesInside) {
  const Report report = TrainReport();
  const std::vector<Slice> slices = Slices(PointTrace(report, "run.h5", Choose(report)));
  std::map<std::pair<int64_t, int64_t>, const Slice*> steps;  // (rank, step)
  std::map<int64_t, int64_t> step_count;
  for (const Slice& s : slices) {
    if (s.cat != "step") continue;
    steps[{s.pid, s.args.at("step").get<int64_t>()}] = &s;
    ++step_count[s.pid];
    EXPECT_EQ(s.tid, 1);
    EXPECT_EQ(s.name, "ProfilerStep#" + std::to_string(s.args.at("step").get<int64_t>()));
  }
  EXPECT_EQ(step_count, (std::map<int64_t, int64_t>{{0, 3}, {1, 3}}));
  // End to end from 0, each as long as its step_s.
  EXPECT_EQ(steps.at({0, 0})->start, 0);
  EXPECT_EQ(steps.at({0, 0})->end, 50'000'000);
  EXPECT_EQ(steps.at({0, 1})->start, 50'000'000);
  EXPECT_EQ(steps.at({0, 2})->end, 135'000'000);
  EXPECT_EQ(steps.at({1, 1})->end - steps.at({1, 1})->start, 245'000'000);
  EXPECT_EQ(steps.at({1, 2})->start, 295'000'000);
  EXPECT_EQ(steps.at({0, 0})->args.at("warmup"), 1);

  // Every phase inside its step; a step's phases one after another in loop order.
  std::map<std::pair<int64_t, int64_t>, std::vector<const Slice*>> phases;
  for (const Slice& s : slices) {
    if (s.cat == "step") continue;
    const Slice& step = *steps.at({s.pid, s.args.at("step").get<int64_t>()});
    EXPECT_GE(s.start, step.start) << s.name;
    EXPECT_LE(s.end, step.end) << s.name;
    EXPECT_LE(s.start, s.end) << s.name;
    if (s.cat == "phase") phases[{s.pid, s.args.at("step").get<int64_t>()}].push_back(&s);
  }
  const std::vector<std::string> order = {"data_wait", "h2d",       "forward",         "backward",
                                          "comm_exposed", "optimizer", "checkpoint_stall"};
  for (const auto& [key, list] : phases) {
    EXPECT_EQ(list.front()->start, steps.at(key)->start);
    for (size_t i = 1; i < list.size(); ++i) {
      EXPECT_EQ(list[i]->start, list[i - 1]->end) << list[i]->name;
      EXPECT_LT(std::find(order.begin(), order.end(), list[i - 1]->name),
                std::find(order.begin(), order.end(), list[i]->name));
    }
  }
  // Rank 0 step 0: data_wait 1 ms, h2d 1 ms, forward 12 ms ... each as measured.
  const std::vector<const Slice*>& first = phases.at({0, 0});
  ASSERT_EQ(first.size(), 6u);  // checkpoint_stall 0: no slice
  EXPECT_EQ(first[2]->name, "forward");
  EXPECT_EQ(first[2]->start, 2'000'000);
  EXPECT_EQ(first[2]->end, 14'000'000);
  EXPECT_EQ(phases.at({0, 2}).front()->name, "h2d");  // data_wait NaN (not measured): no slice
  EXPECT_EQ(phases.at({1, 1}).back()->name, "checkpoint_stall");
  EXPECT_EQ(phases.at({1, 1}).back()->end - phases.at({1, 1}).back()->start, 200'000'000);
}

TEST(TraceExport, NoTwoSlicesOfATrackOverlap) {
  const Report report = TrainReport();
  std::map<std::pair<int64_t, int64_t>, std::vector<Slice>> tracks;
  for (const Slice& s : Slices(PointTrace(report, "run.h5", Choose(report)))) tracks[{s.pid, s.tid}].push_back(s);
  EXPECT_EQ(tracks.size(), 17u);  // 9 tracks per rank, less rank 0's checkpoint_stall (it took none)
  for (auto& [track, list] : tracks) {
    std::sort(list.begin(), list.end(), [](const Slice& a, const Slice& b) { return a.start < b.start; });
    for (size_t i = 1; i < list.size(); ++i) EXPECT_LE(list[i - 1].end, list[i].start) << list[i].name;
  }
}

TEST(TraceExport, CommTotalEndsWithCommExposedAndPhasesPastTheStepAreCut) {
  const Report report = TrainReport();
  const Json trace = PointTrace(report, "run.h5", Choose(report));
  const std::vector<Slice> slices = Slices(trace);
  auto find = [&](int64_t pid, int64_t step, const std::string& name) -> const Slice& {
    for (const Slice& s : slices) {
      if (s.pid == pid && s.name == name && s.args.at("step") == step) return s;
    }
    throw std::runtime_error("no slice " + name);
  };
  // Rank 0 step 1: comm_total 15 ms ends with comm_exposed (at 1+1+11+21+6 = 40 ms into the step).
  const Slice& comm = find(0, 1, "comm_total");
  EXPECT_EQ(comm.end, find(0, 1, "comm_exposed").end);
  EXPECT_EQ(comm.end - comm.start, 15'000'000);
  EXPECT_EQ(comm.tid, 9);
  // Rank 1 step 2: comm_total 30 ms is longer than backward + comm_exposed (25 ms, from 13 ms on): cut at backward's
  // start, by 5 ms.
  const Slice& long_comm = find(1, 2, "comm_total");
  EXPECT_EQ(long_comm.start, find(1, 2, "backward").start);
  EXPECT_EQ(long_comm.end - long_comm.start, 25'000'000);
  EXPECT_NEAR(long_comm.args.at("clipped_s").get<double>(), 0.005, 1e-12);
  EXPECT_EQ(long_comm.args.at("comm_total_s"), 0.030);
  // Rank 0 step 2: the phases add up to 42 ms in a 40 ms step: the optimizer's 3 ms cut at the step's end to 1 ms.
  const Slice& optimizer = find(0, 2, "optimizer");
  EXPECT_EQ(optimizer.end, find(0, 2, "ProfilerStep#2").end);
  EXPECT_EQ(optimizer.end - optimizer.start, 1'000'000);
  EXPECT_NEAR(optimizer.args.at("clipped_s").get<double>(), 0.002, 1e-12);
  EXPECT_EQ(optimizer.args.at("seconds"), 0.003);
  EXPECT_FALSE(find(0, 2, "comm_exposed").args.contains("clipped_s"));
  EXPECT_EQ(trace.at("otherData").at("clipped_slices"), 2);
  // fsdp communicates from forward on: there the floor is forward's start.
  Report fsdp = TrainReport();
  fsdp.root.Child("train").Child("k2").Set("parallel", std::string("fsdp"));
  for (const Slice& s : Slices(PointTrace(fsdp, "run.h5", Choose(fsdp)))) {
    if (s.pid == 1 && s.name == "comm_total" && s.args.at("step") == 2) {
      EXPECT_EQ(s.end - s.start, 30'000'000);
      EXPECT_FALSE(s.args.contains("clipped_s"));
    }
  }
}

TEST(TraceExport, PerRankTracesCarryDistributedInfoFirst) {
  const Report report = TrainReport();
  const TracedPoint point = Choose(report);
  const std::vector<Json> traces = PointTracesPerRank(report, "run.h5", point);
  ASSERT_EQ(traces.size(), 2u);
  for (int64_t rank : {0, 1}) {
    const Json& trace = traces[rank];
    EXPECT_EQ(trace.begin().key(), "distributedInfo");
    EXPECT_EQ(trace.at("distributedInfo").at("rank"), rank);
    EXPECT_EQ(trace.at("distributedInfo").at("world_size"), 2);
    for (const Slice& s : Slices(trace)) EXPECT_EQ(s.pid, rank);
    // HTA finds a file's rank by the first line matching "rank":\s+(\d+).
    const std::string text = TraceText(trace);
    const size_t at = text.find("\"rank\": ");
    ASSERT_NE(at, std::string::npos);
    EXPECT_EQ(text.substr(at, 9), "\"rank\": " + std::to_string(rank));
    EXPECT_EQ(text.find("\"rank\"", at + 1), std::string::npos);
    EXPECT_EQ(Json::parse(text), trace);
    size_t event_lines = 0;  // an event per line
    for (size_t line = text.find("\n{\"ph\":"); line != std::string::npos; line = text.find("\n{\"ph\":", line + 1)) {
      ++event_lines;
    }
    EXPECT_EQ(event_lines, trace.at("traceEvents").size());
  }
  EXPECT_EQ(Slices(traces[1]).size() + Slices(traces[0]).size(), Slices(PointTrace(report, "run.h5", point)).size());
  EXPECT_EQ(RankTraceFileName(3), "rank3.json");
}

TEST(TraceExport, TraceDirectoryHoldsNoOtherTraces) {
  const Report report = TrainReport();
  const TracedPoint point = Choose(report);
  const std::filesystem::path dir = std::filesystem::temp_directory_path() / ("trace_dir_test." + std::to_string(::getpid()));
  std::filesystem::remove_all(dir);
  EXPECT_NO_THROW(CheckTraceDirectory(dir.string(), "--trace-dir", point));  // made when written
  std::filesystem::create_directory(dir);
  std::ofstream(dir / "rank1.json") << "{}";
  std::ofstream(dir / "notes.txt") << "kept";
  EXPECT_NO_THROW(CheckTraceDirectory(dir.string(), "--trace-dir", point));
  std::ofstream(dir / "rank2.json") << "{}";  // an earlier export of more ranks
  try {
    CheckTraceDirectory(dir.string(), "--trace-dir", point);
    FAIL() << "no error for a stray trace";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("it holds 'rank2.json', which HTA would read"), std::string::npos) << e.what();
  }
  EXPECT_THROW(CheckTraceDirectory((dir / "notes.txt").string(), "--trace-dir", point), InputError);
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace tb
