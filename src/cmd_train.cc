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
#include "log.h"
#include "model_config.h"
#include "mpi_util.h"
#include "peaks.h"
#include "report_check.h"
#include "train_loop.h"
#include "train_io.h"
#include "train_summary.h"
#include "transformer.h"
#include "units.h"

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
  int steps = 20;
  int warmup_steps = 2;
  double bucket_mb = kDefaultBucketMiB;
  bool no_overlap = false;
  std::string scaling;
  std::string scaling_mode = "weak";
  int global_batch = 0;
  double learning_rate = 3e-4;
  int64_t seed = 1234;
  std::string attention = "auto";
};

AttentionChoice ParseAttention(const std::string& text) {
  if (text == "auto") return AttentionChoice::kAuto;
  if (text == "cudnn") return AttentionChoice::kCudnn;
  if (text == "cublas") return AttentionChoice::kCublas;
  throw InputError("unknown attention '" + text + "' for --attention (accepted: auto|cudnn|cublas)");
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
  return config;
}

// The training options that determine the numbers each step computes (the model's shape is in the checkpoint's
// fingerprint; PlanTrainIo adds the data options). Not among them: --steps, --warmup-steps (which steps are
// measured, not what they compute) and, on the CPU backend, --bucket-mb and --no-overlap (MPI's sums come out the
// same over any bucket layout: checked bit for bit at 4 and 8 ranks); NCCL picks its algorithm by message size.
TrajectoryOf TrainTrajectory(const TrainFlags& f, int seq, bool cuda, bool weak) {
  return [=](int ranks, int micro_batch) {
    Trajectory options = {
        {"ranks", "ranks", std::to_string(ranks)},
        {"backend", "--backend", cuda ? "cuda" : "cpu"},
        {"seq", "--seq", std::to_string(seq)},
        {"micro_batch", weak ? "--micro-batch" : "sequences per rank (--global-batch / ranks)",
         std::to_string(micro_batch)},
        {"lr", "--lr", Format("%.9g", f.learning_rate)},
        {"data_seed", "--seed", std::to_string(f.seed)}};
    if (cuda) {
      options.push_back({"attention", "--attention", f.attention});
      options.push_back({"bucket_mb", "--bucket-mb", Format("%.9g", f.bucket_mb)});
    }
    return options;
  };
}

std::vector<int> ParseScaling(const std::string& text, int world) {
  std::vector<int> ks;
  if (text.empty()) return {world};
  if (text == "pow2") {
    for (int k = 1; k <= world; k *= 2) ks.push_back(k);
    return ks;
  }
  for (const int64_t k : ParseIntegerList(text, "--scaling", IntRange::Between(1, world))) {
    if (!ks.empty() && k <= ks.back()) throw InputError("--scaling must list increasing rank counts (got '" + text + "')");
    ks.push_back(static_cast<int>(k));
  }
  return ks;
}

// One record as doubles, for gathering to rank 0.
constexpr int kRecordFields = 17;
void Pack(const StepRecord& r, std::vector<double>& out) {
  const double fields[kRecordFields] = {static_cast<double>(r.step), r.warmup ? 1.0 : 0.0, r.data_wait_s, r.h2d_s,
                                        r.forward_s, r.backward_s, r.comm_total_s, r.comm_exposed_s, r.optimizer_s,
                                        r.checkpoint_stall_s, r.step_s, static_cast<double>(r.tokens), r.loss,
                                        static_cast<double>(r.data_bytes), r.data_read_MBps,
                                        static_cast<double>(r.loader_queue_depth), r.checkpoint_writing ? 1.0 : 0.0};
  out.insert(out.end(), fields, fields + kRecordFields);
}
StepRecord Unpack(const double* f) {
  StepRecord r;
  r.step = static_cast<int>(f[0]);
  r.warmup = f[1] != 0;
  r.data_wait_s = f[2];
  r.h2d_s = f[3];
  r.forward_s = f[4];
  r.backward_s = f[5];
  r.comm_total_s = f[6];
  r.comm_exposed_s = f[7];
  r.optimizer_s = f[8];
  r.checkpoint_stall_s = f[9];
  r.step_s = f[10];
  r.tokens = static_cast<int64_t>(f[11]);
  r.loss = f[12];
  r.data_bytes = static_cast<uint64_t>(f[13]);
  r.data_read_MBps = f[14];
  r.loader_queue_depth = static_cast<int>(f[15]);
  r.checkpoint_writing = f[16] != 0;
  return r;
}

