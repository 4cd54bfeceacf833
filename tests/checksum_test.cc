// CRC-32C against published check values and its chaining rule.
#include <gtest/gtest.h>

#include <cstdint>
#include <string>
#include <vector>

#include "checksum.h"

namespace tb {
namespace {

TEST(Crc32c, KnownValues) {
  EXPECT_EQ(Crc32c("123456789", 9), 0xE3069283u);  // the standard check value (RFC 3720, CRC catalogue)
  EXPECT_EQ(Crc32c("", 0), 0u);
  const std::vector<unsigned char> zeros(32, 0);
  EXPECT_EQ(Crc32c(zeros.data(), zeros.size()), 0x8A9136AAu);  // RFC 3720 B.4: 32 bytes of zeros
  const std::vector<unsigned char> ones(32, 0xFF);
  EXPECT_EQ(Crc32c(ones.data(), ones.size()), 0x62A8AB43u);  // RFC 3720 B.4: 32 bytes of 0xFF
}

TEST(Crc32c, ChainsAcrossSplitsAndAlignments) {
  std::string text;
  for (int i = 0; i < 1000; ++i) text += static_cast<char>('a' + (i * 7) % 26);
  const uint32_t whole = Crc32c(text.data(), text.size());
  for (size_t split : {size_t{0}, size_t{1}, size_t{7}, size_t{8}, size_t{13}, size_t{999}, size_t{1000}}) {
    const uint32_t first = Crc32c(text.data(), split);
    EXPECT_EQ(Crc32c(text.data() + split, text.size() - split, first), whole) << "split at " << split;
  }
  EXPECT_NE(Crc32c(text.data() + 1, text.size() - 1), whole);
}

// The definition itself, one bit at a time: the reference the fast paths (three interleaved streams joined by the
// zero-shift tables, one stream, the byte table) must agree with.
uint32_t BitwiseCrc32c(const unsigned char* p, size_t n, uint32_t crc) {
  crc = ~crc;
  for (size_t i = 0; i < n; ++i) {
    crc ^= p[i];
    for (int bit = 0; bit < 8; ++bit) crc = (crc >> 1) ^ ((crc & 1u) ? 0x82F63B78u : 0u);
  }
  return ~crc;
}

TEST(Crc32c, LongBuffersAtEveryOffsetMatchTheBitwiseDefinition) {
  // Lengths around the interleaved path's 12 KiB chunk (three 4 KiB streams), several chunks, and a tail; offsets
  // 0..7 so that unaligned loads are covered; a seeded non-repeating fill so that the streams differ.
  std::vector<unsigned char> data(5 * 12288 + 100);
  uint64_t state = 0x9E3779B97F4A7C15ull;
  for (unsigned char& byte : data) {
    state = state * 6364136223846793005ull + 1442695040888963407ull;
    byte = static_cast<unsigned char>(state >> 56);
  }
  for (size_t length : {size_t{12287}, size_t{12288}, size_t{12289}, size_t{2 * 12288 + 5}, size_t{5 * 12288 + 92}}) {
    for (size_t offset = 0; offset < 8; ++offset) {
      const unsigned char* p = data.data() + offset;
      EXPECT_EQ(Crc32c(p, length), BitwiseCrc32c(p, length, 0)) << "length " << length << " offset " << offset;
      EXPECT_EQ(Crc32c(p + 100, length - 100, Crc32c(p, 100)), BitwiseCrc32c(p, length, 0))
          << "chained, length " << length << " offset " << offset;
    }
  }
  EXPECT_EQ(Crc32c(data.data(), data.size(), 0x12345678u), BitwiseCrc32c(data.data(), data.size(), 0x12345678u));
}

}  // namespace
}  // namespace tb
