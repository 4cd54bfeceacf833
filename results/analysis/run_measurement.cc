#include "run_measurement.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <set>

#include "console.h"
#include "definitions.h"
#include "error.h"
#include "schema.h"

namespace tb {
namespace {

class ReportReader {
 public:
  explicit ReportReader(const std::string& path) : path_(path) {}

  [[noreturn]] void Fail(const std::string& what) const { throw InputError("'" + path_ + "': " + what); }

  double Number(const Group& group, const schema::Field& field, const std::string& where) const {
    if (!group.attributes.contains(field.name)) Fail(where + " lacks the attribute " + field.name);
    const std::optional<double> value = schema::Number(&group, field);
    if (!value) Fail(where + " attribute " + field.name + " is not a number");
    return *value;
  }
  double NumberOr(const Group& group, const schema::Field& field, double fallback) const {
    return group.attributes.contains(field.name) ? Number(group, field, field.name) : fallback;
  }
  std::string Text(const Group& group, const schema::TextAttribute& field) const {
    const std::string* value = schema::Find(&group, field);
    return value ? *value : "";
  }
  // The column's values (for a name with a placeholder, its `key`'s: "<mode>_time_us" for "in_place").
  template <typename T>
  const std::vector<T>& Column(const Table& table, const schema::ColumnField<T>& column, const std::string& where,
                               const std::string& key = "") const {
    const tb::Column* c = schema::FindColumn(table, column, key);
    const std::string name = key.empty() ? column.name : column.Named(key);
    if (!c) Fail(where + " lacks the column " + name);
    const auto* values = std::get_if<std::vector<T>>(&c->values);
    if (!values) Fail(where + " column " + name + " has an unexpected type");
    return *values;
  }

