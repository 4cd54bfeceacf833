// `trainbench p2p`: bandwidth and latency of every rank pair as n x n matrices; weak pairs flagged by host
// and device.
#include "cli.h"
#include "commands.h"
#include "console.h"
#include "error.h"
#include "fault.h"
#include "injecting_communicator.h"
#include "injection.h"
#include "log.h"
#include "p2p.h"
#include "phase.h"
#include "scaling_plan.h"
#include "units.h"

namespace tb {
namespace {

constexpr const char* kUsage =
    "usage: [mpirun -np N] trainbench p2p [--size BYTES] [-n ITERS] [--latency-size BYTES] [--threshold F] [-o FILE]\n"
    "Measures, one pair at a time, unidirectional (sender -> receiver) and bidirectional bandwidth at --size and\n"
    "the latency of a small message (half the round trip); flags pairs below --threshold x the median (GB = 1e9 B).";

struct P2pFlags {
  std::string size = "32M";
  int iters = 10;
  int warmup = 2;
  std::string latency_size = "8";
  int latency_iters = 100;
  double threshold = 0.8;
};

// A send and a receive buffer of the larger message size per rank, on the device (nccl) or the host.
MemoryNeed P2pMemoryNeed(const P2pOptions& o, bool nccl) {
  const double buffers = 2.0 * static_cast<double>(std::max(o.size_bytes, o.latency_bytes));
  MemoryNeed need;
  need.lower = "--size";
  (nccl ? need.device_bytes : need.host_bytes) = buffers;
  need.device_parts = need.host_parts = "a send and a receive buffer of --size";
  return need;
}

class P2pPhase : public Phase {
 public:
  explicit P2pPhase(const RankContext& ctx) : ctx_(ctx) {}
  std::string name() const override { return "p2p"; }
  std::string activity() const override { return "the p2p measurement"; }
  std::string usage() const override { return kUsage; }
  void AddOptions(po::options_description& options) override;
  void Configure(CommandRun& run, const InjectionPlan& faults) override;
  PhaseResult Measure(CommandRun& run, Communicator& comm) override;

 private:
  RankContext ctx_;
  P2pFlags f_;
  P2pOptions p2p_;
};

void P2pPhase::AddOptions(po::options_description& options) {
  P2pFlags& f = f_;
  options.add_options()
      ("size", po::value(&f.size)->default_value(f.size), "message size for the bandwidth matrices (multiple of 4 B)")
      ("iters,n", Number(&f.iters, IntRange::Between(1, 1 << 24))->default_value(f.iters), "timed messages per pair and direction")
      ("warmup,w", Number(&f.warmup, IntRange::Between(0, 1 << 24))->default_value(f.warmup), "untimed messages before each timed loop")
      ("latency-size", po::value(&f.latency_size)->default_value(f.latency_size), "message size for latency")
      ("latency-iters", Number(&f.latency_iters, IntRange::Between(1, 1 << 24))->default_value(f.latency_iters), "timed round trips per pair")
      ("threshold", Number(&f.threshold, RealRange::AboveUpTo(0, 1))->default_value(f.threshold),
       "flag pairs whose bandwidth is below this fraction of the median");
}

void P2pPhase::Configure(CommandRun& r, const InjectionPlan&) {
  p2p_.size_bytes = ParseSize(f_.size, "--size");
  p2p_.latency_bytes = ParseSize(f_.latency_size, "--latency-size");
  p2p_.iters = f_.iters;
  p2p_.warmup = f_.warmup;
  p2p_.latency_iters = f_.latency_iters;
  p2p_.threshold_fraction = f_.threshold;
  ValidateP2pOptions(p2p_);
  CheckMemoryFits(r, P2pMemoryNeed(p2p_, r.backend() == "nccl"));
}

PhaseResult P2pPhase::Measure(CommandRun& run, Communicator& comm) {
  P2pOptions p2p = p2p_;
  p2p.watchdog = &run.watchdog(&comm);
  p2p.stop_requested = [&] { return run.StopRequested(); };
  p2p.rank_nodes = GatherLaunchShape(ctx_).node;
  MaybeInjectFault(ctx_.world_rank);
  Print(Format("# trainbench p2p: %d ranks on %d nodes, backend %s", ctx_.world_size, ctx_.node_count,
               run.backend().c_str()));
  P2pResult result = RunP2p(comm, p2p);
  std::vector<std::string> hosts, gpus;
  for (const RankTopology& r : run.topology().ranks) {
    hosts.push_back(r.host);
    gpus.push_back(r.gpu.index >= 0 ? r.gpu.name + " #" + std::to_string(r.gpu.index) + " " + r.gpu.pci_bus_id : "cpu");
  }
  if (ctx_.world_rank == 0) {
    for (const std::string& line : FormatP2p(result, p2p, hosts, gpus)) Print(line, line.rfind("# Weak links", 0) == 0);
    AddP2pToReport(schema::GroupOf(run.report().root, schema::kP2p), result, p2p, hosts, gpus);
    Group& summary = schema::GroupOf(run.report().root, schema::kSummary);
    schema::Set(summary, schema::summary::p2p_median_uni_GBps, result.median_uni_GBps);
    schema::Set(summary, schema::summary::p2p_flagged_pairs, static_cast<int64_t>(result.flagged.size()));
  }
  return {!result.complete, ""};
}

}  // namespace

std::unique_ptr<Phase> MakeP2pPhase(const RankContext& ctx) { return std::make_unique<P2pPhase>(ctx); }

int RunP2pCommand(const CommandInput& input) {
  P2pPhase phase(input.ctx);
  return RunPhaseCommand(input, phase);
}

}  // namespace tb
