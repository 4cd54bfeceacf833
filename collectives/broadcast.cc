// broadcast: root's buffer copied to every rank. busbw factor 1 (a pipelined chain moves each byte once
// per link).
#include "collective.h"

namespace tb {
namespace {

CollectiveCounts Counts(uint64_t bytes, size_t type_size, int, int) { return SingleBufferCounts(bytes, type_size); }

ExpectedLayout Expected(const CollectiveCounts&, int, int n, ReduceOp, int root) { return CopyLayout(n, root); }

void Run(Communicator& comm, const void* send, void* recv, const CollectiveCounts& c, DataType type, ReduceOp, int root) {
  comm.Broadcast(send, recv, c.op_count, type, root);
}


}  // namespace

const CollectiveDef kBroadcast = {"broadcast", "1", FactorOne, false, true, Counts, Expected, Run};

}  // namespace tb
