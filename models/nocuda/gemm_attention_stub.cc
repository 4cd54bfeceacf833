// models/cuda/gemm.h and attention.h for a build without CUDA: constructing a Gemm or an Attention throws,
// naming itself, so that a caller learns why instead of finding zeros.
#include "cuda/attention.h"
#include "cuda/gemm.h"
#include "nocuda/built_without_cuda.h"

namespace tb::gpu {

// Never constructed: the constructor throws. Complete so that ~Gemm can destroy the (always empty) pointer.
struct Gemm::Impl {};

Gemm::Gemm(void*) { ThrowBuiltWithoutCuda("Gemm"); }

Gemm::~Gemm() = default;

void Gemm::LinearForward(Bf16*, Bf16*, const Bf16*, const Bf16*, const Bf16*, size_t, int, int) {
  ThrowBuiltWithoutCuda("Gemm::LinearForward");
}

void Gemm::LinearForwardFloat(float*, const float*, const Bf16*, const Bf16*, const float*, size_t, int, int) {
  ThrowBuiltWithoutCuda("Gemm::LinearForwardFloat");
}

bool Gemm::LinearBackwardInput(Bf16*, const Bf16*, const Bf16*, const Bf16*, size_t, int, int, float*) {
  ThrowBuiltWithoutCuda("Gemm::LinearBackwardInput");
}

void Gemm::BatchedLinearForward(Bf16*, Bf16*, const Bf16*, const Bf16*, const Bf16*, size_t, int, int, int) {
  ThrowBuiltWithoutCuda("Gemm::BatchedLinearForward");
}

void Gemm::BatchedLinearBackwardInput(Bf16*, const Bf16*, const Bf16*, const Bf16*, size_t, int, int, int) {
  ThrowBuiltWithoutCuda("Gemm::BatchedLinearBackwardInput");
}

void Gemm::BatchedLinearBackwardWeights(float*, float*, const Bf16*, const Bf16*, size_t, int, int, int,
                                        GradientWrite) {
  ThrowBuiltWithoutCuda("Gemm::BatchedLinearBackwardWeights");
}

void Gemm::LinearBackwardWeights(float*, float*, const Bf16*, const Bf16*, size_t, int, int, GradientWrite) {
  ThrowBuiltWithoutCuda("Gemm::LinearBackwardWeights");
}

void Gemm::set_fused_bias_gradients(bool) { ThrowBuiltWithoutCuda("Gemm::set_fused_bias_gradients"); }

size_t Gemm::fused_bias_gradients() const { ThrowBuiltWithoutCuda("Gemm::fused_bias_gradients"); }

void Gemm::set_autotune(bool) { ThrowBuiltWithoutCuda("Gemm::set_autotune"); }

std::vector<KernelChoice> Gemm::kernel_choices() const { ThrowBuiltWithoutCuda("Gemm::kernel_choices"); }

std::unique_ptr<Attention> MakeCudnnAttention(int, int, int, int, void*, int) {
  ThrowBuiltWithoutCuda("MakeCudnnAttention");
}

std::unique_ptr<Attention> MakeCublasAttention(int, int, int, int, void*) {
  ThrowBuiltWithoutCuda("MakeCublasAttention");
}

}  // namespace tb::gpu
