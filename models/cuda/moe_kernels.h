// The routing of a mixture-of-experts layer on the device (models/cuda/README.md, "Mixture of experts on the GPU"):
// what cpu::RouteLogits and cpu::AssignRows compute (models/cpu_moe.h), with the same per-token formulas
// (models/moe_math.h), so that a GPU test compares choice by choice. The first pieces of the CUDA MoE block; the
// gather, the experts' GEMMs, the combine and the backward come next. CUDA-free header: pointers are device pointers,
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
// order (no atomics: the same rows every run), then one small kernel scans the experts.
void MoeAssignRows(int* row, int* assigned, int* block_begin, int* dropped, const int* expert, size_t tokens,
                   int experts, int top_k, long long capacity, void* stream);

// gathered (rows, C): each kept choice's token row of in (N, C) at its row (row (N, K) from MoeAssignRows); rows no
// choice takes are left as they are (the caller zeroes the padding its GEMMs read). Copies only.
void MoeGather(Bf16* gathered, const Bf16* in, const int* row, size_t tokens, int top_k, int channels, void* stream);

// out (N, C) = residual (N, C; null: 0) + Σ over token t's kept choices j (in order) of gate[t, j] · expert_out[row]
// (expert_out (rows, C) bf16, the experts' outputs in gathered order), in fp32; out may alias residual.
void MoeCombine(float* out, const float* residual, const Bf16* expert_out, const int* row, const float* gate,
                size_t tokens, int top_k, int channels, void* stream);

}  // namespace tb::gpu
