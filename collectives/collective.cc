#include "collective.h"

#include "error.h"
#include "moe_alltoall.h"

namespace tb {

const std::vector<const CollectiveDef*>& AllCollectives() {
  static const std::vector<const CollectiveDef*> all = {&kAllReduce, &kAllGather, &kReduceScatter, &kAllToAll,
                                                        &kBroadcast, &kReduce,    &kSendRecv};
  return all;
}

bool HasPerNicRate(const CollectiveDef& def) { return &def == &kAllReduce || &def == &kReduceScatter || &def == &kAllGather; }

const CollectiveDef& FindCollective(const std::string& name, const std::string& flag) {
  std::string accepted;
  for (const CollectiveDef* def : AllCollectives()) {
    if (name == def->name) return *def;
    accepted += (accepted.empty() ? "" : ", ") + std::string(def->name);
  }
  throw InputError("unknown operation '" + name + "' for " + flag + " (accepted: " + accepted + ", " + kMoeAllToAllOp +
                   ", all)");
}

CollectiveCounts SingleBufferCounts(uint64_t requested_bytes, size_t type_size) {
  CollectiveCounts c;
  c.op_count = requested_bytes / type_size;
  c.send_elements = c.recv_elements = c.op_count;
  c.size_bytes = c.op_count * type_size;
  return c;
}

double FactorOne(int) { return 1.0; }
double FactorNMinusOneOverN(int n) { return static_cast<double>(n - 1) / n; }

}  // namespace tb
