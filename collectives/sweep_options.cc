#include "sweep_options.h"

#include <algorithm>

#include "error.h"
#include "units.h"

namespace tb {

SweepOptions ValidateCollectivesFlags(const CollectivesFlags& f, int n_ranks, const Communicator* comm) {
  SweepOptions o;
  if (!f.sizes.empty()) {
    o.sizes = ParseSizeList(f.sizes, "--sizes");
    for (uint64_t s : o.sizes) {
      if (s == 0) throw InputError("invalid size 0 in --sizes: sizes must be at least 1 byte");
    }
  } else {
    uint64_t min = ParseSize(f.min_bytes, "-b/--minbytes");
    uint64_t max = ParseSize(f.max_bytes, "-e/--maxbytes");
    if (min == 0) throw InputError("-b/--minbytes must be at least 1 byte");
    if (max < min) {
      throw InputError("-e/--maxbytes (" + f.max_bytes + ") is below -b/--minbytes (" + f.min_bytes + ")");
    }
    if (f.step_factor < 2) throw InputError("-f/--stepfactor must be an integer >= 2 (got " + std::to_string(f.step_factor) + ")");
    for (uint64_t s = min; s <= max; s = s * static_cast<uint64_t>(f.step_factor)) {
      o.sizes.push_back(s);
      if (s > max / static_cast<uint64_t>(f.step_factor)) break;
    }
  }
  std::vector<std::string> op_names = SplitList(f.ops);
  if (op_names.empty()) throw InputError("--ops is empty (accepted: all_reduce, all_gather, reduce_scatter, alltoall, broadcast, reduce, sendrecv, all)");
  for (const std::string& name : op_names) {
    if (name == "all") {
      o.ops = AllCollectives();
      break;
    }
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
    throw InputError("--root " + std::to_string(f.root) + " is not a rank of this launch (0.." + std::to_string(n_ranks - 1) + ")");
  }
  o.root = f.root;
  if (f.iters < 1) throw InputError("-n/--iters must be at least 1 (got " + std::to_string(f.iters) + ")");
  if (f.warmup < 0) throw InputError("-w/--warmup must be >= 0 (got " + std::to_string(f.warmup) + ")");
  if (f.check_iters < 0) throw InputError("-c/--check-iters must be >= 0 (got " + std::to_string(f.check_iters) + ")");
  o.iters = f.iters;
  o.warmup = f.warmup;
  o.check_iters = f.check_iters;
  o.out_of_place = o.in_place = false;
  for (const std::string& mode : SplitList(f.modes)) {
    if (mode == "out-of-place") {
      o.out_of_place = true;
    } else if (mode == "in-place") {
      o.in_place = true;
    } else {
      throw InputError("unknown mode '" + mode + "' for --modes (accepted: out-of-place, in-place)");
    }
  }
  if (!o.out_of_place && !o.in_place) throw InputError("--modes is empty (accepted: out-of-place, in-place)");
  return o;
}

}  // namespace tb
