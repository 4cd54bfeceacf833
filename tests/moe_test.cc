// The CPU mixture-of-experts layer (models/cpu_moe.h, models/moe_math.h) against a double-precision reference written
// out plainly here: its routing (top-k, ties, capacity in token order, drops), output and aux loss directly, and every
// gradient (input, router, experts' weights and biases) through central differences of the reference, top-1 and top-2,
// with and without dropped choices; the aux loss on hand-made routings; the load statistics.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <numbers>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "cpu_moe.h"
#include "model_config.h"
#include "moe_math.h"

namespace tb {
namespace {

// A layer's shape and its numbers: the input, the residual, the weights, and the weights of the loss's linear
// read-out of the output (loss = Σ readout · out + aux_loss), all held in double for the reference.
struct Problem {
  int tokens = 12, channels = 8, ffn = 6;
  MoeConfig moe;
  std::vector<double> in, residual, router, fc_weight, fc_bias, proj_weight, proj_bias, readout;

  std::vector<std::vector<double>*> Tensors() { return {&in, &router, &fc_weight, &fc_bias, &proj_weight, &proj_bias}; }
};

std::vector<double> Normal(size_t count, double stddev, std::mt19937& rng) {
  std::normal_distribution<double> normal(0.0, stddev);
  std::vector<double> values(count);
  // Rounded to float, so that the fp32 layer and the double reference start from the same numbers.
  for (double& v : values) v = static_cast<float>(normal(rng));
  return values;
}

// Random weights large enough that the router's probabilities differ clearly and GELU is curved.
Problem MakeProblem(int experts, int top_k, double capacity_factor, double aux_loss_coef, uint32_t seed) {
  Problem p;
  p.moe.experts = experts;
  p.moe.top_k = top_k;
  p.moe.expert_ffn = p.ffn;
  p.moe.capacity_factor = capacity_factor;
  p.moe.aux_loss_coef = aux_loss_coef;
  std::mt19937 rng(seed);
  const size_t n = p.tokens, c = p.channels, e = experts, f = p.ffn;
  p.in = Normal(n * c, 1.0, rng);
  p.residual = Normal(n * c, 1.0, rng);
  p.router = Normal(e * c, 0.6, rng);
  p.fc_weight = Normal(e * f * c, 0.5, rng);
  p.fc_bias = Normal(e * f, 0.3, rng);
  p.proj_weight = Normal(e * c * f, 0.5, rng);
  p.proj_bias = Normal(e * c, 0.3, rng);
  p.readout = Normal(n * c, 1.0, rng);
  return p;
}

// --- the reference, in double ---------------------------------------------------------------------------------

double Gelu(double x) {
  const double k = std::sqrt(2.0 / std::numbers::pi);
  return 0.5 * x * (1.0 + std::tanh(k * (x + 0.044715 * x * x * x)));
}

struct Reference {
  std::vector<double> out;               // (N, C), residual included
  std::vector<std::vector<int>> chosen;  // per token, its experts in order of choice
  std::vector<std::vector<bool>> kept;   // per token and choice
  double aux_loss = 0.0;
};

// Token t's router probabilities.
std::vector<double> Probabilities(const Problem& p, int t) {
  const int e = p.moe.experts, c = p.channels;
  std::vector<double> probs(e);
  for (int i = 0; i < e; ++i) {
    for (int j = 0; j < c; ++j) probs[i] += p.in[t * c + j] * p.router[i * c + j];
  }
  const double max = *std::max_element(probs.begin(), probs.end());
  double sum = 0.0;
  for (double& v : probs) sum += v = std::exp(v - max);
  for (double& v : probs) v /= sum;
  return probs;
}

// Expert `expert`'s output for token t: proj · Gelu(fc · x + fc_bias) + proj_bias.
std::vector<double> ExpertOutput(const Problem& p, int expert, int t) {
  const int c = p.channels, f = p.ffn;
  std::vector<double> hidden(f), out(c);
  for (int h = 0; h < f; ++h) {
    double sum = p.fc_bias[expert * f + h];
    for (int j = 0; j < c; ++j) sum += p.fc_weight[(expert * f + h) * c + j] * p.in[t * c + j];
    hidden[h] = Gelu(sum);
  }
  for (int j = 0; j < c; ++j) {
    out[j] = p.proj_bias[expert * c + j];
    for (int h = 0; h < f; ++h) out[j] += p.proj_weight[(expert * c + j) * f + h] * hidden[h];
  }
  return out;
}

// The layer as its definition reads: choices by a stable sort on descending probability, capacity counted in token
// order, gate p for one choice and p over the choices' sum for more.
Reference ReferenceForward(const Problem& p) {
  const int n = p.tokens, c = p.channels, e = p.moe.experts, k = p.moe.top_k;
  const double capacity = std::ceil(p.moe.capacity_factor * n * k / e);
  Reference r;
  r.out = p.residual;
  std::vector<int> assigned(e, 0);
  std::vector<double> mean_prob(e, 0.0);
  for (int t = 0; t < n; ++t) {
    const std::vector<double> probs = Probabilities(p, t);
    std::vector<int> order(e);
    std::iota(order.begin(), order.end(), 0);
    std::stable_sort(order.begin(), order.end(), [&](int a, int b) { return probs[a] > probs[b]; });
    order.resize(k);
    double chosen_sum = 0.0;
    for (int x : order) chosen_sum += probs[x];
    r.chosen.push_back(order);
    r.kept.emplace_back();
    for (int x : order) {
      const bool kept = assigned[x]++ < capacity;
      r.kept.back().push_back(kept);
      if (!kept) continue;
      const double gate = k == 1 ? probs[x] : probs[x] / chosen_sum;
      const std::vector<double> y = ExpertOutput(p, x, t);
      for (int j = 0; j < c; ++j) r.out[t * c + j] += gate * y[j];
    }
    for (int i = 0; i < e; ++i) mean_prob[i] += probs[i] / n;
  }
  for (int i = 0; i < e; ++i) r.aux_loss += static_cast<double>(assigned[i]) / (n * k) * mean_prob[i];
  r.aux_loss *= p.moe.aux_loss_coef * e;
  return r;
}

double ReferenceLoss(const Problem& p) {
  const Reference r = ReferenceForward(p);
  double loss = r.aux_loss;
  for (size_t i = 0; i < r.out.size(); ++i) loss += p.readout[i] * r.out[i];
  return loss;
}

// --- the layer under test, in float ---------------------------------------------------------------------------

std::vector<float> Floats(const std::vector<double>& values) { return {values.begin(), values.end()}; }

// The layer's inputs, weights and gradients in float.
struct Layer {
  std::vector<float> in, residual, router, fc_weight, fc_bias, proj_weight, proj_bias, readout;
  std::vector<float> out, in_grad, router_grad, fc_weight_grad, fc_bias_grad, proj_weight_grad, proj_bias_grad;
  cpu::MoeActivations activations;

