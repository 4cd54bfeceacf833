// reduce: the reduction of all ranks' buffers, on root only. busbw factor 1.
#include "collective.h"

namespace tb {
namespace {

CollectiveCounts Counts(uint64_t bytes, size_t type_size, int, int) { return SingleBufferCounts(bytes, type_size); }

ExpectedLayout Expected(const CollectiveCounts&, int rank, int n, ReduceOp op, int root) {
  if (rank != root) return {};  // other ranks' receive buffers are not defined
  return ReductionLayout(n, op);
}

void Run(Communicator& comm, const void* send, void* recv, const CollectiveCounts& c, DataType type, ReduceOp op, int root) {
  comm.Reduce(send, recv, c.op_count, type, op, root);
}

}  // namespace

const CollectiveDef kReduce = {"reduce", "1", FactorOne, true, true, Counts, Expected, Run};

}  // namespace tb
