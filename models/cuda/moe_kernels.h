// The non-GEMM steps of a mixture-of-experts layer on the device (models/cuda/README.md, "Mixture of experts on the
// GPU"): the routing, what cpu::RouteLogits and cpu::AssignRows compute (models/cpu_moe.h), with the same per-token
// formulas (models/moe_math.h), so that a GPU test compares choice by choice; the gather and combine, expert
// parallel's row moves, the aux loss and the backward (moe_layer.h puts them together with the experts' batched
// GEMMs). CUDA-free header: pointers are device pointers,
// `stream` a cudaStream_t passed as void*. Launchers only enqueue work and throw RuntimeError on a failed launch.
// Implemented by models/cuda/moe_kernels.cu, or by a stub that throws "built without CUDA".
#pragma once

#include <cstddef>

#include "cuda/kernels.h"  // Bf16

namespace tb::gpu {

// probs (N, E): the router's fp32 logits in, their softmax out (in place); expert (N, K): each token's K most
// probable experts, most probable first (ties to the lower index); gate (N, K): their weights (K = 1: p; K > 1: the
// chosen probabilities renormalized). One thread per token.
void MoeRouteLogits(float* probs, int* expert, float* gate, size_t tokens, int experts, int top_k, void* stream);

// Each choice's row in the gathered blocks, in token order (choice i = t·K + j, ascending), for experts of
// `capacity` rows: row (N, K) = its expert's block_begin + its order among the expert's choices, or -1 past the
// capacity; assigned (E) = each expert's choices, dropped ones included; block_begin (E + 1) = the exclusive scan of
// min(assigned, capacity); dropped (1) = the choices past their capacity. One block per expert scans the choices in
// order (no atomics: the same rows every run), then one small kernel scans the experts. block_stride > 0 puts expert
// e's rows at e · block_stride instead of block_begin[e] (the capacity-padded layout of the batched expert GEMMs:
// block_stride = capacity); block_begin is the compact layout's either way.
void MoeAssignRows(int* row, int* assigned, int* block_begin, int* dropped, const int* expert, size_t tokens,
                   int experts, int top_k, long long capacity, long long block_stride, void* stream);

// gathered (rows, C): each kept choice's token row of in (N, C) at its row (row (N, K) from MoeAssignRows); rows no
// choice takes are left as they are (the caller zeroes the padding its GEMMs read). Copies only.
void MoeGather(Bf16* gathered, const Bf16* in, const int* row, size_t tokens, int top_k, int channels, void* stream);

// out (N, C) = residual (N, C; null: 0) + Σ over token t's kept choices j (in order) of gate[t, j] · expert_out[row]
// (expert_out (rows, C) bf16, the experts' outputs in gathered order), in fp32; out may alias residual.
void MoeCombine(float* out, const float* residual, const Bf16* expert_out, const int* row, const float* gate,
                size_t tokens, int top_k, int channels, void* stream);

// Rows moved by an index map (expert parallel's regrouping of received rows into expert rows and back), bf16 (rows,
// C): ScatterRows dst[index[i]] = src[i], GatherRows dst[i] = src[index[i]], for i < rows.
void MoeScatterRows(Bf16* dst, const Bf16* src, const int* index, size_t rows, int channels, void* stream);
void MoeGatherRows(Bf16* dst, const Bf16* src, const int* index, size_t rows, int channels, void* stream);

// aux_loss (1) = coef · E · Σ_e f_e · P_e (moe::AuxLoss): f_e = assigned[e] / (N·K), P_e the mean of probs (N, E)
// over the tokens, each summed in token order in double as the CPU layer does. One block.
void MoeAuxLoss(float* aux_loss, const float* probs, const int* assigned, size_t tokens, int experts, int top_k,
                float coef, void* stream);

// MoeCombine's backward for out_grad (N, C) fp32: expert_out_grad[row] (bf16) = gate · out_grad[t] for each kept
// choice (rows no choice takes are left as they are: the caller zeroes them), gate_grad (N, K) = out_grad[t] ·
// expert_out[row] (0 for a dropped choice). One warp per choice.
void MoeCombineBackward(Bf16* expert_out_grad, float* gate_grad, const float* out_grad, const Bf16* expert_out,
                        const int* row, const float* gate, size_t tokens, int top_k, int channels, void* stream);

// The router's logit gradient (N, E), fp32 into logit_grad_float and rounded into logit_grad (what the router's
// backward GEMMs read): per token, d loss / d probs = the aux loss's (moe::AuxLossProbGrad, coef already times
// d loss / d aux_loss, f_e from assigned) plus the gates' (moe::GateBackward), then moe::SoftmaxBackwardRow. One
// thread per token.
void MoeRouterBackward(Bf16* logit_grad, float* logit_grad_float, const float* probs, const int* expert,
                       const float* gate, const float* gate_grad, const int* assigned, size_t tokens, int experts,
                       int top_k, float aux_coef, void* stream);

// in_grad (N, C) fp32 = router_in_grad (N, C) + Σ over token t's kept choices j (in order) of expert_in_grad[row]:
// the layer's input gradient from the router's and the experts' (bf16 rows).
void MoeScatterInputGrad(float* in_grad, const Bf16* router_in_grad, const Bf16* expert_in_grad, const int* row,
                         size_t tokens, int top_k, int channels, void* stream);

// A block's routing added to its step totals: assigned_sum (E) += assigned, dropped_sum += dropped, aux_sum +=
// aux_loss. One block.
void MoeAccumulateStats(long long* assigned_sum, long long* dropped_sum, double* aux_sum, const int* assigned,
                        const int* dropped, const float* aux_loss, int experts, void* stream);

}  // namespace tb::gpu
