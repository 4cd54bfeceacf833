// models/cuda/kernels.h for a build without CUDA: every launcher and device-memory call throws, naming itself,
// so that a caller learns why instead of finding zeros.
#include "cuda/kernels.h"

#include "nocuda/built_without_cuda.h"

namespace tb::gpu {

void EncoderForward(float*, const int32_t*, const float*, const float*, int, int, int, void*) {
  ThrowBuiltWithoutCuda("EncoderForward");
}

void EncoderBackward(float*, float*, const float*, const int32_t*, int, int, int, int, GradientWrite, void*) {
  ThrowBuiltWithoutCuda("EncoderBackward");
}

void PositionEmbeddingBackward(float*, const float*, int, int, int, int, GradientWrite, void*) {
  ThrowBuiltWithoutCuda("PositionEmbeddingBackward");
}

void LayerNormForward(float*, float*, float*, const float*, const float*, const float*, size_t, int, void*) {
  ThrowBuiltWithoutCuda("LayerNormForward");
}

void LayerNormForward(Bf16*, float*, float*, const float*, const float*, const float*, size_t, int, void*) {
  ThrowBuiltWithoutCuda("LayerNormForward");
}

void LayerNormBackward(float*, Bf16*, float*, float*, const float*, const float*, const float*, const float*,
                       const float*, size_t, int, GradientWrite, float*, void*) {
  ThrowBuiltWithoutCuda("LayerNormBackward");
}

void LayerNormBackward(float*, Bf16*, float*, float*, const Bf16*, const float*, const float*, const float*,
                       const float*, size_t, int, GradientWrite, float*, void*) {
  ThrowBuiltWithoutCuda("LayerNormBackward");
}

size_t LayerNormBackwardScratchFloats(size_t, int) { ThrowBuiltWithoutCuda("LayerNormBackwardScratchFloats"); }

void ColumnSum(float*, const Bf16*, size_t, int, GradientWrite, float*, void*) { ThrowBuiltWithoutCuda("ColumnSum"); }

size_t ColumnSumScratchFloats(size_t, int) { ThrowBuiltWithoutCuda("ColumnSumScratchFloats"); }

void BatchedBiasGelu(Bf16*, Bf16*, const Bf16*, size_t, int, int, void*) { ThrowBuiltWithoutCuda("BatchedBiasGelu"); }

void BatchedColumnSum(float*, const Bf16*, size_t, int, int, GradientWrite, void*) {
  ThrowBuiltWithoutCuda("BatchedColumnSum");
}

void ScaleFloats(float*, size_t, float, void*) { ThrowBuiltWithoutCuda("ScaleFloats"); }

void GeluForward(float*, const float*, size_t, void*) { ThrowBuiltWithoutCuda("GeluForward"); }

void GeluBackward(float*, const float*, size_t, void*) { ThrowBuiltWithoutCuda("GeluBackward"); }

void GeluBackward(Bf16*, const Bf16*, size_t, void*) { ThrowBuiltWithoutCuda("GeluBackward"); }

void ResidualAdd(float*, const float*, const float*, size_t, void*) { ThrowBuiltWithoutCuda("ResidualAdd"); }

void CastToBf16(Bf16*, const float*, size_t, void*) { ThrowBuiltWithoutCuda("CastToBf16"); }

void CrossEntropyForwardBackward(Bf16*, float*, float*, const float*, const int32_t*, size_t, int, int, float,
                                 void*) {
  ThrowBuiltWithoutCuda("CrossEntropyForwardBackward");
}

void CrossEntropyForwardBackward(float*, float*, float*, const float*, const int32_t*, size_t, int, int, float,
                                 void*) {
  ThrowBuiltWithoutCuda("CrossEntropyForwardBackward");
}

bool CrossEntropyReadsLogitsOnce(int) { ThrowBuiltWithoutCuda("CrossEntropyReadsLogitsOnce"); }

// Never constructed: the constructor throws before its members would be.
AdamWPlan::AdamWPlan(const std::vector<AdamWRange>&, size_t) : ranges_(0), blocks_(0), table_(0) {
  ThrowBuiltWithoutCuda("AdamWPlan");
}

void AdamWUpdate(float*, const float*, float*, float*, const AdamWPlan&, const AdamWConfig&, int64_t, void*, Bf16*) {
  ThrowBuiltWithoutCuda("AdamWUpdate");
}

DeviceMemory::DeviceMemory(size_t) { ThrowBuiltWithoutCuda("DeviceMemory"); }

// Never owns memory: the constructor always throws.
DeviceMemory::~DeviceMemory() = default;

DeviceMemory::DeviceMemory(DeviceMemory&&) noexcept = default;

DeviceMemory& DeviceMemory::operator=(DeviceMemory&&) noexcept = default;

void SynchronizeDevice() { ThrowBuiltWithoutCuda("SynchronizeDevice"); }

}  // namespace tb::gpu
