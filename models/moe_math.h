// Per-token formulas of a mixture-of-experts layer (cpu_moe.h; models/README.md, "Mixture of experts"), shared by host
// and device code so that a GPU router computes what the CPU reference does: the router's softmax over E experts,
// the top-K choice, the gate weights and their backward, the expert capacity and the auxiliary load-balancing loss.
// tests/moe_test.cc checks them, through the CPU layer, against plain double-precision math and finite differences.
#pragma once

#include <cmath>

#include "element_math.h"  // TB_HOST_DEVICE

namespace tb::moe {

// Assignments an expert takes from a batch of N tokens with K choices each: ceil(capacity_factor · N · K / E).
// A factor of at least E / K gives every expert room for all N tokens, so nothing is dropped.
TB_HOST_DEVICE inline long long ExpertCapacity(double capacity_factor, long long tokens, int top_k, int experts) {
  return static_cast<long long>(ceil(capacity_factor * static_cast<double>(tokens * top_k) / experts));
}

// probs[i] = softmax(logits)[i] over `count` values; probs may be logits (in place).
TB_HOST_DEVICE inline void SoftmaxRow(const float* logits, int count, float* probs) {
  float max = logits[0];
  for (int i = 1; i < count; ++i) max = logits[i] > max ? logits[i] : max;
  float sum = 0.0f;
  for (int i = 0; i < count; ++i) {
    probs[i] = expf(logits[i] - max);
    sum += probs[i];
  }
  const float inverse = 1.0f / sum;
  for (int i = 0; i < count; ++i) probs[i] *= inverse;
}

// d loss / d logits of a softmax row from d loss / d probs: p_i · (dp_i − Σ_j p_j · dp_j).
TB_HOST_DEVICE inline void SoftmaxBackwardRow(const float* probs, const float* prob_grad, int count,
                                              float* logit_grad) {
  float dot = 0.0f;
  for (int i = 0; i < count; ++i) dot += probs[i] * prob_grad[i];
  for (int i = 0; i < count; ++i) logit_grad[i] = probs[i] * (prob_grad[i] - dot);
}

// The K most probable of E experts, most probable first; of equal probabilities the lower expert index comes first,
// so the choice is deterministic (K passes over the row: no sort, no scratch, as a GPU thread would do it).
TB_HOST_DEVICE inline void TopK(const float* probs, int experts, int top_k, int* chosen) {
  for (int j = 0; j < top_k; ++j) {
    int best = -1;
    for (int e = 0; e < experts; ++e) {
      bool taken = false;
      for (int i = 0; i < j; ++i) taken = taken || chosen[i] == e;
      if (!taken && (best < 0 || probs[e] > probs[best])) best = e;
    }
    chosen[j] = best;
  }
}

// Each choice's weight in the output. K = 1: the expert's probability p, as Switch Transformer (renormalizing one
// choice would give 1 and leave the router without a gradient from the task loss). K > 1: the chosen probabilities
// renormalized to sum to 1, as Mixtral and GShard.
TB_HOST_DEVICE inline void GateWeights(const float* probs, const int* chosen, int top_k, float* gate) {
  if (top_k == 1) {
    gate[0] = probs[chosen[0]];
    return;
  }
  float sum = 0.0f;
  for (int j = 0; j < top_k; ++j) sum += probs[chosen[j]];
  for (int j = 0; j < top_k; ++j) gate[j] = probs[chosen[j]] / sum;
}

// Adds d loss / d p of the chosen experts to prob_grad (E) from gate_grad (K) = d loss / d gate. K > 1, with
// S = Σ_j p_j over the choices and g_j = p_j / S: ∂g_j/∂p_m = (δ_jm − g_j) / S, so dp_m = (dg_m − Σ_j dg_j · g_j) / S.
TB_HOST_DEVICE inline void GateBackward(const float* probs, const int* chosen, const float* gate,
                                        const float* gate_grad, int top_k, float* prob_grad) {
  if (top_k == 1) {
    prob_grad[chosen[0]] += gate_grad[0];
    return;
  }
  float sum = 0.0f;
  float dot = 0.0f;
  for (int j = 0; j < top_k; ++j) {
    sum += probs[chosen[j]];
    dot += gate_grad[j] * gate[j];
  }
  for (int j = 0; j < top_k; ++j) prob_grad[chosen[j]] += (gate_grad[j] - dot) / sum;
}

// Switch Transformer's load-balancing loss (Fedus et al. 2021, eq. 4), for K choices per token:
// coef · E · Σ_i f_i · P_i, with f_i the fraction of the N·K choices that went to expert i (before dropping) and P_i
// the mean router probability of expert i over the N tokens. Perfect balance gives coef.
TB_HOST_DEVICE inline float AuxLoss(float coef, int experts, const float* fraction, const float* mean_prob) {
  float sum = 0.0f;
  for (int i = 0; i < experts; ++i) sum += fraction[i] * mean_prob[i];
  return coef * experts * sum;
}

// d AuxLoss / d p_i of one token's probability of expert i: coef · E · f_i / N (f_i counts choices: no gradient).
TB_HOST_DEVICE inline float AuxLossProbGrad(float coef, int experts, float fraction, long long tokens) {
  return coef * experts * fraction / static_cast<float>(tokens);
}

}  // namespace tb::moe
