// `trainbench train`: synthetic-transformer training steps on every rank, gradients averaged in buckets
// overlapped with backward, every phase timed; a scaling sweep over sub-communicators of the first k ranks.
#include <algorithm>
#include <cmath>
#include <optional>

#include "cli.h"
#include "clock.h"
#include "commands.h"
#include "definitions.h"
#include "console.h"
#include "device.h"
#include "error.h"
#include "fault.h"
#include "injecting_communicator.h"
#include "injection.h"
#include "link_probe.h"
#include "log.h"
#include "memory_fit.h"
#include "model_config.h"
#include "op_summary.h"
#include "mpi_util.h"
#include "peaks.h"
#include "phase.h"
#include "report_check.h"
#include "train_energy.h"
#include "train_loop.h"
#include "train_plan.h"
#include "scaling_plan.h"
#include "train_io.h"
#include "train_repeats.h"
#include "train_summary.h"
#include "tensor_parallel.h"
#include "transformer.h"
#include "units.h"
#include "watchdog.h"

namespace tb {
namespace {

constexpr const char* kUsage =
    "usage: [mpirun -np N] trainbench train [--model NAME] [--layers N] [--seq T] [--micro-batch B] [--steps S]\n"
    "                                      [--scaling 1,2,4|pow2] [--scaling-mode weak|strong] [-o FILE]\n"
    "Runs real training steps (forward, backward, AdamW) of a GPT-style transformer on synthetic tokens; gradients\n"
    "are averaged in buckets all-reduced during backward (--no-overlap: after it). Per step and rank it times\n"
    "data_wait, h2d, forward, backward, comm_total, comm_exposed, optimizer, checkpoint_stall and the step.\n"
    "Model FLOPs per token = 6*N_matmul + 6*L*T*d; MFU = model FLOP/s per rank / peak (or / measured GEMM rate).";

// Shape ceilings: past any model trained today, low enough that parameter, FLOP and memory counts stay exact.
constexpr int64_t kMaxLayers = 4096;
constexpr int64_t kMaxWidth = 1 << 17;
constexpr int64_t kMaxGradAccum = 1 << 16;  // micro-batches per optimizer step
constexpr int64_t kMaxVocab = 1 << 24;
constexpr int64_t kMaxSeq = 1 << 20;

struct TrainFlags {
  std::string model = "gpt2-124m";
  int layers = -1;  // -1: not given
  int d_model = 0;
  int heads = 0;
  int vocab = 50257;
  int seq = 0;
  int micro_batch = 4;
  int grad_accum = 1;
  int steps = 20;
  int warmup_steps = 2;
  double bucket_mb = kDefaultBucketMiB;
  bool no_overlap = false;
  std::string scaling;
  std::string scaling_mode = "weak";
  std::string allreduce = "auto";
  int global_batch = 0;
  double learning_rate = 3e-4;
  int64_t seed = 1234;
  std::string attention = "auto";
  std::string link_probe = "16MiB";
  std::string parallel = "dp";
  int tensor_parallel = 1;
  int pipeline_parallel = 1;
  int micro_batches = 0;  // 0: not given (--grad-accum's count)
  bool allow_cross_node_tp = false;
  bool op_times = false;
  bool cuda_graph = false;
  int repeats = 1;
  // Mixture of experts (0 / not given: an moe-* preset's, or MoeConfig's defaults with --experts).
  int experts = 0;
  int top_k = 0;
  int expert_ffn = 0;
  int moe_every = 0;
  std::optional<double> capacity_factor;
  std::optional<double> aux_loss_coef;
  int expert_parallel = 1;
  bool allow_cross_node_ep = false;
};

// The MoE flags given over `moe` (a preset's, or the defaults).
MoeConfig MoeFromFlags(const TrainFlags& f, MoeConfig moe) {
  if (f.experts > 0) moe.experts = f.experts;
  if (f.top_k > 0) moe.top_k = f.top_k;
  if (f.expert_ffn > 0) moe.expert_ffn = f.expert_ffn;
  if (f.moe_every > 0) moe.every = f.moe_every;
  if (f.capacity_factor) moe.capacity_factor = *f.capacity_factor;
  if (f.aux_loss_coef) moe.aux_loss_coef = *f.aux_loss_coef;
  return moe;
}

// Whether any MoE shape flag was given.
bool MoeFlagsGiven(const TrainFlags& f) {
  return f.experts > 0 || f.top_k > 0 || f.expert_ffn > 0 || f.moe_every > 0 || f.capacity_factor ||
         f.aux_loss_coef;
}

ParallelMode ParseParallel(const std::string& text) {
  if (text == "zero1") return ParallelMode::kZero1;
  if (text == "fsdp") return ParallelMode::kFsdp;
  return ParallelMode::kDp;
}

// --parallel zero1|fsdp: what it cannot be combined with yet (one line, exit 2).
void CheckParallel(const TrainFlags& f, const TrainIoFlags& io) {
  if (f.parallel == "dp") return;
  if (f.allreduce != "auto") {
    throw InputError("--allreduce " + f.allreduce + " chooses the gradient all-reduce; --parallel " + f.parallel +
                     " reduce-scatters the gradients instead (leave --allreduce at auto)");
  }
  if (io.checkpoint_every > 0 || !io.resume.empty()) {
    throw InputError("--parallel " + f.parallel + " with checkpoints (--checkpoint-every, --resume) is not built "
                     "yet: a checkpoint holds every rank's slice of the whole AdamW state, which " + f.parallel +
                     " shards differently; train with --parallel dp to checkpoint");
  }
}

// --tensor-parallel T > 1: what it needs and what it cannot be combined with yet (one line, exit 2). The layout is
// checked against the points by CheckTensorParallelLayout and CheckTensorParallelGroups.
void CheckTensorParallelFlags(const TrainFlags& f, const ModelConfig& model, int seq, bool cuda) {
  if (f.tensor_parallel == 1) return;
  const std::string t = "--tensor-parallel " + std::to_string(f.tensor_parallel);
  const std::string gap = TensorParallelModeGap(f.parallel, f.tensor_parallel, cuda);
  if (!gap.empty()) throw InputError(t + " " + gap);
  CheckTensorParallelStep(model, f.tensor_parallel, f.micro_batch, seq, cuda);
}

// --cuda-graph: what it needs and what it cannot be combined with (one line, exit 2): the CUDA model's passes without
// host work inside them (CudaTransformerOptions::cuda_graphs; the model's own gaps from CudaGraphGap).
void CheckCudaGraphFlags(const TrainFlags& f, const ModelConfig& model, bool cuda) {
  if (!f.cuda_graph) return;
  if (!cuda) throw InputError("--cuda-graph applies to --backend cuda");
  const std::string gap = f.op_times              ? "--op-times (its marks are host work inside the passes)"
                          : f.tensor_parallel > 1 ? "--tensor-parallel (the tensor-parallel model all-reduces inside "
                                                    "its passes)"
                                                  : CudaGraphGap(model, f.parallel == "fsdp", f.pipeline_parallel > 1);
  if (!gap.empty()) throw InputError("--cuda-graph is not built with " + gap);
}

// --pipeline-parallel P > 1: what it cannot be combined with yet (one line, exit 2). P against the layers, the ranks
// and the micro-batches: PlanTrainPoint.
void CheckPipelineFlags(const TrainFlags& f, bool cuda) {
  if (f.pipeline_parallel == 1) return;
  const std::string p = "--pipeline-parallel " + std::to_string(f.pipeline_parallel);
  if (f.parallel == "fsdp") {
    throw InputError(p + " with --parallel fsdp is not built yet (fsdp across the pipelines): dp or zero1");
  }
  if (cuda && f.tensor_parallel > 1) {
    throw InputError(p + " with --tensor-parallel on the cuda backend is not built yet (the CUDA tensor parallel "
                     "model holds no stage); on the cpu backend it is");
  }
}

// Per rank of `group`: whether it is on another node than this one (`node`: this rank's). Collective over the group.
std::vector<bool> RemoteNodes(const Communicator& group, int node) {
  std::vector<bool> remote;
  for (double n : AllGatherDoubles(group.host_comm(), node)) remote.push_back(n != node);
  return remote;
}

// A model with MoE blocks and --expert-parallel: what is not built yet (one line, exit 2). EP against the experts and
// the ranks: PlanTrainPoint.
void CheckMoeFlags(const TrainFlags& f, const ModelConfig& model) {
  if (!model.moe) return;
  const std::string gap = MoeLayoutGap(model, f.parallel, f.tensor_parallel, f.pipeline_parallel, f.expert_parallel);
  if (!gap.empty()) throw InputError(gap);
  if (f.expert_parallel > 1 && f.micro_batches > 0) {
    throw InputError("--expert-parallel with --micro-batches: pipeline stages are not built with experts");
  }
}

// --link-probe SIZE, or 0 / off: no probe.
uint64_t ParseLinkProbe(const std::string& text) {
  if (text == "0" || text == "off") return 0;
  LinkProbeOptions options;
  options.bytes = ParseSize(text, "--link-probe");
  ValidateLinkProbeOptions(options);
  return options.bytes;
}

AttentionChoice ParseAttention(const std::string& text) {
  if (text == "auto") return AttentionChoice::kAuto;
  if (text == "cudnn") return AttentionChoice::kCudnn;
  if (text == "cublas") return AttentionChoice::kCublas;
  throw InputError("unknown attention '" + text + "' for --attention (accepted: auto|cudnn|cublas)");
}

// AdamW's elements on a rank, the mean over a point's ranks: the model's (with stages also the last stage's own copy of
// wte) spread over the stages, and over the replicas where zero1 or fsdp shard them.
double AdamWElementsPerRank(const ModelConfig& model, const TrainPlan& plan, ParallelMode mode) {
  const ParameterCount count = CountParameters(model);
  const double tied_copy = plan.pipeline_parallel > 1 ? static_cast<double>(count.token_embedding) : 0.0;
  const double per_stage = (static_cast<double>(count.total) + tied_copy) / plan.pipeline_parallel;
  return mode == ParallelMode::kDp ? per_stage : per_stage / plan.data_parallel;
}

// What runs the steps on this rank, chosen once for every scaling point.
struct Backend {
  bool cuda = false;
  std::string device;       // "NVIDIA H200 (GPU 0)" or "cpu (2 BLAS threads)"
  std::string device_name;  // as the peak table knows it
  std::string description;  // for the header line
};

ModelConfig ModelFromFlags(const TrainFlags& f) {
  ModelConfig config;
  if (f.model == "custom") {
    std::vector<std::string> missing;
    if (f.layers == -1) missing.push_back("--layers");
    if (f.d_model == 0) missing.push_back("--d-model");
    if (f.heads == 0) missing.push_back("--heads");
    if (!missing.empty()) {
      throw InputError("--model custom needs " + JoinNames(missing, ", ") + " (and optionally --vocab, --seq)");
    }
    config = CustomModel(f.layers, f.d_model, f.heads, f.vocab, f.seq > 0 ? f.seq : 1024);
  } else {
    config = FindPreset(f.model);
    if (f.layers != -1) config = WithLayers(config, f.layers);
  }
  // --experts makes a dense model's MLPs MoE layers; the other MoE flags change an MoE model's (or --experts's).
  if (config.moe || f.experts > 0) {
    config = WithMoe(config, MoeFromFlags(f, config.moe.value_or(MoeConfig{})));
  } else if (MoeFlagsGiven(f)) {
    throw InputError("--top-k, --expert-ffn, --moe-every, --capacity-factor and --aux-loss-coef shape mixture-of-"
                     "experts blocks: give --experts E, or an moe-* model");
  }
  return config;
}

// The training options that determine the numbers each step computes (the model's shape is in the checkpoint's
// fingerprint; PlanTrainIo adds the data options). Not among them: --steps, --warmup-steps (which steps are
// measured, not what they compute) and, on the CPU backend, --no-overlap and, with MPI's own all-reduce, --bucket-mb
// (its sums come out the same over any bucket layout: checked bit for bit at 4 and 8 ranks); NCCL picks its algorithm
// by message size. On the CPU backend the all-reduce's algorithm is among them: a hierarchical one sums in another
// order, which follows the buckets (its rings cut each bucket by rank), so --bucket-mb is then among them too.
TrajectoryOf TrainTrajectory(const TrainFlags& f, int seq, bool cuda, bool weak,
                             const std::vector<ScalingPointPlan>& points) {
  return [=](int ranks, int micro_batch) {
    Trajectory options = {
        {"ranks", "ranks", std::to_string(ranks)},
        {"backend", "--backend", cuda ? "cuda" : "cpu"},
        {"seq", "--seq", std::to_string(seq)},
        {"micro_batch", weak ? "--micro-batch" : "sequences per rank (--global-batch / ranks / --grad-accum)",
         std::to_string(micro_batch)},
        {"grad_accum", "--grad-accum", std::to_string(f.grad_accum)},
        {"lr", "--lr", Format("%.9g", f.learning_rate)},
        {"data_seed", "--seed", std::to_string(f.seed)},
        // Which part of the state each rank holds; older checkpoints were all written without either.
        {"tensor_parallel", "--tensor-parallel", std::to_string(f.tensor_parallel), "1"},
        {"pipeline_parallel", "--pipeline-parallel", std::to_string(f.pipeline_parallel), "1"},
        {"expert_parallel", "--expert-parallel", std::to_string(f.expert_parallel), "1"}};
    for (const ScalingPointPlan& point : points) {
      if (!cuda && point.k == ranks) {
        options.push_back({"allreduce", "--allreduce", point.hierarchical ? "hierarchical" : "flat"});
        // Its rings cut each bucket by rank: which element sums in which order follows the buckets.
        if (point.hierarchical) options.push_back({"bucket_mb", "--bucket-mb", Format("%.9g", f.bucket_mb)});
      }
    }
    if (cuda) {
      options.push_back({"attention", "--attention", f.attention});
      options.push_back({"bucket_mb", "--bucket-mb", Format("%.9g", f.bucket_mb)});
    }
    return options;
  };
}

// Every rank's records of one scaling point and what its model allocated for activations, on rank 0 (ranks outside
// the point send no records). Collective.
std::vector<RankSteps> GatherSteps(const std::vector<StepRecord>& mine, double activations_bytes,
                                   const Topology& topology, const std::string& device) {
  std::vector<RankSteps> ranks;
  const std::vector<std::vector<StepRecord>> all = GatherRecords(MPI_COMM_WORLD, mine);
  const std::vector<double> activations = AllGatherDoubles(MPI_COMM_WORLD, activations_bytes);
  for (size_t rank = 0; rank < all.size(); ++rank) {
    if (all[rank].empty()) continue;
    ranks.push_back({static_cast<int>(rank), topology.ranks[rank].host, device, all[rank], activations[rank]});
  }
  return ranks;
}

// The model and its memory estimate: the whole model's states (cost's ModeMemory shards them as the run's mode did)
// and the activations one rank holds (divided as tensor parallel divides them).
void RecordModel(Group& group, const ModelConfig& c, int micro_batch, int seq, bool mixed_precision,
                 int tensor_parallel) {
  const ParameterCount params = CountParameters(c);
  const MemoryEstimate memory = EstimateMemory(c, micro_batch, seq, mixed_precision, tensor_parallel);
  namespace m = schema::model;
  schema::Set(group, m::name, c.name);
  schema::Set(group, m::layers, c.layers);
  schema::Set(group, m::preset_layers, c.preset_layers);
  schema::Set(group, m::scaled, c.scaled);
  schema::Set(group, m::d_model, c.d_model);
  schema::Set(group, m::heads, c.heads);
  schema::Set(group, m::vocab, c.vocab);
  schema::Set(group, m::vocab_padded, c.vocab_padded);
  schema::Set(group, m::max_seq, c.seq);
  schema::Set(group, m::parameters, params.total);
  schema::Set(group, m::matmul_parameters, params.matmul);
  schema::Set(group, m::active_parameters, params.active);
  schema::Set(group, m::active_matmul_parameters, params.active_matmul);
  const MoeConfig moe = c.moe.value_or(MoeConfig{0, 0, 0, 1, 0, 0});
  schema::Set(group, m::experts, moe.experts);
  schema::Set(group, m::top_k, moe.top_k);
  schema::Set(group, m::expert_ffn, moe.expert_ffn);
  schema::Set(group, m::moe_every, moe.every);
  schema::Set(group, m::moe_layers, MoeBlockCount(c));
  schema::Set(group, m::capacity_factor, moe.capacity_factor);
  schema::Set(group, m::aux_loss_coef, moe.aux_loss_coef);
  schema::Set(group, m::model_flops_per_token, ModelFlopsPerToken(c, seq));
  schema::Set(group, m::flops_convention,
              c.moe ? "6*N_active_matmul + 6*L*T*d (causal attention, forward+backward; active parameters: the router "
                      "and top-k experts of each MoE block per token, dropped tokens counted as routed)"
                    : "6*N_matmul + 6*L*T*d (causal attention, forward+backward)");
  schema::Set(group, m::memory_weights_bytes, memory.weights_bytes);
  schema::Set(group, m::memory_gradients_bytes, memory.gradients_bytes);
  schema::Set(group, m::memory_optimizer_bytes, memory.optimizer_bytes);
  schema::Set(group, m::memory_activations_bytes, memory.activations_bytes);
  schema::Set(group, m::memory_precision,
              mixed_precision ? "bf16 weights/gradients/activations + fp32 master and AdamW (ZeRO's 16 B per "
                                "parameter; the CUDA transformer keeps fp32 gradients: 18 B)"
                              : "fp32 (CPU reference)");
}

// The kernels the model chose by timing (models/cuda/autotune.h), once: from the first point's model. No table when
// it chose none (the CPU backend).
void RecordKernelChoices(Group& train, const Transformer& model) {
  const std::vector<KernelChoice> choices = model.kernel_choices();
  if (choices.empty() || schema::FindTable(&train, schema::train::kKernelChoices) != nullptr) return;
  namespace kc = schema::train::kernel_choices;
  schema::RecordTable<KernelChoice>(schema::train::kKernelChoices)
      .Column(kc::what, [](const KernelChoice& c) { return c.what; })
      .Column(kc::shape, [](const KernelChoice& c) { return c.shape; })
      .Column(kc::candidates, [](const KernelChoice& c) { return c.candidates; })
      .Column(kc::chosen, [](const KernelChoice& c) { return c.chosen; })
      .Column(kc::chosen_s, [](const KernelChoice& c) { return c.chosen_s; })
      .Column(kc::first_s, [](const KernelChoice& c) { return c.first_s; })
      .Write(train, choices);
}

// io/throttle_sweep: one row per storage rate, and the rate at which data_wait reaches `share` of step time.
void AddStorageSweep(Group& io, const std::vector<double>& rates, const std::vector<ScalingPoint>& points,
                     const std::vector<double>& shares, double share) {
  std::vector<double> step_s, tokens_per_s;
  for (const ScalingPoint& p : points) {
    step_s.push_back(p.step_s);
    tokens_per_s.push_back(p.tokens_per_s);
  }
  const std::vector<double> measured_rates(rates.begin(), rates.begin() + static_cast<long>(points.size()));
  namespace ts = schema::io::throttle_sweep;
  Table& table = schema::AddTable(io, schema::io::kThrottleSweep);
  schema::AddColumn(table, ts::io_throttle_MBps, measured_rates);
  schema::AddColumn(table, ts::data_wait_share, shares);
  schema::AddColumn(table, ts::step_s, step_s);
  schema::AddColumn(table, ts::tokens_per_s, tokens_per_s);
  const double crossing = ThrottleAtDataWaitShare(measured_rates, shares, share);
  schema::Set(io, schema::io::sweep_data_wait_share, share);
  schema::Set(io, schema::io::throttle_at_data_wait_share_MBps, crossing);
  Print(std::isnan(crossing)
            ? Format("# storage sweep: data_wait %s %.0f%% of step time %s", shares.empty() || shares[0] < share
                     ? "stays under" : "is already over", 100 * share,
                     shares.empty() || shares[0] < share ? "at every rate tried" : "at the fastest rate tried")
            : Format("# storage sweep: data_wait reaches %.0f%% of step time at %.1f MB/s per rank (linear between "
                     "the sweep's rates)", 100 * share, crossing),
        true);
}

// What a training run needs per rank at `plan`'s point: the model state and activations of its largest pipeline stage
// (the whole model without stages) on the device (cuda) or the host (cpu), as the parallel mode shards them over the
// ranks holding the same parameters (ModeMemory: tensor parallel's T, then zero1's or fsdp's shards over the groups);
// on cuda the host holds the fp32 initial weights while they are drawn and uploaded.
MemoryNeed TrainMemoryNeed(const ModelConfig& model, const TrainPlan& plan, bool cuda, const std::string& mode) {
  const StagePlan& stage = plan.largest_stage();
  const MemoryEstimate& e = stage.memory;
  const int t = plan.tensor_parallel;
  const MemoryBreakdown m = ModeMemory({e.weights_bytes, e.gradients_bytes, e.optimizer_bytes, e.activations_bytes},
                                       mode, plan.ranks / plan.pipeline_parallel, FsdpGatheredParameters(model),
                                       static_cast<double>(CountParameters(model).total), t);
  std::string parts = Format("weights %s, gradients %s, optimizer %s, activations %s", FormatBytes(m.weights_bytes).c_str(),
                             FormatBytes(m.gradients_bytes).c_str(), FormatBytes(m.optimizer_bytes).c_str(),
                             FormatBytes(m.activations_bytes).c_str());
  if (m.working_bytes > 0) parts += ", fsdp working buffers " + FormatBytes(m.working_bytes);
  parts += Format(" at --micro-batch %d and --seq %d", plan.micro_batch, plan.seq);
  if (mode != "dp" || t > 1 || plan.pipeline_parallel > 1) {
    parts += Format(" (--parallel %s over %d ranks, --tensor-parallel %d", mode.c_str(), plan.ranks, t);
    if (plan.pipeline_parallel > 1) {
      parts += Format(", --pipeline-parallel %d: stage %d, layers %d-%d, %d micro-batches in flight",
                      plan.pipeline_parallel, stage.stage.stage, stage.stage.first_layer, stage.stage.end_layer - 1,
                      stage.stage.slots);
    }
    parts += ")";
  }
  MemoryNeed need;
  need.lower = plan.pipeline_parallel > 1 ? "--micro-batch, --seq, --layers or fewer --micro-batches in flight (a "
                                            "larger --pipeline-parallel)"
                                          : "--micro-batch, --seq or --layers";
  if (cuda) {
    need.device_bytes = m.total_bytes();
    need.device_parts = parts;
    need.host_bytes = 4.0 * stage.parameters;
    need.host_parts = "fp32 initial weights";
  } else {
    need.host_bytes = m.total_bytes();
    need.host_parts = parts;
  }
  return need;
}

// One run of the loop: a scaling point, or one storage rate of a sweep (which takes one point).
struct RunPoint {
  int k;
  double throttle_MBps;
  std::string name;
  ScalingPointPlan plan;
};

// One repeat of a point, on rank 0, until the median repeat is chosen: its summary, its figures, and its train and
// io groups (each holding the one child named as the point).
struct PointRepeat {
  ScalingPoint point;
  RepeatFigures figures;
  Group train;
  Group io;
};

// What start-up measured before the first point: the device, its GEMM rate and peak, the model's accounting.
struct TrainSetup {
  Backend backend;
  double gemm_min = 0;  // the slowest rank's measured GEMM rate, FLOP/s
  double copy_min = 0;  // --op-times: the slowest rank's copy rate, bytes read + written per second
  std::optional<DevicePeak> peak;
  double peak_flops = 0;
  double flops_per_token = 0;
  double gradient_bytes = 0;      // the flat fp32 gradient buffer every step all-reduces
};

// `trainbench train`, step by step: configure (flags, model, I/O; agreed by every rank before any work), start-up
// (device, GEMM rate, header), the points (model, I/O, loop, gather, summarise each), the summary, the memory.
class TrainPhase : public Phase {
 public:
  explicit TrainPhase(const RankContext& ctx) : ctx_(ctx) {}
  std::string name() const override { return "train"; }
  std::string activity() const override { return "training"; }
  std::string usage() const override { return kUsage; }
  void AddOptions(po::options_description& options) override;
  std::vector<FlagRule> Rules() const override;
  void Configure(CommandRun& run, const InjectionPlan& faults) override;
  void ConfigureShape(CommandRun& run) override;
  void Verify(CommandRun& run) override;
  PhaseResult Measure(CommandRun& run, Communicator& comm) override;
  // The vocabulary of the model the parsed flags name (InputError for a bad model).
  int64_t vocab() const { return ModelFromFlags(f_).vocab; }

