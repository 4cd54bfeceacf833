// MakeCudaTensorParallelTransformer for a build without CUDA: says so instead of returning a model that cannot run.
#include <cstdint>
#include <memory>

#include "error.h"
#include "tensor_parallel.h"

namespace tb {

std::unique_ptr<Transformer> MakeCudaTensorParallelTransformer(const ModelConfig&, uint64_t, Communicator&,
                                                               const CudaTransformerOptions&) {
  throw RuntimeError(
      "the tensor-parallel CUDA transformer (MakeCudaTensorParallelTransformer) is part of the CUDA backend, and this "
      "trainbench was built without CUDA HINT: reconfigure with -DTRAINBENCH_WITH_CUDA=ON on a machine with the CUDA "
      "toolkit, NCCL and cuDNN, or run with --backend cpu");
}

}  // namespace tb
