// Factory of the NCCL backend. In a build without CUDA it throws RuntimeError("... built without CUDA ...").
#pragma once

#include <mpi.h>

#include <memory>

#include "communicator.h"

namespace tb {

// Creates an NCCL communicator over the ranks of `mpi_comm` (unique id from rank 0 broadcast over MPI), on
// the current device (see BindGpu), with its own non-blocking stream. Collective over `mpi_comm`.
std::unique_ptr<Communicator> MakeNcclCommunicator(MPI_Comm mpi_comm);

}  // namespace tb
