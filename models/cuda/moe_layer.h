// One mixture-of-experts layer on the device: what cpu::MoeForward and cpu::MoeBackward compute (models/cpu_moe.h),
// in the CUDA transformer's mixed precision, every expert on this GPU or, under expert parallel, E/EP of them. bf16
// input rows (the LayerNorm's output), weights, expert rows and their gradients; fp32 router
// logits, probabilities, gate weights, output (onto the fp32 residual stream) and input gradient.
//
// Forward: the router's fp32 logits (LinearForwardFloat), the routing (MoeRouteLogits, MoeAssignRows), the aux loss,
// then the experts in the capacity-padded layout: expert e's kept choices in rows [e·cap, e·cap + kept_e) of an
// (E·cap, C) block, cap = moe::ExpertCapacity (GShard's layout: a fixed shape per batch size), the padding rows zero;
// each matrix is one strided-batched cuBLASLt matmul over the E experts (Gemm::Batched*; fc with its GELU), not a
// launch per expert; then the gated outputs onto the residual (MoeCombine). Backward reverses it: the padding rows'
// output gradients are zero, so they add nothing to any weight gradient.
//
// Expert parallel (MoeExperts::group of EP ranks, device memory: NCCL): the kept choices are gathered in the compact
// layout (expert after expert, so rank p's rows are one block), the row counts exchanged on the host (PlanDispatch,
// moe_dispatch.h), the rows sent with Communicator::AllToAllV (grouped ncclSend/ncclRecv) and regrouped into this
// rank's E/EP experts' padded blocks of EP·cap rows each (what every rank may send an expert), the batched GEMMs run
// over those, and the outputs go back the same way (combine); backward sends the output gradients and returns the
// input gradients likewise. The model's stream is waited for before each all-to-all and the group's after it (host
// waits: the dispatch's sizes are host arguments anyway), and the figures are host seconds around them, as on the CPU.
//
// CUDA-free header: pointers are device pointers, `stream` a cudaStream_t passed as void* (the Gemm's own stream).
// Implemented by models/cuda/moe_layer.cu, or by a stub that throws "built without CUDA".
#pragma once

#include <cstddef>

#include "cuda/kernels.h"  // Bf16
#include "model_config.h"
#include "moe_dispatch.h"
#include "transformer.h"  // GradientWrite

