// The flat parameter layout both transformer implementations share. Weights are stored as PyTorch's
// nn.Linear stores them, (out_features, in_features) row-major, so y = x · Wᵀ + b and a checkpoint maps onto
// GPT-2's tensors one to one.
#include <string>
#include <vector>

#include "transformer.h"

namespace tb {

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

}  // namespace tb
