#include "token_shard.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <system_error>

#include "checksum.h"
#include "error.h"
#include "flags.h"
#include "paths.h"

namespace tb {
namespace {

// Byte offsets of the header fields (all little-endian).
constexpr size_t kMagicAt = 0;
constexpr size_t kVersionAt = 8;
constexpr size_t kHeaderBytesAt = 12;
constexpr size_t kTokenBytesAt = 16;
constexpr size_t kPayloadCrcAt = 20;
constexpr size_t kTokenCountAt = 24;
constexpr size_t kVocabAt = 32;
constexpr size_t kHeaderCrcAt = 40;  // CRC-32C of bytes [0, 40)
constexpr size_t kFieldsEnd = 44;

constexpr size_t kVerifyChunkBytes = 4 << 20;

void Put(unsigned char* at, uint64_t value, int bytes) {
  for (int i = 0; i < bytes; ++i) at[i] = static_cast<unsigned char>(value >> (8 * i));
}

uint64_t Get(const unsigned char* at, int bytes) {
  uint64_t value = 0;
  for (int i = 0; i < bytes; ++i) value |= static_cast<uint64_t>(at[i]) << (8 * i);
  return value;
}

std::string Hex(uint32_t value) {
  char text[16];
  std::snprintf(text, sizeof text, "0x%08x", value);
  return text;
}

// Reads exactly `bytes` at `offset` unless the file ends first; returns the bytes read.
size_t ReadAt(int fd, void* buffer, size_t bytes, uint64_t offset, const std::string& path) {
  size_t done = 0;
  while (done < bytes) {
    ssize_t n = ::pread(fd, static_cast<char*>(buffer) + done, bytes - done, static_cast<off_t>(offset + done));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) throw InputError(path + ": read failed at byte " + std::to_string(offset + done) + ": " + OsMessage(errno));
    if (n == 0) break;
    done += static_cast<size_t>(n);
  }
  return done;
}

class Fd {
 public:
  explicit Fd(const std::string& path) {
    std::string why;
    fd_ = OpenInputFile(path, 0, why);
    if (fd_ < 0) throw InputError(path + ": cannot open: " + why);
  }
  ~Fd() { ::close(fd_); }
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
  int get() const { return fd_; }

 private:
  int fd_;
};

ShardHeader NewHeader(uint64_t vocab) {
  if (vocab < 1 || vocab > (uint64_t{1} << 32)) throw InputError("vocab " + std::to_string(vocab) + " out of range 1..2^32");
  ShardHeader header;
  header.vocab = vocab;
  header.token_bytes = TokenBytesForVocab(vocab);
  return header;
}

}  // namespace

uint32_t TokenBytesForVocab(uint64_t vocab) { return vocab <= 65536 ? 2 : 4; }

std::string TokenDtypeName(uint32_t token_bytes) { return token_bytes == 2 ? "uint16" : "uint32"; }

ShardWriter::ShardWriter(std::string path, uint64_t vocab) : header_(NewHeader(vocab)), file_(path, path + ".tmp") {
  // The header is written last, by Finish(), over this placeholder; the payload follows it.
  const unsigned char placeholder[kShardHeaderBytes] = {};
  file_.Append(placeholder, sizeof placeholder);
}

void ShardWriter::Append(const void* tokens, uint64_t count) {
  const uint64_t bytes = count * header_.token_bytes;
  file_.Append(tokens, bytes);
  header_.payload_crc32c = Crc32c(tokens, bytes, header_.payload_crc32c);
  header_.token_count += count;
}

void ShardWriter::Finish() {
  unsigned char bytes[kShardHeaderBytes] = {};
  std::memcpy(bytes + kMagicAt, kShardMagic, sizeof kShardMagic);
  Put(bytes + kVersionAt, header_.format_version, 4);
  Put(bytes + kHeaderBytesAt, header_.header_bytes, 4);
  Put(bytes + kTokenBytesAt, header_.token_bytes, 4);
  Put(bytes + kPayloadCrcAt, header_.payload_crc32c, 4);
  Put(bytes + kTokenCountAt, header_.token_count, 8);
  Put(bytes + kVocabAt, header_.vocab, 8);
  Put(bytes + kHeaderCrcAt, Crc32c(bytes, kHeaderCrcAt), 4);
  file_.WriteAt(0, bytes, sizeof bytes);
  file_.Commit();
}