 private:
  void RecordConfig(CommandRun& r) const;
  void AcceptFaults(const InjectionPlan& faults);
  void MeasureDevice();
  void PrintHeader() const;
  void RecordHeader(double comm_ready_s);
  std::unique_ptr<Transformer> MakeModel(const Communicator& dp, Communicator* tp, const PipelineStage& stage,
                                         const ExpertPlacement& experts);
  void AddTheory(ScalingPoint& p, int micro_batch) const;
  std::vector<RunPoint> Points() const;
  void ProbeLinks(Communicator& comm);
  bool RunPoints(Communicator& comm);
  bool RunRepeat(Communicator& comm, const RunPoint& point, bool several, int repeat, std::vector<PointRepeat>& repeats);
  ScalingPoint SummarizeRepeat(const RunPoint& point, int micro_batch, const std::vector<RankSteps>& ranks);
  void SetGlobalBatch();
  void CheckNodeGroups(int size, bool allow_cross_node, const NodeGroups& groups) const;
  void AddOpTimes(Group& point_group, const RunPoint& point, const TrainLoopOptions& point_loop,
                  const std::vector<RankSteps>& ranks) const;
  void KeepMedianRepeat(const RunPoint& point, std::vector<PointRepeat>& repeats);
  // `folder`: where under --checkpoint-dir the repeat checkpoints ("" for the directory itself); its io/<point>
  // group goes into `io_groups` (rank 0's).
  std::vector<StepRecord> RunOnePoint(Communicator& sub, const RunPoint& point, const std::string& folder,
                                      TrainLoopOptions& point_loop, EnergySpan& energy, Group& io_groups);
  struct PointComms {
    std::unique_ptr<Communicator> tp, dp, pipeline;  // null where the plan has no such group
    std::unique_ptr<Communicator> experts, expert_data;  // expert parallel: the EP group, the ranks with its experts
  };
  static PointComms MakePointComms(Communicator& sub, const TrainPlan& plan);
  ExpertPlacement ExpertsOf(const TrainPlan& plan, int rank, Communicator* group) const;
  void PrintStep(const StepRecord& r, Communicator& sub, int k);
  class PointHost;
  void Summarise(const std::vector<RunPoint>& runs);
  void RecordMemory();
  Group& train() { return schema::GroupOf(run_->report().root, schema::kTrain); }
  // Sequences per rank per forward and backward at k ranks: strong scaling divides the global batch over the data
  // parallel groups and the micro-batches of a step.
  int PointBatch(int k) const { return weak_ ? f_.micro_batch : global_batch_ / DataParallel(k) / f_.grad_accum; }
  // Data parallel replicas at k ranks: tensor parallel groups and pipelines each share one batch.
  int DataParallel(int k) const { return k / (f_.tensor_parallel * f_.pipeline_parallel); }
  // The plan of the point with k ranks.
  const TrainPlan& PlanOf(int k) const {
    for (const TrainPlan& plan : plans_) {
      if (plan.ranks == k) return plan;
    }
    throw std::logic_error("train: no plan for " + std::to_string(k) + " ranks");
  }
  // A storage sweep: the run repeated at each --io-throttle rate (on one scaling point).
  bool Sweep() const { return io_plan_.throttles_MBps.size() > 1; }

