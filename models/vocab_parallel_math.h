// Per-element and per-row formulas of tensor parallelism's vocab-parallel layers (tensor_parallel.h), shared by host
// and device code: the CUDA kernels of models/cuda/tp_kernels.cu compute with these, and tests check them on the CPU
// (tests/vocab_parallel_math_test.cc) against plain double-precision math. Rank r of T holds the Vl = Vp/T vocabulary
// rows [begin, begin + Vl) of wte, of which the first `used` are real tokens (the rest are padding past V).
//
// The vocab-parallel cross-entropy (Megatron-LM's) of one row of logits, in three stages with an all-reduce after
// each of the first two:
//   1. the local maximum over the real local columns (−∞ for a slice of padding only), all-reduced with max;
//   2. the local sum of exp(logit − global max) and the target's logit where this rank holds the target (0
//      elsewhere), both all-reduced with sum (adding zeros is exact, so every rank gets the target's logit);
//   3. the row's loss, log(sum) + max − target logit, and d loss / d logits = (softmax − onehot(target)) / N over the
//      local columns, 0 in the padding columns.
// The same arithmetic as the CPU reference (cpu_tp_transformer.cc) and the single-GPU cross-entropy (kernels.h),
// but for the order of the sums.
#pragma once

#include <cmath>

#include "element_math.h"  // TB_HOST_DEVICE

namespace tb::vocab_parallel {

// How many of a slice's `rows` vocabulary rows, starting at token id `begin`, are real tokens (below `vocab`).
TB_HOST_DEVICE inline int UsedRows(int vocab, int begin, int rows) {
  const int used = vocab - begin;
  return used < 0 ? 0 : (used > rows ? rows : used);
}

// The row of the slice [begin, begin + rows) that holds token id `token`, or −1 when another rank holds it.
TB_HOST_DEVICE inline int LocalRow(int token, int begin, int rows) {
  const int local = token - begin;
  return local >= 0 && local < rows ? local : -1;
}

// Element c of the embedding lookup's local share for a token at local row `local_row` (LocalRow): its wte row, or 0
// when another rank holds the token (the group's sum is then the token's row, bit for bit).
TB_HOST_DEVICE inline float EmbeddingShare(const float* wte_local, int local_row, int channels, int c) {
  return local_row >= 0 ? wte_local[static_cast<long long>(local_row) * channels + c] : 0.0f;
}

// Stage 1: the larger of two maxima (an empty row's is −∞).
TB_HOST_DEVICE inline float MaxOf(float a, float b) { return b > a ? b : a; }

// Stage 2: one column's share of the normaliser, exp(logit − the global row maximum).
TB_HOST_DEVICE inline float ShiftedExp(float logit, float row_max) { return expf(logit - row_max); }

// Stage 2: the target's logit where this rank's local columns hold it (local_target from LocalRow over the used
// columns), 0 elsewhere.
TB_HOST_DEVICE inline float TargetLogit(const float* row, int local_target) {
  return local_target >= 0 ? row[local_target] : 0.0f;
}

// Stage 3: −log softmax(target) from the group's maximum, sum of exp and target logit: exact even where the target's
// probability underflows.
TB_HOST_DEVICE inline float RowLoss(float sum, float row_max, float target_logit) {
  return logf(sum) + row_max - target_logit;
}

// Stage 3: d loss / d logit of local column `column` of a row, for `used` real local columns: (softmax − onehot) / N
// with inverse_sum = 1 / sum and inverse_rows = 1 / N; 0 in the padding columns, so wte's padding rows get no gradient.
TB_HOST_DEVICE inline float LogitGradient(float logit, int column, int used, int local_target, float row_max,
                                          float inverse_sum, float inverse_rows) {
  if (column >= used) return 0.0f;
  const float onehot = column == local_target ? 1.0f : 0.0f;
  return (ShiftedExp(logit, row_max) * inverse_sum - onehot) * inverse_rows;
}

// A row-parallel layer's output element after its all-reduce: the replicated residual and bias first, then the
// group's sum of partial products (the full model's order: residual + bias, then the product).
TB_HOST_DEVICE inline float BiasResidual(float residual, float bias, float partial) {
  return (residual + bias) + partial;
}

}  // namespace tb::vocab_parallel
