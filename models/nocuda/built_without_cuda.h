// The one error every CUDA-backend stub throws in a build without CUDA, naming the function that was called.
#pragma once

#include <string>

#include "error.h"

namespace tb::gpu {

[[noreturn]] inline void ThrowBuiltWithoutCuda(const char* function) {
  throw RuntimeError(std::string("tb::gpu::") + function +
                     " is part of the CUDA backend, and this trainbench was built without CUDA (reconfigure with "
                     "-DTRAINBENCH_WITH_CUDA=ON on a machine with the CUDA toolkit, NCCL and cuDNN)");
}

}  // namespace tb::gpu
