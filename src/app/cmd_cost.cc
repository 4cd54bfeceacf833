// `trainbench cost`: from training reports and a price file to the decision — total task cost, $/1M tokens and time
// to train per run and offering, the cheapest, the fastest and the cheapest within a deadline; projection of a run
// to other GPU counts and layouts (alpha-beta model fitted to its own measurements, with its held-out error); and
// whether a model fits in a GPU's memory. Reads files only: one process, no MPI communication.
#include <boost/program_options.hpp>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <optional>
#include <sstream>

#include "cli.h"
#include "commands.h"
#include "console.h"
#include "cost.h"
#include "cost_reasons.h"
#include "error.h"
#include "html_report.h"
#include "layout_search.h"
#include "log.h"
#include "memory_fit.h"
#include "model_config.h"
#include "prices.h"
#include "projection.h"
#include "report.h"
#include "report_view.h"
#include "tensor_parallel.h"
#include "reporter.h"
#include "run_measurement.h"
#include "token_shard.h"
#include "transformer.h"
#include "units.h"
#include "validate.h"

namespace tb {
namespace {

namespace po = boost::program_options;

constexpr double kGiB = 1024.0 * 1024.0 * 1024.0;
// The checkpoint trainbench writes holds fp32 weights and both AdamW moments.
constexpr double kCheckpointBytesPerParameter = 12.0;

constexpr const char* kUsage =
    "usage: trainbench cost RUN.h5 [RUN.h5 ...] --prices P.toml (--train-tokens N | --train-steps N)\n"
    "                       [--deadline-hours H] [--k N] [--format text|csv|json]\n"
    "       trainbench cost RUN.h5 --prices P.toml --train-tokens N --project 8,32 [--device-as M1,M2]\n"
    "       trainbench cost RUN.h5 --project 16,32,2x8 [--gpus-per-node 8] [--inter-node-gbps R]\n"
    "                       [--collectives C.h5] [--prices P.toml --train-tokens N]\n"
    "       trainbench cost --model NAME [--layers N] [--micro-batch B] [--seq T] --gpu-memory 80G [--prices P.toml]\n"
    "\n"
    "Cost, per run and price offering whose GPU model matches the run's device (see launch/prices.example.toml):\n"
    "  runtime = start-up (measured) + target tokens / measured tokens/s (largest k, or --k; checkpoint stalls\n"
    "  removed) + checkpoint overhead (runtime / interval x measured stall); nodes = the layout's nodes (measured\n"
    "  or projected), at least ceil(GPUs / GPUs per node), whole nodes billed (idle GPUs on them too); a layout with\n"
    "  more GPUs on a node than an offering's nodes have is not priced on it. Failures = runtime x nodes / MTBF per\n"
    "  node; each loses restart time + start-up + half a checkpoint interval (failures fall uniformly between\n"
    "  checkpoints). total = GPU + storage (dataset + kept checkpoints, $/GB-month over the time to train, 730 h a\n"
    "  month) + egress + retry + energy (a report's measured joules per token -> power per GPU x GPUs x training\n"
    "  hours, at the offering's usd_per_kwh; none when the report measured no energy or the offering gives no\n"
    "  price). Young/Daly interval = sqrt(2 x checkpoint stall x MTBF of the job), MTBF of the job = MTBF per node /\n"
    "  nodes.\n"
    "Projection: alpha (latency) and beta (s/byte) per link class fitted by least squares (relative error) to the\n"
    "  all_reduce sweep (t = 2(n-1)/n S beta + 2(n-1) alpha) and the training buckets (comm_total per step vs\n"
    "  gradient bytes); across nodes a hierarchical all-reduce (intra-node reduce-scatter, inter-node all-reduce of\n"
    "  S/g bytes per GPU at --inter-node-gbps, intra-node all-gather). step(k) = measured step without exposed\n"
    "  communication + (1 - measured overlap) x modelled all-reduce. The error is shown on the largest measured k,\n"
    "  predicted from a fit without it.\n"
    "Fabrics: an offering that names a [[fabric]] (intra-node link and network) gets the measured point as measured\n"
    "  and, at each --project count or NxG (the priced k without one), the fastest layout that fits memory of dp,\n"
    "  zero1, fsdp, each with tensor parallel T inside a node: step = the run's compute (its step less communication;\n"
    "  AdamW rescaled by its sharding; T's compute divided evenly, assumed) + the mode's collectives at the fabric's\n"
    "  rates (intra: 1/busbw and latency, or a measured sweep fitted per size band; inter: the node's NICs shared by\n"
    "  its ranks) x (1 - the run's overlap) + tensor parallel's activation all-reduces; the layouts, the chosen one and\n"
    "  why are printed. --device-as takes a list (the run's compute is then taken for each model).\n"
    "Memory fit: per-GPU weights, gradients, optimizer state (bf16 + fp32 master and AdamW: 16 B/parameter) and\n"
    "  activations, data parallel without sharding; scaled by measured peak / estimate when a report measured\n"
    "  device memory.";

struct CostFlags {
  std::vector<std::string> reports;
  std::string prices;
  std::string train_tokens;
  std::string train_steps;
  double deadline_hours = 0;
  int k = 0;
  std::string project;
  int gpus_per_node = 8;
  double inter_node_gbps = 0;
  double inter_node_latency_us = 5;
  std::string collectives;
  std::string device_as;
  bool require_comparable = false;
  std::string history;
  std::string failure_rate = "assumed";
  std::string model;
  int layers = 0;
  int micro_batch = 0;
  int seq = 0;
  std::string gpu_memory;
  std::string parallel = "dp";
  int ranks = 1;
  int tensor_parallel = 1;
  std::string format = "text";
  std::string html;
};

// Parses the flags and the report paths; false after --help.
bool ParseCostFlags(const std::vector<std::string>& args, CostFlags& f, po::variables_map& given) {
  po::options_description options("cost options");
  options.add_options()
      ("prices", po::value(&f.prices), "price file (TOML): offerings and assumptions")
      ("train-tokens", po::value(&f.train_tokens), "the training target in tokens (300e9, 300G; SI suffixes)")
      ("train-steps", po::value(&f.train_steps), "or in optimizer steps of the priced configuration")
      ("deadline-hours", Number(&f.deadline_hours, RealRange::AboveUpTo(0, 1e12)),
       "mark the cheapest configuration that trains within H hours")
      ("k", Number(&f.k, IntRange::AtLeast(1)), "price this measured scaling point (default: the largest)")
      ("project", po::value(&f.project), "project to these GPU counts or layouts: 16,32,2x8 (NxG = N nodes of G GPUs)")
      ("gpus-per-node", Number(&f.gpus_per_node, IntRange::Between(1, 1 << 10))->default_value(f.gpus_per_node),
       "layout of a plain count in --project")
      ("inter-node-gbps", Number(&f.inter_node_gbps, RealRange::AboveUpTo(0, 1e6)),
       "network rate per GPU across nodes, Gbit/s (replaces a fitted one)")
      ("inter-node-latency-us", Number(&f.inter_node_latency_us, RealRange::Between(0, 1e6))
       ->default_value(f.inter_node_latency_us), "inter-node latency alpha when the run measured no inter-node link")
      ("collectives", po::value(&f.collectives), "a collectives report of the same machines: its all_reduce sweep joins the fit")
      ("device-as", po::value(&f.device_as),
       "price the runs as if measured on these GPU models (a list: H100 SXM,H100 PCIe; e.g. a CPU test run)")
      ("require-comparable", po::bool_switch(&f.require_comparable),
       "exit 2 when the runs differ in a variable a fair comparison holds fixed (model, data, versions, batch shape, "
       "steps, ...)")
      ("history", po::value(&f.history),
       "a validate --history directory of nightly runs: their failed and interrupted runs per node-hour, shown "
       "beside the offerings' MTBF")
      ("failure-rate", Choice(&f.failure_rate, {"assumed", "measured"})->default_value(f.failure_rate),
       "the retry cost's failure rate: the price file's MTBF (assumed) or --history's (measured, once it has seen "
       "3 failures; every offering takes it)")
      ("model", po::value(&f.model), "memory fit of this model (a preset name)")
      ("layers", Number(&f.layers, IntRange::Between(1, 4096)), "with --model: this many layers of its shape")
      ("micro-batch", Number(&f.micro_batch, IntRange::AtLeast(1)), "with --model: sequences per GPU per step (1)")
      ("seq", Number(&f.seq, IntRange::Between(1, 1 << 20)), "with --model: tokens per sequence (the model's)")
      ("gpu-memory", po::value(&f.gpu_memory), "with --model: GPU memory to fit in (80G = 80 GiB, 80GB = 80e9 B)")
      ("parallel", Choice(&f.parallel, {"dp", "zero1", "fsdp"})->default_value(f.parallel),
       "with --model: the mode to fit (dp: whole model per GPU; zero1: AdamW's state over --ranks; fsdp: "
       "everything over --ranks, two layers gathered)")
      ("ranks", Number(&f.ranks, IntRange::Between(1, 1 << 20))->default_value(f.ranks),
       "with --model: the GPUs the mode shards over")
      ("tensor-parallel", Number(&f.tensor_parallel, IntRange::Between(1, 1 << 20))->default_value(f.tensor_parallel),
       "with --model: groups of T of the --ranks GPUs split the model (Megatron), the mode shards across the groups")
      ("format", Choice(&f.format, ReportFormatNames())->default_value(f.format),
       "csv and json: the tables of results/README.md (Output of cost)")
      ("html", po::value(&f.html), "also write an HTML page: the reports' plots and the cost per configuration")
      ("help,h", "show this help");
  std::vector<FlagRule> rules = {Excludes("train-tokens", "train-steps"), Needs("deadline-hours", "prices"),
                                 Needs("collectives", "project"), Needs("gpus-per-node", "project"),
                                 Needs("inter-node-gbps", "project"), Needs("inter-node-latency-us", "project"),
                                 Needs("history", "prices"), Needs("failure-rate", "history")};
  for (const char* flag : {"layers", "micro-batch", "seq", "gpu-memory", "parallel", "ranks", "tensor-parallel"}) {
    rules.push_back(Needs(flag, "model"));
  }
  ParseSpec spec;
  spec.rules = rules;
  spec.positional = "reports";
  spec.positional_target = &f.reports;
  spec.given = &given;
  return ParseCommandLine("cost", args, options, kUsage, spec);
}

// ---- formatting --------------------------------------------------------------------------------------------------

// "$1,234,567" above $100, "$12.34" below.
std::string Usd(double value) {
  if (!std::isfinite(value)) return "n/a";
  if (std::fabs(value) < 100) return Format("$%.2f", value);
  const std::string digits = Format("%.0f", std::fabs(value));
  std::string grouped = value < 0 ? "-$" : "$";
  for (size_t i = 0; i < digits.size(); ++i) {
    if (i > 0 && (digits.size() - i) % 3 == 0) grouped += ',';
    grouped += digits[i];
  }
  return grouped;
}

std::string Gib(double bytes) { return Format("%.1f GiB", bytes / kGiB); }

// ---- the analysis ------------------------------------------------------------------------------------------------

struct MemoryCheck {
  std::string what;  // "gpt-13b (40 layers), micro-batch 1, seq 1024, bf16 mixed precision"
  MemoryBreakdown estimate;  // data parallel's
  std::optional<MemoryCalibration> calibration;
  std::string mode = "dp";         // the parallel mode the fit is for
  int ranks = 1;                   // --model: the ranks it shards over (--ranks)
  double gathered_parameters = 0;  // fsdp: the units held at once
  double parameters = 0;
  // The estimate under the mode over `k` ranks (ModeMemory).
  int tensor_parallel = 1;
  MemoryBreakdown For(int k) const {
    return ModeMemory(estimate, mode, k, gathered_parameters, parameters, tensor_parallel);
  }
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

std::string RunName(const RunAnalysis& run) { return run.m.path; }

// --device-as's GPU models, each once; an unknown name is bad input.
std::vector<GpuModel> DeviceAs(const std::string& list) {
  std::vector<GpuModel> models;
  for (const std::string& name : SplitFlagList(list, "--device-as")) {
    const GpuModel& model = FindGpuModel(name, "--device-as");
    const bool seen = std::any_of(models.begin(), models.end(), [&](const GpuModel& m) { return m.name == model.name; });
    if (!seen) models.push_back(model);
  }
  return models;
}

std::string GpuNames(const RunAnalysis& a) {
  std::vector<std::string> names;
  for (const GpuModel& model : a.gpus) names.push_back(model.name);
  return JoinNames(names, ", ");
}

bool HasGpu(const RunAnalysis& a, const std::string& model) {
  return std::any_of(a.gpus.begin(), a.gpus.end(), [&](const GpuModel& m) { return m.name == model; });
}

// A measured point's throughput without its checkpoint stalls (step_s excludes them).
double TokensPerS(const MeasuredPoint& p) { return p.train.tokens_per_step / p.train.step_s; }

// The estimate for --model, or the run's own as its report states it.
MemoryCheck ModelMemory(const CostFlags& f, const RunMeasurement* run) {
  MemoryCheck check;
  if (!f.model.empty()) {
    ModelConfig config = FindPreset(f.model);
    if (f.layers > 0) config = WithLayers(config, f.layers);
    const int micro_batch = f.micro_batch > 0 ? f.micro_batch : 1;
    const int seq = f.seq > 0 ? f.seq : config.seq;
    const MemoryEstimate e = EstimateMemory(config, micro_batch, seq, true, f.tensor_parallel);
    check.estimate = {e.weights_bytes, e.gradients_bytes, e.optimizer_bytes, e.activations_bytes};
    check.mode = f.parallel;
    check.ranks = f.ranks;
    check.tensor_parallel = f.tensor_parallel;
    check.parameters = static_cast<double>(CountParameters(config).total);
    check.gathered_parameters = FsdpGatheredParameters(config);
    check.what = Format("%s (%d layers, %.3g parameters), micro-batch %d, seq %d, bf16 mixed precision, %s over %d "
                        "rank%s", config.name.c_str(), config.layers, check.parameters, micro_batch, seq,
                        f.parallel.c_str(), f.ranks, f.ranks == 1 ? "" : "s");
    if (f.tensor_parallel > 1) {
      check.what += Format(", tensor parallel %d (states and split activations over %d)", f.tensor_parallel,
                           f.tensor_parallel);
    }
    check.For(f.ranks);  // a bad mode or rank count fails here
  } else if (run) {
    check.estimate = run->memory_estimate;
    check.mode = run->parallel;
    check.tensor_parallel = run->points.back().train.tensor_parallel;
    check.parameters = run->parameters;
    if (run->layers > 0 && run->d_model > 0 && run->heads > 0 && run->vocab > 0 && run->max_seq > 0) {
      check.gathered_parameters =
          FsdpGatheredParameters(CustomModel(run->layers, run->d_model, run->heads, run->vocab, run->max_seq));
    }
    check.what = Format("%s as run (%s%.3g parameters, micro-batch %d, seq %d; %s; %s)", run->model_name.c_str(),
                        run->model_scaled.empty() ? "" : (run->model_scaled + ", ").c_str(), run->parameters,
                        run->points.back().micro_batch, run->seq, run->memory_precision.c_str(), run->parallel.c_str());
  }
  if (run) {  // the measured peak against the estimate of the mode at the run's largest point
    check.calibration = CalibrateMemory(run->peak_device_memory_bytes,
                                        check.For(run->points.back().train.k).total_bytes(),
                                        run->path);
  }
  return check;
}

// The priced point's mean power per GPU (per rank) from its measured energy: joules per token x tokens/s (as
// reported: the energy was measured over the same steps, checkpoint stalls included) / ranks.
std::optional<double> EnergyOf(const MeasuredPoint& p) {
  if (!std::isfinite(p.joules_per_token)) return std::nullopt;
  return p.joules_per_token * p.tokens_per_s_reported / p.train.k;
}

// "energy: measured ..." or why there is none, for the run's lines.
std::string EnergyLine(const RunAnalysis& a) {
  const MeasuredPoint& p = a.m.points[a.priced];
  if (!a.power_per_gpu_W) {
    return "#   energy: not measured (the report has no joules_per_token: NVML gave no energy counter); no energy "
           "cost is added";
  }
  return Format("#   energy: measured %.4g J/token at k=%d (the driver's energy counter over the measured steps), "
                "%.4g W per GPU; priced at each offering's usd_per_kwh (none where it has none)",
                p.joules_per_token, p.train.k, *a.power_per_gpu_W);
}

// The index of the point measured at --k (the largest point without it); a --k the run did not measure is bad input.
size_t PricedPoint(const RunMeasurement& m, int k, const std::string& path) {
  if (k <= 0) return m.points.size() - 1;
  for (size_t i = m.points.size(); i-- > 0;) {
    if (m.points[i].train.k == k) return i;
  }
  std::vector<std::string> measured;
  for (const MeasuredPoint& p : m.points) measured.push_back(std::to_string(p.train.k));
  throw InputError("--k " + std::to_string(k) + ": '" + path + "' measured k = " + JoinNames(measured, ","));
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
void ProjectLayouts(RunAnalysis& a, const std::string& path, const std::vector<Layout>& layouts,
                    const LinkOverrides& overrides, bool lenient) {
  std::vector<TrainPointInput> points;
  for (const MeasuredPoint& p : a.m.points) points.push_back(p.train);
  std::vector<AllReduceSample> samples = a.collective_samples;
  for (const AllReduceSample& s : TrainSamples(points)) samples.push_back(s);
  a.fit = FitAlphaBeta(samples);
  a.links = ResolveLinks(*a.fit, overrides);
  BandLinks(a.links, samples, overrides.inter_node_gbps.has_value());
  a.step_model.emplace(points, a.m.weak_scaling, points.front());
  const int t = points.back().tensor_parallel;
  for (const Layout& layout : layouts) {
    if (layout.gpus_per_node % t != 0) {
      throw InputError("cannot project '" + path + "' (tensor parallel " + std::to_string(t) + ") to " +
                       layout.Name() + ": its groups stay inside a node, and " + std::to_string(t) +
                       " does not divide " + std::to_string(layout.gpus_per_node) + " GPUs per node");
    }
    const std::string missing = MissingLinks(a.links, layout);
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

// What a projection onto a fabric takes from the run: its priced point without its communication (at the repeats'
// median), the measured overlap, and the model's memory and tensor-parallel all-reduces at each size in `tp_sizes`.
ProjectionBasis BasisOf(const RunAnalysis& a, const std::vector<int>& tp_sizes) {
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
  // The overlap of the priced point when it communicated, else of the largest point that did.
  std::vector<const MeasuredPoint*> order = {&p};
  for (auto it = m.points.rbegin(); it != m.points.rend(); ++it) order.push_back(&*it);
  for (const MeasuredPoint* q : order) {
    if (q->train.k <= q->train.tensor_parallel || !(q->train.comm_total_s > 0)) continue;  // one replica: no sync
    b.overlap = std::clamp(1.0 - q->train.comm_exposed_s / q->train.comm_total_s, 0.0, 1.0);
    b.overlap_measured = true;
    b.overlap_source = Format("measured at k=%d (%s)", q->train.k, q->train.parallel.c_str());
    break;
  }
  if (!b.overlap_measured) b.overlap_source = "no point communicated: assumed 0 (every collective exposed)";
  b.parameters = a.memory.parameters;
  b.gathered_parameters = a.memory.gathered_parameters;
  b.calibration = a.memory.calibration;
  const bool shape_known = m.layers > 0 && m.d_model > 0 && m.heads > 0 && m.vocab > 0 && m.max_seq > 0 && m.seq > 0;
  if (!shape_known) {  // a report without the model's shape: data parallel modes only, the report's estimate
    b.shapes.push_back({1, "", m.memory_estimate, 0, 0});
    return b;
  }
  const ModelConfig config = CustomModel(m.layers, m.d_model, m.heads, m.vocab, m.max_seq);
  const bool bf16 = m.memory_precision.starts_with("bf16");
  for (int t : tp_sizes) {
    TensorParallelShape shape;
    shape.tp = t;
    try {
      CheckTensorParallel(config, t);
      if (m.device != "cpu") CheckCudaTensorParallelWidths(config, t);
      if ((static_cast<int64_t>(p.micro_batch) * m.seq) % t != 0) {
        throw InputError(Format("tensor parallel %d does not divide the %d tokens of a micro-batch", t,
                                p.micro_batch * m.seq));
      }
      const MemoryEstimate e = EstimateMemory(config, p.micro_batch, m.seq, bf16, t);
      shape.dp_memory = {e.weights_bytes, e.gradients_bytes, e.optimizer_bytes, e.activations_bytes, 0};
      // The models all-reduce fp32 activations (models/tensor_parallel.h): 4 bytes per element.
      shape.activation_bytes = 4.0 * static_cast<double>(TensorParallelAllReduceElements(config, t, p.micro_batch, m.seq));
      shape.activation_ops = t > 1 ? 4.0 * m.layers + 4.0 : 0.0;
    } catch (const InputError& e) {
      shape.invalid = e.what();
    }
    b.shapes.push_back(shape);
  }
  return b;
}

// Whether --project's layouts are projected with the run's fitted links: without a price file, or for its offerings
// that declare no fabric (those with one are projected onto it: ProjectOntoFabrics).
bool FittedProjection(const std::optional<PriceFile>& prices) {
  return !prices || std::any_of(prices->offerings.begin(), prices->offerings.end(),
                                [&](const Offering& o) { return o.fabric.empty(); });
}

RunAnalysis AnalyzeRun(const Report& report, const std::string& path, const CostFlags& f,
                       const std::vector<AllReduceSample>& extra_samples, const std::vector<Layout>& layouts,
                       const LinkOverrides& overrides, const std::optional<PriceFile>& prices) {
  RunAnalysis a;
  a.m = ReadRunMeasurement(report, path);
  a.priced = PricedPoint(a.m, f.k, path);
  a.power_per_gpu_W = EnergyOf(a.m.points[a.priced]);
  a.device_as = !f.device_as.empty();
  if (a.device_as) {
    a.gpus = DeviceAs(f.device_as);
  } else if (const std::optional<GpuModel> model = MatchGpuModel(a.m.device)) {
    a.gpus.push_back(*model);
  }
  if (!a.gpus.empty()) a.gpu = a.gpus.front();
  SetCheckpointCost(a, prices);
  a.collective_samples = a.m.all_reduce;
  a.collective_samples.insert(a.collective_samples.end(), extra_samples.begin(), extra_samples.end());
  if (!layouts.empty()) {
    const bool fabrics = prices && !prices->fabrics.empty();
    ProjectLayouts(a, path, FittedProjection(prices) ? layouts : std::vector<Layout>{}, overrides, fabrics);
  }
  a.memory = ModelMemory(f, &a.m);
  return a;
}

std::vector<Config> ConfigsOf(const RunAnalysis& a, size_t run_index) {
  std::vector<Config> configs;
  const MeasuredPoint& p = a.m.points[a.priced];
  const Layout measured{p.train.nodes, p.train.gpus_per_node};
  // Priced at the median tokens/s of the repeats (the median repeat's own, but for an even count).
  const auto median = [&](double step_s) { return StepAtRepeatRate(p, step_s, p.tokens_per_s_median); };
  configs.push_back({run_index, Format("k%d %s", p.train.k, measured.Name().c_str()), false, measured, p.train.k,
                     p.train.tokens_per_step, median(p.train.step_s), p.train.comm_exposed_s, a.m.parallel, nullptr,
                     std::nullopt});
  for (const ProjectedPoint& q : a.projected) {
    configs.push_back({run_index, q.layout.Name(), true, q.layout, q.layout.gpus(), q.tokens_per_step,
                       median(q.step_s), q.exposed_s, a.m.parallel, nullptr, std::nullopt});
  }
  return configs;
}

// ---- output ------------------------------------------------------------------------------------------------------

std::string Marks(size_t index, const CostDecision& d) {
  std::vector<std::string> marks;
  if (d.cheapest == index) marks.push_back("cheapest");
  if (d.fastest == index) marks.push_back("fastest");
  if (d.cheapest_within_deadline == index) marks.push_back("deadline");
  return JoinNames(marks, ",");
}

std::string MemoryCell(const MemoryFit& fit) {
  return Format("%s %+.1f", fit.fits ? "yes" : "NO", fit.margin_bytes / kGiB);
}

// Where a configuration's throughput comes from: the run's own measurement or the projection.
const char* Source(const Config& config) { return config.projected ? "projected" : "measured"; }

std::string RowName(const CostRow& row, const std::vector<RunAnalysis>& runs) {
  return RunName(runs[row.config.run]) + " " + row.config.label + " (" + Source(row.config) + ") on " +
         row.offering->name;
}

// The mode of a configuration and what its exposed communication costs it, for the decision lines: "fsdp, exposed
// communication 29.1% of the step (parameter gathers 50.2% of it, as measured at k=4)".
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
  return reason;
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

std::vector<std::string> DecisionLines(const std::vector<CostRow>& rows, const std::vector<RunAnalysis>& runs,
                                       const CostDecision& d, std::optional<double> deadline,
                                       const std::vector<PricedConfig>& priced, const DecisionReasons& reasons) {
  std::vector<std::string> lines;
  auto describe = [&](size_t i, const std::string& reason) {
    const CostRow& r = rows[i];
    return RowName(r, runs) + ": " + Usd(r.cost.total_usd) +
           (r.total_usd_low ? " (" + Usd(*r.total_usd_low) + "-" + Usd(*r.total_usd_high) + " over the repeats)"
                            : std::string(" (1 run: spread unknown)")) +
           Format(", %.1f h to train, $%.4f per 1M tokens", rows[i].cost.time_to_train_hours,
                  rows[i].cost.usd_per_million_tokens) +
           "; " + CommReason(rows[i].config, runs[rows[i].config.run]) + "; " + DominantText(priced[i]) +
           "; why: " + reason;
  };
  if (d.cheapest) lines.push_back("# cheapest: " + describe(*d.cheapest, reasons.cheapest));
  if (d.fastest) lines.push_back("# fastest: " + describe(*d.fastest, reasons.fastest));
  if (deadline) {
    lines.push_back(d.cheapest_within_deadline
                        ? Format("# cheapest within %g h: ", *deadline) +
                              describe(*d.cheapest_within_deadline, reasons.deadline)
                        : Format("# none meets the deadline of %g h (the fastest takes %.1f h)", *deadline,
                                 rows[*d.fastest].cost.time_to_train_hours));
  }
  return lines;
}

std::vector<std::string> RunLines(const RunAnalysis& a, const std::optional<PriceFile>& prices) {
  std::vector<std::string> lines;
  const RunMeasurement& m = a.m;
  std::vector<std::string> ks;
  for (const MeasuredPoint& p : m.points) ks.push_back(std::to_string(p.train.k));
  lines.push_back(Format("# run %s: %s%s; %s; measured k = %s on %d node(s), %s scaling", m.path.c_str(),
                         m.device.c_str(),
                         !a.gpu                ? " (no known GPU model)"
                         : a.device_as         ? (", priced as " + GpuNames(a) + " (--device-as)").c_str()
                                               : (" -> " + a.gpu->name).c_str(),
                         m.model_name.c_str(), JoinNames(ks, ",").c_str(), m.nodes, m.weak_scaling ? "weak" : "strong"));
  lines.back() += ", --parallel " + m.parallel;
  const int t = m.points.back().train.tensor_parallel;
  if (t > 1) lines.back() += Format(" --tensor-parallel %d (its activation all-reduces counted as compute)", t);
  const MeasuredPoint& p = m.points[a.priced];
  lines.push_back(Format("#   priced point k=%d (%s): %.6g tokens/s without checkpoint stalls (%.6g as reported), "
                         "start-up %.1f s",
                         p.train.k, Layout{p.train.nodes, p.train.gpus_per_node}.Name().c_str(),
                         TokensPerS(p), p.tokens_per_s_reported, m.startup_s));
  if (a.stall_s) {
    lines.push_back(Format("#   checkpoint: stall %.3g s (mean of %d rank-events at k=%d)", *a.stall_s, a.stall_events,
                           a.stall_k) +
                    (prices ? Format(", %.3g GB (%s)", a.checkpoint_gb, a.checkpoint_size_source.c_str()) : ""));
  } else {
    lines.push_back(std::string("#   checkpoint stall and Young/Daly interval: n/a: run with --checkpoint-every to measure") +
                    (prices ? Format("; size %.3g GB (%s)", a.checkpoint_gb, a.checkpoint_size_source.c_str()) : ""));
  }
  lines.push_back(EnergyLine(a));
  lines.push_back(p.repeats < 2 ? "#   1 run: spread unknown (train --repeats N measures it); no cost range"
                                : Format("#   %d repeats: tokens/s median %.6g (min %.6g, max %.6g, CV %.1f%%), priced at "
                                         "the median; the cost range is the total at the max and at the min",
                                         p.repeats, p.tokens_per_s_median, p.tokens_per_s_min, p.tokens_per_s_max,
                                         p.tokens_per_s_cv * 100));
  return lines;
}

std::vector<std::string> ProjectionLines(const RunAnalysis& a) {
  std::vector<std::string> lines;
  if (!a.fit) return lines;
  const AlphaBetaFit& fit = *a.fit;
  lines.push_back("# projection of " + RunName(a) +
                  " (alpha-beta all-reduce model, ring inside a node, hierarchical across nodes):");
  lines.push_back(Format("#   fit: %d samples (%zu collective sizes, the rest training buckets), rms relative error %.1f%%",
                         fit.samples, a.collective_samples.size(), fit.rms_relative_error * 100));
  auto link = [](const char* name, const LinkParameters& l) {
    if (!(l.beta_s_per_byte > 0)) return Format("#   %s: not measured (%s)", name, l.origin.c_str());
    return Format("#   %s: alpha %.3g us, beta 1/(%.4g GB/s) (%s)", name, l.alpha_s * 1e6, l.bandwidth_GBps(),
                  l.origin.c_str());
  };
  for (const auto& [name, l] : {std::pair{"intra-node", &a.links.intra}, std::pair{"inter-node", &a.links.inter}}) {
    lines.push_back(link(name, *l));
    for (const SizeBand& band : l->bands) {
      lines.push_back(Format("#     band %s: alpha %.3g us, beta 1/(%.4g GB/s), %d sample%s", band.name.c_str(),
                             band.alpha_s * 1e6, band.beta_s_per_byte > 0 ? 1e-9 / band.beta_s_per_byte : 0.0,
                             band.samples, band.samples == 1 ? "" : "s"));
    }
  }
  for (const std::string& note : fit.notes) lines.push_back("#   note: " + note);
  lines.push_back(a.step_model->overlap_measured()
                      ? Format("#   overlap %.2f (measured at the largest communicating point)", a.step_model->overlap())
                      : std::string("#   overlap: no point communicated; assumed 0 (every all-reduce exposed)"));
  if (a.held_out) {
    const HeldOutCheck& h = *a.held_out;
    lines.push_back(Format("#   held out k=%d (%s): predicted step %.4g s, measured %.4g s: error %.1f%% "
                           "(fitted without it)",
                           h.k, h.layout.Name().c_str(), h.predicted_step_s, h.measured_step_s, h.relative_error * 100));
    for (const std::string& note : h.notes) lines.push_back("#   held-out note: " + note);
  } else {
    lines.push_back("#   held-out error: n/a (needs two measured k and a fit without the largest)");
  }
  TextTable table({{"layout", "", 8}, {"gpus", "", 6}, {"step", "(s)", 10}, {"comm", "(s)", 10}, {"exposed", "(s)", 10},
                   {"tokens/s", "", 12}, {"efficiency", "", 10}, {"source", "", 10}});
  for (const std::string& line : table.HeaderLines()) lines.push_back(line);
  for (const MeasuredPoint& p : a.m.points) {
    const Layout layout{p.train.nodes, p.train.gpus_per_node};
    lines.push_back(table.Row({layout.Name(), std::to_string(p.train.k), Format("%.4g", p.train.step_s),
                               Format("%.4g", p.train.comm_total_s), Format("%.4g", p.train.comm_exposed_s),
                               Format("%.6g", TokensPerS(p)), "-", "measured"}));
  }
  for (const ProjectedPoint& q : a.projected) {
    lines.push_back(table.Row({q.layout.Name(), std::to_string(q.layout.gpus()), Format("%.4g", q.step_s),
                               Format("%.4g", q.comm_s), Format("%.4g", q.exposed_s), Format("%.6g", q.tokens_per_s),
                               Format("%.3f", q.efficiency), "projected"}));
  }
  return lines;
}

// The layouts considered for a run on each offering's fabric, the one chosen and why.
std::vector<std::string> FabricLines(const RunAnalysis& a) {
  std::vector<std::string> lines;
  if (a.on_fabrics.empty()) return lines;
  const ProjectionBasis& b = a.basis;
  lines.push_back(Format("# projection of %s onto each offering's fabric: compute %.4g s per step (the priced k=%d, "
                         "%s, T=%d, without its communication; optimizer %.3g s), collectives at the fabric's rates, "
                         "overlap %.2f %s",
                         RunName(a).c_str(), b.ComputeS(), b.k, b.mode.c_str(), b.tp, b.optimizer_s, b.overlap,
                         b.overlap_source.c_str()));
  TextTable table({{"layout", "", 14}, {"step", "(s)", 10}, {"compute", "(s)", 10}, {"exposed", "(s)", 10},
                   {"activ.", "(s)", 9}, {"tokens/s", "", 11}, {"memory", "(GiB)", 9}, {"", "", 0}});
  for (const FabricProjection& fp : a.on_fabrics) {
    lines.push_back(Format("#   on %s (fabric %s, %s), %s GPUs:", fp.offering->name.c_str(), fp.fabric->name.c_str(),
                           IntraKindName(fp.fabric->intra.kind), fp.target.text.c_str()));
    if (!fp.choice) {
      lines.push_back("#     not projected: " + fp.why_not);
      continue;
    }
    const LayoutChoice& ch = *fp.choice;
    if (!ch.links.empty()) lines.push_back("#     links: " + ch.links);
    for (const std::string& line : table.HeaderLines()) lines.push_back(line);
    std::vector<std::string> assumptions;
    std::vector<std::string> impossible;  // one line per tensor-parallel size the model cannot take
    for (size_t i = 0; i < ch.candidates.size(); ++i) {
      const LayoutCandidate& c = ch.candidates[i];
      const std::string mark = ch.chosen == i ? "chosen" : c.why_not;
      if (!c.considered) {
        const std::string line = Format("#     tp%d: not possible: %s", c.tp, c.why_not.c_str());
        if (std::find(impossible.begin(), impossible.end(), line) == impossible.end()) impossible.push_back(line);
        continue;
      }
      lines.push_back(table.Row({c.layout.Name() + " " + c.Name(), Format("%.4g", c.step_s),
                                 Format("%.4g", c.compute_s + c.optimizer_s), Format("%.4g", c.exposed_s),
                                 Format("%.3g", c.activation_s), Format("%.6g", c.tokens_per_s),
                                 Format("%.3g", c.memory.required_bytes / kGiB), mark}));
      for (const std::string& note : c.assumptions) {
        if (std::find(assumptions.begin(), assumptions.end(), note) == assumptions.end()) assumptions.push_back(note);
      }
    }
    lines.insert(lines.end(), impossible.begin(), impossible.end());
    lines.push_back("#     " + std::string(ch.chosen ? "chosen: " : "none chosen: ") + ch.reason);
    for (const std::string& note : assumptions) lines.push_back("#     assumed: " + note);
  }
  return lines;
}

// How a mode shards the model, for the memory lines.
std::string ModeWords(const std::string& mode) {
  if (mode == "zero1") return "zero1: AdamW's state sharded over the ranks";
  if (mode == "fsdp") return "fsdp: weights, gradients and AdamW's state sharded, two layers gathered at a time";
  return "data parallel, no sharding";
}

std::vector<std::string> MemoryLines(const MemoryCheck& check, const std::vector<std::pair<std::string, double>>& gpus) {
  std::vector<std::string> lines;
  lines.push_back("# memory fit, per GPU (" + ModeWords(check.mode) + "): " + check.what);
  const MemoryBreakdown e = check.For(check.ranks);
  lines.push_back("#   weights " + Gib(e.weights_bytes) + ", gradients " + Gib(e.gradients_bytes) + ", optimizer " +
                  Gib(e.optimizer_bytes) + ", activations " + Gib(e.activations_bytes) +
                  (e.working_bytes > 0 ? ", gathered layers " + Gib(e.working_bytes) : std::string()) + ": total " +
                  Gib(e.total_bytes()));
  lines.push_back(check.calibration ? Format("#   calibration x%.3f: %s", check.calibration->factor,
                                             check.calibration->source.c_str())
                                    : std::string("#   calibration: none (no report measured device memory)"));
  for (const auto& [name, bytes] : gpus) {
    const MemoryFit fit = FitMemory(e, bytes, check.calibration);
    lines.push_back(Format("#   %s, %s: needs %s: %s", name.c_str(), Gib(bytes).c_str(), Gib(fit.required_bytes).c_str(),
                           fit.fits ? ("fits, " + Gib(fit.margin_bytes) + " to spare").c_str()
                                    : ("does NOT fit, short by " + Gib(-fit.margin_bytes)).c_str()));
  }
  return lines;
}

// The cost table; the provisioning columns only when an offering of the price file gives a provisioning time.
void PrintCostTable(const std::vector<CostRow>& rows, const std::vector<RunAnalysis>& runs, const CostDecision& d) {
  size_t run_width = 3, offering_width = 8;
  bool provisioning = false, ranged = false;
  for (const CostRow& r : rows) {
    run_width = std::max(run_width, RunName(runs[r.config.run]).size());
    offering_width = std::max(offering_width, r.offering->name.size());
    provisioning = provisioning || r.cost.provisioning_hours > 0;
    ranged = ranged || r.total_usd_low.has_value();
  }
  std::vector<TextTable::ColumnSpec> columns = {
      {"run", "", static_cast<int>(run_width)}, {"config", "", 8}, {"source", "", 9},
      {"offering", "", static_cast<int>(offering_width)}, {"gpus", "", 5}, {"nodes", "", 5}, {"time", "(h)", 9},
      {"gpu", "($)", 12}, {"storage", "($)", 10}, {"egress", "($)", 9}, {"energy", "($)", 9}, {"failures", "", 8},
      {"retry", "($)", 10}, {"total", "($)", 12}, {"per_1M_tok", "($)", 10}, {"ckpt_every", "(h)", 10},
      {"young_daly", "(h)", 10}, {"fits", "(GiB)", 10}, {"", "", 0}};
  // The range column only when a run repeated its measurement; provisioning's only when an offering gives one.
  if (ranged) columns.insert(columns.begin() + 14, {"range", "($)", 19});
  if (provisioning) columns.insert(columns.begin() + 8, {{"prov", "(h)", 6}, {"prov", "($)", 9}});
  const TextTable table(columns);
  for (const std::string& line : table.HeaderLines()) Print(line);
  for (size_t i = 0; i < rows.size(); ++i) {
    const CostRow& r = rows[i];
    const CostBreakdown& c = r.cost;
    std::vector<std::string> cells = {
        RunName(runs[r.config.run]), r.config.label, Source(r.config), r.offering->name, std::to_string(r.inputs.gpus),
        std::to_string(c.nodes), Format("%.1f", c.time_to_train_hours), Usd(c.gpu_usd), Usd(c.storage_usd),
        Usd(c.transfer_usd), c.energy_usd ? Usd(*c.energy_usd) : c.energy_kwh ? "no price" : "n/a",
        Format("%.2f", c.expected_failures), Usd(c.retry_usd), Usd(c.total_usd),
        Format("%.4f", c.usd_per_million_tokens),
        Format("%.2f%s", c.checkpoint_interval_hours, c.interval_is_young_daly ? "yd" : ""),
        c.young_daly_hours ? Format("%.2f", *c.young_daly_hours) : "n/a", MemoryCell(r.memory), Marks(i, d)};
    if (ranged) {
      cells.insert(cells.begin() + 14, r.total_usd_low ? Usd(*r.total_usd_low) + "-" + Usd(*r.total_usd_high)
                                                       : std::string("1 run"));
    }
    if (provisioning) cells.insert(cells.begin() + 8, {Format("%.2f", c.provisioning_hours), Usd(c.provisioning_usd)});
    Print(table.Row(cells));
  }
}

// What the flags ask for, checked before any file is read.
struct CostPlan {
  std::optional<double> target_tokens, target_steps, deadline, gpu_memory;
  std::vector<Layout> layouts;          // --project for offerings without a fabric (fitted links)
  std::vector<ProjectTarget> targets;   // --project for offerings with a fabric
  LinkOverrides overrides;
};

// Everything one `cost` command computes, from the plan through the decision.
struct CostRun {
  CostPlan plan;
  std::optional<PriceFile> prices;
  std::vector<RunAnalysis> runs;
  std::vector<CostRow> rows;
  std::vector<std::string> notes;  // runs, and (configuration, offering) pairs, that could not be priced, and why
  CostDecision decision;
  std::vector<std::pair<std::string, double>> memory_targets;  // --model's fit: --gpu-memory and each offering's GPU
  std::optional<MemoryCheck> model_memory;
  std::optional<Comparison> comparison;  // several runs
  std::vector<PricedConfig> priced;  // what the reasons need of each row, in the rows' order
  DecisionReasons reasons;
  std::optional<FailureHistory> failures;  // --history
  bool measured_failures = false;          // --failure-rate measured, and the history measured a rate
};

// That there is something to compute, and the files each computation needs.
void CheckCostWork(const CostFlags& f, const po::variables_map& given) {
  if (f.reports.empty() && f.model.empty()) {
    throw InputError("no reports given (usage: trainbench cost RUN.h5 ... --prices P, or --model NAME --gpu-memory SIZE)");
  }
  if (!f.reports.empty() && f.prices.empty() && f.project.empty() && f.model.empty()) {
    throw InputError("nothing to compute: give --prices P (cost), --project LIST (projection) or --model NAME (memory fit)");
  }
  if (!f.model.empty() && f.gpu_memory.empty() && f.prices.empty()) {
    throw InputError("--model needs --gpu-memory SIZE (or --prices, for each offering's GPU memory)");
  }
  if (!f.collectives.empty() && f.reports.size() != 1) {
    throw InputError("--collectives goes with exactly one training report (the machines it measured)");
  }
  if (f.reports.empty() && (!f.project.empty() || !f.device_as.empty() || given.count("k"))) {
    throw InputError("--project, --k and --device-as need training reports");
  }
}

// The flag combinations that mean nothing (each one line, exit 2): the training target first.
void CheckCostFlags(const CostFlags& f, const po::variables_map& given) {
  const bool has_target = !f.train_tokens.empty() || !f.train_steps.empty();
  if (has_target && (f.prices.empty() || f.reports.empty())) {
    throw InputError("--train-tokens and --train-steps price training reports: they go with reports and --prices");
  }
  if (!f.prices.empty() && !f.reports.empty() && !has_target) {
    throw InputError("--prices needs a training target: --train-tokens N or --train-steps N");
  }
  CheckCostWork(f, given);
}

CostPlan PlanCost(const CostFlags& f, const po::variables_map& given) {
  CheckCostFlags(f, given);
  CostPlan plan;
  if (!f.train_tokens.empty()) plan.target_tokens = ParseTokenCount(f.train_tokens, "--train-tokens");
  if (!f.train_steps.empty()) plan.target_steps = ParseTokenCount(f.train_steps, "--train-steps");
  if (given.count("deadline-hours")) plan.deadline = f.deadline_hours;
  if (!f.device_as.empty()) DeviceAs(f.device_as);
  if (!f.project.empty()) {
    plan.layouts = ParseLayouts(f.project, f.gpus_per_node, "--project");
    plan.targets = ParseProjectTargets(f.project, "--project");
  }
  if (given.count("inter-node-gbps")) plan.overrides.inter_node_gbps = f.inter_node_gbps;
  plan.overrides.inter_node_latency_s = f.inter_node_latency_us * 1e-6;
  if (!f.gpu_memory.empty()) plan.gpu_memory = static_cast<double>(ParseSize(f.gpu_memory, "--gpu-memory"));
  if (!f.model.empty()) ModelMemory(f, nullptr);  // an unknown preset or shape fails here, before the files
  if (!f.html.empty()) {
    std::vector<std::string> inputs = f.reports;
    for (const std::string* path : {&f.prices, &f.collectives}) {
      if (!path->empty()) inputs.push_back(*path);
    }
    CheckOutputPath(f.html, "--html", inputs, {HistoryDirectory(f.history)});
  }
  return plan;
}

// The price file, the --collectives sweep and every report, analysed.
void ReadCostInputs(const CostFlags& f, CostRun& c) {
  if (!f.prices.empty()) c.prices = ReadPriceFile(f.prices);
  if (!f.history.empty()) {
    c.failures = ReadFailureHistory(f.history);
    c.measured_failures = f.failure_rate == "measured" && c.failures->measured();
    if (c.measured_failures) {
      for (Offering& offering : c.prices->offerings) offering.mtbf_node_hours = c.failures->mtbf_node_hours();
    }
  }
  std::vector<AllReduceSample> extra_samples;
  if (!f.collectives.empty()) extra_samples = ReadAllReduceSamples(ReadReport(f.collectives), f.collectives);
  std::vector<Report> reports;
  for (const std::string& path : f.reports) {
    reports.push_back(ReadReport(path));
    c.runs.push_back(AnalyzeRun(reports.back(), path, f, extra_samples, c.plan.layouts, c.plan.overrides, c.prices));
  }
  c.comparison = CompareReports(reports, f.reports, f.require_comparable);
}

// The tensor-parallel sizes worth modelling: every divisor of some fabric offering's GPUs per node.
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
      a.basis.overlap_measured = true;
      a.basis.overlap_source = o.overlap_source + " in " + other.m.path + " (the same model and mode; this run did not "
                               "communicate)";
      break;
    }
  }
}

// Every run onto every offering with a fabric and the run's GPU model, at each --project target (the priced k
// without one): the layouts considered there and the one chosen.
void ProjectOntoFabrics(CostRun& c) {
  if (!c.prices) return;
  const std::vector<int> tp_sizes = TensorParallelSizes(*c.prices);
  for (RunAnalysis& a : c.runs) {
    for (const Offering& offering : c.prices->offerings) {
      if (c.prices->FabricOf(offering) && HasGpu(a, offering.gpu) && a.basis.shapes.empty()) {
        a.basis = BasisOf(a, tp_sizes);
      }
    }
  }
  BorrowOverlap(c.runs);
  for (RunAnalysis& a : c.runs) {
    std::vector<ProjectTarget> targets = c.plan.targets;
    if (targets.empty()) {
      const int k = a.m.points[a.priced].train.k;
      targets.push_back({k, std::nullopt, std::to_string(k)});
    }
    for (const Offering& offering : c.prices->offerings) {
      const Fabric* fabric = c.prices->FabricOf(offering);
      if (!fabric || !HasGpu(a, offering.gpu)) continue;
      for (const ProjectTarget& target : targets) {
        FabricProjection projection{&offering, fabric, target, std::nullopt, ""};
        const std::optional<Layout> layout = LayoutOnNodes(target, offering.gpus_per_node, projection.why_not);
        if (layout) projection.choice = ChooseLayout(a.basis, *fabric, *layout, offering.gpu_memory_gib * kGiB);
        a.on_fabrics.push_back(std::move(projection));
      }
    }
  }
}

// What a configuration delivers, in its layout: a layout of N nodes is billed N whole nodes.
CostInputs InputsOf(const Config& config, const RunAnalysis& a, const CostRun& c) {
  CostInputs in;
  in.tokens_per_s = config.tokens_per_step / config.step_s;
  in.target_tokens = c.plan.target_tokens ? *c.plan.target_tokens : *c.plan.target_steps * config.tokens_per_step;
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
  row.inputs = InputsOf(config, a, c);
  row.cost = ComputeCost(row.inputs, offering, c.prices->assumptions);
  row.memory = config.memory ? *config.memory
                             : FitMemory(a.memory.For(config.gpus), offering.gpu_memory_gib * kGiB, a.memory.calibration);
  const MeasuredPoint& p = a.m.points[a.priced];
  if (p.repeats > 1) {
    // The repeats' spread of tokens/s, relative to the median's, applied to the configuration's step time.
    const auto total_at = [&](double tokens_per_s) {
      Config at = config;
      at.step_s = config.step_s * p.tokens_per_s_median / tokens_per_s;
      return ComputeCost(InputsOf(at, a, c), offering, c.prices->assumptions).total_usd;
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
    const Config config{i, won.layout.Name() + " " + won.Name(), true, won.layout, won.layout.gpus(),
                        won.tokens_per_step, won.step_s, won.exposed_s, won.Name(), &fp, won.memory};
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
      if (LayoutFits(InputsOf(config, a, c), offering)) {
        c.rows.push_back(PriceConfig(config, a, offering, c));
      } else {
        c.notes.push_back(MisfitNote(a, config, offering));
      }
    }
    if (fabric) PriceOnFabric(c, i, offering);
  }
  return matched;
}

// Cost rows: every run's configurations on every offering of its GPU model; a note for each run left unpriced and
// each configuration an offering's nodes cannot hold. No row at all is an error naming the first reason.
void PriceRuns(CostRun& c) {
  if (!c.prices || c.runs.empty()) return;
  std::optional<size_t> first_misfit;  // into c.notes
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
    } else if (c.notes.size() > notes && !first_misfit) {
      first_misfit = notes;
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

// The decision over the rows, and --model's memory fit against --gpu-memory and each offering's GPU.
void DecideCost(const CostFlags& f, CostRun& c) {
  std::vector<CostBreakdown> costs;
  for (const CostRow& r : c.rows) costs.push_back(r.cost);
  c.decision = Decide(costs, c.plan.deadline);
  c.priced = PricedConfigs(c.rows, c.runs);
  c.reasons = ExplainDecision(c.priced, c.decision, c.plan.deadline);
  if (c.plan.gpu_memory) c.memory_targets.push_back({"--gpu-memory " + f.gpu_memory, *c.plan.gpu_memory});
  if (c.prices) {
    for (const Offering& o : c.prices->offerings) {
      c.memory_targets.push_back({o.name + " (" + o.gpu + ")", o.gpu_memory_gib * kGiB});
    }
  }
  if (!f.model.empty()) c.model_memory = ModelMemory(f, c.runs.empty() ? nullptr : &c.runs.front().m);
}

// ---- the figures as tables: what the CSV and JSON reporters write (layout: results/README.md, "Output of cost") --

// A table filled row by row: each Add names its column (on the first row) and gives the cell.
class TableBuilder {
 public:
  TableBuilder(std::string name, std::string title, bool per_run) {
    table_.section = "cost";
    table_.name = std::move(name);
    table_.title = std::move(title);
    table_.per_run = per_run;
  }
  TableBuilder& Row() {
    table_.rows.emplace_back();
    return *this;
  }
  TableBuilder& Add(const std::string& column, const std::string& unit, Cell cell) {
    std::vector<Cell>& row = table_.rows.back();
    if (table_.rows.size() == 1) table_.columns.push_back({column, unit});
    row.push_back(std::move(cell));
    return *this;
  }
  ViewTable Take() { return std::move(table_); }

 private:
  ViewTable table_;
};

Cell Opt(const std::optional<double>& value) { return value ? Cell(*value) : Cell(); }
Cell Int(int64_t value) { return Cell(value); }
Cell Flag(bool value) { return Cell(int64_t{value ? 1 : 0}); }

void AddLink(TableBuilder& t, const std::string& prefix, const LinkParameters* l) {
  t.Add(prefix + "_alpha_s", "s", l ? Cell(l->alpha_s) : Cell())
      .Add(prefix + "_beta_s_per_byte", "s/B", l ? Cell(l->beta_s_per_byte) : Cell())
      .Add(prefix + "_bandwidth_GBps", "GB/s", l ? Cell(l->bandwidth_GBps()) : Cell())
      .Add(prefix + "_fitted", "", l ? Flag(l->fitted) : Cell())
      .Add(prefix + "_origin", "", l ? Cell(l->origin) : Cell());
}

// The projection's fit of one run; every cell empty without --project.
void AddFit(TableBuilder& t, const RunAnalysis& a) {
  const AlphaBetaFit* fit = a.fit ? &*a.fit : nullptr;
  t.Add("fit_samples", "", fit ? Int(fit->samples) : Cell())
      .Add("collective_samples", "", fit ? Int(static_cast<int64_t>(a.collective_samples.size())) : Cell())
      .Add("fit_rms_relative_error", "fraction", fit ? Cell(fit->rms_relative_error) : Cell());
  AddLink(t, "intra", fit ? &a.links.intra : nullptr);
  AddLink(t, "inter", fit ? &a.links.inter : nullptr);
  t.Add("fit_notes", "", fit && !fit->notes.empty() ? Cell(JoinNames(fit->notes, "; ")) : Cell())
      .Add("overlap", "fraction", fit ? Cell(a.step_model->overlap()) : Cell())
      .Add("overlap_measured", "", fit ? Flag(a.step_model->overlap_measured()) : Cell());
  const HeldOutCheck* h = a.held_out ? &*a.held_out : nullptr;
  t.Add("held_out_k", "", h ? Int(h->k) : Cell())
      .Add("held_out_layout", "", h ? Cell(h->layout.Name()) : Cell())
      .Add("held_out_predicted_step_s", "s", h ? Cell(h->predicted_step_s) : Cell())
      .Add("held_out_measured_step_s", "s", h ? Cell(h->measured_step_s) : Cell())
      .Add("held_out_relative_error", "fraction", h ? Cell(h->relative_error) : Cell())
      .Add("held_out_notes", "", h && !h->notes.empty() ? Cell(JoinNames(h->notes, "; ")) : Cell());
}

// cost.run: the run as measured, the point priced, its checkpoint stall and size, and the projection's fit.
ViewTable RunTable(const RunAnalysis& a, bool priced) {
  const RunMeasurement& m = a.m;
  const MeasuredPoint& p = m.points[a.priced];
  TableBuilder t("run", "the run, its priced point and the projection's fit", true);
  t.Row().Add("device", "", m.device).Add("gpu_model", "", GpuNames(a))
      .Add("gpu_model_from", "", !a.gpu ? "" : a.device_as ? "--device-as" : "device")
      .Add("ranks", "", Int(m.ranks)).Add("nodes", "", Int(m.nodes)).Add("model", "", m.model_name)
      .Add("scaling_mode", "", m.weak_scaling ? "weak" : "strong").Add("startup_s", "s", m.startup_s)
      .Add("priced_k", "", Int(p.train.k)).Add("priced_layout", "", Layout{p.train.nodes, p.train.gpus_per_node}.Name())
      .Add("tokens_per_s", "tokens/s", TokensPerS(p)).Add("tokens_per_s_reported", "tokens/s", p.tokens_per_s_reported)
      .Add("checkpoint_stall_s", "s", Opt(a.stall_s))
      .Add("checkpoint_events", "", a.stall_s ? Int(a.stall_events) : Cell())
      .Add("checkpoint_stall_k", "", a.stall_s ? Int(a.stall_k) : Cell())
      .Add("checkpoint_stall", "", a.stall_s ? "measured" : "n/a: run with --checkpoint-every to measure")
      .Add("checkpoint_gb", "GB", priced ? Cell(a.checkpoint_gb) : Cell())
      .Add("checkpoint_size_source", "", priced ? Cell(a.checkpoint_size_source) : Cell())
      .Add("joules_per_token", "J/token", a.power_per_gpu_W ? Cell(p.joules_per_token) : Cell())
      .Add("power_per_gpu_W", "W", Opt(a.power_per_gpu_W))
      .Add("energy", "", a.power_per_gpu_W ? "measured" : "n/a: the report has no joules_per_token (no NVML energy)");
  AddFit(t, a);
  return t.Take();
}

// cost.layouts: every layout considered on each offering's fabric, the chosen one marked.
ViewTable LayoutsTable(const RunAnalysis& a) {
  TableBuilder t("layouts", "layouts considered on each offering's fabric", false);
  for (const FabricProjection& fp : a.on_fabrics) {
    const LayoutChoice* ch = fp.choice ? &*fp.choice : nullptr;
    const size_t n = ch && !ch->candidates.empty() ? ch->candidates.size() : 1;
    for (size_t i = 0; i < n; ++i) {
      const LayoutCandidate* c = ch && !ch->candidates.empty() ? &ch->candidates[i] : nullptr;
      const bool modelled = c && c->considered;
      auto num = [&](double v) { return modelled ? Cell(v) : Cell(); };
      t.Row().Add("offering", "", fp.offering->name).Add("fabric", "", fp.fabric->name)
          .Add("intra", "", IntraKindName(fp.fabric->intra.kind)).Add("target", "", fp.target.text)
          .Add("layout", "", ch ? Cell(ch->layout.Name()) : Cell()).Add("candidate", "", c ? Cell(c->Name()) : Cell())
          .Add("mode", "", c ? Cell(c->mode) : Cell()).Add("tensor_parallel", "", c ? Int(c->tp) : Cell())
          .Add("replicas", "", c ? Int(c->replicas()) : Cell()).Add("step_s", "s", num(c ? c->step_s : 0))
          .Add("compute_s", "s", num(c ? c->compute_s : 0)).Add("optimizer_s", "s", num(c ? c->optimizer_s : 0))
          .Add("activation_s", "s", num(c ? c->activation_s : 0)).Add("comm_s", "s", num(c ? c->comm_s : 0))
          .Add("exposed_s", "s", num(c ? c->exposed_s : 0)).Add("tokens_per_step", "tokens", num(c ? c->tokens_per_step : 0))
          .Add("tokens_per_s", "tokens/s", num(c ? c->tokens_per_s : 0))
          .Add("memory_required_bytes", "B", num(c ? c->memory.required_bytes : 0))
          .Add("gpu_memory_bytes", "B", num(c ? c->memory.gpu_memory_bytes : 0))
          .Add("memory_fits", "", modelled ? Flag(c->memory.fits) : Cell())
          .Add("chosen", "", Flag(ch && ch->chosen == i && c))
          .Add("why_not", "", c ? Cell(c->why_not) : Cell(ch ? ch->reason : fp.why_not))
          .Add("reason", "", ch && ch->chosen == i && c ? Cell(ch->reason) : Cell())
          .Add("links", "", ch ? Cell(ch->links) : Cell())
          .Add("assumptions", "", c && !c->assumptions.empty() ? Cell(JoinNames(c->assumptions, "; ")) : Cell());
    }
  }
  return t.Take();
}

// cost.points: the measured points, then the projected layouts.
ViewTable PointsTable(const RunAnalysis& a) {
  TableBuilder t("points", "measured and projected points", false);
  for (const MeasuredPoint& p : a.m.points) {
    const Layout layout{p.train.nodes, p.train.gpus_per_node};
    t.Row().Add("layout", "", layout.Name()).Add("gpus", "", Int(layout.gpus())).Add("nodes", "", Int(layout.nodes))
        .Add("source", "", "measured").Add("k", "", Int(p.train.k)).Add("step_s", "s", p.train.step_s)
        .Add("step_s_reported", "s", p.step_s_reported).Add("tokens_per_step", "tokens", p.train.tokens_per_step)
        .Add("tokens_per_s", "tokens/s", TokensPerS(p)).Add("tokens_per_s_reported", "tokens/s", p.tokens_per_s_reported)
        .Add("comm_s", "s", p.train.comm_total_s).Add("exposed_s", "s", p.train.comm_exposed_s)
        .Add("gradient_bytes", "B", p.train.gradient_bytes).Add("checkpoint_stall_s", "s", Opt(p.checkpoint_stall_s))
        .Add("efficiency", "fraction", Cell()).Add("repeats", "", Int(p.repeats))
        .Add("tokens_per_s_min", "tokens/s", p.tokens_per_s_min).Add("tokens_per_s_max", "tokens/s", p.tokens_per_s_max)
        .Add("tokens_per_s_cv", "fraction", p.tokens_per_s_cv);
  }
  for (const ProjectedPoint& q : a.projected) {
    t.Row().Add("layout", "", q.layout.Name()).Add("gpus", "", Int(q.layout.gpus())).Add("nodes", "", Int(q.layout.nodes))
        .Add("source", "", "projected").Add("k", "", Cell()).Add("step_s", "s", q.step_s)
        .Add("step_s_reported", "s", Cell()).Add("tokens_per_step", "tokens", q.tokens_per_step)
        .Add("tokens_per_s", "tokens/s", q.tokens_per_s).Add("tokens_per_s_reported", "tokens/s", Cell())
        .Add("comm_s", "s", q.comm_s).Add("exposed_s", "s", q.exposed_s).Add("gradient_bytes", "B", Cell())
        .Add("checkpoint_stall_s", "s", Cell()).Add("efficiency", "fraction", q.efficiency).Add("repeats", "", Cell())
        .Add("tokens_per_s_min", "tokens/s", Cell()).Add("tokens_per_s_max", "tokens/s", Cell())
        .Add("tokens_per_s_cv", "fraction", Cell());
  }
  return t.Take();
}

void AddCostRow(TableBuilder& t, const CostRow& r, const std::string& marks, const PricedConfig& priced) {
  const CostBreakdown& c = r.cost;
  t.Row().Add("config", "", r.config.label).Add("projected", "", Flag(r.config.projected))
      .Add("offering", "", r.offering->name).Add("gpu", "", r.offering->gpu).Add("gpus", "", Int(r.inputs.gpus))
      .Add("nodes", "", Int(c.nodes)).Add("billed_gpus", "", Int(c.billed_gpus))
      .Add("target_tokens", "tokens", r.inputs.target_tokens).Add("tokens_per_s", "tokens/s", r.inputs.tokens_per_s)
      .Add("job_usd_per_hour", "USD/h", c.job_usd_per_hour).Add("work_hours", "h", c.work_hours)
      .Add("startup_hours", "h", c.startup_hours).Add("provisioning_hours", "h", c.provisioning_hours)
      .Add("checkpoint_interval_hours", "h", c.checkpoint_interval_hours)
      .Add("interval_is_young_daly", "", Flag(c.interval_is_young_daly))
      .Add("young_daly_hours", "h", Opt(c.young_daly_hours))
      .Add("checkpoint_overhead_hours", "h", c.checkpoint_overhead_hours).Add("run_hours", "h", c.run_hours)
      .Add("job_mtbf_hours", "h", c.job_mtbf_hours).Add("expected_failures", "", c.expected_failures)
      .Add("lost_hours_per_failure", "h", c.lost_hours_per_failure).Add("retry_hours", "h", c.retry_hours)
      .Add("time_to_train_hours", "h", c.time_to_train_hours).Add("gpu_usd", "USD", c.gpu_usd)
      .Add("provisioning_usd", "USD", c.provisioning_usd)
      .Add("storage_gb", "GB", c.storage_gb).Add("storage_usd", "USD", c.storage_usd)
      .Add("transfer_usd", "USD", c.transfer_usd).Add("retry_usd", "USD", c.retry_usd)
      .Add("energy_kwh", "kWh", Opt(c.energy_kwh)).Add("energy_J_per_token", "J/token", Opt(c.energy_J_per_token))
      .Add("usd_per_kwh", "USD/kWh", Opt(r.offering->usd_per_kwh)).Add("energy_usd", "USD", Opt(c.energy_usd))
      .Add("total_usd", "USD", c.total_usd).Add("total_usd_low", "USD", Opt(r.total_usd_low))
      .Add("total_usd_high", "USD", Opt(r.total_usd_high))
      .Add("usd_per_million_tokens", "USD", c.usd_per_million_tokens)
      .Add("gpu_memory_bytes", "B", r.memory.gpu_memory_bytes)
      .Add("memory_required_bytes", "B", r.memory.required_bytes)
      .Add("memory_margin_bytes", "B", r.memory.margin_bytes).Add("memory_fits", "", Flag(r.memory.fits))
      .Add("marks", "", marks);
  // Where the training time and the cost go (cost_reasons.h): every share, and the largest of each.
  const std::vector<Share> time = TimeShares(priced), cost = CostShares(r.cost);
  const char* time_keys[] = {"time_compute_share", "time_exposed_comm_share", "time_data_wait_share",
                             "time_checkpoint_stall_share"};
  for (size_t i = 0; i < time.size(); ++i) t.Add(time_keys[i], "fraction", time[i].fraction);
  t.Add("exposed_comm_link", "", priced.nodes > 1 ? "inter-node" : "intra-node")
      .Add("dominant_time_part", "", Dominant(time).part).Add("dominant_time_share", "fraction", Dominant(time).fraction)
      .Add("dominant_cost_part", "", Dominant(cost).part).Add("dominant_cost_share", "fraction", Dominant(cost).fraction);
}

// cost.rows of run `run`: its configurations on every offering of its GPU model, with the decision's marks.
ViewTable RowsTable(const CostRun& c, size_t run) {
  TableBuilder t("rows", "cost per configuration and offering", false);
  for (size_t i = 0; i < c.rows.size(); ++i) {
    if (c.rows[i].config.run == run) AddCostRow(t, c.rows[i], Marks(i, c.decision), c.priced[i]);
  }
  return t.Take();
}

// What --history measured of failures, beside what the price file assumes, and which the retry cost takes.
std::string FailureLine(const FailureHistory& h, bool used, const std::vector<Offering>& offerings) {
  double low = INFINITY, high = 0;
  for (const Offering& o : offerings) {
    low = std::min(low, o.mtbf_node_hours);
    high = std::max(high, o.mtbf_node_hours);
  }
  const std::string seen = Format("# failures: history %s: %d failed or interrupted of %d runs in %.4g node-hours",
                                  h.dir.c_str(), h.failures, h.runs, h.node_hours);
  if (used) {
    return seen + Format(": MTBF %.4g h per node measured, used for every offering (--failure-rate measured)",
                         h.mtbf_node_hours());
  }
  const std::string assumed = low == high ? Format("%.4g h", low) : Format("%.4g-%.4g h", low, high);
  if (!h.measured()) {
    return seen + Format(": too few failures to measure a rate (%d of the %d needed); the retry cost takes the "
                         "price file's MTBF of %s per node",
                         h.failures, FailureHistory::kMinFailures, assumed.c_str());
  }
  return seen + Format(": MTBF %.4g h per node measured, against %s assumed by the price file (used; "
                       "--failure-rate measured takes the history's)",
                       h.mtbf_node_hours(), assumed.c_str());
}

// cost.decision: the target and the rows that win (named as in the text), and the runs left unpriced.
ViewTable DecisionTable(const CostRun& c) {
  const CostDecision& d = c.decision;
  auto name = [&](const std::optional<size_t>& i) { return i ? Cell(RowName(c.rows[*i], c.runs)) : Cell(); };
  TableBuilder t("decision", "the decision over every run and offering", true);
  t.Row().Add("offerings", "", Int(static_cast<int64_t>(c.prices->offerings.size())))
      .Add("target_tokens", "tokens", Opt(c.plan.target_tokens)).Add("target_steps", "", Opt(c.plan.target_steps))
      .Add("deadline_hours", "h", Opt(c.plan.deadline)).Add("cheapest", "", name(d.cheapest))
      .Add("fastest", "", name(d.fastest)).Add("cheapest_within_deadline", "", name(d.cheapest_within_deadline))
      .Add("deadline_met", "", c.plan.deadline ? Flag(d.cheapest_within_deadline.has_value()) : Cell())
      .Add("unpriced", "", c.notes.empty() ? Cell() : Cell(JoinNames(c.notes, "; ")))
      .Add("cheapest_reason", "", d.cheapest ? Cell(c.reasons.cheapest) : Cell())
      .Add("fastest_reason", "", d.fastest ? Cell(c.reasons.fastest) : Cell())
      .Add("deadline_reason", "", d.cheapest_within_deadline ? Cell(c.reasons.deadline) : Cell())
      .Add("failure_rate", "", c.measured_failures ? "measured" : "assumed")
      .Add("history_runs", "", c.failures ? Int(c.failures->runs) : Cell())
      .Add("history_failures", "", c.failures ? Int(c.failures->failures) : Cell())
      .Add("history_node_hours", "h", c.failures ? Cell(c.failures->node_hours) : Cell())
      .Add("measured_mtbf_node_hours", "h",
           c.failures && c.failures->measured() ? Cell(c.failures->mtbf_node_hours()) : Cell());
  return t.Take();
}

// cost.memory: --model's estimate against --gpu-memory and each offering's GPU, a row per GPU.
ViewTable MemoryTable(const MemoryCheck& check, const std::vector<std::pair<std::string, double>>& gpus) {
  TableBuilder t("memory", "memory fit per GPU (" + ModeWords(check.mode) + ")", false);
  const MemoryBreakdown e = check.For(check.ranks);
  for (const auto& [gpu, bytes] : gpus) {
    const MemoryFit fit = FitMemory(e, bytes, check.calibration);
    t.Row().Add("what", "", check.what).Add("gpu", "", gpu).Add("gpu_memory_bytes", "B", bytes)
        .Add("weights_bytes", "B", e.weights_bytes).Add("gradients_bytes", "B", e.gradients_bytes)
        .Add("optimizer_bytes", "B", e.optimizer_bytes).Add("activations_bytes", "B", e.activations_bytes)
        .Add("working_bytes", "B", e.working_bytes).Add("parallel", "", check.mode)
        .Add("ranks", "", Int(check.ranks)).Add("total_bytes", "B", e.total_bytes()).Add("calibration", "", fit.calibration)
        .Add("calibration_source", "", check.calibration ? check.calibration->source : "none")
        .Add("required_bytes", "B", fit.required_bytes).Add("margin_bytes", "B", fit.margin_bytes)
        .Add("fits", "", Flag(fit.fits));
  }
  return t.Take();
}

// The views of one `cost` command: a view per training report (labelled as given), then one of the whole
// command (labelled with the price file, or --model NAME) for the decision and the memory fit.
std::vector<RunView> CostViews(const CostFlags& f, const CostRun& c) {
  std::vector<RunView> views;
  for (size_t i = 0; i < c.runs.size(); ++i) {
    RunView& view = views.emplace_back(RunView{RunName(c.runs[i]), {}});
    view.tables.push_back(RunTable(c.runs[i], c.prices.has_value()));
    view.tables.push_back(PointsTable(c.runs[i]));
    if (!c.runs[i].on_fabrics.empty()) view.tables.push_back(LayoutsTable(c.runs[i]));
    if (c.prices) view.tables.push_back(RowsTable(c, i));
  }
  RunView all{c.prices ? f.prices : "--model " + f.model, {}};
  if (c.prices && !c.runs.empty()) all.tables.push_back(DecisionTable(c));
  if (c.model_memory) all.tables.push_back(MemoryTable(*c.model_memory, c.memory_targets));
  if (!all.tables.empty()) views.push_back(std::move(all));
  return views;
}

void PrintCostText(const CostRun& c) {
  const CostPlan& p = c.plan;
  Print(std::string("# trainbench cost: ") +
        (c.runs.empty() ? std::string("memory fit") : Format("%zu run(s)", c.runs.size())) +
        (c.prices ? Format("; prices %s (%zu offerings)", c.prices->path.c_str(), c.prices->offerings.size()) : "") +
        (p.target_tokens ? Format("; target %.4g tokens", *p.target_tokens) : "") +
        (p.target_steps ? Format("; target %.4g steps", *p.target_steps) : "") +
        (p.deadline ? Format("; deadline %g h", *p.deadline) : ""));
  if (c.comparison) {
    Print("#");
    for (const std::string& line : ComparisonLines(*c.comparison)) Print(line);
  }
  if (c.failures) {
    Print("#");
    Print(FailureLine(*c.failures, c.measured_failures, c.prices->offerings));
  }
  for (const RunAnalysis& a : c.runs) {
    Print("#");
    for (const std::string& line : RunLines(a, c.prices)) Print(line);
  }
  for (const RunAnalysis& a : c.runs) {
    if (!a.fit) continue;
    Print("#");
    for (const std::string& line : ProjectionLines(a)) Print(line);
  }
  for (const RunAnalysis& a : c.runs) {
    if (a.on_fabrics.empty()) continue;
    Print("#");
    for (const std::string& line : FabricLines(a)) Print(line);
  }
  if (c.model_memory) {
    Print("#");
    for (const std::string& line : MemoryLines(*c.model_memory, c.memory_targets)) Print(line);
  }
  if (c.rows.empty()) return;
  Print("#");
  Print(Format("# cost per run and offering (source: measured = the run's priced point, projected = its projection; "
               "nodes = the layout's, rented whole; energy: measured, at the offering's usd_per_kwh, "
               "'no price' without one, 'n/a' unmeasured; ckpt_every 'yd' = the Young/Daly interval; "
               "fits = GPU memory left, %s)",
               c.model_memory ? "the --model checked" : "each run's model as run"));
  PrintCostTable(c.rows, c.runs, c.decision);
  for (const std::string& note : c.notes) Print("# " + note);
  for (const std::string& line : DecisionLines(c.rows, c.runs, c.decision, p.deadline, c.priced, c.reasons)) Print(line, true);
}

}  // namespace

// Flags first, then files: a mistake in a flag is reported before anything is read.
int RunCostCommand(const CommandInput& input) {
  CostFlags f;
  po::variables_map given;
  if (!ParseCostFlags(input.args, f, given)) return 0;
  CostRun c;
  c.plan = PlanCost(f, given);
  ReadCostInputs(f, c);
  ProjectOntoFabrics(c);
  PriceRuns(c);
  DecideCost(f, c);
  const std::vector<RunView> views = CostViews(f, c);
  const ReportContextInfo context = {"cost", f.reports, c.comparison};
  if (!f.html.empty()) {
    // The page opens with the decision lines the console prints (PrintCostText), not a rendering of its own.
    const std::vector<std::string> decision =
        c.rows.empty() ? std::vector<std::string>{}
                       : DecisionLines(c.rows, c.runs, c.decision, c.plan.deadline, c.priced, c.reasons);
    WriteHtmlReport(f.reports, f.html, ReportViews("json", context, views), HtmlExport::kCost, decision);
    if (f.format == "text") Print("# HTML report: " + f.html);
  }
  if (f.format == "text") {
    PrintCostText(c);
  } else {
    std::string text = ReportViews(f.format, context, views);
    if (!text.empty() && text.back() == '\n') text.pop_back();  // Print ends the line
    Print(text, true);
  }
  return 0;
}

}  // namespace tb