// Every rank's records of one scaling point, on rank 0 (ranks outside the point send none).
std::vector<RankSteps> GatherSteps(const std::vector<StepRecord>& mine, const Topology& topology, int world_rank,
                                   int world_size, const std::string& device) {
  std::vector<double> packed;
  for (const StepRecord& r : mine) Pack(r, packed);
  int count = static_cast<int>(packed.size());
  std::vector<int> counts(world_size), offsets(world_size);
  TB_CHECK_MPI(MPI_Gather(&count, 1, MPI_INT, counts.data(), 1, MPI_INT, 0, MPI_COMM_WORLD));
  int total = 0;
  for (int i = 0; i < world_size; ++i) {
    offsets[i] = total;
    total += counts[i];
  }
  std::vector<double> all(static_cast<size_t>(std::max(total, 1)));
  TB_CHECK_MPI(MPI_Gatherv(packed.data(), count, MPI_DOUBLE, all.data(), counts.data(), offsets.data(), MPI_DOUBLE, 0,
                           MPI_COMM_WORLD));
  std::vector<RankSteps> ranks;
  if (world_rank != 0) return ranks;
  for (int rank = 0; rank < world_size; ++rank) {
    if (counts[rank] == 0) continue;
    RankSteps steps;
    steps.rank = rank;
    steps.host = topology.ranks[rank].host;
    steps.device = device;
    for (int i = 0; i < counts[rank]; i += kRecordFields) steps.steps.push_back(Unpack(all.data() + offsets[rank] + i));
    ranks.push_back(std::move(steps));
  }
  return ranks;
}

void RecordModel(Group& group, const ModelConfig& c, int micro_batch, int seq, bool mixed_precision) {
  const ParameterCount params = CountParameters(c);
  const MemoryEstimate memory = EstimateMemory(c, micro_batch, seq, mixed_precision);
  group.Set("name", c.name);
  group.Set("layers", static_cast<int64_t>(c.layers));
  group.Set("preset_layers", static_cast<int64_t>(c.preset_layers));
  group.Set("scaled", c.scaled);
  group.Set("d_model", static_cast<int64_t>(c.d_model));
  group.Set("heads", static_cast<int64_t>(c.heads));
  group.Set("vocab", static_cast<int64_t>(c.vocab));
  group.Set("vocab_padded", static_cast<int64_t>(c.vocab_padded));
  group.Set("max_seq", static_cast<int64_t>(c.seq));
  group.Set("parameters", params.total);
  group.Set("matmul_parameters", params.matmul);
  group.Set("model_flops_per_token", ModelFlopsPerToken(c, seq));
  group.Set("flops_convention", std::string("6*N_matmul + 6*L*T*d (causal attention, forward+backward)"));
  group.Set("memory_weights_bytes", memory.weights_bytes);
  group.Set("memory_gradients_bytes", memory.gradients_bytes);
  group.Set("memory_optimizer_bytes", memory.optimizer_bytes);
  group.Set("memory_activations_bytes", memory.activations_bytes);
  group.Set("memory_precision",
            std::string(mixed_precision ? "bf16 weights/gradients/activations + fp32 master and AdamW (ZeRO's 16 B per "
                                          "parameter; the CUDA transformer keeps fp32 gradients: 18 B)"
                                        : "fp32 (CPU reference)"));
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
  Table& table = io.tables["throttle_sweep"];
  table.description = "storage sweep: the same run at decreasing --io-throttle rates per rank; data_wait_share = "
                      "(data_wait + h2d) / step time over every rank's measured steps";
  table.Add("io_throttle_MBps", "MB/s", measured_rates).Add("data_wait_share", "", shares)
      .Add("step_s", "s", step_s).Add("tokens_per_s", "tokens/s", tokens_per_s);
  const double crossing = ThrottleAtDataWaitShare(measured_rates, shares, share);
  io.Set("sweep_data_wait_share", share);
  io.Set("throttle_at_data_wait_share_MBps", crossing);
  Print(std::isnan(crossing)
            ? Format("# storage sweep: data_wait %s %.0f%% of step time %s", shares.empty() || shares[0] < share
                     ? "stays under" : "is already over", 100 * share,
                     shares.empty() || shares[0] < share ? "at every rate tried" : "at the fastest rate tried")
            : Format("# storage sweep: data_wait reaches %.0f%% of step time at %.1f MB/s per rank (linear between "
                     "the sweep's rates)", 100 * share, crossing),
        true);
}

