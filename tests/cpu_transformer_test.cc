// The CPU reference transformer: its layout, its initialisation, and its arithmetic against an independent
// double-precision forward written out naively here — the loss directly, the gradients through central
// differences of that forward — then AdamW, overfitting one batch, the gradient-ready order and input checks;
// and the vectorisable Exp the kernels use, against libm.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <map>
#include <numbers>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "cpu_kernels.h"
#include "error.h"
#include "input_error_of.h"
#include "model_config.h"
#include "moe_stats.h"
#include "random.h"
#include "token_windows.h"
#include "transformer.h"

namespace tb {
namespace {

// layers 2, C 16, heads 2 (head_dim 8), vocab 37 padded to 128, 12 positions: every tensor small enough to
// check element by element, and a batch of T = 8 < 12 leaves positional rows that must get no gradient.
ModelConfig TinyConfig() { return CustomModel(2, 16, 2, 37, 12); }
constexpr int kBatch = 2;
constexpr int kSeq = 8;

struct Batch {
  std::vector<int32_t> inputs;
  std::vector<int32_t> targets;
};

Batch RandomBatch(int vocab, int batch, int seq, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int32_t> token(0, vocab - 1);
  Batch b;
  for (int i = 0; i < batch * seq; ++i) {
    b.inputs.push_back(token(rng));
    b.targets.push_back(token(rng));
  }
  return b;
}

// Replaces the GPT-2 initialisation with larger values (nonzero biases, LayerNorm gains away from 1) so that
// attention is peaked and GELU is curved: the check then exercises every nonlinearity, not a near-linear model.
void Randomise(Transformer& model, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.0f, 0.3f);
  const ModelConfig& config = model.config();
  for (const TensorSlot& slot : model.layout()) {
    const bool gain = !slot.decay && slot.name.ends_with(".weight");
    const size_t count = slot.name == "wte" ? static_cast<size_t>(config.vocab) * config.d_model : slot.count;
    for (size_t i = 0; i < count; ++i) model.parameters()[slot.offset + i] = (gain ? 1.0f : 0.0f) + normal(rng);
  }
}

// The forward pass written out plainly in double precision, over weights stored (out_features, in_features):
// the oracle the fp32 BLAS implementation is checked against.
class ReferenceModel {
 public:
  ReferenceModel(const ModelConfig& config, const std::vector<TensorSlot>& layout, const float* params)
      : config_(config), params_(params, params + layout.back().offset + layout.back().count) {
    for (const TensorSlot& slot : layout) offsets_[slot.name] = slot.offset;
  }

  std::vector<double>& params() { return params_; }

  double Loss(const Batch& batch, int batch_size, int seq) const {
    const int c = config_.d_model;
    const int n = batch_size * seq;
    const double* wte = At("wte");
    const double* wpe = At("wpe");
    std::vector<double> x(static_cast<size_t>(n) * c);
    for (int i = 0; i < n; ++i) {
      for (int j = 0; j < c; ++j) x[i * c + j] = wte[batch.inputs[i] * c + j] + wpe[(i % seq) * c + j];
    }
    for (int l = 0; l < config_.layers; ++l) {
      const std::string h = "h" + std::to_string(l) + ".";
      std::vector<double> qkv = Linear(LayerNorm(x, n, h + "ln1"), n, c, 3 * c, h + "attn.qkv");
      std::vector<double> attended = Attention(qkv, batch_size, seq);
      std::vector<double> projected = Linear(attended, n, c, c, h + "attn.proj");
      for (size_t i = 0; i < x.size(); ++i) x[i] += projected[i];
      std::vector<double> hidden = Linear(LayerNorm(x, n, h + "ln2"), n, c, 4 * c, h + "mlp.fc");
      const double k = std::sqrt(2.0 / std::numbers::pi);
      for (double& v : hidden) v = 0.5 * v * (1.0 + std::tanh(k * (v + 0.044715 * v * v * v)));
      std::vector<double> mlp = Linear(hidden, n, 4 * c, c, h + "mlp.proj");
      for (size_t i = 0; i < x.size(); ++i) x[i] += mlp[i];
    }
    std::vector<double> final_norm = LayerNorm(x, n, "lnf");
    double loss = 0.0;
    for (int i = 0; i < n; ++i) {
      std::vector<double> logits(config_.vocab);
      for (int v = 0; v < config_.vocab; ++v) {
        for (int j = 0; j < c; ++j) logits[v] += final_norm[i * c + j] * wte[v * c + j];
      }
      const double max = *std::max_element(logits.begin(), logits.end());
      double sum = 0.0;
      for (double logit : logits) sum += std::exp(logit - max);
      loss += std::log(sum) + max - logits[batch.targets[i]];
    }
    return loss / n;
  }

 private:
  const double* At(const std::string& name) const { return params_.data() + offsets_.at(name); }

