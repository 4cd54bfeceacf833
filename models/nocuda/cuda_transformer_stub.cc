// MakeCudaTransformer for a build without CUDA: says so instead of returning a model that cannot run.
#include <memory>
#include <string>

#include "error.h"
#include "transformer.h"

namespace tb {

std::unique_ptr<Transformer> MakeCudaTransformer(const ModelConfig&, uint64_t, const CudaTransformerOptions&,
                                                 std::string*) {
  throw RuntimeError(
      "the CUDA transformer (MakeCudaTransformer) is part of the CUDA backend, and this trainbench was built without "
      "CUDA HINT: reconfigure with -DTRAINBENCH_WITH_CUDA=ON on a machine with the CUDA toolkit, NCCL and cuDNN, or "
      "run with --backend cpu");
}

}  // namespace tb
