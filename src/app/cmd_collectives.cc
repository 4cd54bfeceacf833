// `trainbench collectives`: nccl-tests-style sweep over sizes and operations, verified element by element.
#include <algorithm>
#include <optional>

#include "cli.h"
#include "commands.h"
#include "console.h"
#include "error.h"
#include "fault.h"
#include "injecting_communicator.h"
#include "injection.h"
#include "log.h"
#include "moe_alltoall.h"
#include "phase.h"
#include "scaling_plan.h"
#include "schema.h"
#include "sweep.h"
#include "sweep_options.h"
#include "units.h"

namespace tb {
namespace {

constexpr const char* kUsage =
    "usage: [mpirun -np N] trainbench collectives [-b MIN] [-e MAX] [-f FACTOR | --sizes LIST] [--ops LIST]\n"
    "                                            [-d DTYPE] [--redop OP] [-n ITERS] [-w WARMUP] [-c CHECK]\n"
    "                                            [--aggregate N] [--cuda-graph N] [--split all|intra|inter] [-o FILE]\n"
    "                                            [--ops moe_alltoall --moe-tokens LIST [--moe-hidden H]\n"
    "                                             [--moe-top-k K] [--moe-experts E] [--moe-seed S]]\n"
    "Times each collective at each size (each rank's mean over ITERS, then the max over ranks), reports algbw =\n"
    "S/t and busbw = algbw x factor (all_reduce 2(n-1)/n; reduce_scatter, all_gather, alltoall (n-1)/n; broadcast,\n"
    "reduce, sendrecv 1; GB = 1e9 bytes), and verifies every element where the buffers live (device kernels on\n"
    "cuda). Buffer offsets rotate between iterations. Sizes: K/M/G = x1024, KB/MB/GB = x1000.\n"
    "--split intra runs every node's ranks on their own communicator, inter one communicator per local rank of one\n"
    "rank per node, all at once (the time is the slowest rank's); across k > 1 nodes the report adds the per-NIC rate\n"
    "busbw x (k-1)/(n-1) of all_reduce, reduce_scatter and all_gather.\n"
    "moe_alltoall (not in `all`) is a mixture-of-experts layer's dispatch and combine: each rank routes --moe-tokens\n"
    "tokens of --moe-hidden bf16 elements to --moe-top-k of --moe-experts experts spread evenly over the ranks, sends\n"
    "each token once to every rank holding one of its experts (alltoallv) and the rows back; GB/s = the mean bytes a\n"
    "rank sends / time (DeepEP's figure). -n, -w and -c apply to it; the sizes, -d and the other flags do not.";

// The options as the sweep uses them where they differ from what was typed: the element type and reduction by
// their canonical names (-d fp32 is float).
// Beside them, what no flag names: that buffer offsets rotate, and where the elements are checked.
void RecordConfig(CommandRun& run, const SweepOptions& o) {
  run.RecordAsUsed("dtype", DataTypeName(o.type));
  run.RecordAsUsed("redop", ReduceOpName(o.reduce_op));
  schema::Set(run.config(), schema::config::buffer_offsets, std::string("rotating"));
  const std::string verified_on = o.check_iters == 0 ? "none" : run.backend() == "nccl" ? "device" : "host";
  schema::Set(run.config(), schema::config::verified_on, verified_on);
}

// The largest buffers any operation of the sweep allocates per rank: on the device (nccl) or the host (mpi). They are
// filled and checked where they live: no host image.
// moe_alltoall's buffers come after the sweep's are freed: the larger of the two counts. Its rows are filled and
// checked on the host, through a host image of one buffer on the cuda backend.
MemoryNeed SweepMemoryNeed(const SweepOptions& o, const std::optional<MoeOptions>& moe, const RankContext& ctx,
                           bool nccl) {
  double buffers = 0;
  for (const CollectiveDef* def : o.ops) {
    const BufferBytes bytes = SweepBufferBytes(*def, o, ctx.world_size, ctx.world_rank);
    buffers = std::max(buffers, static_cast<double>(bytes.send) + static_cast<double>(bytes.recv));
  }
  const double moe_buffers = moe ? MoeBufferBytes(*moe, ctx.world_size) : 0;
  MemoryNeed need;
  need.lower = moe ? "-e/--maxbytes (or the largest of --sizes), --moe-tokens or --moe-hidden"
                   : "-e/--maxbytes (or the largest of --sizes)";
  need.device_bytes = nccl ? std::max(buffers, moe_buffers) : 0;
  need.device_parts = "send and receive buffers of the largest size";
  need.host_bytes = nccl ? moe_buffers / 2 : std::max(buffers, moe_buffers);
  need.host_parts = nccl ? "moe_alltoall's host image of one buffer (the sweep's check runs on the device)"
                         : "send and receive buffers of the largest size";
  return need;
}

// How the launch's ranks sit on nodes. Collective over the world.
NodeShape ShapeOf(const RankContext& ctx) {
  const std::vector<int> per_node = GatherLaunchShape(ctx).RanksPerNode();
  NodeShape shape;
  shape.ranks = ctx.world_size;
  shape.nodes = ctx.node_count;
  shape.min_ranks_per_node = *std::min_element(per_node.begin(), per_node.end());
  shape.max_ranks_per_node = *std::max_element(per_node.begin(), per_node.end());
  return shape;
}

// The communicator the sweep runs on under `split`: `comm` itself for all, else this rank's node (intra) or local
// rank (inter) part of it. Collective over comm.
std::unique_ptr<Communicator> SplitCommunicator(Communicator& comm, const SplitPlan& split, const RankContext& ctx) {
  if (split.split == "intra") return comm.Split(ctx.node_index, ctx.local_rank);
  if (split.split == "inter") return comm.Split(ctx.local_rank, ctx.node_index);
  return nullptr;
}

// Past any useful batch, and far inside the int counters the timing loops keep.
constexpr int64_t kMaxIterations = 1 << 24;
// Operations in one NCCL group: older NCCL releases refused more than 2048 (their documented limit).
constexpr int64_t kMaxAggregate = 1024;

class CollectivesPhase : public Phase {
 public:
  explicit CollectivesPhase(const RankContext& ctx) : ctx_(ctx) {}
  std::string name() const override { return "collectives"; }
  std::string activity() const override { return "the collectives sweep"; }
  std::string usage() const override { return kUsage; }
  void AddOptions(po::options_description& options) override;
  std::vector<FlagRule> Rules() const override {
    return {Excludes("sizes", "minbytes"), Excludes("sizes", "maxbytes"), Excludes("sizes", "stepfactor"),
            Needs("root", "ops", {"broadcast", "reduce", "all"}),
            Needs("redop", "ops", {"all_reduce", "reduce", "reduce_scatter", "all"}),
            Needs("moe-tokens", "ops", {kMoeAllToAllOp}), Needs("moe-hidden", "ops", {kMoeAllToAllOp}),
            Needs("moe-top-k", "ops", {kMoeAllToAllOp}), Needs("moe-experts", "ops", {kMoeAllToAllOp}),
            Needs("moe-seed", "ops", {kMoeAllToAllOp})};
  }
  void Configure(CommandRun& run, const InjectionPlan& faults) override;
  PhaseResult Measure(CommandRun& run, Communicator& comm) override;

