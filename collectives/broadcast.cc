// broadcast: root's buffer copied to every rank. busbw factor 1 (a pipelined chain moves each byte once
// per link).
#include "collective.h"

namespace tb {
namespace {

CollectiveCounts Counts(uint64_t bytes, size_t type_size, int, int) { return SingleBufferCounts(bytes, type_size); }

bool Expected(const CollectiveCounts&, int, int, size_t i, ReduceOp, int root, double* value) {
  *value = InputValue(root, i);
  return true;
}

void Run(Communicator& comm, const void* send, void* recv, const CollectiveCounts& c, DataType type, ReduceOp, int root) {
  comm.Broadcast(send, recv, c.op_count, type, root);
}

int Source(const CollectiveCounts&, int, int, size_t, int root) { return root; }

}  // namespace

const CollectiveDef kBroadcast = {"broadcast", "1", FactorOne, false, true, Counts, Expected, Run, Source};

}  // namespace tb
