// `trainbench cost`: from training reports and a price file to the decision — total task cost, $/1M tokens and time
// to train per run and offering, the cheapest, the fastest and the cheapest within a deadline; projection of a run
// to other GPU counts and layouts (alpha-beta model fitted to its own measurements, with its held-out error) and onto
// each offering's fabric; and whether a model fits in a GPU's memory. Reads files only: one process, no MPI
// communication. A driver of named steps: flags, plan (every flag checked before a file is read), inputs, the
// analysis (results/analysis/cost_analysis.h) and its rendering (cost_text.h, cost_tables.h).
#include <boost/program_options.hpp>

#include <algorithm>

#include "cli.h"
#include "commands.h"
#include "cost_analysis.h"
#include "cost_model_facts.h"
#include "cost_tables.h"
#include "cost_text.h"
#include "error.h"
#include "html_report.h"
#include "log.h"
#include "reporter.h"
#include "token_shard.h"
#include "units.h"

namespace tb {
namespace {

namespace po = boost::program_options;

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
  std::string prices, train_tokens, train_steps;
  double deadline_hours = 0;
  int k = 0;
  std::string project;
  int gpus_per_node = 8;
  double inter_node_gbps = 0;
  double inter_node_latency_us = 5;
  std::string collectives, device_as;
  bool require_comparable = false;
  std::string history;
  std::string failure_rate = "assumed";
  ModelFlags model;
  std::string gpu_memory;
  std::string format = "text";
  std::string html;
};

// --model and the flags that shape its memory fit.
void AddModelFitOptions(po::options_description& options, ModelFlags& model, std::string& gpu_memory) {
  options.add_options()
      ("model", po::value(&model.name), "memory fit of this model (a preset name)")
      ("layers", Number(&model.layers, IntRange::Between(1, 4096)), "with --model: this many layers of its shape")
      ("micro-batch", Number(&model.micro_batch, IntRange::AtLeast(1)), "with --model: sequences per GPU per step (1)")
      ("seq", Number(&model.seq, IntRange::Between(1, 1 << 20)), "with --model: tokens per sequence (the model's)")
      ("gpu-memory", po::value(&gpu_memory), "with --model: GPU memory to fit in (80G = 80 GiB, 80GB = 80e9 B)")
      ("parallel", Choice(&model.parallel, {"dp", "zero1", "fsdp"})->default_value(model.parallel),
       "with --model: the mode to fit (dp: whole model per GPU; zero1: AdamW's state over --ranks; fsdp: "
       "everything over --ranks, two layers gathered)")
      ("ranks", Number(&model.ranks, IntRange::Between(1, 1 << 20))->default_value(model.ranks),
       "with --model: the GPUs the mode shards over")
      ("tensor-parallel", Number(&model.tensor_parallel, IntRange::Between(1, 1 << 20))->default_value(model.tensor_parallel),
       "with --model: groups of T of the --ranks GPUs split the model (Megatron), the mode shards across the groups")
      ("pipeline-parallel", Number(&model.pipeline_parallel, IntRange::Between(1, 4096))
       ->default_value(model.pipeline_parallel),
       "with --model: the --ranks GPUs in P pipeline stages of L/P layers (1F1B; dp or zero1 across the pipelines): "
       "the largest stage's memory")
      ("micro-batches", Number(&model.micro_batches, IntRange::AtLeast(1)),
       "with --pipeline-parallel: micro-batches per step (P: 1F1B holds min(P - s, M) in flight on stage s)")
      ("expert-parallel", Number(&model.expert_parallel, IntRange::Between(1, 1 << 20))
       ->default_value(model.expert_parallel),
       "with --model (an moe-* preset): each MoE block's experts over EP of the --ranks GPUs, E/EP per GPU (dp)");
}

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
      ("format", Choice(&f.format, ReportFormatNames())->default_value(f.format),
       "csv and json: the tables of results/README.md (Output of cost)")
      ("html", po::value(&f.html), "also write an HTML page: the reports' plots and the cost per configuration");
  AddModelFitOptions(options, f.model, f.gpu_memory);
  options.add_options()("help,h", "show this help");
  std::vector<FlagRule> rules = {Excludes("train-tokens", "train-steps"), Needs("deadline-hours", "prices"),
                                 Needs("collectives", "project"), Needs("gpus-per-node", "project"),
                                 Needs("inter-node-gbps", "project"), Needs("inter-node-latency-us", "project"),
                                 Needs("history", "prices"), Needs("failure-rate", "history")};
  for (const char* flag : {"layers", "micro-batch", "seq", "gpu-memory", "parallel", "ranks", "tensor-parallel",
                           "pipeline-parallel", "expert-parallel"}) {
    rules.push_back(Needs(flag, "model"));
  }
  rules.push_back(Needs("micro-batches", "pipeline-parallel"));
  ParseSpec spec;
  spec.rules = rules;
  spec.positional = "reports";
  spec.positional_target = &f.reports;
  spec.given = &given;
  return ParseCommandLine("cost", args, options, kUsage, spec);
}

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

// That there is something to compute, and the files each computation needs.
void CheckCostWork(const CostFlags& f) {
  if (f.reports.empty() && f.model.name.empty()) {
    throw InputError("no reports given (usage: trainbench cost RUN.h5 ... --prices P, or --model NAME --gpu-memory SIZE)");
  }
  if (!f.reports.empty() && f.prices.empty() && f.project.empty() && f.model.name.empty()) {
    throw InputError("nothing to compute: give --prices P (cost), --project LIST (projection) or --model NAME (memory fit)");
  }
  if (!f.model.name.empty() && f.gpu_memory.empty() && f.prices.empty()) {
    throw InputError("--model needs --gpu-memory SIZE (or --prices, for each offering's GPU memory)");
  }
}