 private:
  // The moe_alltoall points, printed as they finish, into the report.
  MoeResult MeasureMoe(CommandRun& run, Communicator& comm);

  RankContext ctx_;
  CollectivesFlags f_;
  SweepOptions sweep_;
  std::optional<MoeOptions> moe_;  // when --ops names moe_alltoall
  InjectionPlan faults_;
};

void CollectivesPhase::AddOptions(po::options_description& options) {
  CollectivesFlags& f = f_;
  options.add_options()
      ("minbytes,b", po::value(&f.min_bytes)->default_value(f.min_bytes), "smallest size S in bytes")
      ("maxbytes,e", po::value(&f.max_bytes)->default_value(f.max_bytes), "largest size S in bytes")
      ("stepfactor,f", Number(&f.step_factor, IntRange::Between(2, 1 << 20))->default_value(f.step_factor), "multiply the size by this between steps")
      ("sizes", po::value(&f.sizes), "explicit comma-separated sizes instead of -b/-e/-f, e.g. 1K,64K,1M")
      ("ops", po::value(&f.ops)->default_value(f.ops),
       "comma-separated: all_reduce, all_gather, reduce_scatter, alltoall, broadcast, reduce, sendrecv, or all")
      ("dtype,d", Choice(&f.dtype, DataTypeAliases())->default_value(f.dtype),
       "element type: float, double, int32 (and half, bfloat16 on cuda), or an alias (fp32, fp64, int, fp16, bf16)")
      ("redop", Choice(&f.redop, {"sum", "avg", "max", "min"})->default_value(f.redop), "the reduction of all_reduce, reduce and reduce_scatter")
      ("root", Number(&f.root, IntRange::AtLeast(0))->default_value(f.root), "root rank of broadcast and reduce")
      ("iters,n", Number(&f.iters, IntRange::Between(1, kMaxIterations))->default_value(f.iters), "timed iterations per size")
      ("warmup,w", Number(&f.warmup, IntRange::Between(0, kMaxIterations))->default_value(f.warmup), "untimed warm-up iterations per size")
      ("check-iters,c", Number(&f.check_iters, IntRange::Between(0, kMaxIterations))->default_value(f.check_iters), "verified runs per size (0 = no check)")
      ("aggregate", Number(&f.aggregate, IntRange::Between(1, kMaxAggregate))->default_value(f.aggregate),
       "operations issued together per timed iteration (one NCCL group; nccl-tests' -m); time divided by N")
      ("cuda-graph", Number(&f.cuda_graph, IntRange::Between(0, kMaxIterations))->default_value(f.cuda_graph),
       "capture the timed batch into a CUDA graph and time N launches of it (nccl-tests' -G; cuda backend; 0 = off)")
      ("modes", po::value(&f.modes)->default_value(f.modes), "out-of-place, in-place, or both")
      ("split", Choice(&f.split, {"all", "intra", "inter"})->default_value(f.split),
       "all ranks on one communicator, every node's ranks on their own (intra), or one rank per node (inter)")
      ("moe-tokens", po::value(&f.moe.tokens)->value_name("LIST")->default_value(f.moe.tokens),
       "moe_alltoall: tokens per rank, a point per comma-separated value (4096, DeepEP's benchmark)")
      ("moe-hidden", Number(&f.moe.hidden, IntRange::Between(1, 1 << 20))->default_value(f.moe.hidden),
       "moe_alltoall: bf16 elements per token (7168, DeepSeek-V3's)")
      ("moe-top-k", Number(&f.moe.top_k, IntRange::Between(1, 1024))->default_value(f.moe.top_k),
       "moe_alltoall: distinct experts per token")
      ("moe-experts", Number(&f.moe.experts, IntRange::Between(0, 1 << 20))->default_value(f.moe.experts),
       "moe_alltoall: experts over every rank, a multiple of the ranks (0: 256 rounded down to one, as DeepEP's test)")
      ("moe-seed", Number(&f.moe.seed, IntRange::AtLeast(0))->default_value(f.moe.seed),
       "moe_alltoall: seed of the routing (the same routing on every rank and run)");
}

void CollectivesPhase::Configure(CommandRun& r, const InjectionPlan& faults) {
  // The MPI backend has no fp16/bf16: ask a (cheap) MPI communicator, as the sweep will use one.
  std::unique_ptr<Communicator> mpi = r.backend() == "mpi" ? r.MakeCommunicator() : nullptr;
  const SplitPlan split = PlanSplit(f_.split, ShapeOf(ctx_));
  sweep_ = ValidateCollectivesFlags(f_, split.ranks, mpi.get());
  sweep_.split = split;
  if (NamesMoeAllToAll(f_)) {
    moe_ = ValidateMoeFlags(f_.moe, ctx_.world_size, f_.split, r.backend() == "mpi");
    moe_->iters = sweep_.iters;
    moe_->warmup = sweep_.warmup;
    moe_->check_iters = sweep_.check_iters;
    moe_->node_of = GatherLaunchShape(ctx_).node;
  }
  CheckMemoryFits(r, SweepMemoryNeed(sweep_, moe_, ctx_, r.backend() == "nccl"));
  RecordConfig(r, sweep_);
  faults_ = faults;
}

PhaseResult CollectivesPhase::Measure(CommandRun& run, Communicator& world) {
  SweepOptions sweep = sweep_;
  std::unique_ptr<Communicator> part = SplitCommunicator(world, sweep.split, ctx_);
  Communicator& comm = part ? *part : world;
  sweep.across = part ? world.host_comm() : MPI_COMM_NULL;
  sweep.watchdog = &run.watchdog(&comm);
  const CommandRun::AbortTargetScope abort_target(run, comm);
  sweep.stop_requested = [&] { return run.StopRequested(); };
  const int rank = ctx_.world_rank;
  sweep.before_timed_batch = BothHooks(TestFaultHook(rank), SlowRankHook(faults_, rank));
  sweep.before_check = WrongValueHook(faults_, rank, sweep.type, sweep.reduce_op);

  Print(Format("# trainbench collectives: %d ranks on %d nodes, backend %s", ctx_.world_size, ctx_.node_count,
               run.backend().c_str()));
  const CollectiveDef* header_printed_for = nullptr;
  SweepResult result = RunSweep(comm, sweep, [&](const OpResult& op, const SizeResult& row) {
    if (header_printed_for != op.def) {
      for (const std::string& line : SweepHeaderLines(op, sweep)) Print(line);
      header_printed_for = op.def;
    }
    Print(SweepRowLine(row, op, sweep));
  });
  if (moe_ && result.complete) {
    const MoeResult moe = MeasureMoe(run, comm);
    result.wrong_total += moe.wrong_total;  // the footer's and the summary's count covers every check
    result.complete = moe.complete;
  }
  for (const std::string& line : SweepFooterLines(result)) Print(line, true);
  AddSweepToReport(run.report(), result, sweep);
  PhaseResult outcome;
  outcome.interrupted = !result.complete;
  if (result.complete && result.wrong_total > 0) {
    outcome.failure = std::to_string(result.wrong_total) + " elements failed verification (see the #wrong columns)";
  }
  return outcome;
}

MoeResult CollectivesPhase::MeasureMoe(CommandRun& run, Communicator& comm) {
  MoeOptions moe = *moe_;
  moe.watchdog = &run.watchdog(&comm);
  moe.stop_requested = [&] { return run.StopRequested(); };
  const int rank = ctx_.world_rank;
  moe.before_timed_batch = BothHooks(TestFaultHook(rank), SlowRankHook(faults_, rank));
  bool header_printed = false;
  MoeResult result = RunMoeAllToAll(comm, moe, [&](const MoePointResult& point) {
    if (!header_printed) {
      for (const std::string& line : MoeHeaderLines(moe, comm.size())) Print(line);
      header_printed = true;
    }
    Print(MoeRowLine(point));
  });
  AddMoeToReport(run.report(), result, moe, comm.size());
  return result;
}

}  // namespace

std::unique_ptr<Phase> MakeCollectivesPhase(const RankContext& ctx) { return std::make_unique<CollectivesPhase>(ctx); }

int RunCollectivesCommand(const CommandInput& input) {
  CollectivesPhase phase(input.ctx);
  return RunPhaseCommand(input, phase);
}

}  // namespace tb
