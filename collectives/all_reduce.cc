// all_reduce: every rank ends with the reduction of all ranks' buffers. busbw factor 2(n-1)/n
// (AllReduceBusFactor, definitions.h).
#include "collective.h"
#include "definitions.h"

namespace tb {
namespace {

CollectiveCounts Counts(uint64_t bytes, size_t type_size, int, int) { return SingleBufferCounts(bytes, type_size); }

ExpectedLayout Expected(const CollectiveCounts&, int, int n, ReduceOp op, int) { return ReductionLayout(n, op); }

void Run(Communicator& comm, const void* send, void* recv, const CollectiveCounts& c, DataType type, ReduceOp op, int) {
  comm.AllReduce(send, recv, c.op_count, type, op);
}

}  // namespace

const CollectiveDef kAllReduce = {"all_reduce", "2(n-1)/n", AllReduceBusFactor, true, false, Counts, Expected, Run};

}  // namespace tb
