#include "cpu_moe.h"

#include <algorithm>
#include <cstring>
#include <stdexcept>

#include "cpu_kernels.h"
#include "moe_math.h"

namespace tb::cpu {
namespace {

// Offset of row `row` in a row-major tensor of `width` columns.
size_t At(int64_t row, int64_t width) { return static_cast<size_t>(row) * static_cast<size_t>(width); }

}  // namespace

void RouteLogits(MoeRouting& routing, const MoeConfig& moe, size_t tokens) {
  const int experts = moe.experts;
  const int k = moe.top_k;
  routing.expert.resize(tokens * k);
  routing.gate.resize(tokens * k);
  for (size_t t = 0; t < tokens; ++t) {
    float* probs = routing.probs.data() + At(t, experts);
    moe::SoftmaxRow(probs, experts, probs);
    moe::TopK(probs, experts, k, routing.expert.data() + At(t, k));
    moe::GateWeights(probs, routing.expert.data() + At(t, k), k, routing.gate.data() + At(t, k));
  }
}

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

namespace {

// The router's probabilities (its logits x · Wrᵀ, then RouteLogits), each token's choices and gate weights.
void RouteTokens(MoeRouting& routing, const float* in, const float* router, const MoeConfig& moe, size_t tokens,
                 int channels) {
  routing.probs.resize(tokens * moe.experts);
  MatmulForward(routing.probs.data(), in, router, nullptr, nullptr, tokens, channels, moe.experts);
  RouteLogits(routing, moe, tokens);
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

// Copies each kept choice's token into its expert's block (all E experts', expert after expert).
void GatherChoices(std::vector<float>& gathered, const float* in, const MoeRouting& routing, int k, size_t tokens,
                   int channels) {
  gathered.resize(At(routing.block_begin.back(), channels));
  for (size_t i = 0; i < tokens * k; ++i) {
    if (routing.row[i] < 0) continue;
    std::memcpy(&gathered[At(routing.row[i], channels)], in + At(i / k, channels), sizeof(float) * channels);
  }
}

// The ranks of `experts`' group (1 without one).
int GroupSize(const MoeExperts* experts) { return experts && experts->group ? experts->group->size() : 1; }

// Expert parallel: source rows (R, C; gathered order) to the experts' ranks, regrouped there into expert rows
// (R_e, C). `received` is scratch.
void Dispatch(const MoeDispatchLayout& d, MoeExperts* experts, const std::vector<float>& source,
              std::vector<float>& expert_rows, std::vector<float>& received, int channels) {
  received.resize(At(d.recv_offsets.back(), 1) + d.recv_counts.back());
  TimeExchange(*experts, experts->figures.dispatch_s, [&] {
    experts->group->AllToAllV(source.data(), d.send_counts, d.send_offsets, received.data(), d.recv_counts,
                              d.recv_offsets, DataType::kFloat32);
  });
  experts->figures.dispatch_bytes += RemoteBytes(d.send_counts, sizeof(float), *experts);
  expert_rows.resize(At(d.expert_row.size(), channels));
  for (size_t i = 0; i < d.expert_row.size(); ++i) {
    std::memcpy(&expert_rows[At(d.expert_row[i], channels)], &received[At(static_cast<int64_t>(i), channels)],
                sizeof(float) * channels);
  }
}

// Expert parallel: expert rows (R_e, C) back to the ranks their tokens came from, in their gathered order (R, C):
// Dispatch reversed.
void Combine(const MoeDispatchLayout& d, MoeExperts* experts, const std::vector<float>& expert_rows,
             std::vector<float>& source, std::vector<float>& received, int channels) {
  received.resize(expert_rows.size());
  for (size_t i = 0; i < d.expert_row.size(); ++i) {
    std::memcpy(&received[At(static_cast<int64_t>(i), channels)], &expert_rows[At(d.expert_row[i], channels)],
                sizeof(float) * channels);
  }
  source.resize(At(d.send_offsets.back(), 1) + d.send_counts.back());
  TimeExchange(*experts, experts->figures.combine_s, [&] {
    experts->group->AllToAllV(received.data(), d.recv_counts, d.recv_offsets, source.data(), d.send_counts,
                              d.send_offsets, DataType::kFloat32);
  });
  experts->figures.combine_bytes += RemoteBytes(d.recv_counts, sizeof(float), *experts);
}

// One local expert's rows of the expert rows, and its tensors.
struct ExpertBlock {
  int begin = 0;  // first row
  int rows = 0;
  size_t fc_weight = 0, fc_bias = 0, proj_weight = 0, proj_bias = 0;  // offsets of its (F, C), (F), (C, F), (C)
};

ExpertBlock BlockOf(const std::vector<int>& block_begin, int expert, int channels, int ffn) {
  ExpertBlock block;
  block.begin = block_begin[expert];
  block.rows = block_begin[expert + 1] - block.begin;
  block.fc_weight = At(expert, At(ffn, channels));
  block.fc_bias = At(expert, ffn);
  block.proj_weight = block.fc_weight;  // (C, F) has the size of (F, C)
  block.proj_bias = At(expert, channels);
  return block;
}

// Every local expert's MLP on its rows: one GEMM per expert and matrix.
void ExpertsForward(MoeExpertRows& x, const MoeWeights& w, int ffn, int channels) {
  const int rows = x.block_begin.back();
  const int local_experts = static_cast<int>(x.block_begin.size()) - 1;
  x.fc_out.resize(At(rows, ffn));
  x.gelu_out.resize(At(rows, ffn));
  x.out.resize(At(rows, channels));
  for (int e = 0; e < local_experts; ++e) {
    const ExpertBlock b = BlockOf(x.block_begin, e, channels, ffn);
    if (b.rows == 0) continue;
    MatmulForward(&x.fc_out[At(b.begin, ffn)], &x.in[At(b.begin, channels)], w.fc_weight + b.fc_weight,
                  w.fc_bias + b.fc_bias, nullptr, b.rows, channels, ffn);
  }
  GeluForward(x.gelu_out.data(), x.fc_out.data(), x.gelu_out.size());
  for (int e = 0; e < local_experts; ++e) {
    const ExpertBlock b = BlockOf(x.block_begin, e, channels, ffn);
    if (b.rows == 0) continue;
    MatmulForward(&x.out[At(b.begin, channels)], &x.gelu_out[At(b.begin, ffn)], w.proj_weight + b.proj_weight,
                  w.proj_bias + b.proj_bias, nullptr, b.rows, ffn, channels);
  }
}

// out[t] = residual[t] + Σ over t's kept choices of gate · expert output (expert_out: R rows in gathered order).
void CombineOutputs(float* out, const float* residual, const MoeRouting& routing, const std::vector<float>& expert_out,
                    int k, size_t tokens, int channels) {
  for (size_t t = 0; t < tokens; ++t) {
    float* o = out + At(t, channels);
    if (residual != nullptr) {
      std::memcpy(o, residual + At(t, channels), sizeof(float) * channels);
    } else {
      std::fill(o, o + channels, 0.0f);
    }
    for (int j = 0; j < k; ++j) {
      const int row = routing.row[At(t, k) + j];
      if (row < 0) continue;
      const float gate = routing.gate[At(t, k) + j];
      const float* y = &expert_out[At(row, channels)];
      for (int c = 0; c < channels; ++c) o[c] += gate * y[c];
    }
  }
}

// The local experts this rank holds of E over the group; throws std::logic_error unless the group divides E.
int LocalExperts(const MoeConfig& moe, const MoeExperts* experts) {
  const int ranks = GroupSize(experts);
  if (moe.experts % ranks != 0) throw std::logic_error("expert parallel: the group does not divide the experts");
  if (experts && experts->group && experts->group->memory() != MemoryKind::kHost) {
    throw std::logic_error("the CPU MoE layer needs a host-memory expert group");
  }
  return moe.experts / ranks;
}

}  // namespace

void MoeForward(MoeActivations& activations, float* out, const float* in, const float* residual,
                const MoeWeights& weights, const MoeConfig& moe, size_t tokens, int channels, MoeExperts* experts) {
  MoeActivations& a = activations;
  const int local_experts = LocalExperts(moe, experts);
  RouteTokens(a.routing, in, weights.router, moe, tokens, channels);
  AssignRows(a.routing, moe, tokens);
  a.aux_loss = AuxLossOf(a.routing, moe, tokens);
  if (GroupSize(experts) == 1) {
    GatherChoices(a.experts.in, in, a.routing, moe.top_k, tokens, channels);
    a.experts.block_begin = a.routing.block_begin;
    ExpertsForward(a.experts, weights, moe.expert_ffn, channels);
    CombineOutputs(out, residual, a.routing, a.experts.out, moe.top_k, tokens, channels);
    return;
  }
  GatherChoices(a.gathered, in, a.routing, moe.top_k, tokens, channels);
  a.dispatch = PlanDispatch(a.routing.block_begin, *experts, local_experts, channels);
  a.experts.block_begin = a.dispatch.expert_begin;
  std::vector<float> received;
  Dispatch(a.dispatch, experts, a.gathered, a.experts.in, received, channels);
  ExpertsForward(a.experts, weights, moe.expert_ffn, channels);
  Combine(a.dispatch, experts, a.experts.out, a.expert_out, received, channels);
  CombineOutputs(out, residual, a.routing, a.expert_out, moe.top_k, tokens, channels);
}

namespace {

// MoeBackward's scratch: the gradients of the forward tensors of the same names.
struct BackwardBuffers {
  std::vector<float> expert_out;   // (R, C) gathered order, this rank's choices
  std::vector<float> gate;         // (N, K)
  std::vector<float> rows_out;     // (R_e, C) of the expert rows' outputs
  std::vector<float> hidden;       // (R_e, F): of gelu_out, then of fc_out in place
  std::vector<float> rows_in;      // (R_e, C) of the expert rows' inputs
  std::vector<float> gathered;     // (R, C) gathered order: of this rank's choices' inputs
  std::vector<float> received;     // the all-to-alls' scratch
};

// d loss / d expert_out = gate · out_grad[t] for each kept choice, and d loss / d gate = out_grad[t] · expert_out.
void OutputBackward(BackwardBuffers& g, const float* out_grad, const MoeRouting& routing,
                    const std::vector<float>& expert_out, int k, size_t tokens, int channels) {
  g.expert_out.resize(expert_out.size());
  g.gate.assign(tokens * k, 0.0f);
  for (size_t i = 0; i < tokens * k; ++i) {
    const int row = routing.row[i];
    if (row < 0) continue;  // a dropped choice has no output, and so no gradient
    const float* dy = out_grad + At(i / k, channels);
    const float* y = &expert_out[At(row, channels)];
    float* dexpert = &g.expert_out[At(row, channels)];
    float dot = 0.0f;
    for (int c = 0; c < channels; ++c) {
      dexpert[c] = routing.gate[i] * dy[c];
      dot += dy[c] * y[c];
    }
    g.gate[i] = dot;
  }
}

// Through each local expert's proj, GELU and fc, block by block: one GEMM per expert and gradient.
void ExpertsBackward(BackwardBuffers& g, const MoeGradients& dw, const MoeWeights& w, const MoeExpertRows& x, int ffn,
                     int channels) {
  const int local_experts = static_cast<int>(x.block_begin.size()) - 1;
  g.hidden.resize(x.fc_out.size());
  g.rows_in.resize(x.in.size());
  for (int e = 0; e < local_experts; ++e) {
    const ExpertBlock b = BlockOf(x.block_begin, e, channels, ffn);
    if (b.rows == 0) continue;
    MatmulBackward(&g.hidden[At(b.begin, ffn)], dw.proj_weight + b.proj_weight, dw.proj_bias + b.proj_bias,
                   &g.rows_out[At(b.begin, channels)], &x.gelu_out[At(b.begin, ffn)], w.proj_weight + b.proj_weight,
                   b.rows, ffn, channels);
  }
  GeluBackward(g.hidden.data(), x.fc_out.data(), g.hidden.size());
  for (int e = 0; e < local_experts; ++e) {
    const ExpertBlock b = BlockOf(x.block_begin, e, channels, ffn);
    if (b.rows == 0) continue;
    MatmulBackward(&g.rows_in[At(b.begin, channels)], dw.fc_weight + b.fc_weight, dw.fc_bias + b.fc_bias,
                   &g.hidden[At(b.begin, ffn)], &x.in[At(b.begin, channels)], w.fc_weight + b.fc_weight, b.rows,
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
                 size_t tokens, int channels, MoeExperts* experts) {
  const MoeActivations& a = activations;
  const MoeRouting& routing = a.routing;
  LocalExperts(moe, experts);
  const bool local = GroupSize(experts) == 1;
  BackwardBuffers g;
  OutputBackward(g, out_grad, routing, local ? a.experts.out : a.expert_out, moe.top_k, tokens, channels);
  // Without a group the gathered rows are the expert rows: handed over, not copied.
  if (local) {
    g.rows_out.swap(g.expert_out);
  } else {
    Dispatch(a.dispatch, experts, g.expert_out, g.rows_out, g.received, channels);
  }
  ExpertsBackward(g, gradients, weights, a.experts, moe.expert_ffn, channels);
  if (local) {
    g.gathered.swap(g.rows_in);
  } else {
    Combine(a.dispatch, experts, g.rows_in, g.gathered, g.received, channels);
  }
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
