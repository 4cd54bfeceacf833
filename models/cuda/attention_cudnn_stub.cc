// MakeCudnnAttention in a CUDA build configured without the cuDNN C++ frontend headers (CUDNN_FRONTEND_INCLUDE_DIR
// not found): it throws, saying how to get them, and the caller falls back to the cuBLAS attention.
#include <string>

#include "cuda/attention.h"
#include "error.h"

namespace tb::gpu {

std::unique_ptr<Attention> MakeCudnnAttention(int, int, int, int, void*, int) {
  throw RuntimeError(std::string("cuDNN fused attention is not available: this trainbench was ") +
                     kBuiltWithoutCudnnFrontend +
                     " (run launch/setup, or configure with -DCUDNN_FRONTEND_INCLUDE_DIR=<folder holding "
                     "cudnn_frontend.h>)");
}

}  // namespace tb::gpu
