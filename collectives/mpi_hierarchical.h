// The MPI backend's hierarchical all-reduce (Communicator::UseHierarchicalAllReduce): a ring reduce-scatter among the
// ranks of a node, a ring all-reduce (reduce-scatter, all-gather) of each rank's shard across the nodes (the ranks with
// the same local rank, one per node, all at once), a ring all-gather in the node, as NCCL's and Horovod's
// hierarchical algorithms do. Our own rings on MPI_Isend/MPI_Irecv, not MPI's collectives, whose algorithm changes
// with the rank count and with in-place buffers (Open MPI's non-blocking all-reduce is binomial below 4 ranks or in
// place): each rank sends 2(m-1)/m x S inside its node and 2(k-1)/k x S/m across nodes (m ranks per node, k nodes),
// the traffic the projection's model counts (results/analysis/projection.h). Non-blocking: each ring step starts
// when Test() or Wait() sees the previous one done; each pass is timed from its start to that moment, so that the
// operation's time splits into its intra-node passes and its inter-node ones (PendingOp::LinkSplit).
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

// Starts it; `send` may equal `recv` (in place). The buffers must stay untouched until it completes. `sequence`
// counts the operations started on these communicators (the same on every rank), so that those in flight at once
// keep their messages apart.
std::unique_ptr<PendingOp> StartHierarchicalAllReduce(const NodeCommunicators& comms, int sequence, const void* send,
                                                      void* recv, size_t count, DataType type, ReduceOp op);

}  // namespace tb
