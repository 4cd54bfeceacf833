// After every run is analysed (cost_analysis.cc): each run onto each offering's fabric in its best layout, every
// configuration priced on every offering of its GPU model, the decision and its reasons, and --model's memory fit.
#include <algorithm>
#include <cmath>

#include "console.h"
#include "cost_analysis.h"
#include "error.h"
#include "units.h"

namespace tb {
namespace {


bool HasGpu(const RunAnalysis& a, const std::string& model) {
  return std::any_of(a.gpus.begin(), a.gpus.end(), [&](const GpuModel& m) { return m.name == model; });
}

// The overlap of the priced point when it communicated, else of the largest point that did (one replica: no sync).
void SetOverlap(ProjectionBasis& b, const RunMeasurement& m, const MeasuredPoint& p) {
  std::vector<const MeasuredPoint*> order = {&p};
  for (auto it = m.points.rbegin(); it != m.points.rend(); ++it) order.push_back(&*it);
  for (const MeasuredPoint* q : order) {
    if (q->train.k <= q->train.tensor_parallel || !(q->train.comm_total_s > 0)) continue;
    b.overlap = std::clamp(1.0 - q->train.comm_exposed_s / q->train.comm_total_s, 0.0, 1.0);
    b.hidden_s = std::max(0.0, q->train.comm_total_s - q->train.comm_exposed_s);
    b.overlap_measured = true;
    b.overlap_source = Format("measured at k=%d (%s), %.3g s hidden per step", q->train.k, q->train.parallel.c_str(),
                              b.hidden_s);
    return;
  }
  b.overlap_source = "no point communicated: assumed 0 (every collective exposed)";
}

// A reference with pipeline stages: its exchanges with the neighbouring stages and tied-embedding all-reduce (out of
// its compute), and its gradients and AdamW state as a share of the whole model's, by its stages' parameters (the
// model's shape at its T and P; without it the candidates without stages take rank 0's stage for the model, stated
// nowhere else: the layouts table shows the figures).
void SetPipelineOfRun(ProjectionBasis& b, const TrainPointInput& p) {
  b.pp = p.pipeline_parallel;
  if (b.pp < 2) return;
  b.pipeline_s = p.pipeline_s;
  b.embedding_s = p.embedding_s;
  for (const TensorParallelShape& shape : b.shapes) {
    for (const PipelineShape& pipe : shape.pipelines) {
      if (shape.tp != b.tp || pipe.pp != b.pp || pipe.parameter_share.empty()) continue;
      // Rank 0 (stage 0) measured gradient_bytes: the whole model's per rank of a T-group is that / its share.
      b.gradient_bytes /= pipe.parameter_share.front();
      double shares = 0;
      for (double share : pipe.parameter_share) shares += share;
      b.optimizer_share = shares / b.pp;
      return;
    }
  }
}

// What a projection onto a fabric takes from the run: its priced point without its communication (at the repeats'
// median), the measured overlap, and the model's memory and tensor-parallel all-reduces at each size (RunModelFacts;
// without the model's shape, data parallel modes only at the report's estimate).
ProjectionBasis BasisOf(const RunAnalysis& a) {
  const RunMeasurement& m = a.m;
  const MeasuredPoint& p = m.points[a.priced];
  ProjectionBasis b;
  b.run = m.path;
  b.mode = p.train.parallel;
  b.k = p.train.k;
  b.tp = p.train.tensor_parallel;
  b.weak = m.weak_scaling;
  b.step_s = StepAtRepeatRate(p, p.train.step_s, p.tokens_per_s_median);
  b.tokens_per_step = p.train.tokens_per_step;
  b.exposed_s = p.train.comm_exposed_s;
  b.activation_s = p.train.activation_s;
  b.optimizer_s = p.optimizer_s;
  b.gradient_bytes = p.train.gradient_bytes;
  if (m.bucket_bytes > 0) b.bucket_bytes = m.bucket_bytes;
  b.fsdp_units = m.layers + 2;
  b.micro_batch_tokens = static_cast<double>(p.micro_batch) * m.seq;
  SetOverlap(b, m, p);
  b.parameters = a.memory.parameters;
  b.gathered_parameters = a.memory.gathered_parameters;
  b.calibration = a.memory.calibration;
  b.shapes = a.shapes;
  if (b.shapes.empty()) b.shapes.push_back({1, "", m.memory_estimate, 0, 0, {}, {}});
  SetPipelineOfRun(b, p.train);
  b.ep = p.train.expert_parallel;
  b.alltoall_s = p.train.alltoall_s;
  b.moe = a.moe;
  return b;
}

// A run that communicated in no point (a single GPU measured on the offering's model) takes the overlap of another
// run of the command with the same model and mode that did: the overlap is the training loop's, not the GPU's.
void BorrowOverlap(std::vector<RunAnalysis>& runs) {
  for (RunAnalysis& a : runs) {
    if (a.basis.shapes.empty() || a.basis.overlap_measured) continue;
    for (const RunAnalysis& other : runs) {
      const ProjectionBasis& o = other.basis;
      if (&other == &a || !o.overlap_measured || o.mode != a.basis.mode || other.m.model_name != a.m.model_name ||
          other.m.parameters != a.m.parameters) {
        continue;
      }
      a.basis.overlap = o.overlap;
      a.basis.hidden_s = o.hidden_s;
      a.basis.overlap_measured = true;
      a.basis.overlap_source = o.overlap_source + " in " + other.m.path + " (the same model and mode; this run did not "
                               "communicate)";
      break;
    }
  }
}

// Run `a` onto every offering with a fabric and its GPU model, at each target: the layouts considered and the one
// chosen.
void ProjectRunOntoFabrics(RunAnalysis& a, const PriceFile& prices, std::vector<ProjectTarget> targets) {
  if (targets.empty()) {
    const int k = a.m.points[a.priced].train.k;
    targets.push_back({k, std::nullopt, std::to_string(k)});
  }
  for (const Offering& offering : prices.offerings) {
    const Fabric* fabric = prices.FabricOf(offering);
    if (!fabric || !HasGpu(a, offering.gpu)) continue;
    for (const ProjectTarget& target : targets) {
      FabricProjection projection{&offering, fabric, target, std::nullopt, ""};
      const std::optional<Layout> layout = LayoutOnNodes(target, offering.gpus_per_node, projection.why_not);
      if (layout) projection.choice = ChooseLayout(a.basis, *fabric, *layout, offering.gpu_memory_gib * kGiB);
      a.on_fabrics.push_back(std::move(projection));
    }
  }
}

// Every run onto every offering with a fabric and the run's GPU model, at each --project target (the priced k
// without one).
void ProjectOntoFabrics(CostRun& c) {
  if (!c.prices) return;
  for (RunAnalysis& a : c.runs) {
    for (const Offering& offering : c.prices->offerings) {
      if (c.prices->FabricOf(offering) && HasGpu(a, offering.gpu) && a.basis.shapes.empty()) a.basis = BasisOf(a);
    }
  }
  BorrowOverlap(c.runs);
  for (RunAnalysis& a : c.runs) ProjectRunOntoFabrics(a, *c.prices, c.plan.targets);
}

// The measured point, then --project's layouts with the fitted links.
std::vector<Config> ConfigsOf(const RunAnalysis& a, size_t run_index) {
  std::vector<Config> configs;
  const MeasuredPoint& p = a.m.points[a.priced];
  const Layout measured{p.train.nodes, p.train.gpus_per_node};
  // Priced at the median tokens/s of the repeats (the median repeat's own, but for an even count).
  const auto median = [&](double step_s) { return StepAtRepeatRate(p, step_s, p.tokens_per_s_median); };
  // A run with stages: its exchanges with the neighbouring stages (the bubble) count as exposed communication, as
  // train's comm_exposed_s counts them; so do expert parallel's all-to-alls (carried as measured by a projection onto
  // fitted links, which does not model them).
  const int pp = p.train.pipeline_parallel;
  configs.push_back({run_index, Format("k%d %s", p.train.k, measured.Name().c_str()), false, measured, p.train.k,
                     p.train.tokens_per_step, median(p.train.step_s),
                     p.train.comm_exposed_s + p.train.pipeline_s + p.train.embedding_s + p.train.alltoall_s,
                     a.m.parallel, nullptr, std::nullopt, pp, p.train.pipeline_s + p.train.embedding_s});
  for (const ProjectedPoint& q : a.projected) {
    configs.push_back({run_index, q.layout.Name(), true, q.layout, q.layout.gpus(), q.tokens_per_step,
                       median(q.step_s), q.exposed_s + q.pipeline_s + p.train.alltoall_s, a.m.parallel, nullptr,
                       std::nullopt, pp, q.pipeline_s});
  }
  return configs;
}

// What a configuration delivers, in its layout: a layout of N nodes is billed N whole nodes.
CostInputs InputsOf(const Config& config, const RunAnalysis& a, const CostPlan& plan) {
  CostInputs in;
  in.tokens_per_s = config.tokens_per_step / config.step_s;
  in.target_tokens = plan.target_tokens ? *plan.target_tokens : *plan.target_steps * config.tokens_per_step;
  in.gpus = config.gpus;
  in.nodes = config.layout.nodes;
  in.gpus_per_node = config.layout.gpus_per_node;
  in.startup_s = a.m.startup_s;
  in.checkpoint_stall_s = a.stall_s;
  in.checkpoint_gb = a.checkpoint_gb;
  in.power_per_gpu_W = a.power_per_gpu_W;
  return in;
}

CostRow PriceConfig(const Config& config, const RunAnalysis& a, const Offering& offering, const CostRun& c) {
  CostRow row;
  row.config = config;
  row.offering = &offering;
  row.inputs = InputsOf(config, a, c.plan);
  row.cost = ComputeCost(row.inputs, offering, c.prices->assumptions);
  row.memory = config.memory ? *config.memory
                             : FitMemory(a.memory.For(config.gpus), offering.gpu_memory_gib * kGiB, a.memory.calibration);
  const MeasuredPoint& p = a.m.points[a.priced];
  if (p.repeats > 1) {
    // The repeats' spread of tokens/s, relative to the median's, applied to the configuration's step time.
    const auto total_at = [&](double tokens_per_s) {
      Config at = config;
      at.step_s = config.step_s * p.tokens_per_s_median / tokens_per_s;
      return ComputeCost(InputsOf(at, a, c.plan), offering, c.prices->assumptions).total_usd;
    };
    row.total_usd_low = total_at(p.tokens_per_s_max);
    row.total_usd_high = total_at(p.tokens_per_s_min);
  }
  return row;
}

// Why `config` is not priced on `offering`: its layout puts more GPUs on one node than the offering's nodes have
// (more nodes would not help: the layout is what was measured or asked for).
std::string MisfitNote(const RunAnalysis& a, const Config& config, const Offering& offering) {
  return Format("%s %s: offering %s has %d GPU%s per node; layout %s needs %d on one node", RunName(a).c_str(),
                config.label.c_str(), offering.name.c_str(), offering.gpus_per_node,
                offering.gpus_per_node == 1 ? "" : "s", config.layout.Name().c_str(), config.layout.gpus_per_node);
}

// Run `i` on `offering`'s fabric: the chosen layout of each target, or a note why none was.
void PriceOnFabric(CostRun& c, size_t i, const Offering& offering) {
  const RunAnalysis& a = c.runs[i];
  for (const FabricProjection& fp : a.on_fabrics) {
    if (fp.offering != &offering) continue;
    const std::string at = RunName(a) + " at " + fp.target.text + " GPUs on " + offering.name + " (fabric " +
                           fp.fabric->name + "): not projected: ";
    if (!fp.choice) {
      c.notes.push_back(at + fp.why_not);
      continue;
    }
    if (!fp.choice->chosen) {
      c.notes.push_back(at + fp.choice->reason);
      continue;
    }
    const LayoutCandidate& won = fp.choice->candidates[*fp.choice->chosen];
    const double stages_s = won.pipeline_s + won.bubble_s + won.embedding_s;
    const Config config{i, won.layout.Name() + " " + won.Name(), true, won.layout, won.layout.gpus(),
                        won.tokens_per_step, won.step_s, won.exposed_s + stages_s + won.alltoall_s, won.Name(), &fp,
                        won.memory, won.pp, stages_s};
    c.rows.push_back(PriceConfig(config, a, offering, c));
  }
}

// Run `i`'s configurations on every offering of its GPU model whose nodes hold their layout (a note for each pair
// that does not). False when no offering has its GPU model.
bool PriceRun(CostRun& c, size_t i) {
  const RunAnalysis& a = c.runs[i];
  bool matched = false;
  for (const Offering& offering : c.prices->offerings) {
    if (!HasGpu(a, offering.gpu)) continue;
    matched = true;
    // On an offering with a fabric: the measured point as measured, then the projections onto that fabric.
    const bool fabric = c.prices->FabricOf(offering) != nullptr;
    std::vector<Config> configs = ConfigsOf(a, i);
    if (fabric) configs.resize(1);
    for (const Config& config : configs) {
      if (LayoutFits(InputsOf(config, a, c.plan), offering)) {
        c.rows.push_back(PriceConfig(config, a, offering, c));
      } else {
        c.notes.push_back(MisfitNote(a, config, offering));
      }
    }
    if (fabric) PriceOnFabric(c, i, offering);
  }
  return matched;
}

// The offerings with a fabric that run `a` is not priced on because their GPU model is not the one it measured, in
// one note: a run's compute is never carried to another GPU model without the user saying so.
void OtherModelsNote(CostRun& c, const RunAnalysis& a) {
  std::vector<std::string> others;
  for (const Offering& offering : c.prices->offerings) {
    if (c.prices->FabricOf(offering) && !HasGpu(a, offering.gpu)) others.push_back(offering.name + " (" + offering.gpu + ")");
  }
  if (others.empty()) return;
  c.notes.push_back(RunName(a) + ": not priced on " + JoinNames(others, ", ") + ": measured on " + GpuNames(a) +
                    "; give a run on that GPU model (one GPU is enough: its compute), or --device-as to take this "
                    "run's compute for it");
}

// Cost rows: every run's configurations on every offering of its GPU model; a note for each run left unpriced and
// each configuration an offering's nodes cannot hold. No row at all is an error naming the first reason.
void PriceRuns(CostRun& c) {
  if (!c.prices || c.runs.empty()) return;
  std::optional<size_t> first_misfit;  // into c.notes
  c.notes.insert(c.notes.end(), c.plan.unplaced.begin(), c.plan.unplaced.end());
  for (size_t i = 0; i < c.runs.size(); ++i) {
    const RunAnalysis& a = c.runs[i];
    const size_t notes = c.notes.size();
    c.notes.insert(c.notes.end(), a.projection_notes.begin(), a.projection_notes.end());
    if (!a.gpu) {
      c.notes.push_back(RunName(a) + ": device '" + a.m.device + "' is no known GPU model (known: " +
                        KnownGpuModelNames() + "); --device-as MODEL prices it as one");
    } else if (!PriceRun(c, i)) {
      c.notes.push_back(RunName(a) + ": no offering in " + c.prices->path + " has GPU model " + GpuNames(a) +
                        (a.device_as ? "" : " (--device-as MODEL prices it as another model; its compute is then taken "
                                            "as this run's)"));
    } else {
      if (c.notes.size() > notes && !first_misfit) first_misfit = notes;
      OtherModelsNote(c, a);
    }
  }
  if (c.rows.empty() && first_misfit) {
    throw InputError("no offering in '" + c.prices->path + "' has nodes for the layout of any configuration (" +
                     c.notes[*first_misfit] + ")");
  }
  if (c.rows.empty()) {
    throw InputError("no offering in '" + c.prices->path + "' matches the device of any run (" +
                     c.notes.front() + ")");
  }
}

// What the reasons need of each row (cost_reasons.h).
std::vector<PricedConfig> PricedConfigs(const std::vector<CostRow>& rows, const std::vector<RunAnalysis>& runs) {
  std::vector<PricedConfig> priced;
  for (const CostRow& r : rows) {
    const RunAnalysis& a = runs[r.config.run];
    priced.push_back({RowName(r, runs), RunName(a) + " " + r.config.label,
                      r.config.step_s > 0 ? r.config.exposed_s / r.config.step_s : 0.0,
                      a.m.points[a.priced].data_wait_share, r.config.layout.nodes, r.cost});
  }
  return priced;
}

// The decision over the rows, where each row's time and cost go, and why the winners win.
void DecideCost(CostRun& c) {
  std::vector<CostBreakdown> costs;
  for (const CostRow& r : c.rows) costs.push_back(r.cost);
  c.decision = Decide(costs, c.plan.deadline);
  c.priced = PricedConfigs(c.rows, c.runs);
  for (const PricedConfig& p : c.priced) c.shares.push_back(SharesOf(p));
  c.reasons = ExplainDecision(c.priced, c.decision, c.plan.deadline);
}

// --model's memory fit (calibrated by the first run) against --gpu-memory and each offering's GPU.
void FitModelMemory(CostRun& c) {
  if (!c.plan.model_memory) return;
  // With runs, calibrated by the first one (AnalyzeRun calibrates each run's copy of the check).
  c.model_memory = c.runs.empty() ? *c.plan.model_memory : c.runs.front().memory;
  const MemoryCheck& check = *c.model_memory;
  c.model_estimate = check.For(check.ranks);
  std::vector<std::pair<std::string, double>> gpus;
  if (c.plan.gpu_memory) gpus.push_back({"--gpu-memory " + c.plan.gpu_memory_text, *c.plan.gpu_memory});
  if (c.prices) {
    for (const Offering& o : c.prices->offerings) gpus.push_back({o.name + " (" + o.gpu + ")", o.gpu_memory_gib * kGiB});
  }
  for (const auto& [gpu, bytes] : gpus) {
    c.model_fits.push_back({gpu, FitMemory(c.model_estimate, bytes, check.calibration)});
  }
}

}  // namespace

void AnalyzeCost(CostRun& c) {
  ProjectOntoFabrics(c);
  PriceRuns(c);
  DecideCost(c);
  FitModelMemory(c);
}

}  // namespace tb
