// The NCCL backend in a build without CUDA: asking for it says why it is not there.
#include "error.h"
#include "nccl_communicator.h"

namespace tb {

std::unique_ptr<Communicator> MakeNcclCommunicator(MPI_Comm) {
  throw RuntimeError(
      "the NCCL communicator is part of the CUDA backend, and this trainbench was built without CUDA (reconfigure "
      "with -DTRAINBENCH_WITH_CUDA=ON on a machine with the CUDA toolkit, NCCL and cuDNN, or use --backend cpu)");
}

}  // namespace tb
