// A batch in the data loader's form — windows of seq+1 uint16 tokens — beside the same batch as int32 input and
// target arrays, for the transformer tests that check both forms give the same result.
#pragma once

#include <cstdint>
#include <random>
#include <vector>

#include "token_batch.h"

namespace tb::test {

struct WindowBatch {
  // `batch` windows of seq+1 tokens drawn uniformly from [0, vocab) with `seed`.
  WindowBatch(int vocab, int batch, int seq, uint32_t seed) : tokens(static_cast<size_t>(batch) * (seq + 1)) {
    std::mt19937 generator(seed);
    for (uint16_t& t : tokens) t = static_cast<uint16_t>(generator() % static_cast<uint32_t>(vocab));
    windows.batch = batch;
    windows.seq = seq;
    windows.token_bytes = 2;
    for (int i = 0; i < batch; ++i) {
      const uint16_t* w = tokens.data() + static_cast<size_t>(i) * (seq + 1);
      windows.windows.push_back(reinterpret_cast<const unsigned char*>(w));
      for (int k = 0; k < seq; ++k) {
        inputs.push_back(w[k]);
        targets.push_back(w[k + 1]);
      }
    }
  }
  WindowBatch(const WindowBatch&) = delete;  // `windows` points into `tokens`
  WindowBatch& operator=(const WindowBatch&) = delete;

  std::vector<uint16_t> tokens;  // window i at [i*(seq+1), (i+1)*(seq+1)); changing one changes `windows`
  TokenBatch windows;
  std::vector<int32_t> inputs, targets;  // (batch, seq) each
};

}  // namespace tb::test