  std::vector<double> LayerNorm(const std::vector<double>& in, int rows, const std::string& name) const {
    const int c = config_.d_model;
    const double* w = At(name + ".weight");
    const double* b = At(name + ".bias");
    std::vector<double> out(in.size());
    for (int r = 0; r < rows; ++r) {
      double mean = 0.0;
      double variance = 0.0;
      for (int j = 0; j < c; ++j) mean += in[r * c + j] / c;
      for (int j = 0; j < c; ++j) variance += (in[r * c + j] - mean) * (in[r * c + j] - mean) / c;
      for (int j = 0; j < c; ++j) out[r * c + j] = (in[r * c + j] - mean) / std::sqrt(variance + 1e-5) * w[j] + b[j];
    }
    return out;
  }

  std::vector<double> Linear(const std::vector<double>& in, int rows, int in_channels, int out_channels,
                             const std::string& name) const {
    const double* w = At(name + ".weight");  // (out_channels, in_channels)
    const double* b = At(name + ".bias");
    std::vector<double> out(static_cast<size_t>(rows) * out_channels);
    for (int r = 0; r < rows; ++r) {
      for (int o = 0; o < out_channels; ++o) {
        double sum = b[o];
        for (int i = 0; i < in_channels; ++i) sum += in[r * in_channels + i] * w[o * in_channels + i];
        out[r * out_channels + o] = sum;
      }
    }
    return out;
  }

  std::vector<double> Attention(const std::vector<double>& qkv, int batch_size, int seq) const {
    const int c = config_.d_model;
    const int head_dim = config_.head_dim();
    std::vector<double> out(static_cast<size_t>(batch_size) * seq * c, 0.0);
    for (int b = 0; b < batch_size; ++b) {
      for (int h = 0; h < config_.heads; ++h) {
        for (int t = 0; t < seq; ++t) {
          const double* q = &qkv[((b * seq + t) * 3) * c + h * head_dim];
          std::vector<double> weights(t + 1);
          for (int u = 0; u <= t; ++u) {
            const double* k = &qkv[((b * seq + u) * 3 + 1) * c + h * head_dim];
            for (int d = 0; d < head_dim; ++d) weights[u] += q[d] * k[d] / std::sqrt(head_dim);
          }
          const double max = *std::max_element(weights.begin(), weights.end());
          double sum = 0.0;
          for (double& w : weights) sum += (w = std::exp(w - max));
          for (int u = 0; u <= t; ++u) {
            const double* v = &qkv[((b * seq + u) * 3 + 2) * c + h * head_dim];
            for (int d = 0; d < head_dim; ++d) out[(b * seq + t) * c + h * head_dim + d] += weights[u] / sum * v[d];
          }
        }
      }
    }
    return out;
  }

