// sendrecv: a ring shift, as nccl-tests runs it: every rank sends its buffer to rank+1 and receives from
// rank-1, all at once. busbw factor 1.
#include "collective.h"

namespace tb {
namespace {

CollectiveCounts Counts(uint64_t bytes, size_t type_size, int, int) { return SingleBufferCounts(bytes, type_size); }

ExpectedLayout Expected(const CollectiveCounts&, int rank, int n, ReduceOp, int) { return CopyLayout(n, (rank + n - 1) % n); }

void Run(Communicator& comm, const void* send, void* recv, const CollectiveCounts& c, DataType type, ReduceOp, int) {
  const int n = comm.size();
  comm.SendRecv(send, (comm.rank() + 1) % n, recv, (comm.rank() + n - 1) % n, c.op_count, type);
}


}  // namespace

const CollectiveDef kSendRecv = {"sendrecv", "1", FactorOne, false, false, Counts, Expected, Run};

}  // namespace tb
