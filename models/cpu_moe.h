// One mixture-of-experts layer on the CPU in fp32: the layer that replaces a block's MLP (models/README.md, "Mixture
// of experts"). For N tokens x (N, C):
//   router: logits = x · Wrᵀ (E experts, no bias), p = softmax over E, each token's K most probable experts
//           (ties to the lower index) with gate weights (moe_math.h: p for K = 1, p renormalized over the K for K > 1);
//   capacity: each expert takes ceil(capacity_factor · N · K / E) choices, in token order (a token's choices most
//           probable first); a choice past its expert's capacity is dropped and counted: that expert adds nothing to
//           the token, whose other choices keep their gate weights (not renormalized), and the residual carries it;
//   experts: each a GELU MLP (fc (F, C) + bias, GELU, proj (C, F) + bias) on its tokens, gathered into one
//           contiguous block per expert so that each matrix is one GEMM per expert (MatmulForward: BLAS);
//   output: out[t] = residual[t] + Σ over t's kept choices of gate · expert(x[t]);
//   aux loss: coef · E · Σ_i f_i · P_i (moe_math.h), f_i over the choices before dropping.
// Backward gives the input gradient and the router's and experts' weight gradients, through the gate weights (their
// renormalization included) and through the aux loss (P_i; f_i counts, which have no gradient).
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "model_config.h"

namespace tb::cpu {

// A layer's weights, the E experts' tensors one after the other (an expert parallel rank holds a contiguous range).
struct MoeWeights {
  const float* router = nullptr;       // (E, C), no bias
  const float* fc_weight = nullptr;    // (E, F, C)
  const float* fc_bias = nullptr;      // (E, F)
  const float* proj_weight = nullptr;  // (E, C, F)
  const float* proj_bias = nullptr;    // (E, C)
};

// Their gradients, in the same shapes; MoeBackward adds (+=) into them.
struct MoeGradients {
  float* router = nullptr;       // (E, C)
  float* fc_weight = nullptr;    // (E, F, C)
  float* fc_bias = nullptr;      // (E, F)
  float* proj_weight = nullptr;  // (E, C, F)
  float* proj_bias = nullptr;    // (E, C)
};

// Where each token went: set by MoeForward, read by MoeBackward. Choice i = t·K + j is token t's j-th choice.
struct MoeRouting {
  std::vector<float> probs;       // (N, E) softmax of the router logits
  std::vector<int> expert;        // (N, K) chosen experts, most probable first
  std::vector<float> gate;        // (N, K) each choice's weight in the output
  std::vector<int> row;           // (N, K) each choice's row in the gathered blocks; -1 when dropped
  std::vector<int> block_begin;   // (E + 1) expert e's rows are [block_begin[e], block_begin[e + 1])
  std::vector<int64_t> assigned;  // (E) choices of each expert, dropped ones included
  int64_t capacity = 0;           // choices an expert takes from this batch
  int64_t dropped = 0;            // choices past their expert's capacity
};

// What MoeForward keeps for backward; R = the kept choices (block_begin[E]).
struct MoeActivations {
  MoeRouting routing;
  std::vector<float> gathered;    // (R, C) each expert's tokens, expert after expert
  std::vector<float> fc_out;      // (R, F) before GELU
  std::vector<float> gelu_out;    // (R, F)
  std::vector<float> expert_out;  // (R, C) before the gate weights
  float aux_loss = 0.0f;          // coef · E · Σ f_i · P_i
};

// out (N, C) = residual (N, C) + the experts' gated outputs; residual may be null (then 0). N·K < 2^31.
void MoeForward(MoeActivations& activations, float* out, const float* in, const float* residual,
                const MoeWeights& weights, const MoeConfig& moe, size_t tokens, int channels);

// in_grad (N, C) = d loss / d in (overwritten), from out_grad (N, C) = d loss / d out and aux_loss_grad = d loss /
// d aux_loss (1 when the aux loss is added to the loss as it is). Parameter gradients are accumulated.
void MoeBackward(float* in_grad, const MoeGradients& gradients, const float* out_grad, float aux_loss_grad,
                 const float* in, const MoeWeights& weights, const MoeActivations& activations, const MoeConfig& moe,
                 size_t tokens, int channels);

// How evenly a batch spread over the experts.
struct MoeLoadStats {
  std::vector<int64_t> assigned;  // (E) choices per expert, dropped ones included
  std::vector<int64_t> kept;      // (E) choices per expert within its capacity
  int64_t dropped = 0;
  double max_over_mean = 0;  // the busiest expert's choices over the mean, N·K / E (1: perfectly balanced)
};

MoeLoadStats LoadStatsOf(const MoeRouting& routing);

}  // namespace tb::cpu
