#include "cpu_moe.h"

#include <algorithm>
#include <cstring>

#include "cpu_kernels.h"
#include "moe_math.h"

namespace tb::cpu {
namespace {

// Offset of row `row` in a row-major tensor of `width` columns.
size_t At(int64_t row, int64_t width) { return static_cast<size_t>(row) * static_cast<size_t>(width); }

// One expert's rows in the gathered blocks, and its tensors.
struct ExpertBlock {
  int begin = 0;  // first gathered row
  int rows = 0;
  size_t fc_weight = 0, fc_bias = 0, proj_weight = 0, proj_bias = 0;  // offsets of its (F, C), (F), (C, F), (C)
};

ExpertBlock BlockOf(const MoeRouting& routing, int expert, int channels, int ffn) {
  ExpertBlock block;
  block.begin = routing.block_begin[expert];
  block.rows = routing.block_begin[expert + 1] - block.begin;
  block.fc_weight = At(expert, At(ffn, channels));
  block.fc_bias = At(expert, ffn);
  block.proj_weight = block.fc_weight;  // (C, F) has the size of (F, C)
  block.proj_bias = At(expert, channels);
  return block;
}

// The router's probabilities, each token's choices most probable first, and their gate weights.
void RouteTokens(MoeRouting& routing, const float* in, const float* router, const MoeConfig& moe, size_t tokens,
                 int channels) {
  const int experts = moe.experts;
  const int k = moe.top_k;
  routing.probs.resize(tokens * experts);
  // The logits (N, E) land in probs and become probabilities in place.
  MatmulForward(routing.probs.data(), in, router, nullptr, nullptr, tokens, channels, experts);
  routing.expert.resize(tokens * k);
  routing.gate.resize(tokens * k);
  for (size_t t = 0; t < tokens; ++t) {
    float* probs = routing.probs.data() + At(t, experts);
    moe::SoftmaxRow(probs, experts, probs);
    moe::TopK(probs, experts, k, routing.expert.data() + At(t, k));
    moe::GateWeights(probs, routing.expert.data() + At(t, k), k, routing.gate.data() + At(t, k));
  }
}

// Gives each choice its row in the gathered blocks, in token order; the choices an expert gets past its capacity are
// dropped (row -1). An expert's block holds its kept choices in token order.
void AssignRows(MoeRouting& routing, const MoeConfig& moe, size_t tokens) {
  const int experts = moe.experts;
  const size_t choices = tokens * moe.top_k;
  routing.capacity = moe::ExpertCapacity(moe.capacity_factor, static_cast<long long>(tokens), moe.top_k, experts);
  routing.assigned.assign(experts, 0);
  routing.row.assign(choices, -1);
  for (size_t i = 0; i < choices; ++i) {
    const int64_t order = routing.assigned[routing.expert[i]]++;  // among the expert's choices so far
    if (order < routing.capacity) routing.row[i] = static_cast<int>(order);
  }
  routing.block_begin.assign(experts + 1, 0);
  for (int e = 0; e < experts; ++e) {
    routing.block_begin[e + 1] =
        routing.block_begin[e] + static_cast<int>(std::min(routing.assigned[e], routing.capacity));
  }
  routing.dropped = 0;
  for (size_t i = 0; i < choices; ++i) {
    if (routing.row[i] < 0) {
      ++routing.dropped;
    } else {
      routing.row[i] += routing.block_begin[routing.expert[i]];
    }
  }
}

// coef · E · Σ f_i · P_i over this batch's routing.
float AuxLossOf(const MoeRouting& routing, const MoeConfig& moe, size_t tokens) {
  const int experts = moe.experts;
  std::vector<float> fraction(experts), mean_prob(experts);
  const double choices = static_cast<double>(tokens) * moe.top_k;
  for (int e = 0; e < experts; ++e) {
    fraction[e] = static_cast<float>(static_cast<double>(routing.assigned[e]) / choices);
    double sum = 0.0;
    for (size_t t = 0; t < tokens; ++t) sum += routing.probs[At(t, experts) + e];
    mean_prob[e] = static_cast<float>(sum / static_cast<double>(tokens));
  }
  return moe::AuxLoss(static_cast<float>(moe.aux_loss_coef), experts, fraction.data(), mean_prob.data());
}

// Copies each kept choice's token into its expert's block, then runs every expert's MLP on its block: one GEMM per
// expert and matrix.
void RunExperts(MoeActivations& a, const float* in, const MoeWeights& w, const MoeConfig& moe, size_t tokens,
                int channels) {
  const MoeRouting& routing = a.routing;
  const int ffn = moe.expert_ffn;
  const int rows = routing.block_begin[moe.experts];
  a.gathered.resize(At(rows, channels));
  a.fc_out.resize(At(rows, ffn));
  a.gelu_out.resize(At(rows, ffn));
  a.expert_out.resize(At(rows, channels));
  for (size_t i = 0; i < tokens * moe.top_k; ++i) {
    if (routing.row[i] < 0) continue;
    std::memcpy(&a.gathered[At(routing.row[i], channels)], in + At(i / moe.top_k, channels), sizeof(float) * channels);
  }
  for (int e = 0; e < moe.experts; ++e) {
    const ExpertBlock b = BlockOf(routing, e, channels, ffn);
    if (b.rows == 0) continue;
    MatmulForward(&a.fc_out[At(b.begin, ffn)], &a.gathered[At(b.begin, channels)], w.fc_weight + b.fc_weight,
                  w.fc_bias + b.fc_bias, nullptr, b.rows, channels, ffn);
  }
  GeluForward(a.gelu_out.data(), a.fc_out.data(), a.gelu_out.size());
  for (int e = 0; e < moe.experts; ++e) {
    const ExpertBlock b = BlockOf(routing, e, channels, ffn);
    if (b.rows == 0) continue;
    MatmulForward(&a.expert_out[At(b.begin, channels)], &a.gelu_out[At(b.begin, ffn)], w.proj_weight + b.proj_weight,
                  w.proj_bias + b.proj_bias, nullptr, b.rows, ffn, channels);
  }
}

// out[t] = residual[t] + Σ over t's kept choices of gate · expert output.
void CombineOutputs(float* out, const float* residual, const MoeActivations& a, int k, size_t tokens, int channels) {
  for (size_t t = 0; t < tokens; ++t) {
    float* o = out + At(t, channels);
    if (residual != nullptr) {
      std::memcpy(o, residual + At(t, channels), sizeof(float) * channels);
    } else {
      std::fill(o, o + channels, 0.0f);
    }
    for (int j = 0; j < k; ++j) {
      const int row = a.routing.row[At(t, k) + j];
      if (row < 0) continue;
      const float gate = a.routing.gate[At(t, k) + j];
      const float* y = &a.expert_out[At(row, channels)];
      for (int c = 0; c < channels; ++c) o[c] += gate * y[c];
    }
  }
}

}  // namespace

void MoeForward(MoeActivations& activations, float* out, const float* in, const float* residual,
                const MoeWeights& weights, const MoeConfig& moe, size_t tokens, int channels) {
  RouteTokens(activations.routing, in, weights.router, moe, tokens, channels);
  AssignRows(activations.routing, moe, tokens);
  activations.aux_loss = AuxLossOf(activations.routing, moe, tokens);
  RunExperts(activations, in, weights, moe, tokens, channels);
  CombineOutputs(out, residual, activations, moe.top_k, tokens, channels);
}

namespace {

// MoeBackward's scratch: the gradients of the forward tensors of the same names.
struct BackwardBuffers {
  std::vector<float> expert_out;  // (R, C)
  std::vector<float> hidden;      // (R, F): of gelu_out, then of fc_out in place
  std::vector<float> gathered;    // (R, C)
  std::vector<float> gate;        // (N, K)
};

// d loss / d expert_out = gate · out_grad[t] for each kept choice, and d loss / d gate = out_grad[t] · expert_out.
void OutputBackward(BackwardBuffers& g, const float* out_grad, const MoeActivations& a, int k, size_t tokens,
                    int channels) {
  const MoeRouting& routing = a.routing;
  g.expert_out.resize(a.expert_out.size());
  g.gate.assign(tokens * k, 0.0f);
  for (size_t i = 0; i < tokens * k; ++i) {
    const int row = routing.row[i];
    if (row < 0) continue;  // a dropped choice has no output, and so no gradient
    const float* dy = out_grad + At(i / k, channels);
    const float* y = &a.expert_out[At(row, channels)];
    float* dexpert = &g.expert_out[At(row, channels)];
    float dot = 0.0f;
    for (int c = 0; c < channels; ++c) {
      dexpert[c] = routing.gate[i] * dy[c];
      dot += dy[c] * y[c];
    }
    g.gate[i] = dot;
  }
}

// Through each expert's proj, GELU and fc, block by block: one GEMM per expert and gradient.
void ExpertsBackward(BackwardBuffers& g, const MoeGradients& dw, const MoeWeights& w, const MoeActivations& a,
                     const MoeConfig& moe, int channels) {
  const int ffn = moe.expert_ffn;
  g.hidden.resize(a.fc_out.size());
  g.gathered.resize(a.gathered.size());
  for (int e = 0; e < moe.experts; ++e) {
    const ExpertBlock b = BlockOf(a.routing, e, channels, ffn);
    if (b.rows == 0) continue;
    MatmulBackward(&g.hidden[At(b.begin, ffn)], dw.proj_weight + b.proj_weight, dw.proj_bias + b.proj_bias,
                   &g.expert_out[At(b.begin, channels)], &a.gelu_out[At(b.begin, ffn)], w.proj_weight + b.proj_weight,
                   b.rows, ffn, channels);
  }
  GeluBackward(g.hidden.data(), a.fc_out.data(), g.hidden.size());
  for (int e = 0; e < moe.experts; ++e) {
    const ExpertBlock b = BlockOf(a.routing, e, channels, ffn);
    if (b.rows == 0) continue;
    MatmulBackward(&g.gathered[At(b.begin, channels)], dw.fc_weight + b.fc_weight, dw.fc_bias + b.fc_bias,
                   &g.hidden[At(b.begin, ffn)], &a.gathered[At(b.begin, channels)], w.fc_weight + b.fc_weight, b.rows,
                   channels, ffn);
  }
}

// d loss / d logits (N, E): the gates' gradient through their renormalization and the aux loss's through P_i, then
// through the softmax.
std::vector<float> RouterLogitGrad(const BackwardBuffers& g, float aux_loss_grad, const MoeRouting& routing,
                                   const MoeConfig& moe, size_t tokens) {
  const int experts = moe.experts;
  const int k = moe.top_k;
  const float coef = static_cast<float>(moe.aux_loss_coef) * aux_loss_grad;
  const double choices = static_cast<double>(tokens) * k;
  std::vector<float> aux_prob_grad(experts);
  for (int e = 0; e < experts; ++e) {
    const float fraction = static_cast<float>(static_cast<double>(routing.assigned[e]) / choices);
    aux_prob_grad[e] = moe::AuxLossProbGrad(coef, experts, fraction, static_cast<long long>(tokens));
  }
  std::vector<float> logit_grad(At(tokens, experts));
  std::vector<float> prob_grad(experts);
  for (size_t t = 0; t < tokens; ++t) {
    const float* probs = &routing.probs[At(t, experts)];
    prob_grad = aux_prob_grad;
    moe::GateBackward(probs, &routing.expert[At(t, k)], &routing.gate[At(t, k)], &g.gate[At(t, k)], k,
                      prob_grad.data());
    moe::SoftmaxBackwardRow(probs, prob_grad.data(), experts, &logit_grad[At(t, experts)]);
  }
  return logit_grad;
}

}  // namespace

void MoeBackward(float* in_grad, const MoeGradients& gradients, const float* out_grad, float aux_loss_grad,
                 const float* in, const MoeWeights& weights, const MoeActivations& activations, const MoeConfig& moe,
                 size_t tokens, int channels) {
  const MoeRouting& routing = activations.routing;
  BackwardBuffers g;
  OutputBackward(g, out_grad, activations, moe.top_k, tokens, channels);
  ExpertsBackward(g, gradients, weights, activations, moe, channels);
  const std::vector<float> logit_grad = RouterLogitGrad(g, aux_loss_grad, routing, moe, tokens);
  // The router's input gradient overwrites in_grad; each kept choice's expert input gradient adds to its token's.
  MatmulBackward(in_grad, gradients.router, nullptr, logit_grad.data(), in, weights.router, tokens, channels,
                 moe.experts);
  for (size_t i = 0; i < tokens * moe.top_k; ++i) {
    if (routing.row[i] < 0) continue;
    float* dx = in_grad + At(i / moe.top_k, channels);
    const float* dgathered = &g.gathered[At(routing.row[i], channels)];
    for (int c = 0; c < channels; ++c) dx[c] += dgathered[c];
  }
}

MoeLoadStats LoadStatsOf(const MoeRouting& routing) {
  MoeLoadStats stats;
  stats.assigned = routing.assigned;
  stats.dropped = routing.dropped;
  int64_t choices = 0;
  int64_t busiest = 0;
  for (const int64_t assigned : routing.assigned) {
    stats.kept.push_back(std::min(assigned, routing.capacity));
    choices += assigned;
    busiest = std::max(busiest, assigned);
  }
  const double mean = static_cast<double>(choices) / static_cast<double>(routing.assigned.size());
  stats.max_over_mean = mean > 0 ? static_cast<double>(busiest) / mean : 0.0;
  return stats;
}

}  // namespace tb::cpu