// What a training run needs per rank: its model state and activations on the device (cuda) or the host (cpu);
// on cuda the host holds the fp32 initial weights while they are drawn and uploaded.
MemoryNeed TrainMemoryNeed(const ModelConfig& model, int micro_batch, int seq, bool cuda) {
  const MemoryEstimate m = EstimateMemory(model, micro_batch, seq, cuda);
  const std::string parts = Format("weights %s, gradients %s, optimizer %s, activations %s at --micro-batch %d and "
                                   "--seq %d", FormatBytes(m.weights_bytes).c_str(),
                                   FormatBytes(m.gradients_bytes).c_str(), FormatBytes(m.optimizer_bytes).c_str(),
                                   FormatBytes(m.activations_bytes).c_str(), micro_batch, seq);
  MemoryNeed need;
  need.lower = "--micro-batch, --seq or --layers";
  if (cuda) {
    need.device_bytes = m.total_bytes();
    need.device_parts = parts;
    need.host_bytes = 4.0 * static_cast<double>(CountParameters(model).total);
    need.host_parts = "fp32 initial weights";
  } else {
    need.host_bytes = m.total_bytes();
    need.host_parts = parts;
  }
  return need;
}

}  // namespace

int RunTrainCommand(const CommandInput& input) {
  TrainFlags f;
  CommonOptions common;
  po::options_description options("train options");
  options.add_options()
      ("model", po::value(&f.model)->default_value(f.model), "preset (gpt2-124m ... gpt-70b) or custom")
      ("layers", Number(&f.layers, IntRange::Between(1, kMaxLayers)), "run N layers of the preset's shape (custom: the layer count)")
      ("d-model", Number(&f.d_model, IntRange::Between(1, kMaxWidth)), "custom: channels")
      ("heads", Number(&f.heads, IntRange::Between(1, kMaxWidth)), "custom: attention heads")
      ("vocab", Number(&f.vocab, IntRange::Between(2, kMaxVocab))->default_value(f.vocab), "custom: vocabulary size")
      ("seq", Number(&f.seq, IntRange::Between(1, kMaxSeq)), "tokens per sequence (default: the model's 1024)")
      ("micro-batch", Number(&f.micro_batch, IntRange::AtLeast(1))->default_value(f.micro_batch), "sequences per rank per step (weak scaling)")
      ("steps", Number(&f.steps, IntRange::AtLeast(1))->default_value(f.steps), "measured steps per scaling point")
      ("warmup-steps", Number(&f.warmup_steps, IntRange::AtLeast(0))->default_value(f.warmup_steps), "steps run first and left out of the statistics")
      ("bucket-mb", Number(&f.bucket_mb, RealRange::AboveUpTo(0, 1 << 20))->default_value(f.bucket_mb), "gradient bucket size in MiB")
      ("no-overlap", po::bool_switch(&f.no_overlap), "all-reduce the gradients after backward instead of during it")
      ("scaling", po::value(&f.scaling), "rank counts to run, e.g. 1,2,4,8 or pow2 (default: all ranks)")
      ("scaling-mode", po::value(&f.scaling_mode)->default_value(f.scaling_mode), "weak (per-rank batch fixed) or strong (global batch fixed)")
      ("global-batch", Number(&f.global_batch, IntRange::AtLeast(1)), "strong scaling: sequences per step over all ranks (default: micro-batch x ranks)")
      ("lr", Number(&f.learning_rate, RealRange::AboveUpTo(0, 1))->default_value(f.learning_rate), "AdamW learning rate")
      ("seed", Number(&f.seed, IntRange::AtLeast(0))->default_value(f.seed), "seed of the weights and the synthetic tokens")
      ("attention", po::value(&f.attention)->default_value(f.attention),
       "cuda: auto (cuDNN fused SDPA when it supports the shape, else cuBLAS), cudnn or cublas");
  TrainIoFlags io_flags;
  AddTrainIoOptions(options, io_flags);
  AddCommonOptions(options, common);

  ModelConfig model;
  TrainIoPlan io_plan;
  TrainLoopOptions loop;
  std::vector<int> scaling;
  bool weak = true;
  int global_batch = 0;  // sequences per step over all ranks: what strong scaling divides by k
  AttentionChoice attention = AttentionChoice::kAuto;
  std::vector<FlagRule> rules = TrainIoFlagRules();
  for (const char* flag : {"d-model", "heads", "vocab"}) rules.push_back(Needs(flag, "model", {"custom"}));
  rules.push_back(Needs("global-batch", "scaling-mode", {"strong"}));
  std::unique_ptr<CommandRun> run = StartCommand("train", input, options, kUsage, common, [&](CommandRun& r) {
    attention = ParseAttention(f.attention);
    if (r.backend() != "nccl" && attention != AttentionChoice::kAuto) {
      throw InputError("--attention " + f.attention + " applies to --backend cuda (the CPU reference has its own)");
    }
    model = ModelFromFlags(f);
    ValidateModel(model);
    loop.seq = f.seq > 0 ? f.seq : model.seq;
    if (loop.seq > model.seq) {
      throw InputError("--seq " + std::to_string(loop.seq) + " exceeds the model's " + std::to_string(model.seq) + " positions");
    }
    if (f.scaling_mode != "weak" && f.scaling_mode != "strong") {
      throw InputError("unknown scaling mode '" + f.scaling_mode + "' for --scaling-mode (accepted: weak|strong)");
    }
    weak = f.scaling_mode == "weak";
    scaling = ParseScaling(f.scaling, input.ctx.world_size);
    global_batch = f.global_batch > 0 ? f.global_batch : f.micro_batch * scaling.back();
    if (!weak) {
      for (int k : scaling) {
        if (global_batch % k != 0) {
          throw InputError("--scaling-mode strong: the global batch " + std::to_string(global_batch) +
                           " does not divide over " + std::to_string(k) + " ranks (set --global-batch)");
        }
      }
    }
    CheckMemoryFits(r, TrainMemoryNeed(model, weak ? f.micro_batch : global_batch / scaling.front(), loop.seq,
                                       r.backend() == "nccl"));
    loop.micro_batch = f.micro_batch;
    loop.steps = f.steps;
    loop.warmup_steps = f.warmup_steps;
    loop.bucket_mb = f.bucket_mb;
    loop.overlap = !f.no_overlap;
    loop.adamw.learning_rate = static_cast<float>(f.learning_rate);
    loop.data_seed = static_cast<uint64_t>(f.seed);
    Group& cfg = r.config();
    cfg.Set("model", f.model);
    cfg.Set("layers", static_cast<int64_t>(model.layers));
    cfg.Set("seq", static_cast<int64_t>(loop.seq));
    cfg.Set("micro_batch", static_cast<int64_t>(f.micro_batch));
    cfg.Set("global_batch", static_cast<int64_t>(global_batch));
    cfg.Set("steps", static_cast<int64_t>(f.steps));
    cfg.Set("warmup_steps", static_cast<int64_t>(f.warmup_steps));
    cfg.Set("bucket_mb", f.bucket_mb);
    cfg.Set("overlap", static_cast<int64_t>(loop.overlap));
    cfg.Set("scaling", f.scaling.empty() ? std::to_string(input.ctx.world_size) : f.scaling);
    cfg.Set("scaling_mode", f.scaling_mode);
    cfg.Set("lr", f.learning_rate);
    cfg.Set("seed", f.seed);
    cfg.Set("attention", f.attention);
    TrainIoRun io_run{loop.seq, static_cast<uint64_t>(f.seed), loop.warmup_steps + loop.steps, {},
                      TrainTrajectory(f, loop.seq, r.backend() == "nccl", weak)};
    for (int k : scaling) io_run.points.emplace_back(k, weak ? f.micro_batch : global_batch / k);
    io_plan = PlanTrainIo(io_flags, model, io_run, cfg);
    r.AddInputs(TrainInputs(io_flags, io_plan));
  }, rules);
  // The one expensive check (it reads the whole dataset) runs last, once every flag is known to be good.
  AgreeOnSetup([&] { VerifyTrainData(io_flags, io_plan, input.ctx.world_rank, input.ctx.world_size); });
  std::unique_ptr<Communicator> comm = run->MakeCommunicator();
  const double comm_ready_s = NowSeconds();

  return run->RecordingFailures([&] {
    const Topology& topology = run->BeginMeasurement("training");
    const RankContext& ctx = run->ctx();
    Backend backend;
    backend.cuda = run->backend() == "nccl";
    // The cores of a node shared by its ranks: OpenBLAS's threads on the CPU, the initial weights' draw on both.
    SetCpuThreadsPerRank(ctx.local_size);
    double gemm_flops = 0;
    if (backend.cuda) {
      const GpuInfo gpu = QueryGpu(ctx.gpu_index);
      backend.device_name = gpu.name;
      backend.device = Format("%s (GPU %d)", gpu.name.c_str(), gpu.index);
      backend.description = "cuda (NCCL + CUDA transformer: bf16 cuBLASLt GEMMs, fp32 master weights and AdamW)";
      gemm_flops = MeasureDeviceGemmFlops();  // every rank on its own GPU, all at once
    } else {
      backend.device = Format("cpu (%d BLAS threads)", CpuThreads());
      backend.description = "cpu (MPI + CPU reference in fp32)";
      // Each rank measures its GEMM rate alone on its node (the others wait asleep), so that ranks sharing cores
      // do not halve each other's figure; nodes measure at the same time.
      MPI_Comm node = MPI_COMM_NULL;
      TB_CHECK_MPI(MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, ctx.world_rank, MPI_INFO_NULL, &node));
      for (int turn = 0; turn < ctx.local_size; ++turn) {
        if (turn == ctx.local_rank) gemm_flops = MeasureCpuGemmFlops();
        SleepingBarrier(node);
      }
      MPI_Comm_free(&node);
    }
    const std::vector<double> gemm_all = AllGatherDoubles(MPI_COMM_WORLD, gemm_flops);
    const double gemm_min = *std::min_element(gemm_all.begin(), gemm_all.end());
    // MFU against rank 0's device in the peak table (a launch mixing GPU models is measured against rank 0's).
    const std::optional<DevicePeak> peak = backend.cuda ? FindDevicePeak(topology.ranks[0].gpu.name) : std::nullopt;
    const double peak_flops = peak ? peak->bf16_flops : 0.0;
    const double flops_per_token = ModelFlopsPerToken(model, loop.seq);
    const ParameterCount params = CountParameters(model);
    const MemoryEstimate memory = EstimateMemory(model, loop.micro_batch, loop.seq, backend.cuda);
    const std::vector<TensorSlot> layout = MakeLayout(model);
    // The flat fp32 gradient buffer, padded embedding rows included: what every step all-reduces.
    const double gradient_bytes = static_cast<double>(layout.back().offset + layout.back().count) * sizeof(float);
    // The all-reduces per step: the buckets the loop forms over the same layout.
    const int64_t gradient_buckets = static_cast<int64_t>(
        PlanBuckets(GradientTensors(layout), static_cast<size_t>(f.bucket_mb * 1024 * 1024), sizeof(float)).size());

    Print(Format("# trainbench train: %d ranks on %d nodes, backend %s", ctx.world_size, ctx.node_count,
                 backend.description.c_str()));
    Print(Format("# model %s%s: %d layers, d %d, %d heads, vocab %d (padded %d), seq %d; %lld parameters",
                 model.name.c_str(), model.scaled.empty() ? "" : (" (" + model.scaled + ")").c_str(), model.layers,
                 model.d_model, model.heads, model.vocab, model.vocab_padded, loop.seq,
                 static_cast<long long>(params.total)));
    Print(Format("# model FLOPs per token %.4g (6*N_matmul + 6*L*T*d); memory per rank (%s estimate): weights %s, "
                 "gradients %s, optimizer %s, activations %s",
                 flops_per_token, backend.cuda ? "mixed-precision" : "fp32",
                 FormatBytes(static_cast<uint64_t>(memory.weights_bytes)).c_str(),
                 FormatBytes(static_cast<uint64_t>(memory.gradients_bytes)).c_str(),
                 FormatBytes(static_cast<uint64_t>(memory.optimizer_bytes)).c_str(),
                 FormatBytes(static_cast<uint64_t>(memory.activations_bytes)).c_str()));
    if (backend.cuda) {
      Print(Format("# peak FLOP/s: %s; measured bf16 GEMM rate %.1f TFLOP/s (cuBLASLt 8192^3, slowest rank), %s",
                   peak ? Format("%s bf16 dense %.0f TFLOP/s (%s)", peak->device.c_str(), peak->bf16_flops / 1e12,
                                 peak->source.c_str()).c_str()
                        : ("no table entry for " + topology.ranks[0].gpu.name + " (MFU against peak: n/a)").c_str(),
                   gemm_min / 1e12, backend.device.c_str()));
    } else {
      Print(Format("# peak FLOP/s: no table entry for a CPU (MFU against peak: n/a); measured sgemm rate %.1f GFLOP/s "
                   "(slowest rank, each measured alone on its node), %s", gemm_min / 1e9, backend.device.c_str()));
    }

    Group& train = run->report().root.Child("train");
    RecordModel(run->report().root.Child("model"), model, loop.micro_batch, loop.seq, backend.cuda);
    train.Set("scaling_mode", f.scaling_mode);
    train.Set("backend", std::string(backend.cuda ? "cuda" : "cpu"));
    train.Set("device", backend.device);
    train.Set("measured_gemm_flops", gemm_min);
    train.Set("measured_gemm",
              std::string(backend.cuda ? "cuBLASLt bf16 GEMM 8192^3 (fp32 accumulation) on each rank's GPU at start-up, "
                                         "timed with CUDA events; the slowest rank's rate"
                                       : "cblas_sgemm fp32 1024^3 on each rank at start-up, one rank of a node at "
                                         "a time; the slowest rank's rate"));
    train.Set("peak_flops", peak ? peak_flops : std::nan(""));
    train.Set("peak_source", peak ? peak->device + " bf16 dense: " + peak->source
                                  : std::string(backend.cuda ? "none: no peak table entry for this GPU"
                                                             : "none: no peak table entry for a CPU"));
    if (io_plan.loader) AddDataVerifyToReport(ctx.world_rank == 0 ? &run->report().root.Child("io") : nullptr, io_flags, io_plan);
    train.Set("mpi_init_s", MpiInitSeconds());
    train.Set("communicator_init_s", comm_ready_s - ProcessStartSeconds() - MpiInitSeconds());

    std::vector<ScalingPoint> points;
    bool interrupted = false;
    bool first_step_seen = false;
    double peak_device_memory = 0;
    // Strong scaling gives the fewest ranks the largest batch: the CUDA model's activations are sized for it.
    const int max_batch = weak ? loop.micro_batch : global_batch / scaling.front();
    auto make_model = [&]() -> std::unique_ptr<Transformer> {
      if (!backend.cuda) return MakeCpuTransformer(model, static_cast<uint64_t>(f.seed));
      CudaTransformerOptions options;
      options.max_batch = max_batch;
      options.attention = attention;
      options.seq = loop.seq;
      std::string fallback_reason;
      const double setup_start = NowSeconds();
      std::unique_ptr<Transformer> cuda_model =
          MakeCudaTransformer(model, static_cast<uint64_t>(f.seed), options, &fallback_reason);
      if (!train.attributes.contains("attention")) {
        // Mostly the host's draw of the initial weights and their upload: what a large model costs before step 0.
        Print(Format("# model setup: %.2f s (device memory, initial weights on %d host threads, upload)",
                     NowSeconds() - setup_start, CpuThreads()));
        train.Set("attention", cuda_model->attention());
        train.Set("attention_fallback_reason", fallback_reason);
        Print("# attention: " + cuda_model->attention() +
              (fallback_reason.empty() ? std::string() : " (cuDNN SDPA unavailable: " + fallback_reason + ")"));
      }
      return cuda_model;
    };
    if (!backend.cuda) train.Set("attention", std::string("cpu"));
    // One run of the loop per scaling point, or per storage rate of a sweep (which takes one point).
    struct RunPoint {
      int k;
      double throttle_MBps;
      std::string name;
    };
    const bool sweep = io_plan.throttles_MBps.size() > 1;
    const bool with_io = io_plan.loader || io_plan.checkpoints || !io_plan.resume_dir.empty();
    std::vector<RunPoint> runs;
    for (int k : scaling) {
      for (double throttle : io_plan.throttles_MBps) {
        runs.push_back({k, throttle, sweep ? Format("k%d_throttle%g", k, throttle) : PointGroupName(k)});
      }
    }
    std::vector<double> sweep_shares;
    for (const RunPoint& point : runs) {
      const int k = point.k;
      std::unique_ptr<Communicator> sub = comm->Prefix(k);
      std::vector<StepRecord> mine;
      TrainLoopOptions point_loop = loop;
      point_loop.micro_batch = weak ? loop.micro_batch : global_batch / k;
      if (sub) {
        std::unique_ptr<Transformer> transformer = make_model();
        PointIo io(io_flags, io_plan, *sub, *transformer, point_loop.micro_batch, loop.seq,
                   static_cast<uint64_t>(f.seed), point.throttle_MBps, runs.size() > 1 ? point.name : "");
        io.Prepare(point_loop);
        point_loop.watchdog = &run->watchdog(sub.get());
        point_loop.stop_requested = [&] { return run->StopRequested(sub->host_comm()); };
        point_loop.at_first_step = TestFaultHook(ctx.world_rank);
        point_loop.on_step = [&](const StepRecord& r) {
          if (!first_step_seen) {
            first_step_seen = true;
            train.Set("startup_s", NowSeconds() - r.step_s - ProcessStartSeconds());
          }
          double local[2] = {r.loss, r.step_s}, sums[2] = {0, 0};
          TB_CHECK_MPI(MPI_Allreduce(&local[0], &sums[0], 1, MPI_DOUBLE, MPI_SUM, sub->host_comm()));
          TB_CHECK_MPI(MPI_Allreduce(&local[1], &sums[1], 1, MPI_DOUBLE, MPI_MAX, sub->host_comm()));
          const double tokens_per_s = static_cast<double>(r.tokens) * k / sums[1];
          const double mfu = peak ? tokens_per_s / k * flops_per_token / peak_flops : std::nan("");
          Print(StepLine(r, sums[0] / k, k, tokens_per_s, mfu));
        };
        mine = RunTrainingSteps(*sub, *transformer, point_loop);
        io.Finish();
        if (with_io) io.AddToReport(run->report().root.Child("io"), point.name, mine);
        peak_device_memory = std::max(peak_device_memory, static_cast<double>(transformer->peak_device_memory_bytes()));
        const int expected = point_loop.warmup_steps + point_loop.steps - point_loop.first_step;
        interrupted = interrupted || static_cast<int>(mine.size()) < expected;
      }
      SleepingBarrier(MPI_COMM_WORLD);  // ranks outside this point wait here without taking the cores
      int stopped = interrupted ? 1 : 0, any_stopped = 0;
      TB_CHECK_MPI(MPI_Allreduce(&stopped, &any_stopped, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD));
      interrupted = any_stopped != 0;
      std::vector<RankSteps> ranks = GatherSteps(mine, topology, ctx.world_rank, ctx.world_size, backend.device);
      if (ctx.world_rank == 0 && !ranks.empty() && !ranks.front().steps.empty()) {
        points.push_back(
            SummarizePoint(k, point_loop.micro_batch, ranks, flops_per_token, peak_flops, gemm_min, gradient_bytes));
        points.back().gradient_buckets = gradient_buckets;
        AddPointToReport(train, points.back(), ranks, point.name);
        if (sweep) sweep_shares.push_back(DataWaitShare(ranks));
      }
      if (interrupted) break;
    }
    if (ctx.world_rank == 0) {
      if (!sweep) ComputeEfficiency(points, weak);
      for (size_t i = 0; i < points.size(); ++i) {
        const ScalingPoint& p = points[i];
        train.Child(runs[i].name).Set("scaling_efficiency", p.efficiency);
        if (sweep) Print(Format("# storage sweep: --io-throttle %g MB/s per rank", runs[i].throttle_MBps), true);
        for (const std::string& line : PointLines(p, f.scaling_mode)) Print(line, line.rfind("# k=", 0) == 0);
      }
      if (sweep) {
        std::vector<double> rates;
        for (const RunPoint& point : runs) rates.push_back(point.throttle_MBps);
        AddStorageSweep(run->report().root.Child("io"), rates, points, sweep_shares, io_flags.data_wait_share);
      }
      Group& summary = run->report().root.Child("summary");
      if (!points.empty()) {
        std::string measured;
        for (size_t i = 0; i < points.size(); ++i) measured += (i ? "," : "") + runs[i].name;
        summary.Set(kTrainPointsAttribute, measured);
        summary.Set("train_tokens_per_s", points.back().tokens_per_s);
        summary.Set("train_ranks", static_cast<int64_t>(points.back().k));
        summary.Set("train_scaling_efficiency", points.back().efficiency);
      }
    }
    const std::vector<double> peaks = AllGatherDoubles(MPI_COMM_WORLD, PeakHostMemoryBytes());
    const std::vector<double> device_peaks = AllGatherDoubles(MPI_COMM_WORLD, peak_device_memory);
    train.Set("peak_host_memory_bytes_max", *std::max_element(peaks.begin(), peaks.end()));
    train.Set("peak_device_memory_bytes_max", *std::max_element(device_peaks.begin(), device_peaks.end()));
    std::vector<int64_t> memory_rank;
    for (int rank = 0; rank < ctx.world_size; ++rank) memory_rank.push_back(rank);
    Table& memory_table = train.tables["memory"];
    memory_table.description =
        "peak resident host memory of each rank's process over the whole run (getrusage); peak device memory in "
        "use on each rank's GPU (total - free from cudaMemGetInfo at the model's high points; 0 on the CPU backend)";
    memory_table.Add("rank", "", memory_rank)
        .Add("peak_host_memory_bytes", "B", peaks)
        .Add("peak_device_memory_bytes", "B", device_peaks);
    return run->Finish(interrupted);
  });
}

}  // namespace tb
