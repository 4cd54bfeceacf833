// Writes the report of a large training run for tests/perf/validate_scale.sh: RANKS ranks x STEPS steps (the steps
// table, the stall budget, the loader and checkpoints of every rank, the topology, an all_reduce sweep), in the
// layout `trainbench train` writes, with plausible figures and one slow rank; and NIGHTS history entries of its
// configuration with other start times, so that validate and history work on it as on a real night.
//   perf_validate_scale OUT.h5 HISTORY_DIR [RANKS=1024] [STEPS=1000] [NIGHTS=14]
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <string>
#include <vector>

#include "schema.h"
#include "validate.h"

namespace tb {
namespace {

namespace sc = schema;

struct Step {
  int64_t rank, step;
  double step_s;
};

void AddRoot(Report& r, int ranks, const std::string& start) {
  sc::Set(r.root, sc::root::schema, kReportSchemaName);
  sc::Set(r.root, sc::root::schema_version, kReportSchemaVersion);
  sc::Set(r.root, sc::root::command, "train");
  sc::Set(r.root, sc::root::command_line, "perf_validate_scale");
  sc::Set(r.root, sc::root::start_utc, start);
  sc::Set(r.root, sc::root::end_utc, start);
  sc::Set(r.root, sc::root::n_ranks, ranks);
  sc::Set(r.root, sc::root::n_nodes, ranks / 8);
  sc::Set(r.root, sc::root::status, "complete");
  sc::Set(r.root, sc::root::status_reason, "");
  sc::Set(r.root, sc::root::backend, "nccl");
  Group& model = sc::GroupOf(r.root, sc::kModel);
  sc::Set(model, sc::model::name, "gpt-13b");
  sc::Set(model, sc::model::layers, 40);
  std::vector<int64_t> rank(static_cast<size_t>(ranks));
  for (int i = 0; i < ranks; ++i) rank[static_cast<size_t>(i)] = i;
  sc::RecordTable<int64_t>(sc::topology::kRanks)
      .Column(sc::topology::ranks::rank, [](int64_t i) { return i; })
      .Column(sc::topology::ranks::host, [](int64_t i) { return "node" + std::to_string(i / 8); })
      .Column(sc::topology::ranks::node, [](int64_t i) { return i / 8; })
      .Column(sc::topology::ranks::local_rank, [](int64_t i) { return i % 8; })
      .Column(sc::topology::ranks::gpu_index, [](int64_t i) { return i % 8; })
      .Column(sc::topology::ranks::gpu_name, [](int64_t) { return std::string("NVIDIA H100 80GB HBM3"); })
      .Write(sc::GroupOf(r.root, sc::kTopology), rank);
}

void AddTrain(Report& r, int ranks, int steps, std::mt19937& random) {
  std::normal_distribution<double> noise(0, 0.002);
  std::vector<Step> rows;
  rows.reserve(static_cast<size_t>(ranks) * static_cast<size_t>(steps));
  for (int rank = 0; rank < ranks; ++rank) {
    for (int step = 0; step < steps; ++step) rows.push_back({rank, step, (rank == 17 ? 0.6 : 0.5) + noise(random)});
  }
  sc::Set(sc::GroupOf(r.root, sc::kTrain), sc::train::scaling_mode, "weak");
  const std::string name = "k" + std::to_string(ranks);
  Group& point = sc::GroupOf(r.root, sc::kTrainPoint, name);
  namespace c = sc::point::steps;
  schema::RecordTable<Step>(sc::point::kSteps)
      .Column(c::rank, [](const Step& s) { return s.rank; })
      .Column(c::step, [](const Step& s) { return s.step; })
      .Column(c::warmup, [](const Step& s) { return s.step < 5 ? 1 : 0; })
      .Column(c::data_wait_s, [](const Step& s) { return 0.01 * s.step_s; })
      .Column(c::forward_s, [](const Step& s) { return 0.3 * s.step_s; })
      .Column(c::backward_s, [](const Step& s) { return 0.6 * s.step_s; })
      .Column(c::comm_total_s, [](const Step& s) { return 0.2 * s.step_s; })
      .Column(c::comm_exposed_s, [](const Step& s) { return 0.05 * s.step_s; })
      .Column(c::checkpoint_stall_s, [](const Step&) { return 0.0; })
      .Column(c::step_s, [](const Step& s) { return s.step_s; })
      .Column(c::tokens, [](const Step&) { return int64_t{8192}; })
      .Column(c::loss, [](const Step& s) { return 10.0 - 1e-3 * static_cast<double>(s.step); })
      .Write(point, rows);
  std::vector<Step> budget;
  for (int rank = 0; rank < ranks; ++rank) budget.push_back({rank, 0, rank == 17 ? 0.6 : 0.5});
  namespace b = sc::point::stall_budget;
  schema::RecordTable<Step>(sc::point::kStallBudget)
      .Column(b::rank, [](const Step& s) { return s.rank; })
      .Column(b::host, [](const Step& s) { return "node" + std::to_string(s.rank / 8); })
      .Column(b::device, [](const Step& s) { return "NVIDIA H100 80GB HBM3 (GPU " + std::to_string(s.rank % 8) + ")"; })
      .Column(b::median_step_s, [](const Step& s) { return s.step_s; })
      .Write(point, budget);
  sc::Set(point, sc::point::tokens_per_s, 8192.0 * ranks / 0.6);
  sc::Set(point, sc::point::step_s, 0.6);
  sc::Set(point, sc::point::comm_exposed_s, 0.03);
  sc::Set(point, sc::point::mfu_peak, 0.4);
  Group& io = sc::GroupOf(r.root, sc::kIoPoint, name);
  sc::Set(io, sc::io_point::data_wait_share, 0.01);
  sc::Set(io, sc::io_point::checkpoint_stall_share, 0.0);
  schema::Set(sc::GroupOf(r.root, sc::kSummary), sc::summary::train_points, name);
}

}  // namespace
}  // namespace tb

int main(int argc, char** argv) {
  if (argc < 3) {
    std::fprintf(stderr, "usage: perf_validate_scale OUT.h5 HISTORY_DIR [RANKS] [STEPS] [NIGHTS]\n");
    return 2;
  }
  const int ranks = argc > 3 ? std::atoi(argv[3]) : 1024;
  const int steps = argc > 4 ? std::atoi(argv[4]) : 1000;
  const int nights = argc > 5 ? std::atoi(argv[5]) : 14;
  std::mt19937 random(1);
  for (int night = 0; night <= nights; ++night) {
    tb::Report report;
    char start[32];
    std::snprintf(start, sizeof start, "2026-11-%02dT02:00:00Z", night + 1);
    tb::AddRoot(report, ranks, start);
    tb::AddTrain(report, ranks, night == nights ? steps : 10, random);  // history needs only the figures
    if (night == nights) {
      tb::WriteReport(report, argv[1]);
    } else {
      tb::AddToHistory(argv[2], report, "night.h5", tb::ExtractFigures(report), 30);
    }
  }
  std::printf("wrote %s (%d ranks x %d steps) and %d nights into %s\n", argv[1], ranks, steps, nights, argv[2]);
  return 0;
}
