// `trainbench cost`'s decision as a library (results/README.md, "Cost and projection"): each run analysed (its priced
// point, checkpoint cost, energy, memory and the fitted projection to --project's layouts), projected onto each
// offering's fabric in its best layout, every configuration priced on every offering of its GPU model, and the
// decision with its reasons. Every result is computed here, once; cost_text.h and cost_tables.h only render it.
// Inputs are plain structs — the run as its report holds it (RunMeasurement), the price file (PriceFile), what the
// flags ask for (CostPlan) and what the training models say of the model (RunModelFacts: computed by the caller from
// models/, which this layer does not link) — so that unit tests build them in code (tests/cost_analysis_test.cc).
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "comparability.h"
#include "cost.h"
#include "cost_reasons.h"
#include "layout_search.h"
#include "memory_fit.h"
#include "prices.h"
#include "projection.h"
#include "run_measurement.h"
#include "validate.h"

namespace tb {

// A model's memory per GPU in a mode: --model's, or a run's as its report states it.
struct MemoryCheck {
  std::string what;  // "gpt-13b (40 layers), micro-batch 1, seq 1024, bf16 mixed precision"
  MemoryBreakdown estimate;  // data parallel's
  std::optional<MemoryCalibration> calibration;
  std::string mode = "dp";         // the parallel mode the fit is for
  int ranks = 1;                   // --model: the ranks it shards over (--ranks)
  double gathered_parameters = 0;  // fsdp: the units held at once
  double parameters = 0;
  int tensor_parallel = 1;
  // A run with pipeline stages: each stage's estimate before the mode shards it (PlanTrainPoint's), the states of its
  // parameters and the activations of its micro-batches in flight; empty without stages.
  std::vector<MemoryBreakdown> stages;
  // The estimate under the mode over `k` ranks (ModeMemory); with stages, the largest stage's over its k / P ranks.
  MemoryBreakdown For(int k) const;
};

// How a mode shards the model, in words: "zero1: AdamW's state sharded over the ranks".
std::string ModeWords(const std::string& mode);

// What the training models say of a run's model, computed by the caller (src/app/cost_model_facts.cc).
struct RunModelFacts {
  MemoryCheck memory;  // the run's model as its report states it, before calibration (unused with --model)
  // The model at each tensor-parallel size of TensorParallelSizes (T = 1 first), each with its pipeline stages at each
  // P of PipelineSizes, at the priced point's micro-batch; empty when the report lacks the model's shape (data
  // parallel modes only, at the report's estimate).
  std::vector<TensorParallelShape> shapes;
  MoeFacts moe;  // the run's MoE blocks (zeros for a dense model or without the model's shape)
};

// What the flags ask for, checked before any file is read.
struct CostPlan {
  std::optional<double> target_tokens, target_steps, deadline;
  std::optional<double> gpu_memory;     // --gpu-memory, bytes
  std::string gpu_memory_text;          // as given ("80G"): the memory fit's row
  std::string model;                    // --model NAME ("" without)
  std::optional<MemoryCheck> model_memory;  // --model's estimate, before calibration
  int k = 0;                            // --k: the measured point to price (0: the largest)
  std::vector<GpuModel> device_as;      // --device-as's models (empty: the device's)
  std::vector<Layout> layouts;          // --project for offerings without a fabric (fitted links)
  std::vector<ProjectTarget> targets;   // --project for offerings with a fabric
  std::vector<std::string> unplaced;    // --project counts --gpus-per-node cannot lay out (noted with --prices)
  LinkOverrides overrides;
  bool measured_failure_rate = false;   // --failure-rate measured
};

// A run projected onto one offering's fabric at one --project target (or at its priced k without one).
struct FabricProjection {
  const Offering* offering = nullptr;
  const Fabric* fabric = nullptr;
  ProjectTarget target;
  std::optional<LayoutChoice> choice;  // nullopt: the target does not fit the offering's nodes (why_not says why)
  std::string why_not;
};

struct RunAnalysis {
  RunMeasurement m;
  size_t priced = 0;  // index into m.points
  std::optional<GpuModel> gpu;   // the first of gpus
  std::vector<GpuModel> gpus;    // the device's model, or --device-as's models
  bool device_as = false;  // gpus come from --device-as, not from the device
  std::vector<TensorParallelShape> shapes;   // RunModelFacts::shapes
  MoeFacts moe;                              // RunModelFacts::moe
  ProjectionBasis basis;   // what a projection onto a fabric takes from the run
  std::vector<FabricProjection> on_fabrics;  // each offering with a fabric x each --project target
  std::vector<std::string> projection_notes;  // --project layouts the fitted links could not model (lenient)
  std::optional<double> stall_s;
  int stall_events = 0;
  int stall_k = 0;
  double checkpoint_gb = 0;
  std::string checkpoint_size_source;
  std::optional<double> power_per_gpu_W;  // measured at the priced point (EnergyOf)
  std::vector<AllReduceSample> collective_samples;  // this report's and --collectives'
  std::optional<AlphaBetaFit> fit;
  LinkModel links;
  std::optional<HeldOutCheck> held_out;
  std::optional<StepModel> step_model;
  std::vector<ProjectedPoint> projected;
  MemoryCheck memory;
};

// A configuration priced: the measured point or a projected layout of one run.
struct Config {
  size_t run = 0;
  std::string label;  // "k8 1x8" (measured), "2x8" (projected) or "4x8 tp2+zero1" (projected onto a fabric)
  bool projected = false;
  Layout layout;
  int gpus = 0;  // ranks of the job: a measured point's k (an uneven layout holds fewer than nodes x per node)
  double tokens_per_step = 0;
  double step_s = 0;  // without checkpoint stalls
  double exposed_s = 0;  // exposed communication per step (measured, or the projection's)
  std::string mode;      // the parallel mode (the run's, or the layout chosen on a fabric)
  // Projected onto an offering's fabric: that offering only, the candidate's memory fit and why it was chosen.
  const FabricProjection* on_fabric = nullptr;
  std::optional<MemoryFit> memory;
  int pp = 1;             // pipeline stages: the run's (measured, projected with the fitted links), or the layout's
  double pipeline_s = 0;  // projected with the fitted links: its exchanges between stages and tied embedding per step
};

struct CostRow {
  Config config;
  const Offering* offering = nullptr;
  CostInputs inputs;
  CostBreakdown cost;
  MemoryFit memory;
  // --repeats: the total cost at the slowest and the fastest repeat's tokens/s (none for one repeat).
  std::optional<double> total_usd_low, total_usd_high;
};

// Everything one `cost` command computes, from the plan through the decision. Rows and projections point into
// `prices` and `runs`: a CostRun is moved, never copied.
struct CostRun {
  CostPlan plan;
  std::optional<PriceFile> prices;
  std::vector<RunAnalysis> runs;
  std::vector<CostRow> rows;
  std::vector<std::string> notes;  // runs, and (configuration, offering) pairs, that could not be priced, and why
  CostDecision decision;
  std::optional<MemoryCheck> model_memory;  // --model's, calibrated by the first run
  MemoryBreakdown model_estimate;           // --model's in its mode over --ranks
  // --model's fit on each GPU (--gpu-memory, each offering's), named "--gpu-memory 80G" or "OFFERING (GPU)".
  std::vector<std::pair<std::string, MemoryFit>> model_fits;
  std::optional<Comparison> comparison;  // several runs
  std::vector<PricedConfig> priced;  // what the reasons need of each row, in the rows' order
  std::vector<RowShares> shares;     // where each row's training time and cost go, in the rows' order
  DecisionReasons reasons;
  std::optional<FailureHistory> failures;  // --history
  bool measured_failures = false;          // --failure-rate measured, and the history measured a rate

