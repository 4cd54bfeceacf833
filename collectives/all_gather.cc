// all_gather: every rank contributes one block; every rank ends with all n blocks in rank order.
// S is the gathered (total) size; busbw factor (n-1)/n.
#include "collective.h"

namespace tb {
namespace {

CollectiveCounts Counts(uint64_t bytes, size_t type_size, int n, int rank) {
  CollectiveCounts c;
  c.op_count = bytes / type_size / n;  // elements each rank contributes
  c.send_elements = c.op_count;
  c.recv_elements = c.op_count * n;
  c.size_bytes = c.recv_elements * type_size;
  c.in_place_send_offset = static_cast<size_t>(rank) * c.op_count;
  return c;
}

ExpectedLayout Expected(const CollectiveCounts& c, int, int n, ReduceOp, int) { return BlocksLayout(n, c.op_count); }

void Run(Communicator& comm, const void* send, void* recv, const CollectiveCounts& c, DataType type, ReduceOp, int) {
  comm.AllGather(send, recv, c.op_count, type);
}


}  // namespace

const CollectiveDef kAllGather = {"all_gather", "(n-1)/n", FactorNMinusOneOverN, false, false, Counts, Expected, Run};

}  // namespace tb
