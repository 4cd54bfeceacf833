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
// Expert parallel (MoeExperts::group of EP ranks): rank r holds experts [r·E/EP, (r+1)·E/EP); each rank routes its own
// tokens (capacity over its own N, as Megatron's router drops before dispatch), sends each kept choice's row to its
// expert's rank (dispatch: Communicator::AllToAllV), which runs its experts on what it received from every rank, and
// gets the outputs back (combine); backward sends the output gradients the same way and the input gradients back.
// Every rank of the group routes the same way as one rank running its batch alone, so the losses match.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "communicator.h"
#include "model_config.h"
#include "moe_dispatch.h"

namespace tb::cpu {

// A layer's weights: the router (all E experts'), and the experts' tensors one after the other, of the experts this
// rank holds (all E, or E/EP of them under expert parallel).
struct MoeWeights {
  const float* router = nullptr;       // (E, C), no bias
  const float* fc_weight = nullptr;    // (E_local, F, C)
  const float* fc_bias = nullptr;      // (E_local, F)
  const float* proj_weight = nullptr;  // (E_local, C, F)
  const float* proj_bias = nullptr;    // (E_local, C)
};

// Their gradients, in the same shapes; MoeBackward adds (+=) into them.
struct MoeGradients {
  float* router = nullptr;       // (E, C)
  float* fc_weight = nullptr;    // (E_local, F, C)
  float* fc_bias = nullptr;      // (E_local, F)
  float* proj_weight = nullptr;  // (E_local, C, F)
  float* proj_bias = nullptr;    // (E_local, C)
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

// The rows this rank's experts run on: R_e of them, local expert after local expert.
struct MoeExpertRows {
  std::vector<int> block_begin;  // (E_local + 1) local expert e's rows are [block_begin[e], block_begin[e + 1])
  std::vector<float> in;         // (R_e, C)
  std::vector<float> fc_out;     // (R_e, F) before GELU
  std::vector<float> gelu_out;   // (R_e, F)
  std::vector<float> out;        // (R_e, C) before the gate weights
};

// What MoeForward keeps for backward; R = the kept choices (block_begin[E]).
struct MoeActivations {
  MoeRouting routing;
  std::vector<float> gathered;    // (R, C) the kept choices' tokens, expert after expert (all E); empty without EP
  MoeExpertRows experts;          // what this rank's experts ran on (without EP: gathered itself)
  MoeDispatchLayout dispatch;     // expert parallel only (expert_row, expert_begin: the compact expert rows)
  std::vector<float> expert_out;  // (R, C) the kept choices' expert outputs, back from their experts (with EP)
  float aux_loss = 0.0f;          // coef · E · Σ f_i · P_i
};

// out (N, C) = residual (N, C) + the experts' gated outputs; residual may be null (then 0). N·K < 2^31.
// `experts`: where the experts are (null: all here); every rank of its group must call together.
void MoeForward(MoeActivations& activations, float* out, const float* in, const float* residual,
                const MoeWeights& weights, const MoeConfig& moe, size_t tokens, int channels,
                MoeExperts* experts = nullptr);

// in_grad (N, C) = d loss / d in (overwritten), from out_grad (N, C) = d loss / d out and aux_loss_grad = d loss /
// d aux_loss (1 when the aux loss is added to the loss as it is). Parameter gradients are accumulated.
// Under expert parallel the experts' weight gradients are over the tokens every rank of the group sent them.
void MoeBackward(float* in_grad, const MoeGradients& gradients, const float* out_grad, float aux_loss_grad,
                 const float* in, const MoeWeights& weights, const MoeActivations& activations, const MoeConfig& moe,
                 size_t tokens, int channels, MoeExperts* experts = nullptr);

// How evenly a batch spread over the experts.
struct MoeLoadStats {
  std::vector<int64_t> assigned;  // (E) choices per expert, dropped ones included
  std::vector<int64_t> kept;      // (E) choices per expert within its capacity
  int64_t dropped = 0;
  double max_over_mean = 0;  // the busiest expert's choices over the mean, N·K / E (1: perfectly balanced)
};

MoeLoadStats LoadStatsOf(const MoeRouting& routing);

// The routing's steps on their own (what MoeForward runs first), for a device implementation to be compared with:
// RouteLogits turns routing.probs, holding the router's logits (N, E), into probabilities in place and sets each
// token's choices (most probable first) and gate weights; AssignRows then gives each choice its row in the gathered
// blocks in token order (token t's choices before token t+1's, a token's most probable first), the choices past their
// expert's capacity dropped (row -1, counted), and sets capacity, assigned and block_begin.
void RouteLogits(MoeRouting& routing, const MoeConfig& moe, size_t tokens);
void AssignRows(MoeRouting& routing, const MoeConfig& moe, size_t tokens);

}  // namespace tb::cpu
