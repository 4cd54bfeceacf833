#include "token_batch.h"

#include <algorithm>
#include <bit>
#include <cstring>

#include "error.h"

namespace tb {
namespace {

// Tokens [0, seq) of one window into `inputs` and [1, seq] into `targets`; returns the largest id. Two plain
// loops over fixed-size loads, which the compiler vectorises; the window is small and stays in cache between them.
template <typename T>
uint32_t WidenWindow(const unsigned char* bytes, int seq, int32_t* inputs, int32_t* targets) {
  static_assert(std::endian::native == std::endian::little, "token files are little-endian");
  uint32_t largest = 0;
  for (int k = 0; k < seq; ++k) {
    T token;
    std::memcpy(&token, bytes + static_cast<size_t>(k) * sizeof(T), sizeof(T));
    inputs[k] = static_cast<int32_t>(token);
    largest = std::max<uint32_t>(largest, token);
  }
  const unsigned char* next = bytes + sizeof(T);
  for (int k = 0; k < seq; ++k) {
    T token;
    std::memcpy(&token, next + static_cast<size_t>(k) * sizeof(T), sizeof(T));
    targets[k] = static_cast<int32_t>(token);
  }
  T last;
  std::memcpy(&last, bytes + static_cast<size_t>(seq) * sizeof(T), sizeof(T));
  return std::max<uint32_t>(largest, last);
}

uint32_t TokenAt(const unsigned char* window, int token_bytes, int k) {
  if (token_bytes == 2) {
    uint16_t t;
    std::memcpy(&t, window + static_cast<size_t>(k) * 2, 2);
    return t;
  }
  uint32_t t;
  std::memcpy(&t, window + static_cast<size_t>(k) * 4, 4);
  return t;
}

[[noreturn]] void ThrowOutOfVocab(const TokenBatch& b, int window, int k, uint64_t token, uint64_t vocab) {
  if (b.origin) {
    const TokenOrigin o = b.origin(window, k);
    throw InputError(o.file + ": corrupt token " + std::to_string(token) + " at byte " + std::to_string(o.byte) +
                     " (vocab " + std::to_string(vocab) + ")");
  }
  throw InputError("token " + std::to_string(token) + " at sequence " + std::to_string(window) + ", position " +
                   std::to_string(k) + " is outside the vocabulary [0, " + std::to_string(vocab) + ")");
}

}  // namespace

TokenBatch TokenArrays(const int32_t* inputs, const int32_t* targets, int batch, int seq) {
  TokenBatch b;
  b.batch = batch;
  b.seq = seq;
  b.inputs = inputs;
  b.targets = targets;
  return b;
}

void UnpackTokens(const TokenBatch& b, uint64_t vocab, int32_t* inputs, int32_t* targets) {
  if (b.batch < 1 || b.seq < 1) {
    throw InputError("a batch needs at least one sequence of one token, got " + std::to_string(b.batch) + " x " +
                     std::to_string(b.seq));
  }
  const size_t seq = static_cast<size_t>(b.seq);
  if (b.windows.empty()) {
    if (!b.inputs || !b.targets) throw InputError("a token batch without windows or arrays");
    const size_t n = static_cast<size_t>(b.batch) * seq;
    auto check = [&](const int32_t* ids, const char* what) {
      for (size_t i = 0; i < n; ++i) {
        if (ids[i] < 0 || static_cast<uint64_t>(ids[i]) >= vocab) {
          throw InputError(std::string(what) + " token " + std::to_string(ids[i]) + " at sequence " +
                           std::to_string(i / seq) + ", position " + std::to_string(i % seq) +
                           " is outside the vocabulary [0, " + std::to_string(vocab) + ")");
        }
      }
    };
    check(b.inputs, "input");
    check(b.targets, "target");
    std::memcpy(inputs, b.inputs, n * sizeof(int32_t));
    std::memcpy(targets, b.targets, n * sizeof(int32_t));
    return;
  }
  if (b.windows.size() != static_cast<size_t>(b.batch)) {
    throw InputError("a token batch of " + std::to_string(b.batch) + " sequences with " +
                     std::to_string(b.windows.size()) + " windows");
  }
  if (b.token_bytes != 2 && b.token_bytes != 4) {
    throw InputError("token width " + std::to_string(b.token_bytes) + " bytes (want 2 or 4)");
  }
  for (int i = 0; i < b.batch; ++i) {
    const unsigned char* window = b.windows[i];
    int32_t* in = inputs + static_cast<size_t>(i) * seq;
    int32_t* tg = targets + static_cast<size_t>(i) * seq;
    const uint64_t largest = b.token_bytes == 2 ? WidenWindow<uint16_t>(window, b.seq, in, tg)
                                                : WidenWindow<uint32_t>(window, b.seq, in, tg);
    if (largest < (b.wrap_vocab ? std::min(b.wrap_vocab, vocab) : vocab)) continue;
    // Rare: raw files wrap ids into the vocabulary; a shard's id out of range is corruption.
    for (int k = 0; k <= b.seq; ++k) {
      uint64_t token = TokenAt(window, b.token_bytes, k);
      if (b.wrap_vocab) token %= b.wrap_vocab;
      if (token >= vocab) ThrowOutOfVocab(b, i, k, token, vocab);
      if (k < b.seq) in[k] = static_cast<int32_t>(token);
      if (k > 0) tg[k - 1] = static_cast<int32_t>(token);
    }
  }
}

}  // namespace tb