  CostRun() = default;
  CostRun(CostRun&&) = default;
  CostRun& operator=(CostRun&&) = default;
  CostRun(const CostRun&) = delete;
  CostRun& operator=(const CostRun&) = delete;
};

// ---- the steps, in the order `cost` takes them -----------------------------------------------------------------

// --history's failures: shown beside the price file's MTBF, and with plan.measured_failure_rate (once the history
// measured a rate) every offering's MTBF per node.
void UseFailureHistory(CostRun& c, FailureHistory history);

// The index of the point measured at `k` (the largest point for k = 0); a k the run did not measure is bad input.
size_t PricedPoint(const RunMeasurement& m, int k);
// The tensor-parallel sizes worth modelling: every divisor of some fabric offering's GPUs per node.
std::vector<int> TensorParallelSizes(const PriceFile& prices);
// The pipeline sizes worth modelling for run `m` (its point `priced`): every P > 1 that divides the nodes of some
// --project target (the priced k without one) on some fabric offering's nodes and is a power of two or divides the
// model's layers (a power of two that does not is listed with train's reason), and the run's own P.
std::vector<int> PipelineSizes(const PriceFile& prices, const std::vector<ProjectTarget>& targets,
                               const RunMeasurement& m, size_t priced);

// One run: the priced point, its GPU models, checkpoint cost, energy and memory, and its projection to
// plan.layouts with the links fitted to its own measurements (and `extra_samples`, --collectives'). A layout the
// fitted links cannot model is bad input, or a note when the price file has fabrics.
RunAnalysis AnalyzeRun(RunMeasurement m, const RunModelFacts& facts, const CostPlan& plan,
                       const std::vector<AllReduceSample>& extra_samples, const std::optional<PriceFile>& prices);

// After every run: each run onto each offering's fabric, every configuration priced, the decision and its reasons,
// and --model's memory fit. Throws InputError when there are runs and prices but no configuration could be priced.
void AnalyzeCost(CostRun& c);

// ---- what the renderers name ------------------------------------------------------------------------------------

std::string RunName(const RunAnalysis& run);
std::string GpuNames(const RunAnalysis& run);  // "H100 SXM, H100 PCIe"
// A measured point's throughput without its checkpoint stalls (step_s excludes them).
double TokensPerS(const MeasuredPoint& p);
// Where a configuration's throughput comes from: "measured" or "projected".
const char* Source(const Config& config);
// "run.h5 k2 1x2 (measured) on lambda-8x-h100-sxm".
std::string RowName(const CostRow& row, const std::vector<RunAnalysis>& runs);
// "cheapest,fastest,deadline": what row `index` wins.
std::string Marks(size_t index, const CostDecision& decision);
// The mode of a configuration and what its exposed communication costs it, for the decision lines.
std::string CommReason(const Config& config, const RunAnalysis& run);

}  // namespace tb
