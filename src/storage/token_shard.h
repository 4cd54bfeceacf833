// Token shards: the files `trainbench data generate` writes and the data loader reads. One shard is a
// 4096-byte header followed by the tokens, little-endian uint16 (vocab <= 65536) or uint32. The header is a
// whole page so that records whose size is a multiple of 4096 stay page-aligned for O_DIRECT. Layout in
// src/README.md. Every problem with a shard is an InputError naming the file and the byte offset. A directory of
// shards is a dataset: token_dataset.h.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "durable_file.h"
#include "random.h"

namespace tb {

constexpr char kShardMagic[8] = {'T', 'B', 'T', 'O', 'K', 'E', 'N', 'S'};
constexpr uint32_t kShardFormatVersion = 1;
constexpr uint32_t kShardHeaderBytes = 4096;

// Bytes per token for a vocabulary: 2 when every id fits in uint16, else 4.
uint32_t TokenBytesForVocab(uint64_t vocab);
// "uint16" or "uint32", for messages.
std::string TokenDtypeName(uint32_t token_bytes);

struct ShardHeader {
  uint32_t format_version = kShardFormatVersion;
  uint32_t header_bytes = kShardHeaderBytes;
  uint32_t token_bytes = 2;  // the dtype: 2 = uint16, 4 = uint32
  uint32_t payload_crc32c = 0;
  uint64_t token_count = 0;
  uint64_t vocab = 0;

  uint64_t payload_bytes() const { return token_count * token_bytes; }
  uint64_t file_bytes() const { return header_bytes + payload_bytes(); }
};

// Writes one shard to `path` through a DurableFile named "<path>.tmp": Append() streams the tokens after a
// placeholder header; Finish() writes the header (count and CRC-32C) and commits the file (fsync, rename,
// directory fsync). Destroyed unfinished, or after a failed write, it removes the temporary file.
class ShardWriter {
 public:
  ShardWriter(std::string path, uint64_t vocab);

  // Tokens in the shard's dtype (token_bytes() each), already below vocab.
  void Append(const void* tokens, uint64_t count);
  void Finish();

  uint32_t token_bytes() const { return header_.token_bytes; }
  const ShardHeader& header() const { return header_; }

 private:
  ShardHeader header_;
  DurableFile file_;
};

// Reads and checks the header of `path` against the file's size: magic, version, dtype, header checksum,
// vocab, and that the file holds exactly the tokens the header announces.
ShardHeader ReadShardHeader(const std::string& path);

// Reads the whole payload and compares its CRC-32C with the header's. Streams it through one 4 MiB buffer and drops
// what it read from the page cache behind it, so that a check of a large dataset neither evicts everything else nor
// leaves the loader's first epoch reading from a cache the check filled.
void VerifyShardPayload(const std::string& path, const ShardHeader& header);

// Synthetic tokens for `data generate`: uniform over [0, vocab), or Zipf: token t with probability proportional
// to 1 / (t + 1)^exponent (drawn through an alias table, so as fast as uniform). A stream depends only on its
// starting state, so shard i, started from StreamState(seed, i), is the same whichever rank writes it.
class TokenGenerator {
 public:
  static constexpr uint64_t kMaxZipfVocab = uint64_t{1} << 24;  // the alias table takes 8 bytes per token id

  // zipf_exponent 0: uniform. InputError for a vocab out of 1..2^32 (Zipf: 1..kMaxZipfVocab).
  TokenGenerator(uint64_t vocab, double zipf_exponent);
  static uint64_t StreamState(uint64_t seed, uint64_t stream) { return SplitMix64(seed ^ SplitMix64(stream)); }

  // `count` tokens of TokenBytesForVocab(vocab) bytes each into `out`, advancing `state`.
  void Fill(void* out, uint64_t count, uint64_t& state) const;

 private:
  template <typename T>
  void FillAs(T* out, uint64_t count, uint64_t& state) const;

  uint64_t vocab_;
  std::vector<uint32_t> keep_below_;  // Zipf alias table: column c keeps c when the coin < keep_below_[c] / 2^32
  std::vector<uint32_t> alias_;       // ... and gives alias_[c] otherwise; empty for uniform
};

// Token counts on the command line: a plain or scientific number (20000000000, 2e10, 1.5e9) or one with an SI
// suffix K=1e3, M=1e6, G=1e9, T=1e12 (20G, 1.5M); the result must be a whole number >= 1.
uint64_t ParseTokenCount(const std::string& text, const std::string& flag);

}  // namespace tb
