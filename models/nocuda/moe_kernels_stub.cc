// models/cuda/moe_kernels.h for a build without CUDA: every launcher throws, naming itself.
#include "cuda/moe_kernels.h"

#include "nocuda/built_without_cuda.h"

namespace tb::gpu {

void MoeRouteLogits(float*, int*, float*, size_t, int, int, void*) { ThrowBuiltWithoutCuda("MoeRouteLogits"); }

void MoeAssignRows(int*, int*, int*, int*, const int*, size_t, int, int, long long, void*) {
  ThrowBuiltWithoutCuda("MoeAssignRows");
}

void MoeGather(Bf16*, const Bf16*, const int*, size_t, int, int, void*) { ThrowBuiltWithoutCuda("MoeGather"); }

void MoeCombine(float*, const float*, const Bf16*, const int*, const float*, size_t, int, int, void*) {
  ThrowBuiltWithoutCuda("MoeCombine");
}

}  // namespace tb::gpu
