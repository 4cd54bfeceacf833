// The MPI backend's hierarchical all-reduce (Communicator::UseHierarchicalAllReduce): reduce-scatter among the ranks
// of a node, all-reduce of each rank's shard across the nodes (the ranks with the same local rank, one per node, all
// at once), all-gather in the node, as NCCL's and Horovod's hierarchical algorithms do. Each rank sends
// 2(m-1)/m x S inside its node and 2(k-1)/k x S/m across nodes (m ranks per node, k nodes): the traffic the
// projection's model counts (results/analysis/projection.h). Non-blocking: each step starts when Test() or Wait()
// sees the previous one done, and is timed from its start to that moment, so that the operation's time splits into
// its intra-node steps and its inter-node step (PendingOp::LinkSplit).
#pragma once

#include <mpi.h>

#include <memory>

#include "communicator.h"

namespace tb {

struct NodeCommunicators {
  MPI_Comm node = MPI_COMM_NULL;    // this rank's node: local_size ranks
  MPI_Comm across = MPI_COMM_NULL;  // the ranks with this rank's local rank, one per node
  int local_rank = 0;
  int local_size = 1;
  int ranks = 1;                    // of the whole communicator (the divisor of an average)
};

// Starts the three steps; `send` may equal `recv` (in place). The buffers must stay untouched until it completes.
std::unique_ptr<PendingOp> StartHierarchicalAllReduce(const NodeCommunicators& comms, const void* send, void* recv,
                                                      size_t count, DataType type, ReduceOp op);

}  // namespace tb
