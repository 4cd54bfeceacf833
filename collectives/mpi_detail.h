// What the MPI backend's pieces share (mpi_communicator.cc, mpi_hierarchical.cc): the MPI type and operation of a
// DataType and ReduceOp, count checks, and ncclAvg's division on the host.
#pragma once

#include <mpi.h>

#include <cstddef>

#include "communicator.h"

namespace tb::mpi_detail {

MPI_Datatype MpiType(DataType type);  // throws InputError for fp16/bf16 (MPI has no such reductions)
MPI_Op MpiOp(ReduceOp op);            // avg is MPI_SUM, divided afterwards (DivideByRanks)
int MpiCount(size_t count);           // throws InputError past MPI's int counts
// ncclAvg semantics: divide the sum by the number of ranks (integer division for int32).
void DivideByRanks(void* data, size_t count, DataType type, int ranks);

}  // namespace tb::mpi_detail
