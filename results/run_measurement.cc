#include "run_measurement.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <set>

#include "definitions.h"
#include "error.h"

namespace tb {
namespace {

class ReportReader {
 public:
  explicit ReportReader(const std::string& path) : path_(path) {}

  [[noreturn]] void Fail(const std::string& what) const { throw InputError("'" + path_ + "': " + what); }

  double Number(const Group& group, const std::string& name, const std::string& where) const {
    auto it = group.attributes.find(name);
    if (it == group.attributes.end()) Fail(where + " lacks the attribute " + name);
    if (const auto* d = std::get_if<double>(&it->second)) return *d;
    if (const auto* i = std::get_if<int64_t>(&it->second)) return static_cast<double>(*i);
    Fail(where + " attribute " + name + " is not a number");
  }
  double NumberOr(const Group& group, const std::string& name, double fallback) const {
    return group.attributes.contains(name) ? Number(group, name, name) : fallback;
  }
  std::string Text(const Group& group, const std::string& name) const {
    auto it = group.attributes.find(name);
    if (it == group.attributes.end()) return "";
    const auto* s = std::get_if<std::string>(&it->second);
    return s ? *s : "";
  }
  template <typename T>
  const std::vector<T>& Column(const Table& table, const std::string& name, const std::string& where) const {
    const tb::Column* column = table.Find(name);
    if (!column) Fail(where + " lacks the column " + name);
    const auto* values = std::get_if<std::vector<T>>(&column->values);
    if (!values) Fail(where + " column " + name + " has an unexpected type");
    return *values;
  }

