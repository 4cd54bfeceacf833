#include "sweep_options.h"

#include <algorithm>

#include "console.h"
#include "error.h"
#include "flags.h"
#include "units.h"

namespace tb {

namespace {

// -b/-e/-f as a geometric series, or --sizes as given.
std::vector<uint64_t> SweepSizes(const CollectivesFlags& f) {
  if (!f.sizes.empty()) return ParseSizeList(f.sizes, "--sizes");
  const uint64_t min = ParseSize(f.min_bytes, "-b/--minbytes");
  const uint64_t max = ParseSize(f.max_bytes, "-e/--maxbytes");
  if (max < min) throw InputError("-e/--maxbytes (" + f.max_bytes + ") is below -b/--minbytes (" + f.min_bytes + ")");
  std::vector<uint64_t> sizes;
  for (uint64_t s = min; s <= max; s = s * static_cast<uint64_t>(f.step_factor)) {
    sizes.push_back(s);
    if (s > max / static_cast<uint64_t>(f.step_factor)) break;
  }
  return sizes;
}

// --aggregate and --cuda-graph; the latter only where the communicator, when given, can capture.
void SetIssuing(const CollectivesFlags& f, const Communicator* comm, SweepOptions& o) {
  o.aggregate = f.aggregate;
  o.cuda_graph = f.cuda_graph;
  if (f.cuda_graph > 0 && comm && !comm->CanCapture()) {
    throw InputError(Format("--cuda-graph needs the NCCL backend: the %s backend's operations run on the host and "
                            "cannot be captured into a CUDA graph", comm->backend().c_str()));
  }
}

}  // namespace

SweepOptions ValidateCollectivesFlags(const CollectivesFlags& f, int n_ranks, const Communicator* comm) {
  SweepOptions o;
  o.sizes = SweepSizes(f);
  const std::vector<std::string> op_names = SplitFlagList(f.ops, "--ops");
  for (const std::string& name : op_names) {
    if (name == "all") {
      o.ops = AllCollectives();
      break;
    }
    if (name == kMoeAllToAllOp) continue;
    const CollectiveDef* def = &FindCollective(name, "--ops");
    if (std::find(o.ops.begin(), o.ops.end(), def) == o.ops.end()) o.ops.push_back(def);
  }
  o.type = ParseDataType(f.dtype, "-d/--dtype");
  if (comm && !comm->Supports(o.type)) {
    throw InputError("--dtype " + f.dtype + " needs the cuda backend: MPI has no " + DataTypeName(o.type) +
                     " reductions (use float, double or int32 on the cpu backend)");
  }
  const std::vector<std::string> redops = {"sum", "avg", "max", "min"};
  auto redop = std::find(redops.begin(), redops.end(), f.redop);
  if (redop == redops.end()) throw InputError("unknown reduction '" + f.redop + "' for --redop (accepted: " + JoinNames(redops) + ")");
  o.reduce_op = static_cast<ReduceOp>(redop - redops.begin());
  if (f.root < 0 || f.root >= n_ranks) {
    throw InputError("--root " + std::to_string(f.root) + " is not a rank of the communicator the sweep runs on (0.." + std::to_string(n_ranks - 1) + ")");
  }
  o.root = f.root;
  o.iters = f.iters;
  o.warmup = f.warmup;
  o.check_iters = f.check_iters;
  SetIssuing(f, comm, o);
  o.out_of_place = o.in_place = false;
  for (const std::string& mode : SplitFlagList(f.modes, "--modes")) {
    if (mode == "out-of-place") {
      o.out_of_place = true;
    } else if (mode == "in-place") {
      o.in_place = true;
    } else {
      throw InputError("unknown mode '" + mode + "' for --modes (accepted: out-of-place, in-place)");
    }
  }
  return o;
}

bool NamesMoeAllToAll(const CollectivesFlags& f) {
  const std::vector<std::string> names = SplitFlagList(f.ops, "--ops");
  return std::find(names.begin(), names.end(), kMoeAllToAllOp) != names.end();
}

SplitPlan PlanSplit(const std::string& split, const NodeShape& shape) {
  SplitPlan plan;
  plan.split = split;
  if (split == "all") {
    plan.ranks = shape.ranks;
    plan.nodes = shape.nodes;
    return plan;
  }
  if (split != "intra" && split != "inter") {
    throw InputError("unknown split '" + split + "' for --split (accepted: all, intra, inter)");
  }
  if (shape.min_ranks_per_node != shape.max_ranks_per_node) {
    throw InputError("--split " + split + " needs the same number of ranks on every node; this launch has " +
                     std::to_string(shape.min_ranks_per_node) + " to " + std::to_string(shape.max_ranks_per_node) +
                     " ranks per node");
  }
  const int per_node = shape.min_ranks_per_node;
  if (split == "intra") {
    if (per_node < 2) {
      throw InputError("--split intra needs at least 2 ranks per node; this launch has 1 on each of its " +
                       std::to_string(shape.nodes) + " nodes");
    }
    plan.communicators = shape.nodes;
    plan.ranks = per_node;
    plan.nodes = 1;
    return plan;
  }
  if (shape.nodes < 2) {
    throw InputError("--split inter needs ranks on at least 2 nodes; all " + std::to_string(shape.ranks) +
                     " ranks of this launch are on one node");
  }
  plan.communicators = per_node;
  plan.ranks = shape.nodes;
  plan.nodes = shape.nodes;
  return plan;
}

}  // namespace tb
