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

}  // namespace
}  // namespace tb