 private:
  const std::string& path_;
};

// Node of each rank, from topology/ranks (every rank on node 0 when the table is missing).
std::map<int64_t, int64_t> RankNodes(const Report& report, const ReportReader& r) {
  std::map<int64_t, int64_t> nodes;
  const Group* topology = report.root.FindChild("topology");
  if (!topology || !topology->tables.contains("ranks")) return nodes;
  const Table& ranks = topology->tables.at("ranks");
  const auto& rank = r.Column<int64_t>(ranks, "rank", "topology/ranks");
  const auto& node = r.Column<int64_t>(ranks, "node", "topology/ranks");
  for (size_t i = 0; i < rank.size() && i < node.size(); ++i) nodes[rank[i]] = node[i];
  return nodes;
}

// Nodes spanned by ranks 0..k-1 and the most ranks any of them holds.
Layout LayoutOfFirst(int k, const std::map<int64_t, int64_t>& rank_nodes) {
  std::map<int64_t, int> per_node;
  for (int rank = 0; rank < k; ++rank) {
    auto it = rank_nodes.find(rank);
    ++per_node[it == rank_nodes.end() ? 0 : it->second];
  }
  Layout layout;
  layout.nodes = static_cast<int>(per_node.size());
  layout.gpus_per_node = 0;
  for (const auto& [node, count] : per_node) layout.gpus_per_node = std::max(layout.gpus_per_node, count);
  return layout;
}

// "k8" -> 8; 0 for other names (storage-sweep groups "k8_throttle200").
int PointRanks(const std::string& name) {
  const std::optional<PointGroup> point = ParsePointGroupName(name);
  return point && point->throttle_MBps == 0 ? static_cast<int>(point->ranks) : 0;
}

// Mean over measured steps of the slowest rank's step time without its checkpoint stall.
double StepWithoutCheckpoints(const Table& steps, const ReportReader& r, const std::string& where) {
  const auto& step = r.Column<int64_t>(steps, "step", where);
  const auto& warmup = r.Column<int64_t>(steps, "warmup", where);
  const auto& step_s = r.Column<double>(steps, "step_s", where);
  const auto& stall = r.Column<double>(steps, "checkpoint_stall_s", where);
  std::map<int64_t, double> slowest;
  for (size_t i = 0; i < step.size(); ++i) {
    if (warmup[i]) continue;
    double& s = slowest[step[i]];
    s = std::max(s, step_s[i] - stall[i]);
  }
  if (slowest.empty()) r.Fail(where + " has no measured steps: no training measurement");
  double sum = 0;
  for (const auto& [index, seconds] : slowest) sum += seconds;
  return sum / static_cast<double>(slowest.size());
}

// Ranks, nodes and the device of the launch (rank 0's GPU, or "cpu").
void ReadLaunch(const Report& report, const ReportReader& r, const std::map<int64_t, int64_t>& rank_nodes,
                RunMeasurement& run) {
  run.ranks = static_cast<int>(r.NumberOr(report.root, "n_ranks", static_cast<double>(rank_nodes.size())));
  std::set<int64_t> nodes;
  for (const auto& [rank, node] : rank_nodes) nodes.insert(node);
  run.nodes = std::max<int>(1, static_cast<int>(nodes.size()));
  run.device = "cpu";
  if (const Group* topology = report.root.FindChild("topology"); topology && topology->tables.contains("ranks")) {
    const Table& ranks = topology->tables.at("ranks");
    const auto& index = r.Column<int64_t>(ranks, "gpu_index", "topology/ranks");
    const auto& name = r.Column<std::string>(ranks, "gpu_name", "topology/ranks");
    if (!index.empty() && index[0] >= 0) run.device = name[0];
  }
}

// The mean checkpoint stall of a point's events (io/<point>/checkpoints), and the state they wrote.
void ReadCheckpointStalls(const Group* point_io, const std::string& name, const ReportReader& r, MeasuredPoint& p) {
  if (!point_io) return;
  p.checkpoint_state_bytes = r.NumberOr(*point_io, "checkpoint_state_bytes", 0.0);
  if (!point_io->tables.contains("checkpoints")) return;
  const auto& stalls = r.Column<double>(point_io->tables.at("checkpoints"), "stall_s", "io/" + name + "/checkpoints");
  if (stalls.empty()) return;
  double sum = 0;
  for (double s : stalls) sum += s;
  p.checkpoint_stall_s = sum / static_cast<double>(stalls.size());
  p.checkpoint_events = static_cast<int>(stalls.size());
}

// One scaling point of train/: its step without checkpoint stalls, communication and batch.
MeasuredPoint ReadPoint(const Group& group, const std::string& name, int k, const ReportReader& r,
                        const std::map<int64_t, int64_t>& rank_nodes, double bucket_bytes) {
  const std::string where = "train/" + name;
  if (!group.tables.contains("steps")) r.Fail(where + " lacks its steps table");
  MeasuredPoint p;
  p.train.k = k;
  const Layout layout = LayoutOfFirst(k, rank_nodes);
  p.train.nodes = layout.nodes;
  p.train.gpus_per_node = layout.gpus_per_node;
  p.train.step_s = StepWithoutCheckpoints(group.tables.at("steps"), r, where);
  p.train.comm_total_s = r.Number(group, "comm_total_s", where);
  p.train.comm_exposed_s = r.Number(group, "comm_exposed_s", where);
  p.train.gradient_bytes = r.Number(group, "gradient_bytes", where);
  // The all-reduces per step as train recorded them; reports written before it did get the estimate (buckets
  // close once they hold bucket_bytes, so a step has about this many).
  p.train.buckets = r.NumberOr(group, "gradient_buckets", 0.0);
  if (!(p.train.buckets >= 1)) p.train.buckets = std::max(1.0, std::ceil(p.train.gradient_bytes / bucket_bytes));
  p.train.tokens_per_step = r.Number(group, "tokens_per_step", where);
  p.step_s_reported = r.Number(group, "step_s", where);
  p.tokens_per_s_reported = r.Number(group, "tokens_per_s", where);
  p.micro_batch = static_cast<int>(r.Number(group, "micro_batch", where));
  if (!(p.train.step_s > 0) || !(p.train.tokens_per_step > 0)) r.Fail(where + " has no positive step time");
  return p;
}

void ReadModel(const Report& report, const ReportReader& r, RunMeasurement& run) {
  const Group* model = report.root.FindChild("model");
  if (!model) return;
  run.model_name = r.Text(*model, "name");
  run.model_scaled = r.Text(*model, "scaled");
  run.parameters = r.NumberOr(*model, "parameters", 0.0);
  run.memory_estimate.weights_bytes = r.NumberOr(*model, "memory_weights_bytes", 0.0);
  run.memory_estimate.gradients_bytes = r.NumberOr(*model, "memory_gradients_bytes", 0.0);
  run.memory_estimate.optimizer_bytes = r.NumberOr(*model, "memory_optimizer_bytes", 0.0);
  run.memory_estimate.activations_bytes = r.NumberOr(*model, "memory_activations_bytes", 0.0);
  run.memory_precision = r.Text(*model, "memory_precision");
}

}  // namespace

RunMeasurement ReadRunMeasurement(const Report& report, const std::string& path) {
  const ReportReader r(path);
  const Group* train = report.root.FindChild("train");
  if (!train) {
    r.Fail("no training measurement (a report of '" + r.Text(report.root, "command") +
           "'; run 'trainbench train' to measure throughput)");
  }
  RunMeasurement run;
  run.path = path;
  const std::map<int64_t, int64_t> rank_nodes = RankNodes(report, r);
  ReadLaunch(report, r, rank_nodes, run);
  run.weak_scaling = r.Text(*train, "scaling_mode") != "strong";
  run.startup_s = r.NumberOr(*train, "startup_s", 0.0);

  const Group* config = report.root.FindChild("config");
  const double bucket_bytes =
      (config ? r.NumberOr(*config, "bucket_mb", kDefaultBucketMiB) : kDefaultBucketMiB) * 1024.0 * 1024.0;
  const Group* io = report.root.FindChild("io");
  for (const auto& [name, group] : train->children()) {
    const int k = PointRanks(name);
    if (k == 0) continue;
    MeasuredPoint p = ReadPoint(*group, name, k, r, rank_nodes, bucket_bytes);
    ReadCheckpointStalls(io ? io->FindChild(name) : nullptr, name, r, p);
    run.points.push_back(std::move(p));
  }
  if (run.points.empty()) r.Fail("no training measurement (the train section holds no measured scaling point)");
  std::sort(run.points.begin(), run.points.end(),
            [](const MeasuredPoint& a, const MeasuredPoint& b) { return a.train.k < b.train.k; });

  const Group* collectives = report.root.FindChild("collectives");
  if (collectives && collectives->FindChild("all_reduce")) run.all_reduce = ReadAllReduceSamples(report, path);
  ReadModel(report, r, run);
  if (config) run.seq = static_cast<int>(r.NumberOr(*config, "seq", 0.0));
  run.peak_device_memory_bytes = r.NumberOr(*train, "peak_device_memory_bytes_max", 0.0);
  return run;
}

std::vector<AllReduceSample> ReadAllReduceSamples(const Report& report, const std::string& path) {
  const ReportReader r(path);
  const Group* collectives = report.root.FindChild("collectives");
  const Group* all_reduce = collectives ? collectives->FindChild("all_reduce") : nullptr;
  if (!all_reduce || !all_reduce->tables.contains("results")) {
    r.Fail("no all_reduce measurement (run 'trainbench collectives --ops all_reduce')");
  }
  const int n = static_cast<int>(r.Number(*all_reduce, "n_ranks", "collectives/all_reduce"));
  const Layout layout = LayoutOfFirst(n, RankNodes(report, r));
  const Table& results = all_reduce->tables.at("results");
  const std::string where = "collectives/all_reduce/results";
  const auto& size = r.Column<int64_t>(results, "size_bytes", where);
  const auto& out_time = r.Column<double>(results, "out_of_place_time_us", where);
  const auto& out_wrong = r.Column<int64_t>(results, "out_of_place_wrong", where);
  const auto& in_time = r.Column<double>(results, "in_place_time_us", where);
  const auto& in_wrong = r.Column<int64_t>(results, "in_place_wrong", where);
  std::vector<AllReduceSample> samples;
  for (size_t i = 0; i < size.size(); ++i) {
    // Out-of-place as nccl-tests quotes it; in-place when only that mode ran. Sizes that failed verification are
    // not measurements of a working all-reduce.
    const bool out_ok = out_time[i] > 0 && std::isfinite(out_time[i]) && out_wrong[i] <= 0;
    const bool in_ok = in_time[i] > 0 && std::isfinite(in_time[i]) && in_wrong[i] <= 0;
    if (!out_ok && !in_ok) continue;
    samples.push_back({layout.nodes, layout.gpus_per_node, static_cast<double>(size[i]), 1.0,
                       (out_ok ? out_time[i] : in_time[i]) * 1e-6,
                       "all_reduce " + std::to_string(size[i]) + " B at " + std::to_string(n) + " ranks"});
  }
  if (samples.empty()) r.Fail("the all_reduce sweep holds no verified measurement");
  return samples;
}

}  // namespace tb
