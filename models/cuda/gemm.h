// The CUDA transformer's linear layers through cuBLASLt: bf16 operands, fp32 accumulation (CUBLAS_COMPUTE_32F),
// fused epilogues where they save a pass over memory (bias, GELU with the pre-activation kept, GELU gradient).
// Shapes and accumulate rules are those of cpu::MatmulForward / cpu::MatmulBackward: row-major, N = rows
// (tokens), weights (OC, IC) as nn.Linear stores them. CUDA-free header: pointers are device pointers, the stream
// is a cudaStream_t passed as void*. Each distinct shape's matmul plan (descriptors, layouts, its algorithm, chosen
// on first use by timing cuBLASLt's candidates) is built once and cached. Every cuBLASLt call is checked and throws
// RuntimeError with cuBLAS's status. Implemented by models/cuda/gemm.cu, or by a stub that throws "built without
// CUDA".
#pragma once

#include <cstddef>
#include <memory>
#include <vector>

#include "cuda/kernels.h"
#include "transformer.h"

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
  // GeluGrad(gelu_pre), for a layer whose input was Gelu(gelu_pre) (the DGELU epilogue). With gelu_bias_grad non-null
  // too: that layer's bias gradient (IC, fp32), the column sums of the (fp32, before rounding) in_grad, written over
  // gelu_bias_grad by the DGELU_BGRAD epilogue where cuBLASLt has an algorithm for it (and bias gradient epilogues
  // are allowed, 16-byte aligned); returns whether it did. When it returns false, nothing was written there: the
  // caller sums the bias gradient itself (LinearBackwardWeights' bias_grad).
  bool LinearBackwardInput(Bf16* in_grad, const Bf16* out_grad, const Bf16* weight, const Bf16* gelu_pre,
                           size_t rows, int in_features, int out_features, float* gelu_bias_grad = nullptr);
  // weight_grad (OC, IC) fp32 = (kOverwrite: beta 0) or += (kAccumulate: beta 1) out_gradᵀ · in; bias_grad (OC)
  // fp32 = or += the column sums of out_grad (null: no bias). Overwriting, the bias gradient comes from the GEMM's
  // BGRADB epilogue where cuBLASLt has an algorithm for it (bias_grad 16-byte aligned, epilogues allowed); otherwise,
  // and when accumulating (the epilogue only writes), from gpu::ColumnSum (fixed order: the same bits every run).
  void LinearBackwardWeights(float* weight_grad, float* bias_grad, const Bf16* out_grad, const Bf16* in,
                             size_t rows, int in_features, int out_features, GradientWrite write);

  // Strided-batched: `batch` linear layers of one shape, each on its own block of `rows` rows (a mixture of
  // experts' experts, each on its capacity of rows), as one cuBLASLt matmul (CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT) per
  // call. Layer b's tensors are the b-th of each argument's blocks: in + b·rows·IC, weight + b·OC·IC, bias + b·OC,
  // out and pre_gelu + b·rows·OC (and likewise in the backward). Contracts as the unbatched calls above, with bf16
  // biases: the bias and GELU come from the epilogues where cuBLASLt has a batched algorithm with them, otherwise from
  // BatchedBiasGelu / GeluBackward after a plain batched product (one more pass; pre_gelu then holds the rounded
  // pre-activation). Bias gradients always from BatchedColumnSum.
  void BatchedLinearForward(Bf16* out, Bf16* pre_gelu, const Bf16* in, const Bf16* weight, const Bf16* bias,
                            size_t rows, int in_features, int out_features, int batch);
  void BatchedLinearBackwardInput(Bf16* in_grad, const Bf16* out_grad, const Bf16* weight, const Bf16* gelu_pre,
                                  size_t rows, int in_features, int out_features, int batch);
  void BatchedLinearBackwardWeights(float* weight_grad, float* bias_grad, const Bf16* out_grad, const Bf16* in,
                                    size_t rows, int in_features, int out_features, int batch, GradientWrite write);

  // Whether bias gradients may come from cuBLASLt's epilogues (BGRADB, DGELU_BGRAD; the default) or always from
  // ColumnSum (for comparing the two); and how many bias gradients the epilogues have written so far.
  void set_fused_bias_gradients(bool allowed);
  size_t fused_bias_gradients() const;

  // Whether a new plan times up to 8 of cuBLASLt's candidate algorithms and keeps the fastest (the default, unless
  // the environment has TRAINBENCH_AUTOTUNE=0) or keeps the heuristic's first (for comparison). Applies to plans
  // built after the call. The timing writes scratch outputs only, never the caller's (see gemm.cu).
  void set_autotune(bool on);
  // One entry per plan with an algorithm, in the order they were built: "gemm <method> <epilogue>", the shape
  // ("m .. n .. k .. op A,B D type", cuBLASLt's column-major view), candidates tried, the chosen one's index in the
  // heuristic's order (0: its first), its median seconds and the first's (NaN where not timed).
  std::vector<KernelChoice> kernel_choices() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace tb::gpu