 private:
  const std::string& path_;
};

// Node of each rank, from topology/ranks (every rank on node 0 when the table is missing).
std::map<int64_t, int64_t> RankNodes(const Report& report, const ReportReader& r) {
  std::map<int64_t, int64_t> nodes;
  const Table* ranks = schema::FindTable(schema::FindGroup(report.root, schema::kTopology), schema::topology::kRanks);
  if (!ranks) return nodes;
  const auto& rank = r.Column(*ranks, schema::topology::ranks::rank, "topology/ranks");
  const auto& node = r.Column(*ranks, schema::topology::ranks::node, "topology/ranks");
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
  namespace c = schema::point::steps;
  const auto& step = r.Column(steps, c::step, where);
  const auto& warmup = r.Column(steps, c::warmup, where);
  const auto& step_s = r.Column(steps, c::step_s, where);
  const auto& stall = r.Column(steps, c::checkpoint_stall_s, where);
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

// Sum of (data_wait + h2d) over sum of step time without checkpoint stalls, every rank's measured steps: the share
// of the priced step the loop waited for data (the stall budget's data_wait, io/<point> data_wait_share's definition).
double DataWaitShareOf(const Table& steps, const ReportReader& r, const std::string& where) {
  namespace c = schema::point::steps;
  const auto& warmup = r.Column(steps, c::warmup, where);
  const auto& step_s = r.Column(steps, c::step_s, where);
  const auto& stall = r.Column(steps, c::checkpoint_stall_s, where);
  const std::vector<double>* wait = schema::Values(steps, c::data_wait_s);  // each absent in the oldest reports: 0
  const std::vector<double>* h2d = schema::Values(steps, c::h2d_s);
  double waited = 0, total = 0;
  for (size_t i = 0; i < step_s.size(); ++i) {
    if (warmup[i]) continue;
    waited += (wait && i < wait->size() ? (*wait)[i] : 0) + (h2d && i < h2d->size() ? (*h2d)[i] : 0);
    total += step_s[i] - stall[i];
  }
  return total > 0 ? waited / total : 0.0;
}

// Mean over every rank's measured steps of AdamW's time (optimizer_s); 0 in reports without the column.
double OptimizerSecondsOf(const Table& steps, const ReportReader& r, const std::string& where) {
  namespace c = schema::point::steps;
  const auto& warmup = r.Column(steps, c::warmup, where);
  const std::vector<double>* optimizer = schema::Values(steps, c::optimizer_s);
  if (!optimizer) return 0.0;
  double sum = 0;
  int n = 0;
  for (size_t i = 0; i < warmup.size() && i < optimizer->size(); ++i) {
    if (warmup[i] || !std::isfinite((*optimizer)[i])) continue;
    sum += (*optimizer)[i];
    ++n;
  }
  return n > 0 ? sum / n : 0.0;
}

// Ranks, nodes and the device of the launch (rank 0's GPU, or "cpu").
void ReadLaunch(const Report& report, const ReportReader& r, const std::map<int64_t, int64_t>& rank_nodes,
                RunMeasurement& run) {
  run.ranks = static_cast<int>(r.NumberOr(report.root, schema::root::n_ranks, static_cast<double>(rank_nodes.size())));
  std::set<int64_t> nodes;
  for (const auto& [rank, node] : rank_nodes) nodes.insert(node);
  run.nodes = std::max<int>(1, static_cast<int>(nodes.size()));
  run.device = "cpu";
  const Table* ranks = schema::FindTable(schema::FindGroup(report.root, schema::kTopology), schema::topology::kRanks);
  if (ranks) {
    const auto& index = r.Column(*ranks, schema::topology::ranks::gpu_index, "topology/ranks");
    const auto& name = r.Column(*ranks, schema::topology::ranks::gpu_name, "topology/ranks");
    if (!index.empty() && index[0] >= 0) run.device = name[0];
  }
}

// The mean checkpoint stall of a point's events (io/<point>/checkpoints), and the state they wrote.
void ReadCheckpointStalls(const Group* point_io, const std::string& name, const ReportReader& r, MeasuredPoint& p) {
  if (!point_io) return;
  p.checkpoint_state_bytes = r.NumberOr(*point_io, schema::io_point::checkpoint_state_bytes, 0.0);
  const Table* checkpoints = schema::FindTable(point_io, schema::io_point::kCheckpoints);
  if (!checkpoints) return;
  const auto& stalls = r.Column(*checkpoints, schema::io_point::checkpoints::stall_s, "io/" + name + "/checkpoints");
  if (stalls.empty()) return;
  double sum = 0;
  for (double s : stalls) sum += s;
  p.checkpoint_stall_s = sum / static_cast<double>(stalls.size());
  p.checkpoint_events = static_cast<int>(stalls.size());
}

// The spread of tokens/s over a point's repeats, when it has more than one (a damaged spread table fails).
void ReadRepeats(const Group& group, const ReportReader& r, const std::string& where, MeasuredPoint& p) {
  namespace sp = schema::point;
  p.repeats = static_cast<int>(r.NumberOr(group, sp::repeat_count, 1.0));
  if (p.repeats < 2) return;
  const Table* spread = schema::FindTable(&group, sp::kSpread);
  if (spread == nullptr) r.Fail(where + " records " + std::to_string(p.repeats) + " repeats but no spread table");
  const auto& figure = r.Column(*spread, sp::spread::figure, where + "/spread");
  const auto& median = r.Column(*spread, sp::spread::median, where + "/spread");
  const auto& min = r.Column(*spread, sp::spread::min, where + "/spread");
  const auto& max = r.Column(*spread, sp::spread::max, where + "/spread");
  const auto& cv = r.Column(*spread, sp::spread::cv, where + "/spread");
  const std::string& tokens_per_s = sp::repeats::tokens_per_s.name;
  for (size_t i = 0; i < figure.size(); ++i) {
    if (figure[i] != tokens_per_s) continue;
    if (!(min[i] > 0) || !(min[i] <= median[i]) || !(median[i] <= max[i])) {
      r.Fail(where + "/spread: " + tokens_per_s + " is not a positive min <= median <= max");
    }
    p.tokens_per_s_median = median[i];
    p.tokens_per_s_min = min[i];
    p.tokens_per_s_max = max[i];
    p.tokens_per_s_cv = cv[i];
    return;
  }
  r.Fail(where + "/spread has no " + tokens_per_s + " row");
}

// Tensor parallel's figures of a point (T = 1 in reports before it): its activation all-reduces stay inside the group
// at any layout — compute base, not gradient sync — and are taken out of the communication.
void ReadTensorParallel(const Group& group, const ReportReader& r, const std::string& where, MeasuredPoint& p) {
  namespace sp = schema::point;
  const int k = p.train.k;
  p.train.tensor_parallel = static_cast<int>(r.NumberOr(group, sp::tensor_parallel, 1.0));
  if (p.train.tensor_parallel < 1 || k % p.train.tensor_parallel != 0) {
    r.Fail(where + " has tensor_parallel " + std::to_string(p.train.tensor_parallel) + " for " + std::to_string(k) +
           " ranks");
  }
  const double activation_s = r.NumberOr(group, sp::comm_activation_s, 0.0);
  p.train.comm_total_s -= activation_s;
  p.train.comm_exposed_s -= activation_s;
  const int t = p.train.tensor_parallel;
  if (t > 1) {  // sent = 2(T-1)/T of the buffers; ReadRunMeasurement counts the calls from the model's layers
    p.train.activation_s = activation_s;
    p.train.activation_bytes = r.NumberOr(group, sp::traffic_activation_bytes, 0.0) * t / (2.0 * (t - 1));
  }
}

// Mean over every rank's measured steps of a column (0 without it: reports before it).
double MeanOverMeasured(const Table& steps, const schema::RealColumn& column, const ReportReader& r,
                        const std::string& where) {
  const auto& warmup = r.Column(steps, schema::point::steps::warmup, where);
  const std::vector<double>* values = schema::Values(steps, column);
  double sum = 0;
  int n = 0;
  for (size_t i = 0; values && i < warmup.size() && i < values->size(); ++i) {
    if (warmup[i] || !std::isfinite((*values)[i])) continue;
    sum += (*values)[i];
    ++n;
  }
  return n > 0 ? sum / n : 0.0;
}

// Pipeline parallel's figures of a point (P = 1 in reports before it): the stages and micro-batches, the exchanges
// with the neighbouring stages and the tied embedding's all-reduce — taken out of the gradient communication (they
// stay in the compute base of a projection) — and the bytes of one boundary exchange: what a rank sent per step,
// M x (2(P-1)/P) of them on average (the first and last stage send to one neighbour, the others to two).
void ReadPipeline(const Group& group, const Table& steps, const ReportReader& r, const std::string& where,
                  MeasuredPoint& p) {
  namespace sp = schema::point;
  TrainPointInput& t = p.train;
  t.pipeline_parallel = static_cast<int>(r.NumberOr(group, sp::pipeline_parallel, 1.0));
  t.micro_batches = static_cast<int>(r.NumberOr(group, sp::micro_batches, 1.0));
  if (t.pipeline_parallel < 1 || t.k % (t.tensor_parallel * t.pipeline_parallel) != 0 || t.micro_batches < 1) {
    r.Fail(where + " has pipeline_parallel " + std::to_string(t.pipeline_parallel) + " (micro_batches " +
           std::to_string(t.micro_batches) + ") for " + std::to_string(t.k) + " ranks of tensor_parallel " +
           std::to_string(t.tensor_parallel));
  }
  if (t.pipeline_parallel == 1) return;
  t.pipeline_s = r.NumberOr(group, sp::comm_pipeline_s, 0.0);
  t.embedding_s = MeanOverMeasured(steps, sp::steps::comm_embedding_s, r, where);
  t.comm_total_s -= t.pipeline_s + t.embedding_s;
  t.comm_exposed_s -= t.pipeline_s + t.embedding_s;
  const double sent = r.NumberOr(group, sp::traffic_pipeline_bytes, 0.0);
  t.edge_bytes = sent * t.pipeline_parallel / (2.0 * t.micro_batches * (t.pipeline_parallel - 1));
  if (const std::vector<int64_t>* bytes = schema::Values(steps, sp::steps::embedding_allreduce_bytes)) {
    for (int64_t b : *bytes) t.embedding_bytes = std::max(t.embedding_bytes, static_cast<double>(b));
  }
  p.bubble_measured = r.NumberOr(group, sp::bubble_measured, std::nan(""));
  p.bubble_theory = r.NumberOr(group, sp::bubble_theory, std::nan(""));
}

// Expert parallel's figures of a point (EP = 1 in reports before it): its dispatch and combine all-to-alls — taken out
// of the gradient communication; a projection onto a fabric models them at the candidate's EP and links, one onto
// fitted links carries them as measured — and the bytes a rank sent in them per step.
void ReadExperts(const Group& group, const ReportReader& r, const std::string& where, MeasuredPoint& p) {
  namespace sp = schema::point;
  TrainPointInput& t = p.train;
  t.expert_parallel = static_cast<int>(r.NumberOr(group, sp::expert_parallel, 1.0));
  if (t.expert_parallel < 1 || t.k % t.expert_parallel != 0) {
    r.Fail(where + " has expert_parallel " + std::to_string(t.expert_parallel) + " for " + std::to_string(t.k) +
           " ranks");
  }
  t.alltoall_s = r.NumberOr(group, sp::comm_alltoall_s, 0.0);
  t.alltoall_bytes = r.NumberOr(group, sp::alltoall_bytes, 0.0);
  t.comm_total_s -= t.alltoall_s;
  t.comm_exposed_s -= t.alltoall_s;
}

// One scaling point of train/: its step without checkpoint stalls, communication and batch.
MeasuredPoint ReadPoint(const Group& group, const std::string& name, int k, const ReportReader& r,
                        const std::map<int64_t, int64_t>& rank_nodes, double bucket_bytes) {
  const std::string where = "train/" + name;
  namespace sp = schema::point;
  const Table* steps = schema::FindTable(&group, sp::kSteps);
  if (!steps) r.Fail(where + " lacks its steps table");
  MeasuredPoint p;
  p.train.k = k;
  // The layout train recorded (an explicit --scaling AxB need not be the first k ranks); before it did, the first k.
  Layout layout = LayoutOfFirst(k, rank_nodes);
  const double nodes = r.NumberOr(group, sp::nodes, 0.0), per_node = r.NumberOr(group, sp::ranks_per_node, 0.0);
  if (nodes >= 1 && per_node >= 1) layout = {static_cast<int>(nodes), static_cast<int>(per_node)};
  p.train.nodes = layout.nodes;
  p.train.gpus_per_node = layout.gpus_per_node;
  p.train.step_s = StepWithoutCheckpoints(*steps, r, where);
  p.data_wait_share = DataWaitShareOf(*steps, r, where);
  p.optimizer_s = OptimizerSecondsOf(*steps, r, where);
  p.train.comm_total_s = r.Number(group, sp::comm_total_s, where);
  p.train.comm_exposed_s = r.Number(group, sp::comm_exposed_s, where);
  ReadTensorParallel(group, r, where, p);
  ReadPipeline(group, *steps, r, where, p);
  ReadExperts(group, r, where, p);
  p.train.gradient_bytes = r.Number(group, sp::gradient_bytes, where);
  // The all-reduces per step as train recorded them; reports written before it did get the estimate (buckets
  // close once they hold bucket_bytes, so a step has about this many).
  p.train.buckets = r.NumberOr(group, sp::gradient_buckets, 0.0);
  if (!(p.train.buckets >= 1)) p.train.buckets = std::max(1.0, std::ceil(p.train.gradient_bytes / bucket_bytes));
  // The mode's collectives as all-reduces; fsdp's gathered bytes from what the point sent ((k-1)/k of them).
  const std::string parallel = r.Text(group, sp::parallel);
  p.train.parallel = parallel.empty() ? "dp" : parallel;  // reports before the modes: dp
  const double sent = r.NumberOr(group, sp::traffic_parameter_gather_bytes, 0.0);
  const double gathered = k > 1 && sent > 0 ? sent * k / (k - 1) : 0.0;
  try {
    const ModeCollectives c = CollectivesOf(p.train.parallel, p.train.gradient_bytes, p.train.buckets, gathered);
    p.train.comm_bytes = c.bytes;
    p.train.buckets = c.ops;
  } catch (const InputError& e) {
    r.Fail(where + ": " + e.what());
  }
  p.train.tokens_per_step = r.Number(group, sp::tokens_per_step, where);
  p.step_s_reported = r.Number(group, sp::step_s, where);
  p.tokens_per_s_reported = r.Number(group, sp::tokens_per_s, where);
  p.micro_batch = static_cast<int>(r.Number(group, sp::micro_batch, where));
  p.gather_exposed_s = r.NumberOr(group, sp::comm_gather_exposed_s, 0.0);
  p.joules_per_token = r.NumberOr(group, sp::joules_per_token, std::nan(""));  // reports before NVML have none
  if (!(p.train.step_s > 0) || !(p.train.tokens_per_step > 0)) r.Fail(where + " has no positive step time");
  ReadRepeats(group, r, where, p);
  return p;
}

void ReadModel(const Report& report, const ReportReader& r, RunMeasurement& run) {
  namespace m = schema::model;
  const Group* model = schema::FindGroup(report.root, schema::kModel);
  if (!model) return;
  run.model_name = r.Text(*model, m::name);
  run.model_scaled = r.Text(*model, m::scaled);
  run.parameters = r.NumberOr(*model, m::parameters, 0.0);
  run.memory_estimate.weights_bytes = r.NumberOr(*model, m::memory_weights_bytes, 0.0);
  run.memory_estimate.gradients_bytes = r.NumberOr(*model, m::memory_gradients_bytes, 0.0);
  run.memory_estimate.optimizer_bytes = r.NumberOr(*model, m::memory_optimizer_bytes, 0.0);
  run.memory_estimate.activations_bytes = r.NumberOr(*model, m::memory_activations_bytes, 0.0);
  run.memory_precision = r.Text(*model, m::memory_precision);
  run.layers = static_cast<int>(r.NumberOr(*model, m::layers, 0.0));
  run.d_model = static_cast<int>(r.NumberOr(*model, m::d_model, 0.0));
  run.heads = static_cast<int>(r.NumberOr(*model, m::heads, 0.0));
  run.vocab = static_cast<int>(r.NumberOr(*model, m::vocab, 0.0));
  run.max_seq = static_cast<int>(r.NumberOr(*model, m::max_seq, 0.0));
  run.experts = static_cast<int>(r.NumberOr(*model, m::experts, 0.0));
  run.top_k = static_cast<int>(r.NumberOr(*model, m::top_k, 0.0));
  run.expert_ffn = static_cast<int>(r.NumberOr(*model, m::expert_ffn, 0.0));
  run.moe_every = static_cast<int>(r.NumberOr(*model, m::moe_every, 1.0));
  run.capacity_factor = r.NumberOr(*model, m::capacity_factor, 0.0);
  run.aux_loss_coef = r.NumberOr(*model, m::aux_loss_coef, 0.0);
  if (run.experts > 0) {
    if (run.top_k < 1 || run.top_k > run.experts || run.expert_ffn < 1 || run.moe_every < 1) {
      r.Fail(Format("model has %d experts with top_k %d, expert_ffn %d, moe_every %d", run.experts, run.top_k,
                    run.expert_ffn, run.moe_every));
    }
  }
}

}  // namespace

RunMeasurement ReadRunMeasurement(const Report& report, const std::string& path) {
  const ReportReader r(path);
  const Group* train = schema::FindGroup(report.root, schema::kTrain);
  if (!train) {
    r.Fail("no training measurement (a report of '" + r.Text(report.root, schema::root::command) +
           "'; run 'trainbench train' to measure throughput)");
  }
  RunMeasurement run;
  run.path = path;
  const std::map<int64_t, int64_t> rank_nodes = RankNodes(report, r);
  ReadLaunch(report, r, rank_nodes, run);
  run.weak_scaling = r.Text(*train, schema::train::scaling_mode) != "strong";
  run.startup_s = r.NumberOr(*train, schema::train::startup_s, 0.0);

  const Group* config = schema::FindGroup(report.root, schema::kConfig);
  const double bucket_bytes =
      (config ? r.NumberOr(*config, schema::config::bucket_mb, kDefaultBucketMiB) : kDefaultBucketMiB) * 1024.0 * 1024.0;
  run.bucket_bytes = bucket_bytes;
  const Group* io = schema::FindGroup(report.root, schema::kIo);
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

  if (schema::FindGroup(report.root, schema::kCollective, "all_reduce")) {
    run.all_reduce = ReadAllReduceSamples(report, path);
  }
  run.parallel = run.points.back().train.parallel;
  ReadModel(report, r, run);
  // The tensor-parallel models' all-reduces per step: the embedding's, two per block in forward (after attn.proj and
  // mlp.proj) and two in backward (the input gradients of qkv and fc), the cross-entropy's two (row maxima; sums of
  // exp and target logits) and the LM head's input gradient (models/tensor_parallel.h).
  for (MeasuredPoint& p : run.points) {
    if (p.train.tensor_parallel > 1 && run.layers > 0) p.train.activation_ops = 4.0 * run.layers + 4.0;
  }
  if (config) run.seq = static_cast<int>(r.NumberOr(*config, schema::config::seq, 0.0));
  run.peak_device_memory_bytes = r.NumberOr(*train, schema::train::peak_device_memory_bytes_max, 0.0);
  return run;
}

std::vector<AllReduceSample> ReadAllReduceSamples(const Report& report, const std::string& path) {
  const ReportReader r(path);
  namespace c = schema::collective;
  const Group* all_reduce = schema::FindGroup(report.root, schema::kCollective, "all_reduce");
  const Table* table = schema::FindTable(all_reduce, c::kResults);
  if (!table) r.Fail("no all_reduce measurement (run 'trainbench collectives --ops all_reduce')");
  const int n = static_cast<int>(r.Number(*all_reduce, c::n_ranks, "collectives/all_reduce"));
  // Under --split the communicators are a node's ranks (intra) or one rank per node (inter, all local ranks' at
  // once: the inter-node phase of a hierarchical all-reduce, NICs shared as there).
  const std::string* split = schema::Find(all_reduce, c::split);
  Layout layout = LayoutOfFirst(n, RankNodes(report, r));
  if (split && *split == "intra") layout = {1, n};
  if (split && *split == "inter") layout = {n, 1};
  const std::string of = split && *split != "all" ? " (--split " + *split + ")" : "";
  const Table& results = *table;
  const std::string where = "collectives/all_reduce/results";
  const auto& size = r.Column(results, c::results::size_bytes, where);
  const auto& out_time = r.Column(results, c::results::time_us, where, "out_of_place");
  const auto& out_wrong = r.Column(results, c::results::wrong, where, "out_of_place");
  const auto& in_time = r.Column(results, c::results::time_us, where, "in_place");
  const auto& in_wrong = r.Column(results, c::results::wrong, where, "in_place");
  std::vector<AllReduceSample> samples;
  for (size_t i = 0; i < size.size(); ++i) {
    // Out-of-place as nccl-tests quotes it; in-place when only that mode ran. Sizes that failed verification are
    // not measurements of a working all-reduce.
    const bool out_ok = out_time[i] > 0 && std::isfinite(out_time[i]) && out_wrong[i] <= 0;
    const bool in_ok = in_time[i] > 0 && std::isfinite(in_time[i]) && in_wrong[i] <= 0;
    if (!out_ok && !in_ok) continue;
    samples.push_back({layout.nodes, layout.gpus_per_node, static_cast<double>(size[i]), 1.0,
                       (out_ok ? out_time[i] : in_time[i]) * 1e-6,
                       "all_reduce " + std::to_string(size[i]) + " B at " + std::to_string(n) + " ranks" + of});
  }
  if (samples.empty()) r.Fail("the all_reduce sweep holds no verified measurement");
  return samples;
}

double StepAtRepeatRate(const MeasuredPoint& p, double step_s, double tokens_per_s) {
  if (p.repeats < 2 || !(tokens_per_s > 0)) return step_s;
  return step_s * p.tokens_per_s_reported / tokens_per_s;
}

}  // namespace tb
