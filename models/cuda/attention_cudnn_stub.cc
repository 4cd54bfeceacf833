// MakeCudnnAttention in a CUDA build configured without the cuDNN C++ frontend headers (CUDNN_FRONTEND_INCLUDE_DIR
// not found): it throws, saying how to get them, and the caller falls back to the cuBLAS attention.
#include "cuda/attention.h"
#include "error.h"

namespace tb::gpu {

std::unique_ptr<Attention> MakeCudnnAttention(int, int, int, int, void*) {
  throw RuntimeError(
      "cuDNN fused attention is not available: this trainbench was built without the cuDNN frontend headers (run "
      "launch/setup, or configure with -DCUDNN_FRONTEND_INCLUDE_DIR=<folder holding cudnn_frontend.h>)");
}

}  // namespace tb::gpu
