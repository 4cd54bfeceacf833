// The MoE layer on the device (see moe_layer.h): the routing and the other non-GEMM steps from moe_kernels.h, the
// router's and the experts' GEMMs from gemm.h, the all-to-alls of expert parallel through the group's Communicator,
// in the order of cpu::MoeForward and cpu::MoeBackward.
#include "cuda/moe_layer.h"

#include <cuda_runtime.h>

#include <vector>

#include "communicator.h"
#include "cuda/cuda_check.h"
#include "cuda/gemm.h"
#include "cuda/model_parts.h"
#include "cuda/moe_kernels.h"
#include "device.h"
#include "error.h"
#include "moe_math.h"

namespace tb::gpu {
namespace {

cudaStream_t AsStream(void* stream) { return static_cast<cudaStream_t>(stream); }

// The layer's shape for this call; throws InputError on what the layer cannot run.
MoeShape CheckedShape(const MoeConfig& moe, size_t tokens, int channels, const MoeExperts* experts) {
  const MoeShape shape = MoeShapeOf(moe, tokens, channels, experts);
  const int ranks = shape.ranks;
  if (moe.experts < 1 || moe.top_k < 1 || moe.top_k > moe.experts || moe.expert_ffn < 1 || channels < 1 ||
      tokens * static_cast<size_t>(moe.top_k) >= (size_t{1} << 31)) {
    throw InputError("the CUDA MoE layer needs 1 <= top_k <= experts, an expert width and channels of at least 1, and "
                     "fewer than 2^31 choices");
  }
  if (moe.experts % ranks != 0) throw InputError("the CUDA MoE layer: the expert group does not divide the experts");
  if (shape.dispatched && experts->group->memory() != MemoryKind::kDevice) {
    throw InputError("the CUDA MoE layer needs a device-memory (NCCL) expert group");
  }
  return shape;
}

// The experts' MLPs on their padded blocks (`batch` experts of `rows` rows each): one batched GEMM per matrix.
void ExpertsForward(Gemm& gemm, const MoeLayerActivations& a, const MoeLayerWeights& w, int batch, size_t rows,
                    int channels, int ffn) {
  gemm.BatchedLinearForward(a.fc_gelu, a.fc_pre, a.expert_in, w.fc_weight, w.fc_bias, rows, channels, ffn, batch);
  gemm.BatchedLinearForward(a.expert_out, nullptr, a.fc_gelu, w.proj_weight, w.proj_bias, rows, ffn, channels, batch);
}

// Their backward from the padded output gradients to the padded input gradients, proj then fc (the GELU's gradient
// fused into proj's input gradient where cuBLASLt can).
void ExpertsBackward(Gemm& gemm, const MoeLayerScratch& s, const MoeLayerGradients& g, const MoeLayerWeights& w,
                     const MoeLayerActivations& a, int batch, size_t rows, int channels, int ffn, GradientWrite write) {
  gemm.BatchedLinearBackwardInput(s.hidden_grad, s.expert_out_grad, w.proj_weight, a.fc_pre, rows, ffn, channels,
                                  batch);
  gemm.BatchedLinearBackwardWeights(g.proj_weight, g.proj_bias, s.expert_out_grad, a.fc_gelu, rows, ffn, channels,
                                    batch, write);
  gemm.BatchedLinearBackwardInput(s.expert_in_grad, s.hidden_grad, w.fc_weight, nullptr, rows, channels, ffn, batch);
  gemm.BatchedLinearBackwardWeights(g.fc_weight, g.fc_bias, s.hidden_grad, a.expert_in, rows, channels, ffn, batch,
                                    write);
}

// Expert parallel: one all-to-all of bf16 rows, after the model's stream and waited for on the host; its seconds and
// the bytes it sent to other ranks added to `seconds` and `bytes`. `forward`: the dispatch's direction (send as the
// layout sends); else the combine's (back the way they came).
void ExchangeRows(const MoeDispatchLayout& d, MoeExperts& experts, const Bf16* send, Bf16* recv, bool forward,
                  void* stream, double& seconds, uint64_t& bytes) {
  TB_CHECK_CUDA(cudaStreamSynchronize(AsStream(stream)));
  const std::vector<size_t>& send_counts = forward ? d.send_counts : d.recv_counts;
  TimeExchange(experts, seconds, [&] {
    if (forward) {
      experts.group->AllToAllV(send, d.send_counts, d.send_offsets, recv, d.recv_counts, d.recv_offsets,
                               DataType::kBFloat16);
    } else {
      experts.group->AllToAllV(send, d.recv_counts, d.recv_offsets, recv, d.send_counts, d.send_offsets,
                               DataType::kBFloat16);
    }
    experts.group->Synchronize();
  });
  bytes += RemoteBytes(send_counts, sizeof(Bf16), experts);
}

void Dispatch(const MoeDispatchLayout& d, MoeExperts& experts, const Bf16* send, Bf16* recv, void* stream) {
  ExchangeRows(d, experts, send, recv, true, stream, experts.figures.dispatch_s, experts.figures.dispatch_bytes);
}

void Combine(const MoeDispatchLayout& d, MoeExperts& experts, const Bf16* send, Bf16* recv, void* stream) {
  ExchangeRows(d, experts, send, recv, false, stream, experts.figures.combine_s, experts.figures.combine_bytes);
}

// Expert parallel's plan for this forward: the compact block starts to the host, the counts exchanged, each received
// row's padded expert row on the device.
void PlanExpertRows(MoeLayerActivations& a, MoeExperts& experts, const MoeShape& shape, void* stream) {
  std::vector<int> block_begin(static_cast<size_t>(shape.experts) + 1);
  TB_CHECK_CUDA(cudaStreamSynchronize(AsStream(stream)));
  CopyDeviceToHost(block_begin.data(), a.block_begin, block_begin.size() * sizeof(int));
  a.dispatch = PlanDispatch(block_begin, experts, shape.local_experts(), shape.channels,
                            static_cast<int>(shape.rows_per_expert()));
  CopyHostToDevice(a.expert_row, a.dispatch.expert_row.data(), a.dispatch.expert_row.size() * sizeof(int));
}

// Rows received under expert parallel.
size_t ReceivedRows(const MoeDispatchLayout& d) { return d.expert_row.size(); }

}  // namespace

MoeShape MoeShapeOf(const MoeConfig& moe, size_t tokens, int channels, const MoeExperts* experts) {
  const bool dispatched = experts != nullptr && experts->group != nullptr;
  return MoeShape{tokens, channels, moe.experts, moe.top_k, moe.expert_ffn,
                  moe::ExpertCapacity(moe.capacity_factor, static_cast<long long>(tokens), moe.top_k, moe.experts),
                  dispatched ? experts->group->size() : 1, dispatched};
}

size_t PointMoeActivations(MoeLayerActivations& a, char* base, const MoeShape& shape) {
  cuda_model::Carver carve(base);
  const size_t n = shape.tokens, rows = shape.padded_rows();
  const size_t choices = shape.choice_rows();
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
  if (shape.dispatched) {
    a.returned = carve.Take<Bf16>(choices * shape.channels);
    a.expert_row = carve.Take<int>(rows);
  }
  return carve.used();
}

size_t PointMoeScratch(MoeLayerScratch& s, char* base, const MoeShape& shape) {
  cuda_model::Carver carve(base);
  const size_t n = shape.tokens, rows = shape.padded_rows();
  s.expert_out_grad = carve.Take<Bf16>(rows * shape.channels);
  s.hidden_grad = carve.Take<Bf16>(rows * shape.ffn);
  s.expert_in_grad = carve.Take<Bf16>(rows * shape.channels);
  s.gate_grad = carve.Take<float>(n * shape.top_k);
  s.logit_grad_float = carve.Take<float>(n * shape.experts);
  s.logit_grad = carve.Take<Bf16>(n * shape.experts);
  s.router_in_grad = carve.Take<Bf16>(n * shape.channels);
  if (shape.dispatched) {
    s.sent = carve.Take<Bf16>(shape.choice_rows() * shape.channels);
    s.received = carve.Take<Bf16>(rows * shape.channels);
  }
  return carve.used();
}

void MoeLayerForward(Gemm& gemm, MoeLayerActivations& a, const MoeLayerScratch& s, float* out, const float* residual,
                     const Bf16* in, const MoeLayerWeights& w, const MoeConfig& moe, size_t tokens, int channels,
                     void* stream, MoeExperts* experts) {
  const MoeShape shape = CheckedShape(moe, tokens, channels, experts);
  if (tokens == 0) return;
  const bool dispatched = shape.dispatched;
  const int e = moe.experts, k = moe.top_k, f = moe.expert_ffn;
  // The router: fp32 logits, then probabilities, choices, gate weights, rows and the aux loss. Without expert parallel
  // each choice's row is in its expert's padded block; with it, compact (the rows to send).
  gemm.LinearForwardFloat(a.probs, nullptr, in, w.router, nullptr, tokens, channels, e);
  MoeRouteLogits(a.probs, a.expert, a.gate, tokens, e, k, stream);
  MoeAssignRows(a.row, a.assigned, a.block_begin, a.dropped, a.expert, tokens, e, k, shape.capacity,
                dispatched ? 0 : shape.capacity, stream);
  MoeAuxLoss(a.aux_loss, a.probs, a.assigned, tokens, e, k, static_cast<float>(moe.aux_loss_coef), stream);
  // The experts' padded blocks: zero rows where fewer than their room came.
  const size_t rows = shape.padded_rows();
  TB_CHECK_CUDA(cudaMemsetAsync(a.expert_in, 0, rows * channels * sizeof(Bf16), AsStream(stream)));
  if (!dispatched) {
    MoeGather(a.expert_in, in, a.row, tokens, k, channels, stream);
    ExpertsForward(gemm, a, w, e, static_cast<size_t>(shape.capacity), channels, f);
    MoeCombine(out, residual, a.expert_out, a.row, a.gate, tokens, k, channels, stream);
    return;
  }
  MoeGather(s.sent, in, a.row, tokens, k, channels, stream);
  PlanExpertRows(a, *experts, shape, stream);
  Dispatch(a.dispatch, *experts, s.sent, s.received, stream);
  MoeScatterRows(a.expert_in, s.received, a.expert_row, ReceivedRows(a.dispatch), channels, stream);
  ExpertsForward(gemm, a, w, shape.local_experts(), static_cast<size_t>(shape.rows_per_expert()), channels, f);
  MoeGatherRows(s.received, a.expert_out, a.expert_row, ReceivedRows(a.dispatch), channels, stream);
  Combine(a.dispatch, *experts, s.received, a.returned, stream);
  MoeCombine(out, residual, a.returned, a.row, a.gate, tokens, k, channels, stream);
}

void MoeLayerBackward(Gemm& gemm, const MoeLayerScratch& s, float* in_grad, const MoeLayerGradients& g,
                      const float* out_grad, float aux_loss_grad, const Bf16* in, const MoeLayerWeights& w,
                      const MoeLayerActivations& a, const MoeConfig& moe, size_t tokens, int channels,
                      GradientWrite write, void* stream, MoeExperts* experts) {
  const MoeShape shape = CheckedShape(moe, tokens, channels, experts);
  if (tokens == 0) return;
  const bool dispatched = shape.dispatched;
  const int e = moe.experts, k = moe.top_k, f = moe.expert_ffn;
  const size_t rows = shape.padded_rows();
  // The gated outputs': the padding rows' gradient zero, so the experts' weight gradients see only kept choices.
  TB_CHECK_CUDA(cudaMemsetAsync(s.expert_out_grad, 0, rows * channels * sizeof(Bf16), AsStream(stream)));
  const Bf16* expert_in_grad = s.expert_in_grad;  // each kept choice's input gradient, at its row
  if (!dispatched) {
    MoeCombineBackward(s.expert_out_grad, s.gate_grad, out_grad, a.expert_out, a.row, a.gate, tokens, k, channels,
                       stream);
    ExpertsBackward(gemm, s, g, w, a, e, static_cast<size_t>(shape.capacity), channels, f, write);
  } else {
    // Compact: every row a kept choice's, each written.
    MoeCombineBackward(s.sent, s.gate_grad, out_grad, a.returned, a.row, a.gate, tokens, k, channels, stream);
    MoeExperts& group = *experts;
    Dispatch(a.dispatch, group, s.sent, s.received, stream);
    MoeScatterRows(s.expert_out_grad, s.received, a.expert_row, ReceivedRows(a.dispatch), channels, stream);
    ExpertsBackward(gemm, s, g, w, a, shape.local_experts(), static_cast<size_t>(shape.rows_per_expert()), channels,
                    f, write);
    MoeGatherRows(s.received, s.expert_in_grad, a.expert_row, ReceivedRows(a.dispatch), channels, stream);
    Combine(a.dispatch, group, s.received, s.sent, stream);
    expert_in_grad = s.sent;
  }
  // The router: the gates' and the aux loss's gradient through the softmax, then its GEMMs.
  const float aux_coef = static_cast<float>(moe.aux_loss_coef) * aux_loss_grad;
  MoeRouterBackward(s.logit_grad, s.logit_grad_float, a.probs, a.expert, a.gate, s.gate_grad, a.assigned, tokens, e,
                    k, aux_coef, stream);
  gemm.LinearBackwardInput(s.router_in_grad, s.logit_grad, w.router, nullptr, tokens, channels, e);
  gemm.LinearBackwardWeights(g.router, nullptr, s.logit_grad, in, tokens, channels, e, write);
  // The input's: the router's plus each kept choice's expert input gradient.
  MoeScatterInputGrad(in_grad, s.router_in_grad, expert_in_grad, a.row, tokens, k, channels, stream);
}

}  // namespace tb::gpu