// The flags that go with training reports.
void CheckReportFlags(const CostFlags& f, const po::variables_map& given) {
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
  CheckCostWork(f);
  CheckReportFlags(f, given);
}

// What the flags ask for, every value checked (and --model's shape) before any file is read.
CostPlan PlanCost(const CostFlags& f, const po::variables_map& given) {
  CheckCostFlags(f, given);
  CostPlan plan;
  if (!f.train_tokens.empty()) plan.target_tokens = ParseTokenCount(f.train_tokens, "--train-tokens");
  if (!f.train_steps.empty()) plan.target_steps = ParseTokenCount(f.train_steps, "--train-steps");
  if (given.count("deadline-hours")) plan.deadline = f.deadline_hours;
  plan.k = f.k;
  if (!f.device_as.empty()) plan.device_as = DeviceAs(f.device_as);
  if (!f.project.empty()) {
    plan.targets = ParseProjectTargets(f.project, "--project");
    // With a price file, a count that --gpus-per-node cannot lay out is still projected onto the fabrics (on each
    // offering's own nodes); the offerings without one note it. Without one it is an error, as it always was.
    plan.layouts = f.prices.empty() ? ParseLayouts(f.project, f.gpus_per_node, "--project")
                                    : FittedLayouts(plan.targets, f.gpus_per_node, plan.unplaced);
  }
  if (given.count("inter-node-gbps")) plan.overrides.inter_node_gbps = f.inter_node_gbps;
  plan.overrides.inter_node_latency_s = f.inter_node_latency_us * 1e-6;
  if (!f.gpu_memory.empty()) plan.gpu_memory = static_cast<double>(ParseSize(f.gpu_memory, "--gpu-memory"));
  plan.gpu_memory_text = f.gpu_memory;
  plan.model = f.model.name;
  if (!f.model.name.empty()) plan.model_memory = ModelMemoryCheck(f.model);  // an unknown preset or shape fails here
  plan.measured_failure_rate = f.failure_rate == "measured";
  if (!f.html.empty()) {
    std::vector<std::string> inputs = f.reports;
    for (const std::string* path : {&f.prices, &f.collectives}) {
      if (!path->empty()) inputs.push_back(*path);
    }
    CheckOutputPath(f.html, "--html", inputs, {HistoryDirectory(f.history)});
  }
  return plan;
}

// The price file, --history and the --collectives sweep, then each report read and analysed in turn (so that its
// errors come in the order of the files), and what the runs held fixed.
CostRun ReadCostInputs(const CostFlags& f, CostPlan plan) {
  CostRun c;
  c.plan = std::move(plan);
  if (!f.prices.empty()) c.prices = ReadPriceFile(f.prices);
  if (!f.history.empty()) UseFailureHistory(c, ReadFailureHistory(f.history));
  std::vector<AllReduceSample> extra_samples;
  if (!f.collectives.empty()) extra_samples = ReadAllReduceSamples(ReadReport(f.collectives), f.collectives);
  const std::vector<int> tp_sizes = c.prices ? TensorParallelSizes(*c.prices) : std::vector<int>{};
  std::vector<Report> reports;
  for (const std::string& path : f.reports) {
    reports.push_back(ReadReport(path));
    RunMeasurement m = ReadRunMeasurement(reports.back(), path);
    const size_t priced = PricedPoint(m, c.plan.k);
    const std::vector<int> pp_sizes = c.prices ? PipelineSizes(*c.prices, c.plan.targets, m, priced) : std::vector<int>{};
    const RunModelFacts facts = RunModelFactsOf(m, m.points[priced], !c.plan.model_memory, tp_sizes, pp_sizes);
    c.runs.push_back(AnalyzeRun(std::move(m), facts, c.plan, extra_samples, c.prices));
  }
  c.comparison = CompareReports(reports, f.reports, f.require_comparable);
  return c;
}

// The HTML page (opening with the decision lines the console prints), then the text or the CSV or JSON tables.
void RenderCost(const CostFlags& f, const CostRun& c) {
  const std::vector<RunView> views = CostViews(c);
  const ReportContextInfo context = {"cost", f.reports, c.comparison};
  if (!f.html.empty()) {
    WriteHtmlReport(f.reports, f.html, ReportViews("json", context, views), HtmlExport::kCost, DecisionLines(c));
    if (f.format == "text") Print("# HTML report: " + f.html);
  }
  if (f.format != "text") {
    std::string text = ReportViews(f.format, context, views);
    if (!text.empty() && text.back() == '\n') text.pop_back();  // Print ends the line
    Print(text, true);
    return;
  }
  for (const std::string& line : CostTextLines(c)) Print(line);
  for (const std::string& line : DecisionLines(c)) Print(line, true);  // the answer, even with --quiet
}

}  // namespace

int RunCostCommand(const CommandInput& input) {
  CostFlags f;
  po::variables_map given;
  if (!ParseCostFlags(input.args, f, given)) return 0;
  CostRun c = ReadCostInputs(f, PlanCost(f, given));
  AnalyzeCost(c);
  RenderCost(f, c);
  return 0;
}

}  // namespace tb
