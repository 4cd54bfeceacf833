// The CUDA kernels that tensor parallelism adds to kernels.h (tensor_parallel.h; used by cuda_tp_transformer.cu): the
// vocab-parallel embedding and cross-entropy over this rank's slice of the vocabulary, and the add that follows a
// row-parallel layer's all-reduce. Their formulas are vocab_parallel_math.h's. As in kernels.h: no CUDA type here,
// pointers are device pointers, `stream` is a cudaStream_t passed as void*, launchers only enqueue work and check
// their launch (RuntimeError on failure). Implemented by models/cuda/tp_kernels.cu; a build without CUDA has no
// caller of them (MakeCudaTensorParallelTransformer's stub throws before).
//
// The slice: vocab_rows = Vl rows of wte starting at token id vocab_begin, of which the first `used` are real tokens
// (vocab_parallel::UsedRows). Logits (N, Vl) are the tied LM head's over all Vl local rows; columns from `used` on are
// padding and take no part in the loss.
#pragma once

#include <cstddef>
#include <cstdint>

#include "cuda/kernels.h"

namespace tb::gpu {

// out (N, C) = the token's row of the local wte slice (Vl, C), or 0 where another rank holds the token: this rank's
// share of the embedding lookup, which the group's all-reduce (sum) completes.
void VocabEmbeddingForward(float* out, const int32_t* tokens, const float* wte_local, size_t rows, int channels,
                           int vocab_begin, int vocab_rows, void* stream);
// out (B, S, C) += wpe[s] (S = seq): the replicated position embedding, added after the all-reduce.
void AddPositionEmbedding(float* out, const float* wpe, size_t rows, int seq, int channels, void* stream);
// wte_local_grad (Vl, C) += out_grad (N, C) at the rows of the tokens this rank holds (always added: the LM head's
// GEMM writes it first); atomics, so the order of the adds into a repeated row varies from run to run. wpe's
// gradient is kernels.h's PositionEmbeddingBackward.
void VocabEmbeddingBackward(float* wte_local_grad, const float* out_grad, const int32_t* tokens, size_t rows,
                            int channels, int vocab_begin, int vocab_rows, void* stream);

// out (N, C) = (residual + bias) + partial, with partial the all-reduced product of a row-parallel layer and bias (C)
// its replicated bias. out may alias residual or partial.
void BiasResidualAdd(float* out, const float* residual, const float* bias, const float* partial, size_t rows,
                     int channels, void* stream);

// Vocab-parallel cross-entropy, stage 1: row_max (N) = the maximum of each row of logits (N, vocab_rows) over its
// first `used` columns (−∞ when used is 0). One block per row.
void VocabParallelRowMax(float* row_max, const float* logits, size_t rows, int vocab_rows, int used, void* stream);
// Stage 2, after row_max is the group's: sums (N) = Σ exp(logit − row_max) over the used columns; target_logits (N)
// = the target's logit where this rank holds the target, else 0. One block per row.
void VocabParallelRowSums(float* sums, float* target_logits, const float* logits, const float* row_max,
                          const int32_t* targets, size_t rows, int vocab_rows, int used, int vocab_begin,
                          void* stream);
// Stage 3, after sums and target_logits are the group's: row_losses (N) = log(sum) + max − target logit, loss (1) =
// their mean (summed in double, in one block: the same on every run), and logits_grad (N, vocab_rows) bf16 =
// gradient_scale · (softmax − onehot(target)) / N over the used columns, 0 in the padding columns.
void VocabParallelLossAndGradient(Bf16* logits_grad, float* row_losses, float* loss, const float* logits,
                                  const float* row_max, const float* sums, const float* target_logits,
                                  const int32_t* targets, size_t rows, int vocab_rows, int used, int vocab_begin,
                                  float gradient_scale, void* stream);

}  // namespace tb::gpu
