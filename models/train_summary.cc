#include "train_summary.h"

#include <algorithm>
#include <cmath>
#include <tuple>

#include "console.h"
#include "definitions.h"
#include "schema.h"

namespace tb {
namespace {

const double kNaN = std::nan("");

double ComputeOf(const StepRecord& r) { return r.forward_s + r.backward_s + r.optimizer_s; }

StallBudget BudgetOf(const RankSteps& rank) {
  StallBudget b;
  b.rank = rank.rank;
  b.host = rank.host;
  b.device = rank.device;
  std::vector<double> step, compute, exposed, data, checkpoint, other, sync, gather, activation, pipeline, alltoall;
  for (const StepRecord& r : rank.steps) {
    if (r.warmup || r.step_s <= 0) continue;
    step.push_back(r.step_s);
    compute.push_back(ComputeOf(r) / r.step_s);
    exposed.push_back(r.comm_exposed_s / r.step_s);
    gather.push_back(r.comm_gather_exposed_s / r.step_s);
    activation.push_back(r.comm_activation_s / r.step_s);
    pipeline.push_back(r.comm_pipeline_s / r.step_s);
    alltoall.push_back(r.comm_alltoall_s / r.step_s);
    sync.push_back(exposed.back() - gather.back() - activation.back() - pipeline.back() - alltoall.back());
    data.push_back(DataWaitOf(r) / r.step_s);
    checkpoint.push_back(r.checkpoint_stall_s / r.step_s);
    other.push_back(std::max(0.0, 1.0 - compute.back() - exposed.back() - data.back() - checkpoint.back()));
  }
  auto percentiles = [](const std::vector<double>& v) {
    return Percentiles{Percentile(v, 50), Percentile(v, 95), Percentile(v, 99)};
  };
  b.median_step_s = Percentile(step, 50);
  b.compute = percentiles(compute);
  b.comm_exposed = percentiles(exposed);
  b.data_wait = percentiles(data);
  b.checkpoint_stall = percentiles(checkpoint);
  b.other = percentiles(other);
  b.comm_gradient_sync = percentiles(sync);
  b.comm_param_gather = percentiles(gather);
  b.comm_activation = percentiles(activation);
  b.comm_pipeline = percentiles(pipeline);
  b.comm_alltoall = percentiles(alltoall);
  return b;
}

double ShareOf(double part_s, double step_s) { return step_s > 0 ? part_s / step_s : kNaN; }

}  // namespace

double DataWaitOf(const StepRecord& r) { return r.data_wait_s + r.h2d_s; }

CollectiveTraffic RingTraffic(double allreduce_bytes, double reduce_scatter_bytes, double all_gather_bytes,
                              int ranks) {
  const double share = ranks > 1 ? static_cast<double>(ranks - 1) / ranks : 0.0;
  return {share * (2 * allreduce_bytes + reduce_scatter_bytes), share * all_gather_bytes};
}

double TheoryAllToAllBytes(const ModelConfig& model, double tokens, double element_bytes, int expert_parallel) {
  const double remote = expert_parallel > 1 ? (expert_parallel - 1.0) / expert_parallel : 0.0;
  return tokens * AllToAllBytesPerToken(model, element_bytes) * remote;
}

double TheoryActivationTraffic(int layers, int micro_batch, int seq, int d_model, double element_bytes,
                               int tensor_parallel) {
  const double elements = 4.0 * layers * micro_batch * seq * d_model;
  return RingTraffic(elements * element_bytes, 0, 0, tensor_parallel).gradient_sync;
}

CollectiveTraffic TheoryTraffic(ParallelMode mode, double gradient_bytes, int ranks) {
  switch (mode) {
    case ParallelMode::kZero1: return RingTraffic(0, gradient_bytes, gradient_bytes, ranks);
    case ParallelMode::kFsdp: return RingTraffic(0, gradient_bytes, 2 * gradient_bytes, ranks);
    case ParallelMode::kDp: break;
  }
  return RingTraffic(gradient_bytes, 0, 0, ranks);
}

void StepTotals::Add(const StepRecord& r) {
  if (r.warmup) return;
  step_s += r.step_s;
  data_wait_s += DataWaitOf(r);
  checkpoint_stall_s += r.checkpoint_stall_s;
}

StepTotals& StepTotals::operator+=(const StepTotals& other) {
  step_s += other.step_s;
  data_wait_s += other.data_wait_s;
  checkpoint_stall_s += other.checkpoint_stall_s;
  return *this;
}

double StepTotals::data_wait_share() const { return ShareOf(data_wait_s, step_s); }
double StepTotals::checkpoint_stall_share() const { return ShareOf(checkpoint_stall_s, step_s); }

StepTotals TotalsOf(const std::vector<RankSteps>& ranks) {
  StepTotals totals;
  for (const RankSteps& rank : ranks) {
    for (const StepRecord& r : rank.steps) totals.Add(r);
  }
  return totals;
}

double Percentile(std::vector<double> values, double q) {
  if (values.empty()) return kNaN;
  std::sort(values.begin(), values.end());
  // Nearest rank: the smallest value with at least q% of the values at or below it.
  size_t rank = static_cast<size_t>(std::ceil(q / 100.0 * static_cast<double>(values.size())));
  return values[std::clamp<size_t>(rank, 1, values.size()) - 1];
}

namespace {

// The communication figures of a point, summed over ranks and measured steps.
struct CommSums {
  double total = 0, exposed = 0, intra = 0, inter = 0, gather_exposed = 0, activation = 0;
  double pipeline = 0, pipeline_bytes = 0, forward = 0, backward = 0;
  double alltoall = 0, alltoall_bytes = 0, alltoall_inter = 0, dispatch = 0, dispatch_bytes = 0, combine = 0,
         combine_bytes = 0, moe_balance = 0, moe_choices = 0, moe_dropped = 0, moe_aux = 0;
  CollectiveTraffic traffic;