  ModelConfig config_;
  std::vector<double> params_;
  std::map<std::string, size_t> offsets_;
};

std::vector<float> Parameters(Transformer& model) {
  return std::vector<float>(model.parameters(), model.parameters() + model.parameter_elements());
}

std::vector<float> Gradients(Transformer& model) {
  return std::vector<float>(model.gradients(), model.gradients() + model.parameter_elements());
}

TEST(TransformerLayout, NamesCountsAndOffsetsInForwardOrder) {
  const ModelConfig config = TinyConfig();
  const std::vector<TensorSlot> layout = MakeLayout(config);
  const size_t c = 16;
  struct Expected {
    std::string suffix;
    size_t count;
    bool decay;
  };
  const std::vector<Expected> block = {
      {"ln1.weight", c, false},          {"ln1.bias", c, false},
      {"attn.qkv.weight", 3 * c * c, true}, {"attn.qkv.bias", 3 * c, false},
      {"attn.proj.weight", c * c, true},  {"attn.proj.bias", c, false},
      {"ln2.weight", c, false},          {"ln2.bias", c, false},
      {"mlp.fc.weight", 4 * c * c, true}, {"mlp.fc.bias", 4 * c, false},
      {"mlp.proj.weight", 4 * c * c, true}, {"mlp.proj.bias", c, false},
      {"moe.router.weight", 0, true},  // a dense block's: empty
  };
  std::vector<TensorSlot> expected = {{"wte", 0, 128 * c, -1, true}, {"wpe", 0, 12 * c, -1, true}};
  for (int l = 0; l < 2; ++l) {
    for (const Expected& e : block) {
      expected.push_back({"h" + std::to_string(l) + "." + e.suffix, 0, e.count, l, e.decay});
    }
  }
  expected.push_back({"lnf.weight", 0, c, -1, false});
  expected.push_back({"lnf.bias", 0, c, -1, false});

  ASSERT_EQ(layout.size(), expected.size());
  size_t offset = 0;
  for (size_t i = 0; i < layout.size(); ++i) {
    SCOPED_TRACE(expected[i].name);
    EXPECT_EQ(layout[i].name, expected[i].name);
    EXPECT_EQ(layout[i].offset, offset);
    EXPECT_EQ(layout[i].count, expected[i].count);
    EXPECT_EQ(layout[i].layer, expected[i].layer);
    EXPECT_EQ(layout[i].decay, expected[i].decay);
    offset += layout[i].count;
  }
}

TEST(TransformerLayout, TotalMatchesClosedForm) {
  // Vp·C + T·C + L·(12C² + 13C) + 2C, for the tiny model and for gpt2-124m (Vp = 50304, T = 1024).
  const auto total = [](const std::vector<TensorSlot>& layout) { return layout.back().offset + layout.back().count; };
  EXPECT_EQ(total(MakeLayout(TinyConfig())), 128u * 16 + 12 * 16 + 2 * (12 * 16 * 16 + 13 * 16) + 2 * 16);
  const size_t c = 768;
  EXPECT_EQ(total(MakeLayout(FindPreset("gpt2-124m"))), 50304 * c + 1024 * c + 12 * (12 * c * c + 13 * c) + 2 * c);
  auto model = MakeCpuTransformer(TinyConfig(), 1);
  EXPECT_EQ(model->parameter_elements(), total(model->layout()));
  EXPECT_EQ(model->backend(), "cpu");
}

TEST(CpuKernels, ExpAndTanhMatchLibm) {
  double worst_exp = 0.0;
  double worst_tanh = 0.0;
  for (float x = -87.0f; x <= 87.0f; x += 0.0013f) {
    worst_exp = std::max(worst_exp, std::abs(cpu::Exp(x) / std::exp(static_cast<double>(x)) - 1.0));
    worst_tanh = std::max(worst_tanh, std::abs(cpu::TanhViaExp(x / 8) - std::tanh(static_cast<double>(x / 8))));
  }
  EXPECT_LT(worst_exp, 2.5e-7);  // about 2 ulp
  EXPECT_LT(worst_tanh, 2.5e-7);
  // Saturation instead of inf and 0, and what a softmax or tanh makes of it.
  EXPECT_LT(cpu::Exp(-1000.0f), 1e-37f);
  EXPECT_GT(cpu::Exp(-1000.0f), 0.0f);
  EXPECT_GT(cpu::Exp(1000.0f), 1e37f);
  EXPECT_TRUE(std::isfinite(cpu::Exp(std::numeric_limits<float>::infinity())));
  EXPECT_EQ(cpu::TanhViaExp(1000.0f), 1.0f);
  EXPECT_EQ(cpu::TanhViaExp(-1000.0f), -1.0f);
  EXPECT_TRUE(std::isnan(cpu::Exp(std::numeric_limits<float>::quiet_NaN())));
  EXPECT_TRUE(std::isnan(cpu::Gelu(std::numeric_limits<float>::quiet_NaN())));
}

TEST(CpuTransformer, SameSeedSameModelOtherSeedOtherModel) {
  auto a = MakeCpuTransformer(TinyConfig(), 42);
  auto b = MakeCpuTransformer(TinyConfig(), 42);
  auto c = MakeCpuTransformer(TinyConfig(), 43);
  const size_t bytes = a->parameter_elements() * sizeof(float);
  EXPECT_EQ(std::memcmp(a->parameters(), b->parameters(), bytes), 0);
  EXPECT_NE(std::memcmp(a->parameters(), c->parameters(), bytes), 0);
  // Every drawn tensor differs between seeds, not just the first.
  for (const TensorSlot& slot : a->layout()) {
    if (!slot.decay || slot.count == 0) continue;
    EXPECT_NE(std::memcmp(a->parameters() + slot.offset, c->parameters() + slot.offset, slot.count * sizeof(float)), 0)
        << slot.name;
  }
}

TEST(CpuTransformer, InitialisesAsGpt2) {
  // C = 64 so that each weight tensor has thousands of draws and its sample deviation is within a few percent.
  const ModelConfig config = CustomModel(2, 64, 4, 300, 32);
  auto model = MakeCpuTransformer(config, 7);
  const float* p = model->parameters();
  for (const TensorSlot& slot : model->layout()) {
    SCOPED_TRACE(slot.name);
    if (slot.count == 0) continue;  // a dense block's router
    const bool padded = slot.name == "wte";
    const size_t drawn = padded ? static_cast<size_t>(config.vocab) * config.d_model : slot.count;
    if (!slot.decay) {
      const float expected = slot.name.ends_with(".weight") ? 1.0f : 0.0f;  // LayerNorm gains; biases
      for (size_t i = 0; i < slot.count; ++i) ASSERT_EQ(p[slot.offset + i], expected);
      continue;
    }
    double sum = 0.0;
    double squares = 0.0;
    for (size_t i = 0; i < drawn; ++i) {
      sum += p[slot.offset + i];
      squares += static_cast<double>(p[slot.offset + i]) * p[slot.offset + i];
    }
    const double stddev = std::sqrt(squares / drawn - (sum / drawn) * (sum / drawn));
    const double expected = slot.name.ends_with(".proj.weight") ? 0.02 / std::sqrt(2.0 * config.layers) : 0.02;
    EXPECT_NEAR(stddev, expected, 0.06 * expected);
    EXPECT_NEAR(sum / drawn, 0.0, 0.1 * expected);
    for (size_t i = drawn; i < slot.count; ++i) ASSERT_EQ(p[slot.offset + i], 0.0f) << "padding row element " << i;
  }
}

// The initial weights are one stream of normals in layout order (Box–Muller over splitmix64, a spare carried from
// one tensor into the next), drawn here by one thread in order: InitializeParameters, which draws pieces of it on
// several threads by jumping ahead, must give the same bits.
TEST(InitializeParameters, EqualsTheStreamDrawnInOrder) {
  const ModelConfig config = CustomModel(2, 12, 2, 301, 16);
  const std::vector<TensorSlot> layout = MakeLayout(config);
  const size_t elements = layout.back().offset + layout.back().count;
  uint64_t state = 99;
  bool has_spare = false;
  double spare = 0.0;
  auto next = [&](float stddev) {
    if (has_spare) {
      has_spare = false;
      return static_cast<float>(spare * stddev);
    }
    const double u1 = 1.0 - static_cast<double>(NextSplitMix64(state) >> 11) * 0x1.0p-53;
    const double u2 = static_cast<double>(NextSplitMix64(state) >> 11) * 0x1.0p-53;
    const double radius = std::sqrt(-2.0 * std::log(u1));
    spare = radius * std::sin(2 * std::numbers::pi * u2);
    has_spare = true;
    return static_cast<float>(radius * std::cos(2 * std::numbers::pi * u2) * stddev);
  };
  std::vector<float> expected(elements, 0.0f);
  for (const TensorSlot& slot : layout) {
    float* p = expected.data() + slot.offset;
    if (!slot.decay && slot.name.ends_with(".weight")) std::fill(p, p + slot.count, 1.0f);
    if (!slot.decay) continue;
    const size_t drawn = slot.name == "wte" ? static_cast<size_t>(config.vocab) * config.d_model : slot.count;
    const float stddev = slot.name.ends_with(".proj.weight") ? 0.02f / std::sqrt(2.0f * config.layers) : 0.02f;
    for (size_t i = 0; i < drawn; ++i) p[i] = next(stddev);
  }
  std::vector<float> actual(elements, std::numeric_limits<float>::quiet_NaN());
  InitializeParameters(config, layout, 99, actual.data());
  EXPECT_EQ(std::memcmp(actual.data(), expected.data(), elements * sizeof(float)), 0);
}

// Any range, at any boundary (inside a pair of normals, across slots, inside wte's padding), writes every element
// of it with the bits of the whole buffer.
TEST(InitializeParameters, RangesEqualTheWhole) {
  const ModelConfig config = CustomModel(2, 12, 2, 301, 16);
  const std::vector<TensorSlot> layout = MakeLayout(config);
  const size_t elements = layout.back().offset + layout.back().count;
  std::vector<float> whole(elements);
  InitializeParameters(config, layout, 5, whole.data());
  const size_t wte_padding = static_cast<size_t>(config.vocab) * config.d_model + 3;
  const size_t h0 = layout[BlockSlot(0, kQkvWeight)].offset;
  for (const auto& [begin, end] : std::vector<std::pair<size_t, size_t>>{
           {0, 1}, {1, 2}, {3, 1000}, {wte_padding, h0 + 7}, {h0 - 1, h0 + 1}, {h0 + 1, elements}, {0, elements}}) {
    SCOPED_TRACE(std::to_string(begin) + ".." + std::to_string(end));
    std::vector<float> part(end - begin, std::numeric_limits<float>::quiet_NaN());
    InitializeParameterRange(config, layout, 5, begin, end, part.data());
    EXPECT_EQ(std::memcmp(part.data(), whole.data() + begin, part.size() * sizeof(float)), 0);
  }
}

TEST(CpuTransformer, LossAtInitialisationIsNearLogVocab) {
  const ModelConfig config = TinyConfig();
  auto model = MakeCpuTransformer(config, 3);
  const Batch batch = RandomBatch(config.vocab, kBatch, kSeq, 11);
  EXPECT_NEAR(model->ForwardBatch(batch.inputs.data(), batch.targets.data(), kBatch, kSeq), std::log(37.0), 0.3);
}

TEST(CpuTransformer, ForwardMatchesDoublePrecisionReference) {
  const ModelConfig config = TinyConfig();
  auto model = MakeCpuTransformer(config, 5);
  Randomise(*model, 6);
  const Batch batch = RandomBatch(config.vocab, kBatch, kSeq, 12);
  const float loss = model->ForwardBatch(batch.inputs.data(), batch.targets.data(), kBatch, kSeq);
  const ReferenceModel reference(config, model->layout(), model->parameters());
  const double expected = reference.Loss(batch, kBatch, kSeq);
  EXPECT_NEAR(loss, expected, 1e-5 * expected);
}

// What a data loader hands over (windows of seq+1 uint16 tokens) trains the same as the equivalent int32 arrays.
TEST(CpuTransformer, TokenWindowsEqualTheirArrays) {
  const ModelConfig config = TinyConfig();
  auto model = MakeCpuTransformer(config, 5);
  test::WindowBatch b(config.vocab, kBatch, kSeq, 21);
  model->SetBatch(b.windows);
  model->Forward();
  const float from_windows = model->Loss();
  EXPECT_EQ(from_windows, model->ForwardBatch(b.inputs.data(), b.targets.data(), kBatch, kSeq));
  b.tokens[3] = static_cast<uint16_t>(config.vocab);
  EXPECT_THROW(model->SetBatch(b.windows), InputError);
}

TEST(CpuTransformer, ForwardOfABatchIsTheMeanOverItsSequences) {
  const ModelConfig config = TinyConfig();
  auto model = MakeCpuTransformer(config, 5);
  Randomise(*model, 8);
  const Batch batch = RandomBatch(config.vocab, kBatch, kSeq, 13);
  const float both = model->ForwardBatch(batch.inputs.data(), batch.targets.data(), kBatch, kSeq);
  const float first = model->ForwardBatch(batch.inputs.data(), batch.targets.data(), 1, kSeq);
  const float second = model->ForwardBatch(batch.inputs.data() + kSeq, batch.targets.data() + kSeq, 1, kSeq);
  EXPECT_NEAR(both, (first + second) / 2, 1e-5);
  // Growing the activations again and coming back gives the same answer bit for bit.
  const float again = model->ForwardBatch(batch.inputs.data(), batch.targets.data(), kBatch, kSeq);
  EXPECT_EQ(again, both);
}

// Backward's gradients against central differences of the double-precision reference, for `samples` random
// elements of every tensor: with h = 1e-5 in double the difference quotient is exact to ~1e-9, so the
// tolerance measures the fp32 arithmetic alone. Also checks that what the mean loss cannot depend on — wte's
// padding rows, wpe's rows past `seq` — gets exactly zero.
void ExpectGradientsMatchReference(const ModelConfig& config, int batch_size, int seq, int samples) {
  auto model = MakeCpuTransformer(config, 9);
  Randomise(*model, 10);
  const Batch batch = RandomBatch(config.vocab, batch_size, seq, 14);
  model->ForwardBatch(batch.inputs.data(), batch.targets.data(), batch_size, seq);
  model->Backward({});
  const std::vector<float> gradients = Gradients(*model);

  ReferenceModel reference(config, model->layout(), model->parameters());
  std::mt19937 rng(15);
  constexpr double kStep = 1e-5;
  const size_t real_wte = static_cast<size_t>(config.vocab) * config.d_model;
  const size_t real_wpe = static_cast<size_t>(seq) * config.d_model;
  for (const TensorSlot& slot : model->layout()) {
    if (slot.count == 0) continue;  // a dense block's router
    const size_t real = slot.name == "wte" ? real_wte : slot.name == "wpe" ? real_wpe : slot.count;
    std::uniform_int_distribution<size_t> pick(0, real - 1);
    std::vector<size_t> picked;
    for (int i = 0; i < samples; ++i) picked.push_back(pick(rng));
    if (slot.name == "wte") picked.push_back(batch.inputs[0] * config.d_model + 3);  // a row the encoder reads
    for (size_t i : picked) {
      SCOPED_TRACE(slot.name + "[" + std::to_string(i) + "]");
      double& p = reference.params()[slot.offset + i];
      const double saved = p;
      p = saved + kStep;
      const double plus = reference.Loss(batch, batch_size, seq);
      p = saved - kStep;
      const double minus = reference.Loss(batch, batch_size, seq);
      p = saved;
      const double numeric = (plus - minus) / (2 * kStep);
      const double analytic = gradients[slot.offset + i];
      EXPECT_NEAR(analytic, numeric, 1e-3 * std::max(std::abs(analytic), std::abs(numeric)) + 1e-7);
    }
  }
  const TensorSlot& wte = model->layout()[0];
  for (size_t i = real_wte; i < wte.count; ++i) ASSERT_EQ(gradients[wte.offset + i], 0.0f) << "wte element " << i;
  const TensorSlot& wpe = model->layout()[1];
  for (size_t i = real_wpe; i < wpe.count; ++i) ASSERT_EQ(gradients[wpe.offset + i], 0.0f) << "wpe element " << i;
}

TEST(CpuTransformer, GradientsMatchFiniteDifferencesOfReference) {
  ExpectGradientsMatchReference(TinyConfig(), kBatch, kSeq, 20);
}

// A sequence of two full attention row blocks and a partial one: the blocks that add into dk and dv, and the
// keys each block may see, are checked too.
TEST(CpuTransformer, GradientsMatchAcrossAttentionRowBlocks) {
  const int seq = 2 * cpu::kAttentionBlockRows + 22;
  ExpectGradientsMatchReference(CustomModel(1, 16, 2, 37, seq + 10), 1, seq, 6);
}

// An MoE block's slots: the experts' tensors where the MLP's are, one expert after the other, and the router.
TEST(TransformerLayout, MoeBlocksHoldTheirExpertsAndRouter) {
  const ModelConfig config = FindPreset("moe-tiny");  // 4 experts of 512 on d 128, every block
  const std::vector<TensorSlot> layout = MakeLayout(config);
  ASSERT_EQ(layout.size(), kFirstBlockSlot + config.layers * kBlockTensors + 2);
  const size_t c = 128, e = 4, f = 512;
  const std::pair<BlockTensor, std::pair<std::string, size_t>> expected[] = {
      {kFcWeight, {"h1.moe.fc.weight", e * f * c}},     {kFcBias, {"h1.moe.fc.bias", e * f}},
      {kMlpProjWeight, {"h1.moe.proj.weight", e * c * f}}, {kMlpProjBias, {"h1.moe.proj.bias", e * c}},
      {kRouterWeight, {"h1.moe.router.weight", e * c}}};
  for (const auto& [tensor, name_count] : expected) {
    const TensorSlot& slot = layout[BlockSlot(1, tensor)];
    EXPECT_EQ(slot.name, name_count.first);
    EXPECT_EQ(slot.count, name_count.second);
    EXPECT_TRUE(IsExpertSlot(layout, BlockSlot(1, tensor)) == (tensor != kRouterWeight)) << slot.name;
  }
  size_t total = 0;
  for (const TensorSlot& slot : layout) total += slot.count;
  EXPECT_EQ(total, CountParameters(config).total + (config.vocab_padded - config.vocab) * c);
  // Expert parallel 2: each expert slot halves, rank 1's starting at expert 2; the rest whole.
  const std::vector<TensorSlot> held = ExpertLayout(layout, {2, 1, nullptr, {}});
  EXPECT_EQ(held[BlockSlot(0, kFcWeight)].count, e * f * c / 2);
  EXPECT_EQ(held[BlockSlot(0, kFcWeight)].first, e * f * c / 2);
  EXPECT_EQ(held[BlockSlot(0, kRouterWeight)].count, e * c);
  EXPECT_EQ(held[BlockSlot(0, kRouterWeight)].first, 0u);
  EXPECT_EQ(held.back().offset + held.back().count, total - ExpertParameters(config) / 2);
}

// One expert with room for every token (top-1, capacity factor 1) is the dense MLP: its gate is softmax over one
// logit, exactly 1. With the dense model's weights in its slots, the MoE model gives the dense loss and gradients, and
// its router none (the softmax of one logit does not move; the aux loss is then the constant coef).
TEST(CpuTransformer, OneExpertMoeBlockIsTheDenseMlp) {
  const ModelConfig dense_config = TinyConfig();
  MoeConfig one;
  one.experts = 1;
  one.top_k = 1;
  one.capacity_factor = 1.0;
  const ModelConfig moe_config = WithMoe(dense_config, one);
  auto dense = MakeCpuTransformer(dense_config, 9);
  auto moe = MakeCpuTransformer(moe_config, 9);
  Randomise(*dense, 10);
  ASSERT_EQ(dense->layout().size(), moe->layout().size());
  for (size_t s = 0; s < moe->layout().size(); ++s) {
    const TensorSlot &from = dense->layout()[s], &to = moe->layout()[s];
    if (from.count == 0) {
      std::fill(moe->parameters() + to.offset, moe->parameters() + to.offset + to.count, 0.25f);  // the router
      continue;
    }
    ASSERT_EQ(from.count, to.count) << to.name;
    std::copy(dense->parameters() + from.offset, dense->parameters() + from.offset + from.count,
              moe->parameters() + to.offset);
  }
  const Batch batch = RandomBatch(dense_config.vocab, kBatch, kSeq, 16);
  const float dense_loss = dense->ForwardBatch(batch.inputs.data(), batch.targets.data(), kBatch, kSeq);
  const float moe_loss = moe->ForwardBatch(batch.inputs.data(), batch.targets.data(), kBatch, kSeq);
  EXPECT_NEAR(moe_loss, dense_loss, 1e-6 * dense_loss);
  dense->Backward({});
  moe->Backward({});
  for (size_t s = 0; s < moe->layout().size(); ++s) {
    const TensorSlot &from = dense->layout()[s], &to = moe->layout()[s];
    SCOPED_TRACE(to.name);
    double largest = 0, worst = 0;
    for (size_t i = 0; i < to.count; ++i) {
      const double want = from.count == 0 ? 0.0 : dense->gradients()[from.offset + i];
      largest = std::max(largest, std::fabs(want));
      worst = std::max(worst, std::fabs(moe->gradients()[to.offset + i] - want));
    }
    EXPECT_LE(worst, from.count == 0 ? 1e-9 : 1e-5 * largest);
  }
  const MoeStepStats stats = MoeStatsOf(*moe)->TakeMoeStats();
  EXPECT_EQ(stats.dropped, 0);
  EXPECT_EQ(stats.choices, 2 * kBatch * kSeq);  // 2 blocks x N tokens x top-1
  EXPECT_DOUBLE_EQ(stats.max_over_mean(), 1.0);
  EXPECT_NEAR(stats.aux_loss(), 2 * one.aux_loss_coef, 1e-6);  // coef per block at perfect balance
  EXPECT_EQ(MoeStatsOf(*dense), nullptr);
}

TEST(CpuTransformer, BackwardOverwritesOrAccumulatesAsTold) {
  const ModelConfig config = TinyConfig();
  auto model = MakeCpuTransformer(config, 9);
  const Batch batch = RandomBatch(config.vocab, kBatch, kSeq, 16);
  model->ForwardBatch(batch.inputs.data(), batch.targets.data(), kBatch, kSeq);
  model->Backward({});
  const std::vector<float> once = Gradients(*model);
  model->ForwardBatch(batch.inputs.data(), batch.targets.data(), kBatch, kSeq);
  model->Backward({}, GradientWrite::kAccumulate);
  const std::vector<float> twice = Gradients(*model);
  // Not bit-exact: a sum of row contributions added onto an earlier sum rounds differently from doubling it.
  for (size_t i = 0; i < once.size(); ++i) ASSERT_NEAR(twice[i], 2 * once[i], 1e-5 * std::abs(once[i]) + 1e-10) << i;
  // kOverwrite writes over what was there: the same gradients as the first backward, to the bit.
  model->ForwardBatch(batch.inputs.data(), batch.targets.data(), kBatch, kSeq);
  model->Backward({}, GradientWrite::kOverwrite);
  EXPECT_EQ(Gradients(*model), once);
}

// With a gradient scale s, Backward gives s times the gradients (the loss itself unscaled): gradient accumulation
// over M micro-batches sets 1/M.
TEST(CpuTransformer, GradientScaleScalesTheGradientsNotTheLoss) {
  const ModelConfig config = TinyConfig();
  auto model = MakeCpuTransformer(config, 9);
  const Batch batch = RandomBatch(config.vocab, kBatch, kSeq, 16);
  const float loss = model->ForwardBatch(batch.inputs.data(), batch.targets.data(), kBatch, kSeq);
  model->Backward({});
  const std::vector<float> whole = Gradients(*model);
  model->SetGradientScale(0.25f);
  EXPECT_EQ(model->ForwardBatch(batch.inputs.data(), batch.targets.data(), kBatch, kSeq), loss);
  model->Backward({});
  const std::vector<float> quarter = Gradients(*model);
  for (size_t i = 0; i < whole.size(); ++i) ASSERT_NEAR(quarter[i], 0.25f * whole[i], 1e-6 * std::abs(whole[i])) << i;
}

TEST(CpuTransformer, GradientReadyOncePerTensorFromLnfDownToWte) {
  const ModelConfig config = TinyConfig();
  auto model = MakeCpuTransformer(config, 2);
  const Batch batch = RandomBatch(config.vocab, kBatch, kSeq, 17);
  model->ForwardBatch(batch.inputs.data(), batch.targets.data(), kBatch, kSeq);
  std::vector<size_t> order;
  model->Backward([&](size_t slot) { order.push_back(slot); });
  // Descending slot order is exactly lnf, the blocks from last to first, wpe, then wte: every slot that holds
  // elements (a dense block's router slot is empty).
  std::vector<size_t> expected;
  for (size_t slot = model->layout().size(); slot-- > 0;) {
    if (model->layout()[slot].count > 0) expected.push_back(slot);
  }
  EXPECT_EQ(expected.size(), model->layout().size() - config.layers);
  EXPECT_EQ(order, expected);
  EXPECT_EQ(model->layout()[order.front()].name, "lnf.bias");
  EXPECT_EQ(model->layout()[order[order.size() - 2]].name, "wpe");
  EXPECT_EQ(model->layout()[order.back()].name, "wte");
}

TEST(CpuTransformer, AdamWStepMatchesFormula) {
  const ModelConfig config = TinyConfig();
  auto model = MakeCpuTransformer(config, 4);
  std::mt19937 rng(18);
  std::normal_distribution<float> normal(0.0f, 0.1f);
  for (size_t i = 0; i < model->parameter_elements(); ++i) model->gradients()[i] = normal(rng);
  const std::vector<float> before = Parameters(*model);
  const std::vector<float> gradients = Gradients(*model);  // padding rows included: they must be ignored
  const AdamWConfig adamw{1e-2f, 0.9f, 0.95f, 1e-8f, 0.1f};
  // With the same gradient twice, m̂ = g and v̂ = g² at both steps: w ← w − lr·(g/(|g| + eps) + wd·w).
  std::vector<double> expected(before.begin(), before.end());
  for (int64_t step = 1; step <= 2; ++step) {
    model->AdamWStep(adamw, step);
    for (const TensorSlot& slot : model->layout()) {
      const double decay = slot.decay ? adamw.weight_decay : 0.0;
      const size_t real = slot.name == "wte" ? static_cast<size_t>(config.vocab) * config.d_model : slot.count;
      for (size_t i = slot.offset; i < slot.offset + real; ++i) {
        const double g = gradients[i];
        expected[i] -= adamw.learning_rate * (g / (std::abs(g) + adamw.epsilon) + decay * expected[i]);
      }
    }
  }
  const float* after = model->parameters();
  for (const TensorSlot& slot : model->layout()) {
    SCOPED_TRACE(slot.name);
    for (size_t i = slot.offset; i < slot.offset + slot.count; ++i) {
      ASSERT_NEAR(after[i], expected[i], 1e-6 + 1e-5 * std::abs(expected[i])) << "element " << i - slot.offset;
    }
  }
  const size_t padding = static_cast<size_t>(config.vocab) * config.d_model;
  for (size_t i = padding; i < model->layout()[0].count; ++i) ASSERT_EQ(after[i], 0.0f);
  EXPECT_NE(InputErrorOf([&] { model->AdamWStep(adamw, 0); }), "");
}

TEST(CpuTransformer, OverfitsOneBatch) {
  const ModelConfig config = TinyConfig();
  auto model = MakeCpuTransformer(config, 21);
  const Batch batch = RandomBatch(config.vocab, kBatch, kSeq, 22);
  AdamWConfig adamw;
  adamw.learning_rate = 1e-2f;
  float first = 0.0f;
  float last = 0.0f;
  for (int64_t step = 1; step <= 80; ++step) {
    last = model->ForwardBatch(batch.inputs.data(), batch.targets.data(), kBatch, kSeq);
    if (step == 1) first = last;
    model->Backward({});
    model->AdamWStep(adamw, step);
  }
  EXPECT_LT(last, 0.3f * first) << "loss went from " << first << " to " << last;
  const TensorSlot& wte = model->layout()[0];
  for (size_t i = static_cast<size_t>(config.vocab) * config.d_model; i < wte.count; ++i) {
    ASSERT_EQ(model->parameters()[wte.offset + i], 0.0f) << "padding element " << i;
  }
}

TEST(CpuTransformer, RejectsBadBatches) {
  const ModelConfig config = TinyConfig();
  auto model = MakeCpuTransformer(config, 1);
  Batch batch = RandomBatch(config.vocab, kBatch, 12, 23);
  const int32_t* in = batch.inputs.data();
  const int32_t* tg = batch.targets.data();
  EXPECT_NE(InputErrorOf([&] { model->ForwardBatch(in, tg, 1, 13); }).find("sequence length 13"), std::string::npos);
  EXPECT_NE(InputErrorOf([&] { model->ForwardBatch(in, tg, 1, 0); }), "");
  EXPECT_NE(InputErrorOf([&] { model->ForwardBatch(in, tg, 0, 8); }), "");
  batch.inputs[12 + 5] = 37;
  const std::string message = InputErrorOf([&] { model->ForwardBatch(in, tg, 2, 12); });
  EXPECT_NE(message.find("input token 37 at sequence 1, position 5"), std::string::npos) << message;
  batch.inputs[12 + 5] = 0;
  batch.targets[3] = -1;
  EXPECT_NE(InputErrorOf([&] { model->ForwardBatch(in, tg, 2, 12); }).find("target token -1 at sequence 0, position 3"),
            std::string::npos);
  ModelConfig uneven_heads = config;
  uneven_heads.heads = 3;
  EXPECT_THROW(MakeCpuTransformer(uneven_heads, 1), InputError);
}

TEST(CpuTransformer, BackwardNeedsAForwardFirst) {
  const ModelConfig config = TinyConfig();
  auto model = MakeCpuTransformer(config, 1);
  EXPECT_THROW(model->Backward({}), RuntimeError);
  const Batch batch = RandomBatch(config.vocab, 1, kSeq, 24);
  model->ForwardBatch(batch.inputs.data(), batch.targets.data(), 1, kSeq);
  model->Backward({});
  EXPECT_THROW(model->Backward({}), RuntimeError);
}

}  // namespace
}  // namespace tb
