// The MoE layer on the device (see moe_layer.h): the routing and the other non-GEMM steps from moe_kernels.h, the
// router's and the experts' GEMMs from gemm.h, in the order of cpu::MoeForward and cpu::MoeBackward.
#include "cuda/moe_layer.h"

#include <cuda_runtime.h>

#include "cuda/cuda_check.h"
#include "cuda/gemm.h"
#include "cuda/moe_kernels.h"
#include "error.h"

namespace tb::gpu {
namespace {

cudaStream_t AsStream(void* stream) { return static_cast<cudaStream_t>(stream); }

// Typed tensors carved out of `base` at 256-byte alignment (null: only counted), as the transformers carve theirs.
class Carve {
 public:
  explicit Carve(char* base) : base_(base) {}
  template <typename T>
  T* Take(size_t count) {
    const size_t offset = used_;
    used_ += (count * sizeof(T) + 255) / 256 * 256;
    return base_ == nullptr ? nullptr : reinterpret_cast<T*>(base_ + offset);
  }
  size_t used() const { return used_; }

 private:
  char* base_;
  size_t used_ = 0;
};

void CheckShape(const MoeConfig& moe, size_t tokens, int channels) {
  if (moe.experts < 1 || moe.top_k < 1 || moe.top_k > moe.experts || moe.expert_ffn < 1 || channels < 1 ||
      tokens * static_cast<size_t>(moe.top_k) >= (size_t{1} << 31)) {
    throw InputError("the CUDA MoE layer needs 1 <= top_k <= experts, an expert width and channels of at least 1, and "
                     "fewer than 2^31 choices");
  }
}

}  // namespace

size_t PointMoeActivations(MoeLayerActivations& a, char* base, const MoeShape& shape) {
  Carve carve(base);
  const size_t n = shape.tokens, rows = shape.padded_rows();
  const size_t choices = n * static_cast<size_t>(shape.top_k);
  a.probs = carve.Take<float>(n * shape.experts);
  a.expert = carve.Take<int>(choices);
  a.gate = carve.Take<float>(choices);
  a.row = carve.Take<int>(choices);
  a.assigned = carve.Take<int>(shape.experts);
  a.block_begin = carve.Take<int>(shape.experts + 1);
  a.dropped = carve.Take<int>(1);
  a.aux_loss = carve.Take<float>(1);
  a.expert_in = carve.Take<Bf16>(rows * shape.channels);
  a.fc_pre = carve.Take<Bf16>(rows * shape.ffn);
  a.fc_gelu = carve.Take<Bf16>(rows * shape.ffn);
  a.expert_out = carve.Take<Bf16>(rows * shape.channels);
  return carve.used();
}

size_t PointMoeScratch(MoeLayerScratch& s, char* base, const MoeShape& shape) {
  Carve carve(base);
  const size_t n = shape.tokens, rows = shape.padded_rows();
  s.expert_out_grad = carve.Take<Bf16>(rows * shape.channels);
  s.hidden_grad = carve.Take<Bf16>(rows * shape.ffn);
  s.expert_in_grad = carve.Take<Bf16>(rows * shape.channels);
  s.gate_grad = carve.Take<float>(n * shape.top_k);
  s.logit_grad_float = carve.Take<float>(n * shape.experts);
  s.logit_grad = carve.Take<Bf16>(n * shape.experts);
  s.router_in_grad = carve.Take<Bf16>(n * shape.channels);
  return carve.used();
}

void MoeLayerForward(Gemm& gemm, const MoeLayerActivations& a, float* out, const float* residual, const Bf16* in,
                     const MoeLayerWeights& w, const MoeConfig& moe, size_t tokens, int channels, void* stream) {
  CheckShape(moe, tokens, channels);
  if (tokens == 0) return;
  const MoeShape shape = MoeShapeOf(moe, tokens, channels);
  const int e = moe.experts, k = moe.top_k, f = moe.expert_ffn;
  // The router: fp32 logits, then probabilities, choices, gate weights, rows and the aux loss.
  gemm.LinearForwardFloat(a.probs, nullptr, in, w.router, nullptr, tokens, channels, e);
  MoeRouteLogits(a.probs, a.expert, a.gate, tokens, e, k, stream);
  MoeAssignRows(a.row, a.assigned, a.block_begin, a.dropped, a.expert, tokens, e, k, shape.capacity, shape.capacity,
                stream);
  MoeAuxLoss(a.aux_loss, a.probs, a.assigned, tokens, e, k, static_cast<float>(moe.aux_loss_coef), stream);
  // The experts on their padded blocks: zero rows where fewer than the capacity came.
  const size_t rows = shape.padded_rows();
  TB_CHECK_CUDA(cudaMemsetAsync(a.expert_in, 0, rows * channels * sizeof(Bf16), AsStream(stream)));
  MoeGather(a.expert_in, in, a.row, tokens, k, channels, stream);
  const auto cap = static_cast<size_t>(shape.capacity);
  gemm.BatchedLinearForward(a.fc_gelu, a.fc_pre, a.expert_in, w.fc_weight, w.fc_bias, cap, channels, f, e);
  gemm.BatchedLinearForward(a.expert_out, nullptr, a.fc_gelu, w.proj_weight, w.proj_bias, cap, f, channels, e);
  MoeCombine(out, residual, a.expert_out, a.row, a.gate, tokens, k, channels, stream);
}

void MoeLayerBackward(Gemm& gemm, const MoeLayerScratch& s, float* in_grad, const MoeLayerGradients& g,
                      const float* out_grad, float aux_loss_grad, const Bf16* in, const MoeLayerWeights& w,
                      const MoeLayerActivations& a, const MoeConfig& moe, size_t tokens, int channels,
                      GradientWrite write, void* stream) {
  CheckShape(moe, tokens, channels);
  if (tokens == 0) return;
  const MoeShape shape = MoeShapeOf(moe, tokens, channels);
  const int e = moe.experts, k = moe.top_k, f = moe.expert_ffn;
  const size_t rows = shape.padded_rows();
  const auto cap = static_cast<size_t>(shape.capacity);
  // The gated outputs': the padding rows' gradient zero, so the experts' weight gradients see only kept choices.
  TB_CHECK_CUDA(cudaMemsetAsync(s.expert_out_grad, 0, rows * channels * sizeof(Bf16), AsStream(stream)));
  MoeCombineBackward(s.expert_out_grad, s.gate_grad, out_grad, a.expert_out, a.row, a.gate, tokens, k, channels,
                     stream);
  // The experts, proj then fc (the GELU's gradient fused into proj's input gradient where cuBLASLt can).
  gemm.BatchedLinearBackwardInput(s.hidden_grad, s.expert_out_grad, w.proj_weight, a.fc_pre, cap, f, channels, e);
  gemm.BatchedLinearBackwardWeights(g.proj_weight, g.proj_bias, s.expert_out_grad, a.fc_gelu, cap, f, channels, e,
                                    write);
  gemm.BatchedLinearBackwardInput(s.expert_in_grad, s.hidden_grad, w.fc_weight, nullptr, cap, channels, f, e);
  gemm.BatchedLinearBackwardWeights(g.fc_weight, g.fc_bias, s.hidden_grad, a.expert_in, cap, channels, f, e, write);
  // The router: the gates' and the aux loss's gradient through the softmax, then its GEMMs.
  const float aux_coef = static_cast<float>(moe.aux_loss_coef) * aux_loss_grad;
  MoeRouterBackward(s.logit_grad, s.logit_grad_float, a.probs, a.expert, a.gate, s.gate_grad, a.assigned, tokens, e,
                    k, aux_coef, stream);
  gemm.LinearBackwardInput(s.router_in_grad, s.logit_grad, w.router, nullptr, tokens, channels, e);
  gemm.LinearBackwardWeights(g.router, nullptr, s.logit_grad, in, tokens, channels, e, write);
  // The input's: the router's plus each kept choice's expert input gradient.
  MoeScatterInputGrad(in_grad, s.router_in_grad, s.expert_in_grad, a.row, tokens, k, channels, stream);
}

}  // namespace tb::gpu
