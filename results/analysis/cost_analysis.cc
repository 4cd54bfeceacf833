// One run as `cost` analyses it: the priced point, its GPU models, checkpoint cost, energy, memory and the projection
// with the run's fitted links. The fabrics, the prices and the decision: cost_pricing.cc.
#include "cost_analysis.h"

#include <algorithm>
#include <cmath>

#include "console.h"
#include "error.h"
#include "units.h"

namespace tb {
namespace {

// The checkpoint trainbench writes holds fp32 weights and both AdamW moments.
constexpr double kCheckpointBytesPerParameter = 12.0;

// The priced point's mean power per GPU (per rank) from its measured energy: joules per token x tokens/s (as
// reported: the energy was measured over the same steps, checkpoint stalls included) / ranks.
std::optional<double> EnergyOf(const MeasuredPoint& p) {
  if (!std::isfinite(p.joules_per_token)) return std::nullopt;
  return p.joules_per_token * p.tokens_per_s_reported / p.train.k;
}

// The checkpoint stall of the priced point, else of the largest point that checkpointed, and the checkpoint size
// the price file's interval model uses: the price file's, else the measured state, else 12 B per parameter.
void SetCheckpointCost(RunAnalysis& a, const std::optional<PriceFile>& prices) {
  const MeasuredPoint& priced = a.m.points[a.priced];
  const MeasuredPoint* stalled = priced.checkpoint_stall_s ? &priced : nullptr;
  for (auto it = a.m.points.rbegin(); !stalled && it != a.m.points.rend(); ++it) {
    if (it->checkpoint_stall_s) stalled = &*it;
  }
  if (stalled) {
    a.stall_s = stalled->checkpoint_stall_s;
    a.stall_events = stalled->checkpoint_events;
    a.stall_k = stalled->train.k;
  }
  if (!prices) return;
  const CostAssumptions& as = prices->assumptions;
  if (as.checkpoint_size == CheckpointSizeSource::kGigabytes) {
    a.checkpoint_gb = as.checkpoint_gb;
    a.checkpoint_size_source = "from the price file";
  } else if (stalled && stalled->checkpoint_state_bytes > 0) {
    a.checkpoint_gb = stalled->checkpoint_state_bytes / 1e9;
    a.checkpoint_size_source = "measured";
  } else {
    a.checkpoint_gb = a.m.parameters * kCheckpointBytesPerParameter / 1e9;
    a.checkpoint_size_source = "estimated: 12 B/parameter (fp32 weights + AdamW m, v)";
  }
}

// Fits the links to the run's collectives and steps and projects its step time to each layout; a layout the run
// cannot be projected to (tensor-parallel groups that do not fit its nodes, a link it lacks) is bad input.
// `lenient` (a price file that also has fabric offerings): a layout the fitted links cannot model is a note for the
// offerings without a fabric, not an error.
void ProjectLayouts(RunAnalysis& a, const std::vector<Layout>& layouts, const LinkOverrides& overrides, bool lenient) {
  const std::string& path = a.m.path;
  std::vector<TrainPointInput> points;
  for (const MeasuredPoint& p : a.m.points) points.push_back(p.train);
  std::vector<AllReduceSample> samples = a.collective_samples;
  for (const AllReduceSample& s : TrainSamples(points)) samples.push_back(s);
  a.fit = FitAlphaBeta(samples);
  a.links = ResolveLinks(*a.fit, overrides);
  BandLinks(a.links, samples, overrides.inter_node_gbps.has_value());
  a.step_model.emplace(points, a.m.weak_scaling, points.front());
  const int t = points.back().tensor_parallel, pp = points.back().pipeline_parallel;
  for (const Layout& layout : layouts) {
    if (layout.gpus_per_node % t != 0) {
      throw InputError("cannot project '" + path + "' (tensor parallel " + std::to_string(t) + ") to " +
                       layout.Name() + ": its groups stay inside a node, and " + std::to_string(t) +
                       " does not divide " + std::to_string(layout.gpus_per_node) + " GPUs per node");
    }
    const std::string missing = layout.gpus() % (t * pp) != 0
                                    ? Format("its %d pipeline stages x tensor parallel %d do not divide %d GPUs", pp,
                                             t, layout.gpus())
                                    : MissingLinks(a.links, layout);
    if (!missing.empty() && lenient) {
      a.projection_notes.push_back(path + " " + layout.Name() + " on the offerings without a fabric: not projected: " +
                                   missing);
      continue;
    }
    if (!missing.empty()) throw InputError("cannot project '" + path + "' to " + layout.Name() + ": " + missing);
    a.projected.push_back(a.step_model->Project(a.links, layout));
  }
  a.held_out = CheckHeldOut(points, a.collective_samples, a.m.weak_scaling, overrides);
}

// Whether --project's layouts are projected with the run's fitted links: without a price file, or for its offerings
// that declare no fabric (those with one are projected onto it: ProjectOntoFabrics).
bool FittedProjection(const std::optional<PriceFile>& prices) {
  return !prices || std::any_of(prices->offerings.begin(), prices->offerings.end(),
                                [&](const Offering& o) { return o.fabric.empty(); });
}

// `check` calibrated by the measured peak of `run` against the estimate of its mode at the run's largest point.
MemoryCheck CalibratedBy(MemoryCheck check, const RunMeasurement& run) {
  check.calibration = CalibrateMemory(run.peak_device_memory_bytes,
                                      check.For(run.points.back().train.k).total_bytes(), run.path);
  return check;
}

}  // namespace

MemoryBreakdown MemoryCheck::For(int k) const {
  if (stages.empty()) return ModeMemory(estimate, mode, k, gathered_parameters, parameters, tensor_parallel);
  MemoryBreakdown largest;
  for (const MemoryBreakdown& stage : stages) {
    const int per_stage = k / static_cast<int>(stages.size());
    const MemoryBreakdown m = ModeMemory(stage, mode, per_stage, 0.0, parameters, tensor_parallel);
    if (m.total_bytes() > largest.total_bytes()) largest = m;
  }
  return largest;
}

std::string ModeWords(const std::string& mode) {
  if (mode == "zero1") return "zero1: AdamW's state sharded over the ranks";
  if (mode == "fsdp") return "fsdp: weights, gradients and AdamW's state sharded, two layers gathered at a time";
  return "data parallel, no sharding";
}

void UseFailureHistory(CostRun& c, FailureHistory history) {
  c.failures = std::move(history);
  c.measured_failures = c.plan.measured_failure_rate && c.failures->measured();
  if (c.measured_failures) {
    for (Offering& offering : c.prices->offerings) offering.mtbf_node_hours = c.failures->mtbf_node_hours();
  }
}

size_t PricedPoint(const RunMeasurement& m, int k) {
  if (k <= 0) return m.points.size() - 1;
  for (size_t i = m.points.size(); i-- > 0;) {
    if (m.points[i].train.k == k) return i;
  }
  std::vector<std::string> measured;
  for (const MeasuredPoint& p : m.points) measured.push_back(std::to_string(p.train.k));
  throw InputError("--k " + std::to_string(k) + ": '" + m.path + "' measured k = " + JoinNames(measured, ","));
}

std::vector<int> TensorParallelSizes(const PriceFile& prices) {
  std::vector<int> sizes;
  for (const Offering& o : prices.offerings) {
    if (o.fabric.empty()) continue;
    for (int t = 1; t <= o.gpus_per_node; ++t) {
      if (o.gpus_per_node % t == 0 && std::find(sizes.begin(), sizes.end(), t) == sizes.end()) sizes.push_back(t);
    }
  }
  std::sort(sizes.begin(), sizes.end());
  return sizes;
}

std::vector<int> PipelineSizes(const PriceFile& prices, const std::vector<ProjectTarget>& targets,
                               const RunMeasurement& m, size_t priced) {
  std::vector<int> sizes;
  auto add = [&](int p) {
    if (p > 1 && std::find(sizes.begin(), sizes.end(), p) == sizes.end()) sizes.push_back(p);
  };
  add(m.points[priced].train.pipeline_parallel);
  const int k = m.points[priced].train.k;
  const std::vector<ProjectTarget> at = targets.empty() ? std::vector<ProjectTarget>{{k, std::nullopt, ""}} : targets;
  for (const Offering& o : prices.offerings) {
    if (o.fabric.empty()) continue;
    for (const ProjectTarget& target : at) {
      std::string why;
      const std::optional<Layout> layout = LayoutOnNodes(target, o.gpus_per_node, why);
      for (int p = 2; layout && p <= layout->nodes; ++p) {
        const bool power_of_two = (p & (p - 1)) == 0;
        if (layout->nodes % p == 0 && (power_of_two || (m.layers > 0 && m.layers % p == 0))) add(p);
      }
    }
  }
  std::sort(sizes.begin(), sizes.end());
  return sizes;
}

RunAnalysis AnalyzeRun(RunMeasurement m, const RunModelFacts& facts, const CostPlan& plan,
                       const std::vector<AllReduceSample>& extra_samples, const std::optional<PriceFile>& prices) {
  RunAnalysis a;
  a.m = std::move(m);
  a.priced = PricedPoint(a.m, plan.k);
  a.power_per_gpu_W = EnergyOf(a.m.points[a.priced]);
  a.device_as = !plan.device_as.empty();
  if (a.device_as) {
    a.gpus = plan.device_as;
  } else if (const std::optional<GpuModel> model = MatchGpuModel(a.m.device)) {
    a.gpus.push_back(*model);
  }
  if (!a.gpus.empty()) a.gpu = a.gpus.front();
  a.shapes = facts.shapes;
  a.moe = facts.moe;
  SetCheckpointCost(a, prices);
  a.collective_samples = a.m.all_reduce;
  a.collective_samples.insert(a.collective_samples.end(), extra_samples.begin(), extra_samples.end());
  if (!plan.layouts.empty()) {
    const bool fabrics = prices && !prices->fabrics.empty();
    ProjectLayouts(a, FittedProjection(prices) ? plan.layouts : std::vector<Layout>{}, plan.overrides, fabrics);
  }
  a.memory = CalibratedBy(plan.model_memory ? *plan.model_memory : facts.memory, a.m);
  return a;
}

std::string RunName(const RunAnalysis& run) { return run.m.path; }

std::string GpuNames(const RunAnalysis& run) {
  std::vector<std::string> names;
  for (const GpuModel& model : run.gpus) names.push_back(model.name);
  return JoinNames(names, ", ");
}

double TokensPerS(const MeasuredPoint& p) { return p.train.tokens_per_step / p.train.step_s; }

const char* Source(const Config& config) { return config.projected ? "projected" : "measured"; }

std::string RowName(const CostRow& row, const std::vector<RunAnalysis>& runs) {
  return RunName(runs[row.config.run]) + " " + row.config.label + " (" + Source(row.config) + ") on " +
         row.offering->name;
}

std::string Marks(size_t index, const CostDecision& d) {
  std::vector<std::string> marks;
  if (d.cheapest == index) marks.push_back("cheapest");
  if (d.fastest == index) marks.push_back("fastest");
  if (d.cheapest_within_deadline == index) marks.push_back("deadline");
  return JoinNames(marks, ",");
}

// ", pp2 x 4 micro-batches (1F1B): bubble 23.5% measured (20.0% in theory), stage exchanges and the tied embedding
// 31.0% of the step" for a run with stages ("" without).
std::string PipelineReason(const Config& config, const RunAnalysis& a) {
  const TrainPointInput& p = a.m.points[a.priced].train;
  if (config.pp < 2) return "";
  const MeasuredPoint& measured = a.m.points[a.priced];
  const double stages_s = config.projected ? config.pipeline_s : p.pipeline_s + p.embedding_s;
  return Format(", pp%d x %d micro-batches (1F1B): bubble %.1f%% measured at k=%d (%.1f%% in theory), exchanges with "
                "the neighbouring stages and the tied embedding %.1f%% of the step%s",
                config.pp, p.micro_batches, 100 * measured.bubble_measured, p.k, 100 * measured.bubble_theory,
                100 * stages_s / config.step_s,
                config.projected ? " (as measured, with the change of link modelled)" : "");
}

// "fsdp, exposed communication 29.1% of the step (parameter gathers 50.2% of it, as measured at k=4)", or on a fabric
// the layout search's reason.
std::string CommReason(const Config& config, const RunAnalysis& a) {
  if (config.on_fabric) {
    const LayoutChoice& choice = *config.on_fabric->choice;
    return Format("%s on fabric %s, the best of %zu layouts considered: %s", config.mode.c_str(),
                  config.on_fabric->fabric->name.c_str(), choice.candidates.size(), choice.reason.c_str());
  }
  const MeasuredPoint& p = a.m.points[a.priced];
  std::string reason = Format("%s, exposed communication %.1f%% of the step", config.mode.c_str(),
                              100 * config.exposed_s / config.step_s);
  if (p.train.comm_exposed_s > 0 && p.gather_exposed_s > 0) {
    reason += Format(" (parameter gathers %.1f%% of it, as measured at k=%d)",
                     100 * p.gather_exposed_s / p.train.comm_exposed_s, p.train.k);
  }
  return reason + PipelineReason(config, a);
}

}  // namespace tb
