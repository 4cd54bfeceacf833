// models/cuda/moe_kernels.h and moe_layer.h for a build without CUDA: every launcher throws, naming itself.
#include "cuda/moe_kernels.h"
#include "cuda/moe_layer.h"

#include "nocuda/built_without_cuda.h"

namespace tb::gpu {

void MoeRouteLogits(float*, int*, float*, size_t, int, int, void*) { ThrowBuiltWithoutCuda("MoeRouteLogits"); }

void MoeAssignRows(int*, int*, int*, int*, const int*, size_t, int, int, long long, long long, void*) {
  ThrowBuiltWithoutCuda("MoeAssignRows");
}

void MoeGather(Bf16*, const Bf16*, const int*, size_t, int, int, void*) { ThrowBuiltWithoutCuda("MoeGather"); }

void MoeCombine(float*, const float*, const Bf16*, const int*, const float*, size_t, int, int, void*) {
  ThrowBuiltWithoutCuda("MoeCombine");
}

void MoeScatterRows(Bf16*, const Bf16*, const int*, size_t, int, void*) { ThrowBuiltWithoutCuda("MoeScatterRows"); }

void MoeGatherRows(Bf16*, const Bf16*, const int*, size_t, int, void*) { ThrowBuiltWithoutCuda("MoeGatherRows"); }

void MoeAuxLoss(float*, const float*, const int*, size_t, int, int, float, void*) {
  ThrowBuiltWithoutCuda("MoeAuxLoss");
}

void MoeCombineBackward(Bf16*, float*, const float*, const Bf16*, const int*, const float*, size_t, int, int, void*) {
  ThrowBuiltWithoutCuda("MoeCombineBackward");
}

void MoeRouterBackward(Bf16*, float*, const float*, const int*, const float*, const float*, const int*, size_t, int,
                       int, float, void*) {
  ThrowBuiltWithoutCuda("MoeRouterBackward");
}

void MoeScatterInputGrad(float*, const Bf16*, const Bf16*, const int*, size_t, int, int, void*) {
  ThrowBuiltWithoutCuda("MoeScatterInputGrad");
}

void MoeAccumulateStats(long long*, long long*, double*, const int*, const int*, const float*, int, void*) {
  ThrowBuiltWithoutCuda("MoeAccumulateStats");
}

MoeShape MoeShapeOf(const MoeConfig&, size_t, int, const MoeExperts*) { ThrowBuiltWithoutCuda("MoeShapeOf"); }

size_t PointMoeActivations(MoeLayerActivations&, char*, const MoeShape&) {
  ThrowBuiltWithoutCuda("PointMoeActivations");
}

size_t PointMoeScratch(MoeLayerScratch&, char*, const MoeShape&) { ThrowBuiltWithoutCuda("PointMoeScratch"); }

void MoeLayerForward(Gemm&, MoeLayerActivations&, const MoeLayerScratch&, float*, const float*, const Bf16*,
                     const MoeLayerWeights&, const MoeConfig&, size_t, int, void*, MoeExperts*) {
  ThrowBuiltWithoutCuda("MoeLayerForward");
}

void MoeLayerBackward(Gemm&, const MoeLayerScratch&, float*, const MoeLayerGradients&, const float*, float,
                      const Bf16*, const MoeLayerWeights&, const MoeLayerActivations&, const MoeConfig&, size_t, int,
                      GradientWrite, void*, MoeExperts*) {
  ThrowBuiltWithoutCuda("MoeLayerBackward");
}

}  // namespace tb::gpu
