// MPI backend of the Communicator: host memory, blocking MPI collectives on a duplicate of the given
// communicator (so that our traffic never matches anybody else's).
#pragma once

#include <mpi.h>

#include <memory>

#include "communicator.h"

namespace tb {

std::unique_ptr<Communicator> MakeMpiCommunicator(MPI_Comm mpi_comm);

}  // namespace tb
