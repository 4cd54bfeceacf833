// alltoall: rank r sends block p of its buffer to rank p and receives rank p's block r into block p.
// S is the whole per-rank buffer; busbw factor (n-1)/n (the block to itself does not cross a link).
#include "collective.h"

namespace tb {
namespace {

CollectiveCounts Counts(uint64_t bytes, size_t type_size, int n, int) {
  CollectiveCounts c;
  c.op_count = bytes / type_size / n;  // elements to each peer
  c.send_elements = c.recv_elements = c.op_count * n;
  c.size_bytes = c.send_elements * type_size;
  return c;
}

// Block p holds peer p's block `rank`.
ExpectedLayout Expected(const CollectiveCounts& c, int rank, int n, ReduceOp, int) {
  return BlocksLayout(n, c.op_count, static_cast<uint64_t>(rank) * c.op_count);
}

void Run(Communicator& comm, const void* send, void* recv, const CollectiveCounts& c, DataType type, ReduceOp, int) {
  comm.AllToAll(send, recv, c.op_count, type);
}


}  // namespace

const CollectiveDef kAllToAll = {"alltoall", "(n-1)/n", FactorNMinusOneOverN, false, false, Counts, Expected, Run};

}  // namespace tb