ShardHeader ReadShardHeader(const std::string& path) {
  Fd fd(path);
  struct stat st {};
  if (::fstat(fd.get(), &st) != 0) throw InputError(path + ": cannot stat: " + OsMessage(errno));
  const uint64_t file_bytes = static_cast<uint64_t>(st.st_size);
  unsigned char bytes[kFieldsEnd] = {};
  const size_t got = ReadAt(fd.get(), bytes, kFieldsEnd, 0, path);
  if (got >= sizeof kShardMagic && std::memcmp(bytes + kMagicAt, kShardMagic, sizeof kShardMagic) != 0) {
    throw InputError(path + ": not a trainbench token shard: bad magic at byte 0 (want \"TBTOKENS\")");
  }
  if (file_bytes < kShardHeaderBytes) {
    throw InputError(path + ": truncated at byte " + std::to_string(file_bytes) + ": the header needs " +
                     std::to_string(kShardHeaderBytes) + " bytes, file has " + std::to_string(file_bytes));
  }
  ShardHeader h;
  h.format_version = static_cast<uint32_t>(Get(bytes + kVersionAt, 4));
  h.header_bytes = static_cast<uint32_t>(Get(bytes + kHeaderBytesAt, 4));
  h.token_bytes = static_cast<uint32_t>(Get(bytes + kTokenBytesAt, 4));
  h.payload_crc32c = static_cast<uint32_t>(Get(bytes + kPayloadCrcAt, 4));
  h.token_count = Get(bytes + kTokenCountAt, 8);
  h.vocab = Get(bytes + kVocabAt, 8);
  const std::string at = path + ": ";
  if (h.format_version != kShardFormatVersion) {
    throw InputError(at + "unsupported format version " + std::to_string(h.format_version) + " at byte " +
                     std::to_string(kVersionAt) + " (this trainbench reads version " +
                     std::to_string(kShardFormatVersion) + ")");
  }
  if (h.header_bytes != kShardHeaderBytes) {
    throw InputError(at + "bad header size " + std::to_string(h.header_bytes) + " at byte " +
                     std::to_string(kHeaderBytesAt) + " (want " + std::to_string(kShardHeaderBytes) + ")");
  }
  if (h.token_bytes != 2 && h.token_bytes != 4) {
    throw InputError(at + "bad token dtype " + std::to_string(h.token_bytes) + " at byte " +
                     std::to_string(kTokenBytesAt) + " (want 2 = uint16 or 4 = uint32)");
  }
  const uint32_t header_crc = static_cast<uint32_t>(Get(bytes + kHeaderCrcAt, 4));
  if (Crc32c(bytes, kHeaderCrcAt) != header_crc) {
    throw InputError(at + "header checksum mismatch at byte " + std::to_string(kHeaderCrcAt) + ": bytes 0.." +
                     std::to_string(kHeaderCrcAt) + " give " + Hex(Crc32c(bytes, kHeaderCrcAt)) + ", stored " +
                     Hex(header_crc) + " (the header is corrupt)");
  }
  if (h.vocab < 1 || h.token_bytes != TokenBytesForVocab(h.vocab)) {
    throw InputError(at + "vocab " + std::to_string(h.vocab) + " at byte " + std::to_string(kVocabAt) +
                     " does not match dtype " + TokenDtypeName(h.token_bytes) + " at byte " +
                     std::to_string(kTokenBytesAt));
  }
  if (h.token_count > (UINT64_MAX - kShardHeaderBytes) / h.token_bytes) {
    throw InputError(at + "impossible token count " + std::to_string(h.token_count) + " at byte " +
                     std::to_string(kTokenCountAt));
  }
  const std::string says = "header says " + std::to_string(h.token_count) + " tokens (" +
                           std::to_string(h.file_bytes()) + " bytes), file has " + std::to_string(file_bytes);
  if (file_bytes < h.file_bytes()) throw InputError(at + "truncated at byte " + std::to_string(file_bytes) + ": " + says);
  if (file_bytes > h.file_bytes()) {
    throw InputError(at + "unexpected bytes after byte " + std::to_string(h.file_bytes()) + ": " + says);
  }
  return h;
}

void VerifyShardPayload(const std::string& path, const ShardHeader& header) {
  Fd fd(path);
  std::vector<unsigned char> chunk(kVerifyChunkBytes);
  uint32_t crc = 0;
  uint64_t offset = header.header_bytes;
  const uint64_t end = header.file_bytes();
  while (offset < end) {
    const size_t want = static_cast<size_t>(std::min<uint64_t>(chunk.size(), end - offset));
    const size_t got = ReadAt(fd.get(), chunk.data(), want, offset, path);
    if (got < want) {
      throw InputError(path + ": truncated at byte " + std::to_string(offset + got) + ": header says " +
                       std::to_string(header.token_count) + " tokens (" + std::to_string(end) + " bytes)");
    }
    crc = Crc32c(chunk.data(), got, crc);
    ::posix_fadvise(fd.get(), static_cast<off_t>(offset), static_cast<off_t>(got), POSIX_FADV_DONTNEED);  // advice
    offset += got;
  }
  // Again over the whole file: pages still queued for the LRU when their range was advised stay cached otherwise.
  ::posix_fadvise(fd.get(), 0, 0, POSIX_FADV_DONTNEED);
  if (crc != header.payload_crc32c) {
    throw InputError(path + ": payload checksum mismatch: bytes " + std::to_string(header.header_bytes) + ".." +
                     std::to_string(end) + " give " + Hex(crc) + ", the header at byte " +
                     std::to_string(kPayloadCrcAt) + " says " + Hex(header.payload_crc32c) +
                     " (the file is corrupt)");
  }
}

