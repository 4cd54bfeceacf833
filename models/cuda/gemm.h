// The CUDA transformer's linear layers through cuBLASLt: bf16 operands, fp32 accumulation (CUBLAS_COMPUTE_32F),
// fused epilogues where they save a pass over memory (bias, GELU with the pre-activation kept, GELU gradient).
// Shapes and accumulate rules are those of cpu::MatmulForward / cpu::MatmulBackward: row-major, N = rows
// (tokens), weights (OC, IC) as nn.Linear stores them. CUDA-free header: pointers are device pointers, the stream
// is a cudaStream_t passed as void*. Each distinct shape's matmul plan (descriptors, layouts, the heuristic's
// algorithm) is built once and cached. Every cuBLASLt call is checked and throws RuntimeError with cuBLAS's
// status. Implemented by models/cuda/gemm.cu, or by a stub that throws "built without CUDA".
#pragma once

#include <cstddef>
#include <memory>

#include "cuda/kernels.h"

namespace tb::gpu {

class Gemm {
 public:
  // All work goes to `stream`; owns a cuBLASLt handle and its workspace.
  explicit Gemm(void* stream);
  ~Gemm();
  Gemm(const Gemm&) = delete;
  Gemm& operator=(const Gemm&) = delete;

  // out (N, OC) = in (N, IC) · weightᵀ + bias (OC; null: none). With pre_gelu non-null, pre_gelu (N, OC) keeps
  // that value and out = Gelu(pre_gelu), the tanh approximation of element::Gelu (the GELU_AUX_BIAS epilogue).
  void LinearForward(Bf16* out, Bf16* pre_gelu, const Bf16* in, const Bf16* weight, const Bf16* bias, size_t rows,
                     int in_features, int out_features);
  // out (N, OC) fp32 = residual (N, OC) fp32 + in · weightᵀ + bias (fp32, OC). residual and bias may be null;
  // out may alias residual. For the projections that write into the fp32 residual stream, and for the LM head's
  // fp32 logits (no residual, no bias).
  void LinearForwardFloat(float* out, const float* residual, const Bf16* in, const Bf16* weight, const float* bias,
                          size_t rows, int in_features, int out_features);
  // in_grad (N, IC) = out_grad (N, OC) · weight, overwritten. With gelu_pre non-null (N, IC): in_grad *=
  // GeluGrad(gelu_pre), for a layer whose input was Gelu(gelu_pre) (the DGELU epilogue).
  void LinearBackwardInput(Bf16* in_grad, const Bf16* out_grad, const Bf16* weight, const Bf16* gelu_pre,
                           size_t rows, int in_features, int out_features);
  // weight_grad (OC, IC) fp32 += out_gradᵀ · in; bias_grad (OC) fp32 += column sums of out_grad (null: no bias).
  void LinearBackwardWeights(float* weight_grad, float* bias_grad, const Bf16* out_grad, const Bf16* in,
                             size_t rows, int in_features, int out_features);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace tb::gpu
