// reduce_scatter: the reduction of all ranks' buffers, with block r of the result left on rank r.
// S is the full (input) size; busbw factor (n-1)/n.
#include "collective.h"

namespace tb {
namespace {

CollectiveCounts Counts(uint64_t bytes, size_t type_size, int n, int rank) {
  CollectiveCounts c;
  c.op_count = bytes / type_size / n;  // elements each rank receives
  c.send_elements = c.op_count * n;
  c.recv_elements = c.op_count;
  c.size_bytes = c.send_elements * type_size;
  c.in_place_recv_offset = static_cast<size_t>(rank) * c.op_count;
  return c;
}

ExpectedLayout Expected(const CollectiveCounts& c, int rank, int n, ReduceOp op, int) {
  return ReductionLayout(n, op, static_cast<uint64_t>(rank) * c.op_count);  // block `rank` of the reduction
}

void Run(Communicator& comm, const void* send, void* recv, const CollectiveCounts& c, DataType type, ReduceOp op, int) {
  comm.ReduceScatter(send, recv, c.op_count, type, op);
}

}  // namespace

const CollectiveDef kReduceScatter = {"reduce_scatter", "(n-1)/n", FactorNMinusOneOverN, true, false, Counts, Expected, Run};

}  // namespace tb
