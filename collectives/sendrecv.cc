// sendrecv: a ring shift, as nccl-tests runs it: every rank sends its buffer to rank+1 and receives from
// rank-1, all at once. busbw factor 1.
#include "collective.h"

namespace tb {
namespace {

CollectiveCounts Counts(uint64_t bytes, size_t type_size, int, int) { return SingleBufferCounts(bytes, type_size); }

bool Expected(const CollectiveCounts&, int rank, int n, size_t i, ReduceOp, int, double* value) {
  *value = InputValue((rank + n - 1) % n, i);
  return true;
}

void Run(Communicator& comm, const void* send, void* recv, const CollectiveCounts& c, DataType type, ReduceOp, int) {
  const int n = comm.size();
  comm.SendRecv(send, (comm.rank() + 1) % n, recv, (comm.rank() + n - 1) % n, c.op_count, type);
}

int Source(const CollectiveCounts&, int rank, int n, size_t, int) { return (rank + n - 1) % n; }

}  // namespace

const CollectiveDef kSendRecv = {"sendrecv", "1", FactorOne, false, false, Counts, Expected, Run, Source};

}  // namespace tb