  RankContext ctx_;
  TrainFlags f_;
  TrainIoFlags io_flags_;
  CommandRun* run_ = nullptr;
  ModelConfig model_;
  TrainIoPlan io_plan_;
  InjectionPlan faults_;
  TrainLoopOptions loop_;
  std::vector<ScalingPointPlan> scaling_;
  std::vector<TrainPlan> plans_;  // per scaling point, in its order
  LaunchShape shape_;
  LinkProbeOptions link_probe_;  // bytes 0: off
  bool weak_ = true;
  ParallelMode parallel_ = ParallelMode::kDp;
  int global_batch_ = 0;  // sequences per optimizer step over all ranks: what strong scaling divides by k
  AttentionChoice attention_ = AttentionChoice::kAuto;
  const Topology* topology_ = nullptr;
  TrainSetup setup_;
  std::vector<ScalingPoint> points_;  // each point's median repeat
  std::vector<std::vector<RepeatFigures>> point_repeats_;  // and every repeat's figures
  std::vector<size_t> point_median_;
  std::vector<double> sweep_shares_;
  bool first_step_seen_ = false;
  double peak_device_memory_ = 0;
  ModelStateBytes point_state_;  // what the last point's model allocated on this rank
  uint64_t point_working_bytes_ = 0;  // and fsdp's working buffers
  double point_gradient_bytes_ = 0;   // the gradients it synchronises (a tensor parallel slice's)
  int64_t point_buckets_ = 0;         // dp's buckets over them
};

// The loop's outside for one point (TrainLoopHost): the point's data and checkpoints (PointIo), the run's watchdog and
// stop over the point's ranks, the test faults, and after each step its line and the energy marks.
class TrainPhase::PointHost final : public TrainLoopHost {
 public:
  PointHost(TrainPhase& phase, Communicator& sub, int k, PointIo& io, MeasuredStepsEnergy energy)
      : phase_(phase),
        sub_(sub),
        k_(k),
        io_(io),
        energy_(std::move(energy)),
        at_first_step_(TestFaultHook(phase.run_->ctx().world_rank)),
        in_each_step_(SlowRankHook(phase.faults_, phase.run_->ctx().world_rank)) {}
  std::optional<StepBatch> NextBatch(int) override { return io_.NextBatch(); }
  void BeforeUpdate() override { io_.BeforeUpdate(); }
  void AfterUpdate(int step) override { io_.AfterUpdate(step); }
  bool CheckpointWriting() override { return io_.CheckpointWriting(); }
  Watchdog* watchdog() override { return &phase_.run_->watchdog(&sub_); }
  bool StopRequested() override { return phase_.run_->StopRequested(sub_.host_comm()); }
  void AtFirstStep() override {
    if (at_first_step_) at_first_step_();
  }
  void InEachStep() override {
    if (in_each_step_) in_each_step_();
  }
  void OnStep(const StepRecord& r) override {
    phase_.PrintStep(r, sub_, k_);
    energy_.AfterStep(r);
  }

