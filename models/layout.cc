// The flat parameter layout both transformer implementations share. Weights are stored as PyTorch's
// nn.Linear stores them, (out_features, in_features) row-major, so y = x · Wᵀ + b and a checkpoint maps onto
// GPT-2's tensors one to one.
#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "clock.h"
#include "error.h"
#include "random.h"
#include "transformer.h"

namespace tb {
namespace {

// Box–Muller normals over splitmix64, a few lines of our own: std::normal_distribution's output is left to each
// standard library, and every rank must draw the same model from the same seed.
class NormalGenerator {
 public:
  explicit NormalGenerator(uint64_t seed) : state_(seed) {}

  float Next(float stddev) {
    if (has_spare_) {
      has_spare_ = false;
      return static_cast<float>(spare_ * stddev);
    }
    const double u1 = 1.0 - Uniform();  // (0, 1]: log stays finite
    const double u2 = Uniform();
    const double radius = std::sqrt(-2.0 * std::log(u1));
    constexpr double kTwoPi = 6.283185307179586;
    spare_ = radius * std::sin(kTwoPi * u2);
    has_spare_ = true;
    return static_cast<float>(radius * std::cos(kTwoPi * u2) * stddev);
  }

 private:
  double Uniform() { return static_cast<double>(NextSplitMix64(state_) >> 11) * 0x1.0p-53; }  // [0, 1)

  uint64_t state_;
  double spare_ = 0.0;
  bool has_spare_ = false;
};

class HostPhaseClock : public PhaseClock {
 public:
  void Mark() override { marks_.push_back(NowSeconds()); }
  std::vector<double> Intervals() override {
    std::vector<double> intervals;
    for (size_t i = 1; i < marks_.size(); ++i) intervals.push_back(marks_[i] - marks_[i - 1]);
    marks_.clear();
    return intervals;
  }

 private:
  std::vector<double> marks_;
};

}  // namespace

std::unique_ptr<PhaseClock> MakeHostPhaseClock() { return std::make_unique<HostPhaseClock>(); }


std::vector<TensorSlot> MakeLayout(const ModelConfig& config) {
  const size_t channels = config.d_model;
  const size_t hidden = static_cast<size_t>(config.mlp_ratio) * channels;
  std::vector<TensorSlot> layout;
  size_t offset = 0;
  auto add = [&](std::string name, size_t count, int layer, bool decay) {
    layout.push_back(TensorSlot{std::move(name), offset, count, layer, decay});
    offset += count;
  };
  add("wte", static_cast<size_t>(config.vocab_padded) * channels, -1, true);  // (Vp, C)
  add("wpe", static_cast<size_t>(config.seq) * channels, -1, true);           // (T, C)
  for (int l = 0; l < config.layers; ++l) {
    // Appended piece by piece: "h" + std::to_string(l) trips GCC 12's false -Wrestrict positive.
    std::string prefix = "h";
    prefix += std::to_string(l);
    prefix += '.';
    add(prefix + "ln1.weight", channels, l, false);                    // (C)
    add(prefix + "ln1.bias", channels, l, false);                      // (C)
    add(prefix + "attn.qkv.weight", 3 * channels * channels, l, true);  // (3C, C)
    add(prefix + "attn.qkv.bias", 3 * channels, l, false);             // (3C)
    add(prefix + "attn.proj.weight", channels * channels, l, true);    // (C, C)
    add(prefix + "attn.proj.bias", channels, l, false);                // (C)
    add(prefix + "ln2.weight", channels, l, false);                    // (C)
    add(prefix + "ln2.bias", channels, l, false);                      // (C)
    add(prefix + "mlp.fc.weight", hidden * channels, l, true);         // (4C, C)
    add(prefix + "mlp.fc.bias", hidden, l, false);                     // (4C)
    add(prefix + "mlp.proj.weight", channels * hidden, l, true);       // (C, 4C)
    add(prefix + "mlp.proj.bias", channels, l, false);                 // (C)
  }
  add("lnf.weight", channels, -1, false);  // (C)
  add("lnf.bias", channels, -1, false);    // (C)
  return layout;
}

void InitializeParameters(const ModelConfig& config, const std::vector<TensorSlot>& layout, uint64_t seed,
                          float* params) {
  constexpr float kStddev = 0.02f;
  // GPT-2 scales the projections that write into the residual stream so that its variance does not grow
  // with depth: each block adds two of them.
  const float residual_stddev = kStddev / std::sqrt(2.0f * config.layers);
  NormalGenerator normal(seed);
  for (size_t s = 0; s < layout.size(); ++s) {
    const TensorSlot& slot = layout[s];
    float* p = params + slot.offset;
    const bool residual_projection = slot.name.ends_with(".proj.weight");  // attn.proj and mlp.proj
    const bool layer_norm_gain = !slot.decay && slot.name.ends_with(".weight");
    if (layer_norm_gain) {
      std::fill(p, p + slot.count, 1.0f);
    } else if (slot.decay) {
      // wte's padding rows are not drawn: they stay zero.
      const size_t drawn = slot.name == "wte" ? static_cast<size_t>(config.vocab) * config.d_model : slot.count;
      const float stddev = residual_projection ? residual_stddev : kStddev;
      for (size_t i = 0; i < drawn; ++i) p[i] = normal.Next(stddev);
    }
  }
}


void CheckBatchShape(const ModelConfig& config, int batch, int seq) {
  if (batch < 1) throw InputError("batch size must be at least 1, got " + std::to_string(batch));
  if (seq < 1 || seq > config.seq) {
    throw InputError("sequence length " + std::to_string(seq) + " is outside 1.." + std::to_string(config.seq) +
                     ", the positions of model '" + config.name + "'");
  }
}

}  // namespace tb
