// all_reduce: every rank ends with the reduction of all ranks' buffers. busbw factor 2(n-1)/n: a ring moves
// each byte out and back in, n-1 steps each way.
#include "collective.h"

namespace tb {
namespace {

double Factor(int n) { return 2.0 * (n - 1) / n; }

CollectiveCounts Counts(uint64_t bytes, size_t type_size, int, int) { return SingleBufferCounts(bytes, type_size); }

bool Expected(const CollectiveCounts&, int, int n, size_t i, ReduceOp op, int, double* value) {
  *value = ReduceInputs(i, n, op);
  return true;
}

void Run(Communicator& comm, const void* send, void* recv, const CollectiveCounts& c, DataType type, ReduceOp op, int) {
  comm.AllReduce(send, recv, c.op_count, type, op);
}

}  // namespace

const CollectiveDef kAllReduce = {"all_reduce", "2(n-1)/n", Factor, true, false, Counts, Expected, Run};

}  // namespace tb
