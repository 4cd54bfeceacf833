// One batch of token sequences as its source holds it, and the one place it becomes the model's int32 ids.
//
// A data loader hands out windows: sequence i is seq+1 little-endian unsigned tokens (uint16 or uint32) read
// straight from a file, whose inputs are tokens [0, seq) and targets tokens [1, seq]. Tests and tools may
// instead give separate int32 input and target arrays. Either way the model unpacks the batch into its own
// memory once (UnpackTokens, in its SetBatch: the h2d phase), so the loader's workers only read, as fio does.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

namespace tb {

// Where a token came from, for error messages: a file and the byte offset of the token in it.
struct TokenOrigin {
  std::string file;
  uint64_t byte = 0;
};

struct TokenBatch {
  int batch = 0;  // sequences
  int seq = 0;    // positions per sequence

  // Windows form: windows[i] points at sequence i's seq+1 tokens of token_bytes (2 or 4) each.
  std::vector<const unsigned char*> windows;
  int token_bytes = 0;
  // Non-zero: every token id is taken modulo wrap_vocab (raw files of arbitrary bytes); zero: an id at or above
  // the model's vocabulary is an error.
  uint64_t wrap_vocab = 0;
  // Names where token k of window i was read (may be empty); the error for an out-of-vocabulary id uses it.
  std::function<TokenOrigin(int window, int token)> origin;

  // Arrays form (windows empty): batch*seq int32 ids each.
  const int32_t* inputs = nullptr;
  const int32_t* targets = nullptr;
};

// A TokenBatch of the arrays form.
TokenBatch TokenArrays(const int32_t* inputs, const int32_t* targets, int batch, int seq);

// Writes the batch's ids into inputs and targets (batch*seq int32 each; a copy for arrays, one widening pass per
// window otherwise) and checks each against [0, vocab): InputError naming the file and byte (windows with an
// origin) or the sequence and position otherwise. Also InputError for a batch without sequences or a window
// form without windows.
void UnpackTokens(const TokenBatch& batch, uint64_t vocab, int32_t* inputs, int32_t* targets);

}  // namespace tb