namespace tb::gpu {

class Gemm;

// A layer's sizes for N tokens: C channels, E experts, top K, F hidden per expert, each expert's capacity, and its
// expert group: its ranks EP, and whether there is one (a group of one rank runs expert parallel's path too).
struct MoeShape {
  size_t tokens = 0;
  int channels = 0;
  int experts = 0;
  int top_k = 0;
  int ffn = 0;
  long long capacity = 0;  // moe::ExpertCapacity(capacity_factor, N, K, E): choices an expert takes from a rank
  int ranks = 1;
  bool dispatched = false;  // the rows go through an expert group's all-to-alls
  int local_experts() const { return experts / ranks; }
  // Each local expert's padded rows: the capacity from each rank of the group.
  long long rows_per_expert() const { return capacity * ranks; }
  // The padded blocks' rows, E_local · EP · cap = E · cap with or without expert parallel.
  size_t padded_rows() const { return static_cast<size_t>(experts) * static_cast<size_t>(capacity); }
  // The kept choices' rows at most (the compact layout's, expert parallel's), N · K.
  size_t choice_rows() const { return tokens * static_cast<size_t>(top_k); }
};
MoeShape MoeShapeOf(const MoeConfig& moe, size_t tokens, int channels, const MoeExperts* experts = nullptr);

struct MoeLayerWeights {
  const Bf16* router = nullptr;       // (E, C)
  const Bf16* fc_weight = nullptr;    // (E, F, C)
  const Bf16* fc_bias = nullptr;      // (E, F)
  const Bf16* proj_weight = nullptr;  // (E, C, F)
  const Bf16* proj_bias = nullptr;    // (E, C)
};

// fp32, the weights' shapes; written or added to as the backward's GradientWrite says.
struct MoeLayerGradients {
  float* router = nullptr;
  float* fc_weight = nullptr;
  float* fc_bias = nullptr;
  float* proj_weight = nullptr;
  float* proj_bias = nullptr;
};

// What the forward keeps for the backward (rows: E·cap of the shape it was pointed for).
struct MoeLayerActivations {
  float* probs = nullptr;       // (N, E) the router's logits, then their softmax
  int* expert = nullptr;        // (N, K) chosen experts, most probable first
  float* gate = nullptr;        // (N, K)
  int* row = nullptr;           // (N, K) each choice's padded row, -1 when dropped
  int* assigned = nullptr;      // (E) choices per expert, dropped ones included
  int* block_begin = nullptr;   // (E + 1) the compact layout's block starts (its last: the kept choices)
  int* dropped = nullptr;       // (1)
  float* aux_loss = nullptr;    // (1) coef · E · Σ f_e · P_e
  Bf16* expert_in = nullptr;    // (rows, C) the kept choices' input rows, padding zero
  Bf16* fc_pre = nullptr;       // (rows, F) before the GELU
  Bf16* fc_gelu = nullptr;      // (rows, F)
  Bf16* expert_out = nullptr;   // (rows, C) before the gate weights
  // Expert parallel only:
  Bf16* returned = nullptr;     // (N·K, C) the kept choices' expert outputs back from their ranks, compact order
  int* expert_row = nullptr;    // (rows) each received row's padded expert row (dispatch.expert_row on the device)
  MoeDispatchLayout dispatch;   // this forward's all-to-all layout (host)
};

// The backward's scratch, which layers may share.
struct MoeLayerScratch {
  Bf16* expert_out_grad = nullptr;  // (rows, C), padding zero
  Bf16* hidden_grad = nullptr;      // (rows, F)
  Bf16* expert_in_grad = nullptr;   // (rows, C)
  float* gate_grad = nullptr;       // (N, K)
  float* logit_grad_float = nullptr;  // (N, E)
  Bf16* logit_grad = nullptr;       // (N, E)
  Bf16* router_in_grad = nullptr;   // (N, C)
  // Expert parallel only, used by forward and backward alike:
  Bf16* sent = nullptr;             // (N·K, C) compact rows to send: inputs, output gradients, input gradients back
  Bf16* received = nullptr;         // (rows, C) rows received, in received order
};

// Points `a` (or `s`) into `base` for layers of up to `shape` (its tokens and capacity the most any call will have;
// its group the one the layer will run with), each tensor 256-byte aligned; returns the bytes they
// take. A null base only counts.
size_t PointMoeActivations(MoeLayerActivations& a, char* base, const MoeShape& shape);
size_t PointMoeScratch(MoeLayerScratch& s, char* base, const MoeShape& shape);

// out (N, C) fp32 = residual (N, C) + the experts' gated outputs for in (N, C); out may alias residual. The routing,
// aux loss and expert activations are left in `a`. `experts`: where the experts are (null: all here; its group in
// device memory, every rank of it calling together; the weights then hold its E/EP experts); scratch's `sent` and
// `received` are used under expert parallel.
void MoeLayerForward(Gemm& gemm, MoeLayerActivations& a, const MoeLayerScratch& scratch, float* out,
                     const float* residual, const Bf16* in, const MoeLayerWeights& weights, const MoeConfig& moe,
                     size_t tokens, int channels, void* stream, MoeExperts* experts = nullptr);

// in_grad (N, C) fp32 = d loss / d in (overwritten), from out_grad (N, C) = d loss / d out and aux_loss_grad = d loss
// / d aux_loss; the weights' gradients written or added to. `a`: this input's forward.
void MoeLayerBackward(Gemm& gemm, const MoeLayerScratch& scratch, float* in_grad, const MoeLayerGradients& gradients,
                      const float* out_grad, float aux_loss_grad, const Bf16* in, const MoeLayerWeights& weights,
                      const MoeLayerActivations& a, const MoeConfig& moe, size_t tokens, int channels,
                      GradientWrite write, void* stream, MoeExperts* experts = nullptr);

}  // namespace tb::gpu