TokenGenerator::TokenGenerator(uint64_t vocab, double zipf_exponent) : vocab_(vocab) {
  if (vocab < 1 || vocab > (uint64_t{1} << 32)) {
    throw InputError("--vocab " + std::to_string(vocab) + " is out of range 1..4294967296");
  }
  if (zipf_exponent == 0) return;
  if (vocab > kMaxZipfVocab) {
    throw InputError("--vocab " + std::to_string(vocab) + " is too large for --distribution zipf (at most " +
                     std::to_string(kMaxZipfVocab) + ")");
  }
  // Vose's alias method: scale the weights to mean 1, then pair each column below 1 with one above.
  std::vector<double> scaled(vocab);
  double total = 0;
  for (uint64_t t = 0; t < vocab; ++t) total += scaled[t] = std::pow(static_cast<double>(t + 1), -zipf_exponent);
  std::vector<uint32_t> small, large;
  for (uint64_t t = 0; t < vocab; ++t) {
    scaled[t] *= static_cast<double>(vocab) / total;
    (scaled[t] < 1 ? small : large).push_back(static_cast<uint32_t>(t));
  }
  keep_below_.assign(vocab, UINT32_MAX);
  alias_.resize(vocab);
  for (uint64_t t = 0; t < vocab; ++t) alias_[t] = static_cast<uint32_t>(t);
  while (!small.empty() && !large.empty()) {
    const uint32_t s = small.back(), l = large.back();
    small.pop_back();
    keep_below_[s] = static_cast<uint32_t>(std::min(scaled[s] * 4294967296.0, 4294967295.0));
    alias_[s] = l;
    scaled[l] -= 1 - scaled[s];
    if (scaled[l] < 1) {
      large.pop_back();
      small.push_back(l);
    }
  }
}

template <typename T>
void TokenGenerator::FillAs(T* out, uint64_t count, uint64_t& state) const {
  // Each 64-bit draw gives a column (high half, scaled to the vocab by multiply-shift) and a 32-bit coin.
  auto column = [&](uint64_t bits32) { return (bits32 * vocab_) >> 32; };
  if (alias_.empty()) {
    uint64_t i = 0;
    for (; i + 1 < count; i += 2) {  // two uniform tokens per draw
      const uint64_t r = SplitMix64(state++);
      out[i] = static_cast<T>(column(r >> 32));
      out[i + 1] = static_cast<T>(column(r & 0xFFFFFFFFu));
    }
    if (i < count) out[i] = static_cast<T>(column(SplitMix64(state++) >> 32));
    return;
  }
  for (uint64_t i = 0; i < count; ++i) {
    const uint64_t r = SplitMix64(state++);
    const uint64_t c = column(r >> 32);
    out[i] = static_cast<T>((r & 0xFFFFFFFFu) < keep_below_[c] ? c : alias_[c]);
  }
}

void TokenGenerator::Fill(void* out, uint64_t count, uint64_t& state) const {
  if (TokenBytesForVocab(vocab_) == 2) {
    FillAs(static_cast<uint16_t*>(out), count, state);
  } else {
    FillAs(static_cast<uint32_t*>(out), count, state);
  }
}

uint64_t ParseTokenCount(const std::string& text, const std::string& flag) {
  auto invalid = [&](const std::string& why) {
    return InputError("invalid count '" + text + "' for " + flag + ": " + why +
                      " (expected a number such as 20000000, 2e7 or 20M; suffixes K=1e3, M=1e6, G=1e9, T=1e12)");
  };
  std::string number = text;
  double multiplier = 1;
  if (!number.empty()) {
    switch (number.back()) {
      case 'K': case 'k': multiplier = 1e3; break;
      case 'M': case 'm': multiplier = 1e6; break;
      case 'G': case 'g': multiplier = 1e9; break;
      case 'T': case 't': multiplier = 1e12; break;
      default: break;
    }
    if (multiplier != 1) number.pop_back();
  }
  if (!IsDecimalNumber(number, true)) throw invalid("not a number");
  if (std::all_of(number.begin(), number.end(), [](char c) { return std::isdigit(static_cast<unsigned char>(c)); }) &&
      multiplier == 1) {
    // Exact for every uint64, where a double would round above 2^53.
    errno = 0;
    const unsigned long long value = std::strtoull(number.c_str(), nullptr, 10);
    if (errno == ERANGE) throw invalid("too large");
    if (value == 0) throw invalid("must be at least 1");
    return value;
  }
  char* end = nullptr;
  const double value = std::strtod(number.c_str(), &end) * multiplier;
  if (*end != '\0') throw invalid("not a number");
  if (!std::isfinite(value) || value >= 1.8e19) throw invalid("too large");
  if (value < 1) throw invalid("must be at least 1");
  if (value != std::floor(value)) throw invalid("not a whole number");
  return static_cast<uint64_t>(value);
}

}  // namespace tb