  explicit Layer(const Problem& p)
      : in(Floats(p.in)),
        residual(Floats(p.residual)),
        router(Floats(p.router)),
        fc_weight(Floats(p.fc_weight)),
        fc_bias(Floats(p.fc_bias)),
        proj_weight(Floats(p.proj_weight)),
        proj_bias(Floats(p.proj_bias)),
        readout(Floats(p.readout)),
        out(in.size()),
        in_grad(in.size()),
        router_grad(router.size()),
        fc_weight_grad(fc_weight.size()),
        fc_bias_grad(fc_bias.size()),
        proj_weight_grad(proj_weight.size()),
        proj_bias_grad(proj_bias.size()) {}

  cpu::MoeWeights Weights() const {
    return {router.data(), fc_weight.data(), fc_bias.data(), proj_weight.data(), proj_bias.data()};
  }
  cpu::MoeGradients Gradients() {
    return {router_grad.data(), fc_weight_grad.data(), fc_bias_grad.data(), proj_weight_grad.data(),
            proj_bias_grad.data()};
  }
  // Gradients in the order of Problem::Tensors.
  std::vector<const std::vector<float>*> GradientTensors() const {
    return {&in_grad, &router_grad, &fc_weight_grad, &fc_bias_grad, &proj_weight_grad, &proj_bias_grad};
  }
};

// Forward, then backward of loss = Σ readout · out + aux_loss.
void RunLayer(Layer& layer, const Problem& p) {
  cpu::MoeForward(layer.activations, layer.out.data(), layer.in.data(), layer.residual.data(), layer.Weights(), p.moe,
                  p.tokens, p.channels);
  cpu::MoeBackward(layer.in_grad.data(), layer.Gradients(), layer.readout.data(), 1.0f, layer.in.data(),
                   layer.Weights(), layer.activations, p.moe, p.tokens, p.channels);
}

void ExpectSameRouting(const cpu::MoeRouting& routing, const Reference& r, int top_k) {
  for (size_t t = 0; t < r.chosen.size(); ++t) {
    for (int j = 0; j < top_k; ++j) {
      SCOPED_TRACE("token " + std::to_string(t) + ", choice " + std::to_string(j));
      EXPECT_EQ(routing.expert[t * top_k + j], r.chosen[t][j]);
      EXPECT_EQ(routing.row[t * top_k + j] >= 0, r.kept[t][j]);
    }
  }
}

void ExpectOutputMatches(const std::vector<float>& out, const Reference& r) {
  for (size_t i = 0; i < r.out.size(); ++i) EXPECT_NEAR(out[i], r.out[i], 1e-5 * std::max(1.0, std::abs(r.out[i])));
}

// Every element of every gradient against the central difference of the reference loss. With h = 1e-6 in double the
// quotient is exact to ~1e-9, so the tolerance measures the fp32 arithmetic alone (rounding ~1e-6 relative); it is
// tight enough that leaving out any term of the backward fails (e.g. the renormalization's −Σ dg·g of GateBackward).
void ExpectGradientsMatchReference(Problem p, const Layer& layer) {
  constexpr double kStep = 1e-6;
  const std::vector<std::string> names = {"in", "router", "fc_weight", "fc_bias", "proj_weight", "proj_bias"};
  const std::vector<std::vector<double>*> tensors = p.Tensors();
  const std::vector<const std::vector<float>*> gradients = layer.GradientTensors();
  for (size_t k = 0; k < tensors.size(); ++k) {
    for (size_t i = 0; i < tensors[k]->size(); ++i) {
      SCOPED_TRACE(names[k] + "[" + std::to_string(i) + "]");
      double& value = (*tensors[k])[i];
      const double saved = value;
      value = saved + kStep;
      const double plus = ReferenceLoss(p);
      value = saved - kStep;
      const double minus = ReferenceLoss(p);
      value = saved;
      const double numeric = (plus - minus) / (2 * kStep);
      const double analytic = (*gradients[k])[i];
      EXPECT_NEAR(analytic, numeric, 2e-4 * std::max(std::abs(analytic), std::abs(numeric)) + 1e-5);
    }
  }
}

// Forward against the reference (routing, output, aux loss), then every gradient.
void CheckLayer(const Problem& p, bool expect_drops) {
  Layer layer(p);
  RunLayer(layer, p);
  const Reference r = ReferenceForward(p);
  ExpectSameRouting(layer.activations.routing, r, p.moe.top_k);
  EXPECT_EQ(layer.activations.routing.dropped > 0, expect_drops);
  ExpectOutputMatches(layer.out, r);
  EXPECT_NEAR(layer.activations.aux_loss, r.aux_loss, 1e-6 * r.aux_loss);
  ExpectGradientsMatchReference(p, layer);
}

// A capacity factor of E / K gives each expert room for every token: nothing is dropped. 0.5 drops.
TEST(MoeLayer, TopOneWithoutDrops) { CheckLayer(MakeProblem(4, 1, 4.0, 0.01, 1), false); }
TEST(MoeLayer, TopOneWithDrops) { CheckLayer(MakeProblem(4, 1, 0.5, 0.01, 2), true); }
TEST(MoeLayer, TopTwoWithoutDrops) { CheckLayer(MakeProblem(4, 2, 2.0, 0.01, 3), false); }
TEST(MoeLayer, TopTwoWithDrops) { CheckLayer(MakeProblem(4, 2, 0.5, 0.01, 4), true); }
TEST(MoeLayer, TopThreeOfFiveWithDrops) { CheckLayer(MakeProblem(5, 3, 0.75, 0.01, 5), true); }

// The aux loss alone (a zero read-out): the router's gradient is then the aux loss's alone, checked at full weight.
TEST(MoeLayer, AuxLossGradientAlone) {
  Problem p = MakeProblem(4, 2, 2.0, 1.0, 6);
  std::fill(p.readout.begin(), p.readout.end(), 0.0);
  CheckLayer(p, false);
}

// The choice is by descending probability; equal probabilities go to the lower expert index.
TEST(MoeMath, TopKBreaksTiesByLowerIndex) {
  const float probs[] = {0.1f, 0.3f, 0.3f, 0.3f};
  int chosen[3];
  moe::TopK(probs, 4, 2, chosen);
  EXPECT_EQ(chosen[0], 1);
  EXPECT_EQ(chosen[1], 2);
  const float other[] = {0.2f, 0.2f, 0.5f, 0.1f};
  moe::TopK(other, 4, 3, chosen);
  EXPECT_EQ(chosen[0], 2);
  EXPECT_EQ(chosen[1], 0);
  EXPECT_EQ(chosen[2], 1);
}

TEST(MoeMath, CapacityRoundsUp) {
  EXPECT_EQ(moe::ExpertCapacity(1.0, 6, 2, 4), 3);
  EXPECT_EQ(moe::ExpertCapacity(1.25, 10, 2, 8), 4);  // 3.125
  EXPECT_EQ(moe::ExpertCapacity(4.0, 12, 1, 4), 12);  // E / K: room for every token
  EXPECT_EQ(moe::ExpertCapacity(0.01, 12, 1, 4), 1);
}

// A zero router gives every expert the same probability: every token chooses experts 0 and 1, in that order, each with
// gate 1/2. With capacity ceil(1 · 6 · 2 / 4) = 3, tokens 0-2 are kept by both and tokens 3-5 dropped by both, so
// their output is the residual, bit for bit.
TEST(MoeLayer, TiesGoToTheLowerIndexAndCapacityFillsInTokenOrder) {
  Problem p = MakeProblem(4, 2, 1.0, 0.01, 7);
  p.tokens = 6;
  p.in.resize(6 * p.channels);
  p.residual.resize(6 * p.channels);
  p.readout.resize(6 * p.channels);
  std::fill(p.router.begin(), p.router.end(), 0.0);
  Layer layer(p);
  RunLayer(layer, p);
  const cpu::MoeRouting& routing = layer.activations.routing;
  EXPECT_EQ(routing.capacity, 3);
  for (int t = 0; t < 6; ++t) {
    SCOPED_TRACE("token " + std::to_string(t));
    EXPECT_EQ(routing.expert[2 * t], 0);
    EXPECT_EQ(routing.expert[2 * t + 1], 1);
    EXPECT_EQ(routing.gate[2 * t], 0.5f);
    EXPECT_EQ(routing.row[2 * t] >= 0, t < 3);
    EXPECT_EQ(routing.row[2 * t + 1] >= 0, t < 3);
    if (t < 3) continue;
    for (int c = 0; c < p.channels; ++c) EXPECT_EQ(layer.out[t * p.channels + c], layer.residual[t * p.channels + c]);
  }
  const Reference r = ReferenceForward(p);
  ExpectSameRouting(routing, r, 2);
  ExpectOutputMatches(layer.out, r);

  const cpu::MoeLoadStats stats = cpu::LoadStatsOf(routing);
  EXPECT_EQ(stats.assigned, (std::vector<int64_t>{6, 6, 0, 0}));
  EXPECT_EQ(stats.kept, (std::vector<int64_t>{3, 3, 0, 0}));
  EXPECT_EQ(stats.dropped, 6);
  EXPECT_DOUBLE_EQ(stats.max_over_mean, 2.0);  // 6 against the mean 6 · 2 / 4 = 3
}

// The aux loss of a hand-made routing: C = 2, E = 2, one-hot inputs and a router (ln 3 on its diagonal) that give a
// token (1, 0) the probabilities (3/4, 1/4) and a token (0, 1) the probabilities (1/4, 3/4).
float AuxLossOf(const std::vector<double>& in, int top_k) {
  Problem p;
  p.tokens = static_cast<int>(in.size() / 2);
  p.channels = 2;
  p.ffn = 1;
  p.moe.experts = 2;
  p.moe.top_k = top_k;
  p.moe.expert_ffn = 1;
  p.moe.capacity_factor = 2.0;
  p.moe.aux_loss_coef = 0.01;
  p.in = in;
  p.residual.assign(in.size(), 0.0);
  p.readout.assign(in.size(), 0.0);
  p.router = {std::log(3.0), 0.0, 0.0, std::log(3.0)};
  p.fc_weight.assign(2 * 1 * 2, 0.0);
  p.fc_bias.assign(2, 0.0);
  p.proj_weight.assign(2 * 2 * 1, 0.0);
  p.proj_bias.assign(2 * 2, 0.0);
  Layer layer(p);
  RunLayer(layer, p);
  return layer.activations.aux_loss;
}

TEST(MoeLayer, AuxLossOfHandMadeRoutings) {
  // Three tokens to expert 0, one to expert 1 (top-1): f = (3/4, 1/4), P = ((3·3/4 + 1/4)/4, (3·1/4 + 3/4)/4) =
  // (5/8, 3/8), aux = 0.01 · 2 · (3/4 · 5/8 + 1/4 · 3/8) = 0.01 · 1.125.
  EXPECT_NEAR(AuxLossOf({1, 0, 1, 0, 1, 0, 0, 1}, 1), 0.01 * 1.125, 1e-8);
  // Balanced: f = P = (1/2, 1/2), aux = coef, the minimum.
  EXPECT_NEAR(AuxLossOf({1, 0, 1, 0, 0, 1, 0, 1}, 1), 0.01, 1e-8);
  // Top-2 of 2 experts: every token chooses both, f = (1/2, 1/2) over the N·K choices, so aux = coef · (P_0 + P_1).
  EXPECT_NEAR(AuxLossOf({1, 0, 1, 0, 1, 0, 0, 1}, 2), 0.01, 1e-8);
}

// Without a residual the output is the experts' gated sum alone.
TEST(MoeLayer, NullResidualMeansZero) {
  const Problem p = MakeProblem(4, 2, 2.0, 0.01, 8);
  Layer with(p);
  RunLayer(with, p);
  std::vector<float> alone(with.out.size());
  cpu::MoeForward(with.activations, alone.data(), with.in.data(), nullptr, with.Weights(), p.moe, p.tokens, p.channels);
  for (size_t i = 0; i < alone.size(); ++i) EXPECT_NEAR(alone[i] + with.residual[i], with.out[i], 1e-6);
}

}  // namespace
}  // namespace tb