  // `k` ranks in groups of `tp`: gradients over the k / tp holding a slice (of a stage: over k / (tp pp)),
  // activations inside a group.
  void Add(const StepRecord& r, int k, int tp, int pp, int ep) {
    alltoall += r.comm_alltoall_s;
    alltoall_bytes += static_cast<double>(r.alltoall_dispatch_bytes + r.alltoall_combine_bytes);
    alltoall_inter += static_cast<double>(r.alltoall_inter_node_bytes);
    dispatch += r.alltoall_dispatch_s;
    dispatch_bytes += static_cast<double>(r.alltoall_dispatch_bytes);
    combine += r.alltoall_combine_s;
    combine_bytes += static_cast<double>(r.alltoall_combine_bytes);
    moe_balance += r.moe_max_over_mean;  // NaN for a dense model, and so the point's
    moe_choices += static_cast<double>(r.moe_choices);
    moe_dropped += static_cast<double>(r.moe_dropped);
    moe_aux += r.moe_aux_loss;
    pipeline += r.comm_pipeline_s;
    pipeline_bytes += static_cast<double>(r.pipeline_send_bytes);
    forward += r.forward_s;
    backward += r.backward_s;
    total += r.comm_total_s;
    exposed += r.comm_exposed_s;
    intra += r.comm_intra_s;  // NaN, and so the point's, when any step could not tell
    inter += r.comm_inter_s;
    gather_exposed += r.comm_gather_exposed_s;
    activation += r.comm_activation_s;
    const CollectiveTraffic t =
        RingTraffic(r.allreduce_bytes, r.reduce_scatter_bytes, r.all_gather_bytes, k / (tp * pp));
    // The experts' gradients go round the k / EP ranks holding the same experts.
    traffic.gradient_sync += t.gradient_sync + RingTraffic(r.experts_allreduce_bytes, 0, 0, k / ep).gradient_sync;
    traffic.parameter_gather += t.parameter_gather;
    traffic.activation += RingTraffic(r.activation_allreduce_bytes, 0, 0, tp).gradient_sync;
  }
  // Means per step and rank into p.
  void Into(ScalingPoint& p, double samples) const {
    auto mean = [samples](double sum) { return samples > 0 ? sum / samples : kNaN; };
    p.comm_total_s = mean(total);
    p.comm_exposed_s = mean(exposed);
    p.comm_intra_s = mean(intra);
    p.comm_inter_s = mean(inter);
    p.comm_gather_exposed_s = mean(gather_exposed);
    p.comm_activation_s = mean(activation);
    p.traffic = {mean(traffic.gradient_sync), mean(traffic.parameter_gather), mean(traffic.activation)};
    p.comm_pipeline_s = mean(pipeline);
    p.traffic_pipeline = mean(pipeline_bytes);
    p.bubble_measured = pipeline > 0 ? pipeline / (forward + backward + pipeline) : kNaN;
    p.comm_alltoall_s = mean(alltoall);
    p.alltoall_bytes = mean(alltoall_bytes);
    p.alltoall_inter_node_bytes = mean(alltoall_inter);
    p.alltoall_GBps = alltoall > 0 ? alltoall_bytes / alltoall / 1e9 : kNaN;
    p.alltoall_dispatch_GBps = dispatch > 0 ? dispatch_bytes / dispatch / 1e9 : kNaN;
    p.alltoall_combine_GBps = combine > 0 ? combine_bytes / combine / 1e9 : kNaN;
    p.moe_max_over_mean = mean(moe_balance);
    p.moe_dropped_share = moe_choices > 0 ? moe_dropped / moe_choices : kNaN;
    p.moe_aux_loss = mean(moe_aux);
  }
};

}  // namespace

double StageSummary::bubble_measured() const {
  const double pipelined = forward_s + backward_s + comm_pipeline_s;
  return pipelined > 0 ? comm_pipeline_s / pipelined : kNaN;
}

std::vector<StageSummary> SummarizeStages(const TrainPlan& plan, const std::vector<RankSteps>& ranks) {
  std::vector<StageSummary> stages;
  std::vector<double> samples(plan.stages.size(), 0.0);
  for (const StagePlan& s : plan.stages) {
    StageSummary stage;
    stage.plan = s;
    stages.push_back(stage);
  }
  for (size_t i = 0; i < ranks.size(); ++i) {
    const size_t s = static_cast<size_t>(plan.Place(static_cast<int>(i)).stage);
    // NaN wins: a stage whose models do not say has no figure.
    stages[s].activations_bytes = std::isnan(ranks[i].activations_bytes)
                                      ? ranks[i].activations_bytes
                                      : std::max(stages[s].activations_bytes, ranks[i].activations_bytes);
    for (const StepRecord& r : ranks[i].steps) {
      if (r.warmup) continue;
      stages[s].forward_s += r.forward_s;
      stages[s].backward_s += r.backward_s;
      stages[s].comm_pipeline_s += r.comm_pipeline_s;
      stages[s].pipeline_send_bytes += static_cast<double>(r.pipeline_send_bytes);
      samples[s] += 1;
    }
  }
  // Stage s's ranks are [s T D, (s+1) T D): each one's peer in the next stage is T D ranks on.
  const size_t stride = static_cast<size_t>(plan.tensor_parallel * plan.data_parallel);
  for (size_t i = 0; i + stride < ranks.size(); ++i) {
    std::string& link = stages[static_cast<size_t>(plan.Place(static_cast<int>(i)).stage)].next_stage_link;
    if (ranks[i].host != ranks[i + stride].host) link = "inter-node";
    if (link.empty()) link = "intra-node";
  }
  for (size_t s = 0; s < stages.size(); ++s) {
    const double n = samples[s] > 0 ? samples[s] : kNaN;
    stages[s].forward_s /= n;
    stages[s].backward_s /= n;
    stages[s].comm_pipeline_s /= n;
    stages[s].pipeline_send_bytes /= n;
  }
  return stages;
}

ScalingPoint SummarizePoint(int k, int micro_batch, const std::vector<RankSteps>& ranks, double model_flops_per_token,
                            double peak_flops, double measured_gemm_flops, double gradient_bytes,
                            int tensor_parallel, int pipeline_parallel, int expert_parallel) {
  ScalingPoint p;
  p.k = k;
  p.micro_batch = micro_batch;
  p.model_flops_per_token = model_flops_per_token;
  p.gradient_bytes = gradient_bytes;
  const size_t steps = ranks.empty() ? 0 : ranks.front().steps.size();
  std::tie(p.tensor_parallel, p.pipeline_parallel, p.expert_parallel) =
      std::tuple(tensor_parallel, pipeline_parallel, expert_parallel);
  double step_sum = 0, loss_first = 0, loss_last = 0;
  CommSums comm;
  int64_t tokens_per_step = 0;
  int measured = 0;
  std::vector<double> slowest_steps;
  bool first = true;
  for (size_t s = 0; s < steps; ++s) {
    if (ranks.front().steps[s].warmup) continue;
    double slowest = 0, loss = 0;
    int64_t tokens = 0;
    for (const RankSteps& rank : ranks) {
      const StepRecord& r = rank.steps[s];
      slowest = std::max(slowest, r.step_s);
      tokens += r.tokens;
      loss += r.loss;
      comm.Add(r, k, tensor_parallel, pipeline_parallel, expert_parallel);
    }
    loss /= static_cast<double>(ranks.size());
    if (first) loss_first = loss;
    first = false;
    loss_last = loss;
    step_sum += slowest;
    slowest_steps.push_back(slowest);
    tokens_per_step = tokens;
    ++measured;
  }
  p.measured_steps = measured;
  p.tokens_per_step = tokens_per_step;
  const double samples = static_cast<double>(measured) * static_cast<double>(ranks.size());
  p.step_s = measured ? step_sum / measured : kNaN;
  p.step_s_p95 = Percentile(slowest_steps, 95);
  p.tokens_per_s = static_cast<double>(tokens_per_step) / p.step_s;
  p.tokens_per_s_per_rank = p.tokens_per_s / k;
  const double flops_per_rank = p.tokens_per_s_per_rank * model_flops_per_token;
  p.mfu_peak = peak_flops > 0 ? flops_per_rank / peak_flops : kNaN;
  p.mfu_measured = measured_gemm_flops > 0 ? flops_per_rank / measured_gemm_flops : kNaN;
  comm.Into(p, samples);
  p.overlap = p.comm_total_s > 0 ? 1.0 - p.comm_exposed_s / p.comm_total_s : kNaN;
  // A ring's bus bandwidth is what each rank sends over the time: for dp's all-reduce, nccl-tests' busbw.
  const double sent = p.traffic.gradient_sync + p.traffic.parameter_gather + p.traffic.activation;
  p.effective_busbw_GBps = (k > 1 && p.comm_total_s > 0) ? sent / p.comm_total_s / 1e9 : kNaN;
  p.loss_first = loss_first;
  p.loss_last = loss_last;
  for (const RankSteps& rank : ranks) p.budgets.push_back(BudgetOf(rank));
  for (size_t i = 0; i < p.budgets.size(); ++i) {
    if (p.budgets[i].median_step_s > p.budgets[p.worst_rank].median_step_s) p.worst_rank = static_cast<int>(i);
  }
  return p;
}

void ComputeEfficiency(std::vector<ScalingPoint>& points, bool weak) {
  if (points.empty()) return;
  const ScalingPoint* base = &points.front();
  for (const ScalingPoint& p : points) {
    if (p.k < base->k) base = &p;
  }
  for (ScalingPoint& p : points) {
    const double ratio = static_cast<double>(p.k) / base->k;
    if (points.size() == 1) {
      p.efficiency = kNaN;
    } else if (weak) {
      p.efficiency = p.tokens_per_s / (ratio * base->tokens_per_s);
    } else {
      p.efficiency = base->step_s / (ratio * p.step_s);
    }
  }
}

std::string StepLine(const StepRecord& r, double loss, int k, double tokens_per_s, double mfu) {
  const double step = r.step_s > 0 ? r.step_s : kNaN;
  return Format("step %5d%s | k %3d | loss %.4f | %9.2f ms | %11.0f tok/s | MFU %s | data %4.1f%% comm %4.1f%% ckpt %4.1f%%",
                r.step, r.warmup ? " (warm-up)" : "          ", k, loss, r.step_s * 1e3, tokens_per_s,
                std::isnan(mfu) ? "  n/a " : Format("%5.1f%%", mfu * 100).c_str(), 100 * DataWaitOf(r) / step,
                100 * r.comm_exposed_s / step, 100 * r.checkpoint_stall_s / step);
}

namespace {

// The point's stall budget per rank (share of step time, p50/p95/p99) and its slowest rank.
void AppendStallBudgetLines(const ScalingPoint& p, std::vector<std::string>& lines) {
  lines.push_back("#   stall budget per rank (share of step time, p50/p95/p99):");
  TextTable table({{"rank", "", 6}, {"host", "", 12}, {"step", "(ms)", 9}, {"compute", "", 17},
                   {"comm_exposed", "", 17}, {"data_wait", "", 17}, {"checkpoint", "", 17}, {"other", "", 17}});
  for (std::string& line : table.HeaderLines()) lines.push_back(std::move(line));
  auto cell = [&](const Percentiles& q) { return Format("%.1f/%.1f/%.1f", 100 * q.p50, 100 * q.p95, 100 * q.p99); };
  for (const StallBudget& b : p.budgets) {
    lines.push_back(table.Row({std::to_string(b.rank), b.host, FormatFixed(b.median_step_s * 1e3, 2), cell(b.compute),
                               cell(b.comm_exposed), cell(b.data_wait), cell(b.checkpoint_stall), cell(b.other)}));
  }
  const StallBudget& worst = p.budgets[static_cast<size_t>(p.worst_rank)];
  lines.push_back(Format("#   slowest rank: %d on %s (%s), median step %.2f ms", worst.rank, worst.host.c_str(),
                         worst.device.c_str(), worst.median_step_s * 1e3));
}

// Mixture of experts' line: the load balance, the dropped choices, and under expert parallel the all-to-alls' bytes
// against theory, their exposed time and rate.
void AppendMoeLines(const ScalingPoint& p, std::vector<std::string>& lines) {
  if (std::isnan(p.moe_max_over_mean)) return;
  std::string line = Format("#   experts: busiest over mean %.2f (worst block, mean over steps), %.2f%% of the choices "
                            "dropped, aux loss %.4g", p.moe_max_over_mean, 100 * p.moe_dropped_share, p.moe_aux_loss);
  if (p.expert_parallel > 1) {
    line += Format("; expert parallel %d: all-to-all %.2f MB sent per rank per step (theory %.2f MB, balanced; "
                   "%.2f MB to other nodes), %.3f ms exposed; dispatch %.3f GB/s, combine %.3f GB/s (DeepEP on H800: "
                   "153 and 158 GB/s over NVLink)", p.expert_parallel, p.alltoall_bytes / 1e6,
                   p.alltoall_bytes_theory / 1e6, p.alltoall_inter_node_bytes / 1e6, p.comm_alltoall_s * 1e3,
                   p.alltoall_dispatch_GBps, p.alltoall_combine_GBps);
  }
  lines.push_back(line);
}

// Pipeline parallel's lines: the bubble against 1F1B's, the bytes between stages against theory, and which stage
// boundaries cross nodes.
void AppendPipelineLines(const ScalingPoint& p, std::vector<std::string>& lines) {
  if (p.pipeline_parallel <= 1) return;
  auto pct = [](double v) { return std::isnan(v) ? std::string("n/a") : Format("%.1f%%", 100 * v); };
  lines.push_back(Format("#   pipeline %d stages x %d micro-batches (1F1B): bubble %s measured, %s in theory; sent to "
                         "neighbouring stages %.2f MB per rank per step (theory %.2f MB), %.3f ms exposed",
                         p.pipeline_parallel, p.micro_batches, pct(p.bubble_measured).c_str(),
                         pct(p.bubble_theory).c_str(), p.traffic_pipeline / 1e6, p.traffic_pipeline_theory / 1e6,
                         p.comm_pipeline_s * 1e3));
  int across = 0;
  for (const StageSummary& stage : p.stages) across += stage.next_stage_link == "inter-node" ? 1 : 0;
  if (across > 0) {
    lines.push_back(Format("#   %d of %d stage boundaries cross nodes: their activations and gradients go over the "
                           "inter-node link", across, p.pipeline_parallel - 1));
  }
}

}  // namespace

std::vector<std::string> PointLines(const ScalingPoint& p, const std::string& mode) {
  auto pct = [](double v) { return std::isnan(v) ? std::string("n/a") : Format("%.1f%%", 100 * v); };
  std::vector<std::string> lines = {
      Format("# k=%d: %d measured steps, %lld tokens/step, step %.2f ms (slowest rank, mean), %.0f tokens/s, %.0f per rank",
             p.k, p.measured_steps, static_cast<long long>(p.tokens_per_step), p.step_s * 1e3, p.tokens_per_s,
             p.tokens_per_s_per_rank),
      Format("#   MFU %s of peak, %s of measured GEMM rate; %s scaling efficiency %s; loss %.4f -> %.4f",
             pct(p.mfu_peak).c_str(), pct(p.mfu_measured).c_str(), mode.c_str(), pct(p.efficiency).c_str(),
             p.loss_first, p.loss_last),
      Format("#   comm per step: total %.3f ms, exposed %.3f ms, overlap %s; %.1f MB of gradients %s, effective busbw %s",
             p.comm_total_s * 1e3, p.comm_exposed_s * 1e3, pct(p.overlap).c_str(), p.gradient_bytes / 1e6,
             p.parallel == "zero1"  ? "reduce-scattered and the parameters all-gathered after backward (zero1: AdamW's state sharded)"
             : p.parallel == "fsdp" ? "reduce-scattered layer by layer, the parameters all-gathered before each layer's forward and backward (fsdp)"
                                    : Format("in %lld bucket%s", static_cast<long long>(p.gradient_buckets),
                                             p.gradient_buckets == 1 ? "" : "s").c_str(),
             std::isnan(p.effective_busbw_GBps) ? "n/a" : Format("%.2f GB/s", p.effective_busbw_GBps).c_str()),
  };
  if (p.state.weights > 0) {
    auto mb = [](double bytes) { return Format("%.1f", bytes / 1e6); };
    lines.push_back(Format("#   model state per rank (%s), MB allocated / ZeRO's: weights %s / %s, gradients %s / %s, "
                           "optimizer %s / %s", p.parallel.c_str(), mb(p.state.weights).c_str(),
                           mb(p.state_theory.weights).c_str(), mb(p.state.gradients).c_str(),
                           mb(p.state_theory.gradients).c_str(), mb(p.state.optimizer).c_str(),
                           mb(p.state_theory.optimizer).c_str()));
    if (p.working_bytes > 0) {
      lines.push_back(Format("#   fsdp working buffers (gathered layers and their gradients, outside ZeRO's 16 Psi/N): %s MB",
                             mb(p.working_bytes).c_str()));
    }
  }
  if (p.tensor_parallel > 1) {
    lines.push_back(Format("#   tensor parallel %d: activation all-reduces send %.2f MB per rank per step (Megatron's "
                           "4 L B S d: %.2f MB), %.3f ms exposed", p.tensor_parallel, p.traffic.activation / 1e6,
                           p.traffic_theory.activation / 1e6, p.comm_activation_s * 1e3));
  }
  AppendPipelineLines(p, lines);
  AppendMoeLines(p, lines);
  if (p.k > 1) {
    auto mb = [](double bytes) { return Format("%.2f", bytes / 1e6); };
    lines.push_back(Format("#   sent per rank per step (ring), MB issued / ZeRO's: gradient sync %s / %s, parameter "
                           "gather %s / %s; exposed: gradient sync %.3f ms, parameter gather %.3f ms",
                           mb(p.traffic.gradient_sync).c_str(), mb(p.traffic_theory.gradient_sync).c_str(),
                           mb(p.traffic.parameter_gather).c_str(), mb(p.traffic_theory.parameter_gather).c_str(),
                           (p.comm_exposed_s - p.comm_gather_exposed_s - p.comm_activation_s - p.comm_pipeline_s) * 1e3,
                           p.comm_gather_exposed_s * 1e3));
  }
  if (p.nodes > 1) {
    lines.push_back(Format("#   layout %dx%d (%d nodes x %d ranks), %s all-reduce%s", p.nodes, p.ranks_per_node,
                           p.nodes, p.ranks_per_node, p.allreduce.c_str(),
                           std::isnan(p.comm_inter_s) ? ": intra- and inter-node time not told apart"
                                                      : Format(": comm inside nodes %.3f ms, across nodes %.3f ms",
                                                               p.comm_intra_s * 1e3, p.comm_inter_s * 1e3).c_str()));
  }
  AppendStallBudgetLines(p, lines);
  return lines;
}

namespace {

namespace sp = schema::point;

// A step record with its rank, as the steps table holds it.
struct RankStep {
  int rank;
  const StepRecord* r;
};

void AddStepsTable(Group& group, const std::vector<RankSteps>& ranks) {
  namespace c = sp::steps;
  std::vector<RankStep> rows;
  for (const RankSteps& rank : ranks) {
    for (const StepRecord& r : rank.steps) rows.push_back({rank.rank, &r});
  }
  schema::RecordTable<RankStep>(sp::kSteps)
      .Column(c::rank, [](const RankStep& s) { return s.rank; })
      .Column(c::step, [](const RankStep& s) { return s.r->step; })
      .Column(c::warmup, [](const RankStep& s) { return s.r->warmup ? 1 : 0; })
      .Column(c::data_wait_s, [](const RankStep& s) { return s.r->data_wait_s; })
      .Column(c::h2d_s, [](const RankStep& s) { return s.r->h2d_s; })
      .Column(c::forward_s, [](const RankStep& s) { return s.r->forward_s; })
      .Column(c::backward_s, [](const RankStep& s) { return s.r->backward_s; })
      .Column(c::comm_total_s, [](const RankStep& s) { return s.r->comm_total_s; })
      .Column(c::comm_exposed_s, [](const RankStep& s) { return s.r->comm_exposed_s; })
      .Column(c::comm_gather_exposed_s, [](const RankStep& s) { return s.r->comm_gather_exposed_s; })
      .Column(c::comm_activation_s, [](const RankStep& s) { return s.r->comm_activation_s; })
      .Column(c::comm_pipeline_s, [](const RankStep& s) { return s.r->comm_pipeline_s; })
      .Column(c::comm_embedding_s, [](const RankStep& s) { return s.r->comm_embedding_s; })
      .Column(c::pipeline_send_bytes, [](const RankStep& s) { return static_cast<int64_t>(s.r->pipeline_send_bytes); })
      .Column(c::embedding_allreduce_bytes,
              [](const RankStep& s) { return static_cast<int64_t>(s.r->embedding_allreduce_bytes); })
      .Column(c::comm_alltoall_s, [](const RankStep& s) { return s.r->comm_alltoall_s; })
      .Column(c::alltoall_dispatch_s, [](const RankStep& s) { return s.r->alltoall_dispatch_s; })
      .Column(c::alltoall_combine_s, [](const RankStep& s) { return s.r->alltoall_combine_s; })
      .Column(c::comm_experts_s, [](const RankStep& s) { return s.r->comm_experts_s; })
      .Column(c::alltoall_dispatch_bytes,
              [](const RankStep& s) { return static_cast<int64_t>(s.r->alltoall_dispatch_bytes); })
      .Column(c::alltoall_combine_bytes,
              [](const RankStep& s) { return static_cast<int64_t>(s.r->alltoall_combine_bytes); })
      .Column(c::alltoall_inter_node_bytes,
              [](const RankStep& s) { return static_cast<int64_t>(s.r->alltoall_inter_node_bytes); })
      .Column(c::experts_allreduce_bytes,
              [](const RankStep& s) { return static_cast<int64_t>(s.r->experts_allreduce_bytes); })
      .Column(c::moe_choices, [](const RankStep& s) { return s.r->moe_choices; })
      .Column(c::moe_dropped, [](const RankStep& s) { return s.r->moe_dropped; })
      .Column(c::moe_max_over_mean, [](const RankStep& s) { return s.r->moe_max_over_mean; })
      .Column(c::moe_aux_loss, [](const RankStep& s) { return s.r->moe_aux_loss; })
      .Column(c::comm_intra_s, [](const RankStep& s) { return s.r->comm_intra_s; })
      .Column(c::comm_inter_s, [](const RankStep& s) { return s.r->comm_inter_s; })
      .Column(c::optimizer_s, [](const RankStep& s) { return s.r->optimizer_s; })
      .Column(c::checkpoint_stall_s, [](const RankStep& s) { return s.r->checkpoint_stall_s; })
      .Column(c::step_s, [](const RankStep& s) { return s.r->step_s; })
      .Column(c::tokens, [](const RankStep& s) { return s.r->tokens; })
      .Column(c::loss, [](const RankStep& s) { return s.r->loss; })
      .Column(c::data_bytes, [](const RankStep& s) { return static_cast<int64_t>(s.r->data_bytes); })
      .Column(c::data_read_MBps, [](const RankStep& s) { return s.r->data_read_MBps; })
      .Column(c::loader_queue_depth, [](const RankStep& s) { return s.r->loader_queue_depth; })
      .Column(c::checkpoint_writing, [](const RankStep& s) { return s.r->checkpoint_writing ? 1 : 0; })
      .Write(group, rows);
}

// The stall budget's parts, in the order of schema::point::stall_budget::kParts.
const Percentiles& PartOf(const StallBudget& b, size_t part) {
  const Percentiles* parts[] = {&b.compute, &b.comm_exposed, &b.data_wait, &b.checkpoint_stall, &b.other};
  return *parts[part];
}

void AddStallBudgetTable(Group& group, const ScalingPoint& p) {
  namespace c = sp::stall_budget;
  schema::RecordTable<StallBudget> table(sp::kStallBudget);
  table.Column(c::rank, [](const StallBudget& b) { return b.rank; })
      .Column(c::host, [](const StallBudget& b) { return b.host; })
      .Column(c::device, [](const StallBudget& b) { return b.device; })
      .Column(c::median_step_s, [](const StallBudget& b) { return b.median_step_s; });
  for (size_t part = 0; part < c::kParts.size(); ++part) {
    table.Column(c::p50, [part](const StallBudget& b) { return PartOf(b, part).p50; }, c::kParts[part])
        .Column(c::p95, [part](const StallBudget& b) { return PartOf(b, part).p95; }, c::kParts[part])
        .Column(c::p99, [part](const StallBudget& b) { return PartOf(b, part).p99; }, c::kParts[part]);
  }
  const Percentiles StallBudget::*kinds[] = {&StallBudget::comm_gradient_sync, &StallBudget::comm_param_gather,
                                             &StallBudget::comm_activation, &StallBudget::comm_pipeline,
                                             &StallBudget::comm_alltoall};
  for (size_t kind = 0; kind < c::kCommKinds.size(); ++kind) {
    auto of = [member = kinds[kind]](const StallBudget& b) -> const Percentiles& { return b.*member; };
    table.Column(c::kind_p50, [of](const StallBudget& b) { return of(b).p50; }, c::kCommKinds[kind])
        .Column(c::kind_p95, [of](const StallBudget& b) { return of(b).p95; }, c::kCommKinds[kind])
        .Column(c::kind_p99, [of](const StallBudget& b) { return of(b).p99; }, c::kCommKinds[kind]);
  }
  table.Write(group, p.budgets);
}

void AddStagesTable(Group& group, const std::vector<StageSummary>& stages) {
  namespace c = sp::stages;
  schema::RecordTable<StageSummary>(sp::kStages)
      .Column(c::stage, [](const StageSummary& s) { return s.plan.stage.stage; })
      .Column(c::first_layer, [](const StageSummary& s) { return s.plan.stage.first_layer; })
      .Column(c::last_layer, [](const StageSummary& s) { return s.plan.stage.end_layer - 1; })
      .Column(c::slots, [](const StageSummary& s) { return s.plan.stage.slots; })
      .Column(c::parameters, [](const StageSummary& s) { return s.plan.parameters; })
      .Column(c::activations_bytes_theory, [](const StageSummary& s) { return s.plan.memory.activations_bytes; })
      .Column(c::activations_bytes, [](const StageSummary& s) { return s.activations_bytes; })
      .Column(c::forward_s, [](const StageSummary& s) { return s.forward_s; })
      .Column(c::backward_s, [](const StageSummary& s) { return s.backward_s; })
      .Column(c::comm_pipeline_s, [](const StageSummary& s) { return s.comm_pipeline_s; })
      .Column(c::bubble_measured, [](const StageSummary& s) { return s.bubble_measured(); })
      .Column(c::pipeline_send_bytes, [](const StageSummary& s) { return s.pipeline_send_bytes; })
      .Column(c::pipeline_send_bytes_theory, [](const StageSummary& s) { return s.plan.pipeline_send_bytes; })
      .Column(c::next_stage_link, [](const StageSummary& s) { return s.next_stage_link; })
      .Write(group, stages);
}

// The point's mixture-of-experts figures: load balance, drops, aux loss, and expert parallel's all-to-alls.
void SetExpertAttributes(Group& group, const ScalingPoint& p) {
  namespace sp = schema::point;
  schema::Set(group, sp::expert_parallel, p.expert_parallel);
  schema::Set(group, sp::comm_alltoall_s, p.comm_alltoall_s);
  schema::Set(group, sp::alltoall_bytes, p.alltoall_bytes);
  schema::Set(group, sp::alltoall_inter_node_bytes, p.alltoall_inter_node_bytes);
  schema::Set(group, sp::alltoall_bytes_theory, p.alltoall_bytes_theory);
  schema::Set(group, sp::alltoall_GBps, p.alltoall_GBps);
  schema::Set(group, sp::alltoall_dispatch_GBps, p.alltoall_dispatch_GBps);
  schema::Set(group, sp::alltoall_combine_GBps, p.alltoall_combine_GBps);
  schema::Set(group, sp::moe_max_over_mean, p.moe_max_over_mean);
  schema::Set(group, sp::moe_dropped_share, p.moe_dropped_share);
  schema::Set(group, sp::moe_aux_loss, p.moe_aux_loss);
}

void SetPointAttributes(Group& group, const ScalingPoint& p) {
  schema::Set(group, sp::ranks, p.k);
  schema::Set(group, sp::micro_batch, p.micro_batch);
  schema::Set(group, sp::tokens_per_step, p.tokens_per_step);
  schema::Set(group, sp::measured_steps, p.measured_steps);
  schema::Set(group, sp::step_s, p.step_s);
  schema::Set(group, sp::step_s_p95, p.step_s_p95);
  schema::Set(group, sp::tokens_per_s, p.tokens_per_s);
  schema::Set(group, sp::tokens_per_s_per_rank, p.tokens_per_s_per_rank);
  schema::Set(group, sp::model_flops_per_token, p.model_flops_per_token);
  schema::Set(group, sp::mfu_peak, p.mfu_peak);
  schema::Set(group, sp::mfu_measured_gemm, p.mfu_measured);
  schema::Set(group, sp::scaling_efficiency, p.efficiency);
  schema::Set(group, sp::comm_total_s, p.comm_total_s);
  schema::Set(group, sp::comm_exposed_s, p.comm_exposed_s);
  schema::Set(group, sp::comm_intra_s, p.comm_intra_s);
  schema::Set(group, sp::comm_inter_s, p.comm_inter_s);
  schema::Set(group, sp::nodes, p.nodes);
  schema::Set(group, sp::ranks_per_node, p.ranks_per_node);
  schema::Set(group, sp::allreduce, p.allreduce);
  schema::Set(group, sp::parallel, p.parallel);
  schema::Set(group, sp::weights_bytes, p.state.weights);
  schema::Set(group, sp::gradients_bytes, p.state.gradients);
  schema::Set(group, sp::optimizer_bytes, p.state.optimizer);
  schema::Set(group, sp::weights_bytes_theory, p.state_theory.weights);
  schema::Set(group, sp::gradients_bytes_theory, p.state_theory.gradients);
  schema::Set(group, sp::optimizer_bytes_theory, p.state_theory.optimizer);
  schema::Set(group, sp::comm_gather_exposed_s, p.comm_gather_exposed_s);
  schema::Set(group, sp::traffic_gradient_sync_bytes, p.traffic.gradient_sync);
  schema::Set(group, sp::traffic_parameter_gather_bytes, p.traffic.parameter_gather);
  schema::Set(group, sp::traffic_gradient_sync_bytes_theory, p.traffic_theory.gradient_sync);
  schema::Set(group, sp::traffic_parameter_gather_bytes_theory, p.traffic_theory.parameter_gather);
  schema::Set(group, sp::working_bytes, p.working_bytes);
  schema::Set(group, sp::tensor_parallel, p.tensor_parallel);
  schema::Set(group, sp::comm_activation_s, p.comm_activation_s);
  schema::Set(group, sp::pipeline_parallel, p.pipeline_parallel);
  schema::Set(group, sp::micro_batches, p.micro_batches);
  schema::Set(group, sp::comm_pipeline_s, p.comm_pipeline_s);
  schema::Set(group, sp::bubble_measured, p.bubble_measured);
  schema::Set(group, sp::bubble_theory, p.bubble_theory);
  schema::Set(group, sp::traffic_pipeline_bytes, p.traffic_pipeline);
  schema::Set(group, sp::traffic_pipeline_bytes_theory, p.traffic_pipeline_theory);
  SetExpertAttributes(group, p);
  schema::Set(group, sp::traffic_activation_bytes, p.traffic.activation);
  schema::Set(group, sp::traffic_activation_bytes_theory, p.traffic_theory.activation);
  schema::Set(group, sp::overlap, p.overlap);
  schema::Set(group, sp::gradient_bytes, p.gradient_bytes);
  schema::Set(group, sp::gradient_buckets, p.gradient_buckets);
  schema::Set(group, sp::effective_busbw_GBps, p.effective_busbw_GBps);
  schema::Set(group, sp::loss_first, p.loss_first);
  schema::Set(group, sp::loss_last, p.loss_last);
  schema::Set(group, sp::worst_rank, p.budgets[static_cast<size_t>(p.worst_rank)].rank);
}

}  // namespace

void AddPointToReport(Group& train, const ScalingPoint& p, const std::vector<RankSteps>& ranks,
                      const std::string& name) {
  Group& group = train.Child(name.empty() ? PointGroupName({p.k, 0}) : name);  // under train/: schema::kTrainPoint
  AddStepsTable(group, ranks);
  AddStallBudgetTable(group, p);
  if (!p.stages.empty()) AddStagesTable(group, p.stages);
  SetPointAttributes(group, p);
}

void AddPointEnergyToReport(Group& group, double energy_J, const ScalingPoint& p) {
  const double steps = p.measured_steps > 0 ? p.measured_steps : std::nan("");
  schema::Set(group, schema::point::energy_J, energy_J);
  schema::Set(group, schema::point::energy_per_step_J, energy_J / steps);
  schema::Set(group, schema::point::joules_per_token, energy_J / (steps * static_cast<double>(p.tokens_per_step)));
}

}  // namespace tb