 private:
  TrainPhase& phase_;
  Communicator& sub_;
  int k_;
  PointIo& io_;
  MeasuredStepsEnergy energy_;
  std::function<void()> at_first_step_;  // where the CLI injects test faults
  std::function<void()> in_each_step_;   // and a slow rank
};

// The parallel layout's flags: the mode across the replicas, tensor parallel, pipeline stages.
void AddParallelOptions(po::options_description& options, TrainFlags& f) {
  options.add_options()
      ("parallel", Choice(&f.parallel, {"dp", "zero1", "fsdp"})->default_value(f.parallel),
       "dp: every rank holds the whole model and all-reduces the gradients; zero1: AdamW's state sharded over the "
       "ranks (reduce-scatter the gradients, AdamW on the shard, all-gather the parameters); fsdp: parameters, "
       "gradients and AdamW's state sharded (each layer all-gathered before its forward and again before its "
       "backward, the next one ahead, its gradients reduce-scattered; --no-overlap: all blocking; CPU backend)")
      ("tensor-parallel", Number(&f.tensor_parallel, IntRange::Between(1, kMaxWidth))->default_value(f.tensor_parallel),
       "split the model over groups of T ranks inside a node (Megatron: column/row-parallel layers, activation "
       "all-reduces, vocab-parallel embedding and cross-entropy), data parallel across the groups; T divides the "
       "heads and the ranks of each node; with --data every rank of a group reads the group's batches")
      ("pipeline-parallel", Number(&f.pipeline_parallel, IntRange::Between(1, kMaxLayers))->default_value(f.pipeline_parallel),
       "split the layers into P pipeline stages of consecutive layers (the embeddings with the first, the final "
       "LayerNorm, LM head and loss with the last), outermost over the ranks (stage s on ranks [s k/P, (s+1) k/P), "
       "so that stages span nodes); Megatron's 1F1B schedule over --micro-batches, activations and their gradients "
       "sent point to point between neighbouring stages; dp or zero1 across the pipelines, tensor parallel inside "
       "each stage; with --data the first and last stages read each replica's batches")
      ("micro-batches", Number(&f.micro_batches, IntRange::Between(1, kMaxGradAccum)),
       "pipeline parallel: micro-batches of --micro-batch sequences per optimizer step, M >= P (gradient "
       "accumulation, as --grad-accum: give one of the two)")
      ("allow-cross-node-tp", po::bool_switch(&f.allow_cross_node_tp),
       "let tensor parallel groups span nodes (their activation all-reduces then cross the slow link)")
      ("expert-parallel", Number(&f.expert_parallel, IntRange::Between(1, kMaxWidth))->default_value(f.expert_parallel),
       "spread each MoE block's experts over groups of EP consecutive ranks inside a node (E/EP each), the tokens "
       "dispatched to their experts' ranks and combined back with all-to-alls (MPI_Alltoallv; NCCL grouped "
       "send/recv), data parallel over all ranks; EP divides the experts and the ranks (--parallel dp)")
      ("allow-cross-node-ep", po::bool_switch(&f.allow_cross_node_ep),
       "let expert parallel groups span nodes (their all-to-alls then cross the slow link)");
}

// Mixture-of-experts blocks: on a dense preset with --experts, or changing an moe-* preset's.
void AddMoeOptions(po::options_description& options, TrainFlags& f) {
  options.add_options()
      ("experts", Number(&f.experts, IntRange::Between(1, kMaxWidth)),
       "replace the MLP of every (--moe-every n: every n-th) block by E experts of its shape and a router (moe-* "
       "presets have them)")
      ("top-k", Number(&f.top_k, IntRange::Between(1, kMaxWidth)),
       "experts per token (default 2; 1 weighs its expert by its probability, as Switch; more renormalize)")
      ("expert-ffn", Number(&f.expert_ffn, IntRange::Between(1, 1 << 20)), "each expert's hidden width (default: the MLP's)")
      ("moe-every", Number(&f.moe_every, IntRange::Between(1, kMaxLayers)), "block l is an MoE block when l % n == 0 (default 1)")
      ("capacity-factor", po::value<double>()->notifier([&f](double v) { f.capacity_factor = v; }),
       "tokens an expert takes per batch: ceil(factor x tokens x top-k / experts), the rest dropped and counted "
       "(default 1.25; experts / top-k never drops)")
      ("aux-loss-coef", po::value<double>()->notifier([&f](double v) { f.aux_loss_coef = v; }),
       "weight of the load-balancing loss (default 0.01)");
}

void TrainPhase::AddOptions(po::options_description& options) {
  TrainFlags& f = f_;
  options.add_options()
      ("model", po::value(&f.model)->default_value(f.model), "preset (gpt2-124m ... gpt-70b) or custom")
      ("layers", Number(&f.layers, IntRange::Between(1, kMaxLayers)), "run N layers of the preset's shape (custom: the layer count)")
      ("d-model", Number(&f.d_model, IntRange::Between(1, kMaxWidth)), "custom: channels")
      ("heads", Number(&f.heads, IntRange::Between(1, kMaxWidth)), "custom: attention heads")
      ("vocab", Number(&f.vocab, IntRange::Between(2, kMaxVocab))->default_value(f.vocab), "custom: vocabulary size")
      ("seq", Number(&f.seq, IntRange::Between(1, kMaxSeq)), "tokens per sequence (default: the model's 1024)")
      ("micro-batch", Number(&f.micro_batch, IntRange::AtLeast(1))->default_value(f.micro_batch), "sequences per rank per forward and backward (weak scaling)")
      ("grad-accum", Number(&f.grad_accum, IntRange::Between(1, kMaxGradAccum))->default_value(f.grad_accum),
       "gradient accumulation: N micro-batches per optimizer step, their gradients summed (the mean loss over all "
       "of them) before one gradient sync and one AdamW step")
      ("steps", Number(&f.steps, IntRange::AtLeast(1))->default_value(f.steps), "measured steps per scaling point")
      ("warmup-steps", Number(&f.warmup_steps, IntRange::AtLeast(0))->default_value(f.warmup_steps), "steps run first and left out of the statistics")
      ("repeats", Number(&f.repeats, IntRange::Between(1, kMaxRepeats))->default_value(f.repeats),
       "run each point's warm-up and measured steps N times on a fresh model; figures are the median repeat's, "
       "with min, max and CV over the repeats")
      ("bucket-mb", Number(&f.bucket_mb, RealRange::AboveUpTo(0, 1 << 20))->default_value(f.bucket_mb), "gradient bucket size in MiB")
      ("no-overlap", po::bool_switch(&f.no_overlap), "all-reduce the gradients after backward instead of during it")
      ("scaling", po::value(&f.scaling),
       "points to run: rank counts (1,2,4,8 or pow2: the first k ranks), nodes (all ranks of 1, 2, 4, ... nodes) or "
       "layouts NxM (1x2,2x2,4x2: M ranks on each of N nodes); default: all ranks")
      ("allreduce", Choice(&f.allreduce, {"auto", "flat", "hierarchical"})->default_value(f.allreduce),
       "gradient all-reduce on the mpi backend: hierarchical (reduce-scatter in each node, all-reduce across, "
       "all-gather; times intra- and inter-node apart), flat (MPI's own), auto (hierarchical across nodes)")
      ("scaling-mode", Choice(&f.scaling_mode, {"weak", "strong"})->default_value(f.scaling_mode), "weak: per-rank batch fixed; strong: global batch fixed")
      ("global-batch", Number(&f.global_batch, IntRange::AtLeast(1)), "strong scaling: sequences per optimizer step over all ranks (default: micro-batch x ranks x grad-accum)")
      ("lr", Number(&f.learning_rate, RealRange::AboveUpTo(0, 1))->default_value(f.learning_rate), "AdamW learning rate")
      ("seed", Number(&f.seed, IntRange::AtLeast(0))->default_value(f.seed), "seed of the weights and the synthetic tokens")
      ("attention", Choice(&f.attention, {"auto", "cudnn", "cublas"})->default_value(f.attention),
       "cuda: auto = cuDNN fused SDPA when it supports the shape, else cuBLAS")
      ("op-times", po::bool_switch(&f.op_times),
       "time the model's work by kind (embedding, LayerNorms, attention, MLP, LM head and cross-entropy, AdamW) with "
       "marks on the model's stream (CUDA events, NVTX ranges for a profiler): a table per point, as time, TFLOP/s "
       "against the measured GEMM rate and GB/s against the measured copy rate")
      ("cuda-graph", po::bool_switch(&f.cuda_graph),
       "cuda: replay each micro-batch's forward and backward from CUDA graphs captured at their second call (fewer "
       "launches, the same bits); not with --op-times, --tensor-parallel, --pipeline-parallel, fsdp or MoE models")
      ("link-probe", po::value(&f.link_probe)->default_value(f.link_probe),
       "across nodes, before the points: every node pair exchanges this much both ways on each local rank's link, "
       "naming the host whose link is slow (3 nodes or more); 0 or off: no probe");
  AddParallelOptions(options, f);
  AddMoeOptions(options, f);
  AddTrainIoOptions(options, io_flags_);
}

std::vector<FlagRule> TrainPhase::Rules() const {
  std::vector<FlagRule> rules = TrainIoFlagRules();
  for (const char* flag : {"d-model", "heads", "vocab"}) rules.push_back(Needs(flag, "model", {"custom"}));
  rules.push_back(Needs("global-batch", "scaling-mode", {"strong"}));
  // Buckets are dp's; zero1's collectives run after backward, with nothing to overlap.
  rules.push_back(Needs("bucket-mb", "parallel", {"dp"}));
  rules.push_back(Needs("no-overlap", "parallel", {"dp", "fsdp"}));
  rules.push_back(Needs("allow-cross-node-tp", "tensor-parallel"));
  rules.push_back(Needs("micro-batches", "pipeline-parallel"));
  rules.push_back(Needs("allow-cross-node-ep", "expert-parallel"));
  return rules;
}

// The one expensive check: it reads the whole dataset.
void TrainPhase::Verify(CommandRun&) { VerifyTrainData(io_flags_, io_plan_, ctx_.world_rank, ctx_.world_size); }

// Validates the flags against the model, the ranks and the host (every rank, agreed), and plans the I/O.
void TrainPhase::Configure(CommandRun& r, const InjectionPlan& faults) {
  ConfigureShape(r);
  TrainIoRun io_run{loop_.seq, static_cast<uint64_t>(f_.seed), loop_.warmup_steps + loop_.steps, {},
                    TrainTrajectory(f_, loop_.seq, r.backend() == "nccl", weak_, scaling_)};
  for (const ScalingPointPlan& point : scaling_) io_run.points.emplace_back(point.k, PointBatch(point.k));
  io_run.ranks_per_replica = f_.tensor_parallel * f_.pipeline_parallel;
  io_plan_ = PlanTrainIo(io_flags_, model_, io_run);
  r.RecordAsUsed("record_bytes", static_cast<int64_t>(io_plan_.record_bytes));  // 0: seq+1 tokens
  r.AddInputs(TrainInputs(io_flags_, io_plan_));
  AcceptFaults(faults);
}

// The model, its shape against the launch, the parallel layout and the memory it needs: everything but the files.
void TrainPhase::ConfigureShape(CommandRun& r) {
  const TrainFlags& f = f_;
  attention_ = ParseAttention(f.attention);
  if (r.backend() != "nccl" && attention_ != AttentionChoice::kAuto) {
    throw InputError("--attention " + f.attention + " applies to --backend cuda (the CPU reference has its own)");
  }
  model_ = ModelFromFlags(f);
  ValidateModel(model_);
  loop_.seq = f.seq > 0 ? f.seq : model_.seq;
  if (loop_.seq > model_.seq) {
    throw InputError("--seq " + std::to_string(loop_.seq) + " exceeds the model's " + std::to_string(model_.seq) + " positions");
  }
  weak_ = f.scaling_mode == "weak";
  shape_ = GatherLaunchShape(ctx_);
  scaling_ = ParseScaling(f.scaling, shape_);
  link_probe_.bytes = ParseLinkProbe(f.link_probe);
  parallel_ = ParseParallel(f.parallel);
  CheckParallel(f, io_flags_);
  if (f.repeats > 1 && !io_flags_.resume.empty()) {
    throw InputError("--repeats " + std::to_string(f.repeats) + " with --resume: a resumed run continues one "
                     "trajectory once (drop one of them)");
  }
  if (parallel_ == ParallelMode::kDp) ChooseAllReduce(f.allreduce, r.backend() == "mpi", scaling_);
  CheckTensorParallelFlags(f, model_, loop_.seq, r.backend() == "nccl");
  CheckCudaGraphFlags(f, model_, r.backend() == "nccl");
  if (f.micro_batches > 0) {
    if (f.grad_accum != 1) {
      throw InputError("--micro-batches and --grad-accum both count the micro-batches of an optimizer step: give one");
    }
    f_.grad_accum = f.micro_batches;
  }
  CheckPipelineFlags(f, r.backend() == "nccl");
  CheckMoeFlags(f, model_);
  CheckNodeGroups(f.tensor_parallel, f.allow_cross_node_tp, kTensorParallelGroups);
  CheckNodeGroups(f.expert_parallel, f.allow_cross_node_ep, kExpertParallelGroups);
  SetGlobalBatch();
  plans_.clear();
  for (const ScalingPointPlan& point : scaling_) {
    plans_.push_back(PlanTrainPoint(model_, point.k, f.tensor_parallel, f.pipeline_parallel, PointBatch(point.k),
                                    f_.grad_accum, loop_.seq, r.backend() == "nccl", f.expert_parallel));
  }
  // Strong scaling gives the fewest ranks the largest batch; the fewest ranks shard the least.
  CheckMemoryFits(r, TrainMemoryNeed(model_, plans_.front(), r.backend() == "nccl", f.parallel));
  loop_.micro_batch = f.micro_batch;
  loop_.grad_accum = f.grad_accum;
  loop_.op_times = f.op_times;
  loop_.steps = f.steps;
  loop_.warmup_steps = f.warmup_steps;
  loop_.bucket_mb = f.bucket_mb;
  loop_.overlap = !f.no_overlap;
  loop_.parallel = parallel_;
  loop_.adamw.learning_rate = static_cast<float>(f.learning_rate);
  loop_.data_seed = static_cast<uint64_t>(f.seed);
  RecordConfig(r);
}

// Groups of `size` consecutive ranks (tensor parallel's, expert parallel's) against every point's layout: inside a
// node unless `allow_cross_node`.
void TrainPhase::CheckNodeGroups(int size, bool allow_cross_node, const NodeGroups& groups) const {
  CheckTensorParallelLayout(size, scaling_, allow_cross_node, groups);
  if (allow_cross_node) return;
  for (const ScalingPointPlan& point : scaling_) CheckTensorParallelGroups(size, point, shape_, groups);
}

// The sequences per optimizer step over all ranks. A tensor parallel group and a pipeline share their batch: data
// parallel runs over the k / (T P) replicas; strong scaling divides the global batch over them and the micro-batches
// of a step.
void TrainPhase::SetGlobalBatch() {
  const TrainFlags& f = f_;
  global_batch_ =
      f.global_batch > 0 ? f.global_batch : f.micro_batch * DataParallel(scaling_.back().k) * f.grad_accum;
  for (const ScalingPointPlan& point : scaling_) {
    const int groups = DataParallel(point.k);
    // A layout the ranks do not divide into is refused with its reason by PlanTrainPoint.
    if (weak_ || groups == 0 || global_batch_ % (groups * f.grad_accum) == 0) continue;
    throw InputError("--scaling-mode strong: the global batch " + std::to_string(global_batch_) +
                     " does not divide over " + std::to_string(groups) +
                     (f.tensor_parallel > 1 || f.pipeline_parallel > 1 ? " data parallel replicas" : " ranks") +
                     (f.grad_accum > 1 ? " x " + std::to_string(f.grad_accum) + " micro-batches" : "") +
                     " (set --global-batch)");
  }
}

// --inject: what train can inject; io-stall slows the loader's reads, so it needs one.
void TrainPhase::AcceptFaults(const InjectionPlan& faults) {
  faults_ = faults;
  if (const InjectedFault* stall = faults_.Find(FaultKind::kIoStall); stall && !io_plan_.loader) {
    throw InputError("--inject '" + stall->spec + "' delays the data loader's reads: give --data or --data-raw");
  }
  io_plan_.io_stall_ms = faults_.IoStallMs();
}

// The options as the run resolved them (the model's shape, layers and sequence length, the global batch, all
// ranks); the rest are recorded as given (CommandRun::RecordOptions).
void TrainPhase::RecordConfig(CommandRun& r) const {
  r.RecordAsUsed("layers", int64_t{model_.layers});
  r.RecordAsUsed("d_model", int64_t{model_.d_model});
  r.RecordAsUsed("heads", int64_t{model_.heads});
  r.RecordAsUsed("vocab", int64_t{model_.vocab});
  r.RecordAsUsed("seq", int64_t{loop_.seq});
  r.RecordAsUsed("global_batch", int64_t{global_batch_});
  r.RecordAsUsed("micro_batch", int64_t{plans_.front().micro_batch});
  r.RecordAsUsed("grad_accum", int64_t{loop_.grad_accum});
  r.RecordAsUsed("scaling", f_.scaling.empty() ? std::to_string(ctx_.world_size) : f_.scaling);
  schema::Set(r.config(), schema::config::overlap, loop_.overlap ? 1 : 0);
}

PhaseResult TrainPhase::Measure(CommandRun& run, Communicator& comm) {
  run_ = &run;
  topology_ = &run.topology();
  // A measurement of its own each time (suite --repeats measures again).
  setup_ = {};
  points_.clear();
  sweep_shares_.clear();
  first_step_seen_ = false;
  peak_device_memory_ = 0;
  MeasureDevice();
  PrintHeader();
  RecordHeader(run.communicator_ready_s());
  ProbeLinks(comm);
  const bool interrupted = RunPoints(comm);
  RecordMemory();
  return {interrupted, ""};
}

// The backend's device and its GEMM rate, measured on every rank (collective), then the model's accounting.
void TrainPhase::MeasureDevice() {
  const RankContext& ctx = run_->ctx();
  Backend& backend = setup_.backend;
  backend.cuda = run_->backend() == "nccl";
  // The cores of a node shared by its ranks: OpenBLAS's threads on the CPU, the initial weights' draw on both.
  SetCpuThreadsPerRank(ctx.local_size);
  double gemm_flops = 0;
  double copy_rate = 0;
  if (backend.cuda) {
    const GpuInfo gpu = QueryGpu(ctx.gpu_index);
    backend.device_name = gpu.name;
    backend.device = Format("%s (GPU %d)", gpu.name.c_str(), gpu.index);
    backend.description = "cuda (NCCL + CUDA transformer: bf16 cuBLASLt GEMMs, fp32 master weights and AdamW)";
    gemm_flops = MeasureDeviceGemmFlops();  // every rank on its own GPU, all at once
    if (f_.op_times) copy_rate = MeasureDeviceCopyBytesPerSecond();
  } else {
    backend.device = Format("cpu (%d BLAS threads)", CpuThreads());
    backend.description = "cpu (MPI + CPU reference in fp32)";
    // Each rank measures its GEMM rate alone on its node (the others wait asleep), so that ranks sharing cores
    // do not halve each other's figure; nodes measure at the same time.
    MPI_Comm node = MPI_COMM_NULL;
    TB_CHECK_MPI(MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, ctx.world_rank, MPI_INFO_NULL, &node));
    for (int turn = 0; turn < ctx.local_size; ++turn) {
      if (turn == ctx.local_rank) gemm_flops = MeasureCpuGemmFlops();
      if (turn == ctx.local_rank && f_.op_times) copy_rate = MeasureCpuCopyBytesPerSecond();
      SleepingBarrier(node);
      if (run_->StopRequested(node)) break;  // a node's turns take 0.3 s per rank: a stop does not wait for them all
    }
    MPI_Comm_free(&node);
  }
  const std::vector<double> gemm_all = AllGatherDoubles(MPI_COMM_WORLD, gemm_flops);
  setup_.gemm_min = *std::min_element(gemm_all.begin(), gemm_all.end());
  const std::vector<double> copy_all = AllGatherDoubles(MPI_COMM_WORLD, copy_rate);
  setup_.copy_min = *std::min_element(copy_all.begin(), copy_all.end());
  // MFU against rank 0's device in the peak table (a launch mixing GPU models is measured against rank 0's).
  setup_.peak = backend.cuda ? FindDevicePeak(topology_->ranks[0].gpu.name) : std::nullopt;
  setup_.peak_flops = setup_.peak ? setup_.peak->bf16_flops : 0.0;
  setup_.flops_per_token = ModelFlopsPerToken(model_, loop_.seq);
  const std::vector<TensorSlot> layout = MakeLayout(model_);
  setup_.gradient_bytes = static_cast<double>(layout.back().offset + layout.back().count) * sizeof(float);
}

void TrainPhase::PrintHeader() const {
  const RankContext& ctx = run_->ctx();
  const Backend& backend = setup_.backend;
  const ParameterCount params = CountParameters(model_);
  // The first point's plan (the fewest ranks: the least sharding, the largest batch), as the memory check read it.
  const TrainPlan& plan = plans_.front();
  const MemoryNeed memory = TrainMemoryNeed(model_, plan, backend.cuda, f_.parallel);
  Print(Format("# trainbench train: %d ranks on %d nodes, backend %s", ctx.world_size, ctx.node_count,
               backend.description.c_str()));
  Print(Format("# model %s%s: %d layers, d %d, %d heads, vocab %d (padded %d), seq %d; %lld parameters",
               model_.name.c_str(), model_.scaled.empty() ? "" : (" (" + model_.scaled + ")").c_str(), model_.layers,
               model_.d_model, model_.heads, model_.vocab, model_.vocab_padded, loop_.seq,
               static_cast<long long>(params.total)));
  if (model_.moe) {
    Print(Format("# mixture of experts: %d of %d blocks with %d experts of width %d, top-%d, capacity factor %g, aux "
                 "loss coef %g; %lld parameters active per token",
                 MoeBlockCount(model_), model_.layers, model_.moe->experts, model_.moe->expert_ffn, model_.moe->top_k,
                 model_.moe->capacity_factor, model_.moe->aux_loss_coef, static_cast<long long>(params.active)));
  }
  Print(Format("# model FLOPs per token %.4g (%s); memory per rank at k=%d (%s estimate): %s", setup_.flops_per_token,
               model_.moe ? "6*N_active_matmul + 6*L*T*d: the router and top-k experts per token" : "6*N_matmul + 6*L*T*d",
               plan.ranks, backend.cuda ? "mixed-precision" : "fp32",
               (backend.cuda ? memory.device_parts : memory.host_parts).c_str()));
  if (plan.pipeline_parallel > 1) {
    const PipelineStage& first = plan.stages.front().stage;
    const int depth = first.end_layer - first.first_layer;
    Print(Format("# pipeline: %d stages of %d layer%s (stage s on ranks [s k/%d, (s+1) k/%d)), 1F1B over %d "
                 "micro-batches of %d sequences: bubble (P-1)/(M+P-1) = %.1f%% in theory",
                 plan.pipeline_parallel, depth, depth == 1 ? "" : "s", plan.pipeline_parallel, plan.pipeline_parallel,
                 plan.micro_batches, plan.micro_batch, 100 * plan.bubble_theory()));
  }
  if (loop_.grad_accum > 1 && plan.pipeline_parallel == 1) {
    Print(Format("# gradient accumulation: %d micro-batches of %d sequences per rank per optimizer step (one "
                 "gradient sync)", loop_.grad_accum, loop_.micro_batch));
  }
  const std::optional<DevicePeak>& peak = setup_.peak;
  if (backend.cuda) {
    Print(Format("# peak FLOP/s: %s; measured bf16 GEMM rate %.1f TFLOP/s (cuBLASLt 8192^3, slowest rank), %s",
                 peak ? Format("%s bf16 dense %.0f TFLOP/s (%s)", peak->device.c_str(), peak->bf16_flops / 1e12,
                               peak->source.c_str()).c_str()
                      : ("no table entry for " + topology_->ranks[0].gpu.name + " (MFU against peak: n/a)").c_str(),
                 setup_.gemm_min / 1e12, backend.device.c_str()));
  } else {
    Print(Format("# peak FLOP/s: no table entry for a CPU (MFU against peak: n/a); measured sgemm rate %.1f GFLOP/s "
                 "(slowest rank, each measured alone on its node), %s", setup_.gemm_min / 1e9, backend.device.c_str()));
  }
}

// The model and the run-wide train attributes (collective: the data verification's figures are gathered).
void TrainPhase::RecordHeader(double comm_ready_s) {
  const Backend& backend = setup_.backend;
  const std::optional<DevicePeak>& peak = setup_.peak;
  Group& t = train();
  RecordModel(schema::GroupOf(run_->report().root, schema::kModel), model_, loop_.micro_batch, loop_.seq, backend.cuda,
              f_.tensor_parallel);
  namespace st = schema::train;
  schema::Set(t, st::scaling_mode, f_.scaling_mode);
  schema::Set(t, st::backend, backend.cuda ? "cuda" : "cpu");
  schema::Set(t, st::device, backend.device);
  schema::Set(t, st::measured_gemm_flops, setup_.gemm_min);
  if (f_.op_times) schema::Set(t, st::copy_bytes_per_s, setup_.copy_min);
  schema::Set(t, st::measured_gemm,
        std::string(backend.cuda ? "cuBLASLt bf16 GEMM 8192^3 (fp32 accumulation) on each rank's GPU at start-up, "
                                   "timed with CUDA events; the slowest rank's rate"
                                 : "cblas_sgemm fp32 1024^3 on each rank at start-up, one rank of a node at "
                                   "a time; the slowest rank's rate"));
  schema::Set(t, st::peak_flops, peak ? setup_.peak_flops : std::nan(""));
  schema::Set(t, st::peak_source, peak ? peak->device + " bf16 dense: " + peak->source
                            : std::string(backend.cuda ? "none: no peak table entry for this GPU"
                                                       : "none: no peak table entry for a CPU"));
  if (io_plan_.loader) {
    AddDataVerifyToReport(run_->ctx().world_rank == 0 ? &schema::GroupOf(run_->report().root, schema::kIo) : nullptr, io_flags_,
                          io_plan_);
  }
  schema::Set(t, st::mpi_init_s, MpiInitSeconds());
  schema::Set(t, st::communicator_init_s, comm_ready_s - ProcessStartSeconds() - MpiInitSeconds());
  if (!backend.cuda) schema::Set(t, st::attention, "cpu");
  schema::Set(t, st::cuda_graphs, !f_.cuda_graph ? "off" : "forward and backward");
}

// The model of a point: the whole model, or under tensor parallel this rank's slices of it over the group `tp`;
// `dp` holds the ranks with the same parameters (one per group), over which zero1 shards the optimizer state and
// fsdp every unit.
std::unique_ptr<Transformer> TrainPhase::MakeModel(const Communicator& dp, Communicator* tp, const PipelineStage& stage,
                                                   const ExpertPlacement& experts) {
  const std::vector<TensorSlot> layout =
      StageLayout(tp ? TensorParallelLayout(model_, tp->size()) : MakeLayout(model_), stage);
  ModelPlacement placement;
  placement.stage = stage;
  placement.experts = experts;
  if (parallel_ == ParallelMode::kZero1) {
    placement.shard = ShardOf(layout.back().offset + layout.back().count, dp.size(), dp.rank());
  } else if (parallel_ == ParallelMode::kFsdp) {
    placement.fsdp = MakeFsdpLayout(layout, dp.size(), dp.rank());
  }
  const auto seed = static_cast<uint64_t>(f_.seed);
  if (!setup_.backend.cuda) {
    return tp ? MakeCpuTensorParallelTransformer(model_, seed, *tp, placement)
              : MakeCpuTransformer(model_, seed, placement);
  }
  CudaTransformerOptions options;
  options.max_batch = PointBatch(scaling_.front().k);  // the CUDA model's activations are sized for the largest batch
  options.attention = attention_;
  options.seq = loop_.seq;
  options.placement = placement;
  options.cuda_graphs = f_.cuda_graph;
  std::string fallback_reason;
  const double setup_start = NowSeconds();
  std::unique_ptr<Transformer> cuda_model = tp ? MakeCudaTensorParallelTransformer(model_, seed, *tp, options)
                                                : MakeCudaTransformer(model_, seed, options, &fallback_reason);
  Group& t = train();
  if (schema::Find(&t, schema::train::attention) == nullptr) {
    // Mostly the host's draw of the initial weights and their upload: what a large model costs before step 0.
    Print(Format("# model setup: %.2f s (device memory, initial weights on %d host threads, upload)",
                 NowSeconds() - setup_start, CpuThreads()));
    schema::Set(t, schema::train::attention, cuda_model->attention());
    schema::Set(t, schema::train::attention_fallback_reason, fallback_reason);
    Print("# attention: " + cuda_model->attention() +
          (fallback_reason.empty() ? std::string() : " (cuDNN SDPA unavailable: " + fallback_reason + ")"));
    if (f_.cuda_graph) {
      Print("# cuda graphs: forward and backward replayed from graphs captured at their second call (backward "
            "eagerly where dp's buckets start from it)");
    }
  }
  return cuda_model;
}

std::vector<RunPoint> TrainPhase::Points() const {
  std::vector<RunPoint> runs;
  for (const ScalingPointPlan& plan : scaling_) {
    for (double throttle : io_plan_.throttles_MBps) {
      runs.push_back({plan.k, throttle, PointGroupName({plan.k, Sweep() ? throttle : 0}), plan});
    }
  }
  return runs;
}

// The inter-node link probe over the whole launch, when it spans nodes (collective): its lines and train's tables.
void TrainPhase::ProbeLinks(Communicator& comm) {
  if (link_probe_.bytes == 0 || shape_.nodes() < 2) return;
  link_probe_.watchdog = &run_->watchdog(&comm);
  const LinkProbeResult result = ProbeInterNodeLinks(comm, shape_.node, shape_.local_rank, link_probe_);
  if (run_->ctx().world_rank != 0) return;
  std::vector<std::string> node_hosts(static_cast<size_t>(result.nodes));
  for (const RankTopology& rank : topology_->ranks) node_hosts.at(static_cast<size_t>(rank.node)) = rank.host;
  const std::vector<std::string> lines = FormatLinkProbe(result, link_probe_, node_hosts);
  for (const std::string& line : lines) Print(line, &line == &lines.back());  // the verdict even with --quiet
  AddLinkProbeToReport(train(), result, link_probe_, node_hosts);
}

// Each point on the first k ranks (the others wait asleep), --repeats times, its records gathered and summarised on
// rank 0; stops after a point that a signal cut short. Returns whether the run was interrupted. Collective.
bool TrainPhase::RunPoints(Communicator& comm) {
  const std::vector<RunPoint> runs = Points();
  bool interrupted = false;
  for (const RunPoint& point : runs) {
    // A stop signal during the set-up (the GEMM rates) or between points: no model and loader built for nothing.
    if (run_->StopRequested()) {
      interrupted = true;
      break;
    }
    std::vector<PointRepeat> repeats;  // rank 0's
    for (int r = 1; r <= f_.repeats && !interrupted; ++r) {
      if (f_.repeats > 1) Print(Format("# %s: repeat %d of %d", point.name.c_str(), r, f_.repeats));
      interrupted = RunRepeat(comm, point, runs.size() > 1, r, repeats);
    }
    if (!repeats.empty()) KeepMedianRepeat(point, repeats);
    if (interrupted) break;
    // A point boundary: a crash or a timeout in the next point leaves this one in the file.
    if (&point != &runs.back()) {
      run_->WriteReportInProgress("training, after point " + point.name);
    }
  }
  if (run_->ctx().world_rank == 0) Summarise(runs);
  return interrupted;
}

// One repeat of `point`: on rank 0 its summary and its train and io groups, set aside in `repeats` until the median
// is known. Returns whether a signal cut it short (agreed by every rank). Collective.
bool TrainPhase::RunRepeat(Communicator& comm, const RunPoint& point, bool several, int repeat,
                           std::vector<PointRepeat>& repeats) {
  const RankContext& ctx = run_->ctx();
  const bool member = point.plan.Holds(ctx.world_rank, ctx.node_index, ctx.local_rank);
  std::unique_ptr<Communicator> sub = comm.Split(member ? 0 : -1, ctx.world_rank);
  if (sub && point.plan.hierarchical) sub->UseHierarchicalAllReduce(ctx.node_index, ctx.local_rank);
  TrainLoopOptions point_loop = loop_;
  point_loop.micro_batch = PointBatch(point.k);
  std::vector<StepRecord> mine;
  EnergySpan energy;
  PointRepeat kept;
  bool interrupted = false;
  if (sub) {
    // Each repeat checkpoints into a folder of its own (r1, r2, ...), under its point's when there are several.
    const std::string folder = (several ? point.name : "") + (f_.repeats > 1 ? (several ? "/r" : "r") +
                                                                                   std::to_string(repeat)
                                                                             : "");
    mine = RunOnePoint(*sub, point, folder, point_loop, energy, kept.io);
    const int expected = point_loop.warmup_steps + point_loop.steps - point_loop.first_step;
    interrupted = static_cast<int>(mine.size()) < expected;
  }
  SleepingBarrier(MPI_COMM_WORLD);  // ranks outside this point wait here without taking the cores
  int stopped = interrupted ? 1 : 0, any_stopped = 0;
  TB_CHECK_MPI(MPI_Allreduce(&stopped, &any_stopped, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD));
  const double energy_J = run_->gpu_health().EnergyJoules(energy, sub != nullptr);
  const std::vector<RankSteps> ranks =
      GatherSteps(mine, sub ? point_state_.activations : std::nan(""), *topology_, setup_.backend.device);
  if (ctx.world_rank == 0 && !ranks.empty() && !ranks.front().steps.empty()) {
    kept.point = SummarizeRepeat(point, point_loop.micro_batch, ranks);
    AddPointToReport(kept.train, kept.point, ranks, point.name);
    if (f_.op_times) AddOpTimes(kept.train.Child(point.name), point, point_loop, ranks);
    AddPointEnergyToReport(kept.train.Child(point.name), energy_J, kept.point);
    kept.figures = FiguresOf(kept.point, ranks, kept.io.FindChild(point.name));
    repeats.push_back(std::move(kept));
  }
  return any_stopped != 0;
}

// --op-times: the point's table, printed and into its group (rank 0).
void TrainPhase::AddOpTimes(Group& point_group, const RunPoint& point, const TrainLoopOptions& point_loop,
                            const std::vector<RankSteps>& ranks) const {
  const TrainPlan& plan = PlanOf(point.k);
  OpShape shape{model_, point_loop.seq, point_loop.micro_batch, point_loop.grad_accum, setup_.backend.cuda};
  shape.stages = plan.pipeline_parallel;
  shape.tensor_parallel = plan.tensor_parallel;
  shape.comm_model = plan.tensor_parallel > 1 || plan.expert_parallel > 1 || parallel_ == ParallelMode::kFsdp ||
                     (parallel_ == ParallelMode::kDp && DataParallel(point.k) > 1);
  shape.parameter_elements = AdamWElementsPerRank(model_, plan, parallel_);
  const OpRates rates{setup_.gemm_min, setup_.copy_min};
  const std::vector<OpRow> rows = SummarizeOpTimes(ranks, shape, rates);
  AddOpTimesTable(point_group, rows);
  for (const std::string& line : OpTimesLines(rows, rates)) Print(line);
}

// A repeat's figures, with what the loop cannot know: the layout, the mode and its theory.
ScalingPoint TrainPhase::SummarizeRepeat(const RunPoint& point, int micro_batch, const std::vector<RankSteps>& ranks) {
  const TrainPlan& plan = PlanOf(point.k);
  ScalingPoint p = SummarizePoint(point.k, micro_batch, ranks, setup_.flops_per_token, setup_.peak_flops,
                                  setup_.gemm_min, point_gradient_bytes_, plan.tensor_parallel, plan.pipeline_parallel,
                                  plan.expert_parallel);
  p.micro_batches = plan.micro_batches;
  if (plan.pipeline_parallel > 1) p.stages = SummarizeStages(plan, ranks);
  // zero1: one reduce-scatter and one all-gather; fsdp: one of each per unit
  p.gradient_buckets = parallel_ == ParallelMode::kZero1 ? 1
                       : parallel_ == ParallelMode::kFsdp ? model_.layers + 2
                                                          : point_buckets_;
  p.nodes = point.plan.nodes;
  p.ranks_per_node = point.plan.ranks_per_node;
  // The hierarchical all-reduce is the point's communicator's; tensor parallel's and pipeline's data parallel groups
  // are split off it and reduce flat.
  const bool split_groups = plan.tensor_parallel > 1 || plan.pipeline_parallel > 1;
  p.allreduce = parallel_ != ParallelMode::kDp                 ? "none"
                : point.plan.hierarchical && !split_groups ? "hierarchical"
                                                           : "flat";
  p.parallel = f_.parallel;
  p.state = point_state_;
  AddTheory(p, micro_batch);
  return p;
}

// Rank 0: the median repeat's groups into the report, with every repeat's figures and their spread.
void TrainPhase::KeepMedianRepeat(const RunPoint& point, std::vector<PointRepeat>& repeats) {
  std::vector<RepeatFigures> figures;
  for (const PointRepeat& r : repeats) figures.push_back(r.figures);
  const size_t median = MedianRepeat(figures);
  PointRepeat& m = repeats[median];
  train().Attach(point.name, m.train.Release(point.name));
  if (std::unique_ptr<Group> io = m.io.Release(point.name)) {
    schema::GroupOf(run_->report().root, schema::kIo).Attach(point.name, std::move(io));
  }
  AddRepeatsToReport(train().Child(point.name), figures, median);
  points_.push_back(m.point);
  point_repeats_.push_back(std::move(figures));
  point_median_.push_back(median);
  if (Sweep()) sweep_shares_.push_back(m.figures.data_wait_share);
}

// One point on the ranks of `sub`: its communicators and model as the plan lays them out, its I/O, the loop with a
// line per step, the io group.
std::vector<StepRecord> TrainPhase::RunOnePoint(Communicator& sub, const RunPoint& point, const std::string& folder,
                                                TrainLoopOptions& point_loop, EnergySpan& energy, Group& io_groups) {
  const TrainPlan& plan = PlanOf(point.k);
  const PointComms comms = MakePointComms(sub, plan);
  Communicator& dp = comms.dp ? *comms.dp : sub;
  const std::unique_ptr<Transformer> transformer =
      MakeModel(dp, comms.tp.get(), plan.stages.at(static_cast<size_t>(plan.Place(sub.rank()).stage)).stage,
                ExpertsOf(plan, sub.rank(), comms.experts.get()));
  point_gradient_bytes_ = static_cast<double>(transformer->parameter_elements() * sizeof(float));
  point_buckets_ = static_cast<int64_t>(PlanBuckets(DataParallelGradientTensors(transformer->layout(),
                                                                                plan.expert_parallel > 1),
                                                    static_cast<size_t>(loop_.bucket_mb * 1024 * 1024), sizeof(float))
                                            .size());
  PointIo io(io_flags_, io_plan_, sub, *transformer, plan, static_cast<uint64_t>(f_.seed), point.throttle_MBps, folder);
  io.Prepare(point_loop);
  const CommandRun::AbortTargetScope abort_target(*run_, sub);
  PointHost host(*this, sub, point.k, io, MeasuredStepsEnergy(run_->gpu_health(), energy, point_loop.warmup_steps));
  point_loop.host = &host;
  point_loop.pipeline = comms.pipeline.get();
  point_loop.expert_data = comms.expert_data.get();
  point_loop.working_bytes = &point_working_bytes_;
  std::vector<StepRecord> mine = RunTrainingSteps(dp, *transformer, point_loop);
  if (run_->ctx().world_rank == 0) RecordKernelChoices(train(), *transformer);
  energy.end = run_->gpu_health().MarkEnergy();
  io.Finish();
  if (io_plan_.loader || io_plan_.checkpoints || !io_plan_.resume_dir.empty()) {
    io.AddToReport(io_groups, point.name, mine);
  }
  peak_device_memory_ = std::max(peak_device_memory_, static_cast<double>(transformer->peak_device_memory_bytes()));
  point_state_ = transformer->state_bytes();
  return mine;
}

// Where this rank's experts are: its place in its expert group, and which of the group's ranks are on other nodes.
ExpertPlacement TrainPhase::ExpertsOf(const TrainPlan& plan, int rank, Communicator* group) const {
  ExpertPlacement experts{plan.expert_parallel, plan.ExpertRank(rank), group, {}};
  if (group) experts.remote_node = RemoteNodes(*group, shape_.node[static_cast<size_t>(ctx_.world_rank)]);
  return experts;
}

// The plan's groups on this rank: tensor parallel (T consecutive ranks, on one node: CheckTensorParallelGroups), the
// ranks holding the same parameters (one per tensor parallel group and pipeline) for the gradients, and the pipeline.
TrainPhase::PointComms TrainPhase::MakePointComms(Communicator& sub, const TrainPlan& plan) {
  const int rank = sub.rank();
  PointComms comms;
  if (plan.tensor_parallel > 1) comms.tp = sub.Split(plan.TensorGroup(rank), rank);
  if (plan.tensor_parallel > 1 || plan.pipeline_parallel > 1) comms.dp = sub.Split(plan.DataGroup(rank), rank);
  if (plan.pipeline_parallel > 1) comms.pipeline = sub.Split(plan.PipelineGroup(rank), rank);
  if (plan.expert_parallel > 1) {
    comms.experts = sub.Split(plan.ExpertGroup(rank), rank);
    comms.expert_data = sub.Split(plan.ExpertDataGroup(rank), rank);
  }
  return comms;
}

// After each step of a point: the start-up time once, and the step's line (the mean loss and the slowest rank's time
// over the point's ranks: collective).
void TrainPhase::PrintStep(const StepRecord& r, Communicator& sub, int k) {
  if (!first_step_seen_) {
    first_step_seen_ = true;
    schema::Set(train(), schema::train::startup_s, NowSeconds() - r.step_s - ProcessStartSeconds());
  }
  // The loss and the tokens summed over the point's ranks (each holds its share of the tokens), the slowest step.
  double local[3] = {r.loss, static_cast<double>(r.tokens), r.step_s}, sums[3] = {0, 0, 0};
  {
    InCommunication waiting;  // for the peers, as in a collective: a host cut off here is no stuck rank 0
    TB_CHECK_MPI(MPI_Allreduce(&local[0], &sums[0], 2, MPI_DOUBLE, MPI_SUM, sub.host_comm()));
    TB_CHECK_MPI(MPI_Allreduce(&local[2], &sums[2], 1, MPI_DOUBLE, MPI_MAX, sub.host_comm()));
  }
  const double tokens_per_s = sums[1] / sums[2];
  const double mfu = setup_.peak ? tokens_per_s / k * setup_.flops_per_token / setup_.peak_flops : std::nan("");
  Print(StepLine(r, sums[0] / k, k, tokens_per_s, mfu));
}

// ZeRO's, Megatron's and 1F1B's figures for a point: the model state and traffic of the mode over the ranks that hold
// the same parameters (rank 0's: Psi / T of the first stage's; Megatron splits the parameters over T, and the
// replicated LayerNorms and biases make the allocation a little larger), tensor parallel's activation all-reduces
// over the stage's layers, and the pipeline's bubble and stage traffic.
void TrainPhase::AddTheory(ScalingPoint& p, int micro_batch) const {
  const TrainPlan& plan = PlanOf(p.k);
  const int t = plan.tensor_parallel;
  const StagePlan& first = plan.stages.front();
  const bool held = plan.pipeline_parallel > 1 || plan.expert_parallel > 1;  // a part of the model per rank
  const double psi = (held ? first.parameters : setup_.gradient_bytes / sizeof(float)) / t;
  p.state_theory = TheoryStateBytes(parallel_, setup_.backend.cuda, psi, plan.data_parallel);
  p.working_bytes = static_cast<double>(point_working_bytes_);
  // Traffic is a mean over the ranks: each stage's mode over its own parameters.
  p.traffic_theory = {};
  for (const StagePlan& stage : plan.stages) {
    const double stage_psi = plan.pipeline_parallel > 1 ? stage.parameters / t : psi;
    // Expert parallel: the experts a rank holds go round the D/EP replicas holding the same experts, the rest round D.
    const double experts = plan.expert_parallel > 1 ? ExpertParameters(model_) / plan.expert_parallel : 0.0;
    const CollectiveTraffic traffic = TheoryTraffic(parallel_, (stage_psi - experts) * sizeof(float), plan.data_parallel);
    const CollectiveTraffic expert_traffic =
        TheoryTraffic(parallel_, experts * sizeof(float), plan.data_parallel / plan.expert_parallel);
    p.traffic_theory.gradient_sync += (traffic.gradient_sync + expert_traffic.gradient_sync) / plan.pipeline_parallel;
    p.traffic_theory.parameter_gather += traffic.parameter_gather / plan.pipeline_parallel;
  }
  if (model_.moe) {
    const double tokens = static_cast<double>(plan.micro_batches) * micro_batch * loop_.seq;
    // The rows' element: bf16 on the CUDA model (its activations), fp32 on the CPU.
    const double element = setup_.backend.cuda ? sizeof(uint16_t) : sizeof(float);
    p.alltoall_bytes_theory = TheoryAllToAllBytes(model_, tokens, element, plan.expert_parallel);
  }
  p.traffic_theory.activation =
      TheoryActivationTraffic(first.stage.end_layer - first.stage.first_layer, micro_batch, loop_.seq, model_.d_model,
                              sizeof(float), t) *
      plan.micro_batches;
  p.bubble_theory = plan.pipeline_parallel > 1 ? plan.bubble_theory() : std::nan("");
  double sends = 0;
  for (const StagePlan& stage : plan.stages) sends += stage.pipeline_send_bytes;
  p.traffic_pipeline_theory = sends / plan.pipeline_parallel;
}

// Rank 0: scaling efficiency, each point's lines, the storage sweep, and the summary the other commands read.
void TrainPhase::Summarise(const std::vector<RunPoint>& runs) {
  const bool sweep = Sweep();
  if (!sweep) ComputeEfficiency(points_, weak_);
  for (size_t i = 0; i < points_.size(); ++i) {
    const ScalingPoint& p = points_[i];
    schema::Set(train().Child(runs[i].name), schema::point::scaling_efficiency, p.efficiency);
    if (sweep) Print(Format("# storage sweep: --io-throttle %g MB/s per rank", runs[i].throttle_MBps), true);
    for (const std::string& line : PointLines(p, f_.scaling_mode)) Print(line, line.rfind("# k=", 0) == 0);
    Print(SpreadLine(point_repeats_[i], point_median_[i]), true);
  }
  if (sweep) {
    std::vector<double> rates;
    for (const RunPoint& point : runs) rates.push_back(point.throttle_MBps);
    AddStorageSweep(schema::GroupOf(run_->report().root, schema::kIo), rates, points_, sweep_shares_, io_flags_.data_wait_share);
  }
  if (points_.empty()) return;
  Group& summary = schema::GroupOf(run_->report().root, schema::kSummary);
  std::string measured;
  for (size_t i = 0; i < points_.size(); ++i) measured += (i ? "," : "") + runs[i].name;
  schema::Set(summary, schema::summary::train_points, measured);
  schema::Set(summary, schema::summary::train_tokens_per_s, points_.back().tokens_per_s);
  schema::Set(summary, schema::summary::train_ranks, points_.back().k);
  schema::Set(summary, schema::summary::train_scaling_efficiency, points_.back().efficiency);
}

// Peak host and device memory of every rank over the whole run (collective).
void TrainPhase::RecordMemory() {
  const std::vector<double> peaks = AllGatherDoubles(MPI_COMM_WORLD, PeakHostMemoryBytes());
  const std::vector<double> device_peaks = AllGatherDoubles(MPI_COMM_WORLD, peak_device_memory_);
  Group& t = train();
  schema::Set(t, schema::train::peak_host_memory_bytes_max, *std::max_element(peaks.begin(), peaks.end()));
  schema::Set(t, schema::train::peak_device_memory_bytes_max, *std::max_element(device_peaks.begin(), device_peaks.end()));
  std::vector<int64_t> memory_rank;
  for (int rank = 0; rank < run_->ctx().world_size; ++rank) memory_rank.push_back(rank);
  namespace mc = schema::train::memory;
  Table& memory_table = schema::AddTable(t, schema::train::kMemory);
  schema::AddColumn(memory_table, mc::rank, memory_rank);
  schema::AddColumn(memory_table, mc::peak_host_memory_bytes, peaks);
  schema::AddColumn(memory_table, mc::peak_device_memory_bytes, device_peaks);
}

}  // namespace

std::unique_ptr<Phase> MakeTrainPhase(const RankContext& ctx) { return std::make_unique<TrainPhase>(ctx); }

int64_t TrainPhaseVocab(const Phase& train) { return dynamic_cast<const TrainPhase&>(train).vocab(); }

int RunTrainCommand(const CommandInput& input) {
  TrainPhase phase(input.ctx);
  return RunPhaseCommand(input, phase);
}

}  // namespace tb
