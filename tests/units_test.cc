// Size parsing and list splitting: the grammar of -b/-e/--sizes.
#include <gtest/gtest.h>

#include "error.h"
#include "units.h"

namespace tb {
namespace {

TEST(ParseSize, PlainNumbersAndSuffixes) {
  EXPECT_EQ(ParseSize("8", "-b"), 8u);
  EXPECT_EQ(ParseSize("1K", "-b"), 1024u);
  EXPECT_EQ(ParseSize("64k", "-b"), 64u * 1024);
  EXPECT_EQ(ParseSize("1M", "-b"), 1u << 20);
  EXPECT_EQ(ParseSize("1G", "-e"), 1ULL << 30);
  EXPECT_EQ(ParseSize("2T", "-e"), 2ULL << 40);
  EXPECT_EQ(ParseSize("16MiB", "-e"), 16ULL << 20);
  EXPECT_EQ(ParseSize("1GB", "-e"), 1000000000ULL);
  EXPECT_EQ(ParseSize("5KB", "-e"), 5000ULL);
  EXPECT_EQ(ParseSize("12B", "-e"), 12ULL);
  EXPECT_EQ(ParseSize(" 3M ", "-e"), 3ULL << 20);
}

TEST(ParseSize, RejectsMalformedWithFlagName) {
  for (const char* bad : {"1Q", "", "M", "-5", "1.5M", "12 K B", "0x10", "99999999999999999999"}) {
    try {
      ParseSize(bad, "-b/--minbytes");
      ADD_FAILURE() << "accepted '" << bad << "'";
    } catch (const InputError& e) {
      EXPECT_NE(std::string(e.what()).find("-b/--minbytes"), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find(std::string("'") + bad + "'"), std::string::npos) << e.what();
      EXPECT_EQ(e.code(), ExitCode::kInput);
    }
  }
}

TEST(ParseSize, OverflowWithSuffixIsRejected) { EXPECT_THROW(ParseSize("17179869184G", "-e"), InputError); }

TEST(ParseSizeList, SplitsAndParses) {
  EXPECT_EQ(ParseSizeList("1K,64K, 1M,16M", "--sizes"),
            (std::vector<uint64_t>{1024, 65536, 1u << 20, 16u << 20}));
  EXPECT_THROW(ParseSizeList(",,", "--sizes"), InputError);
  EXPECT_THROW(ParseSizeList("1K,2Z", "--sizes"), InputError);
}

TEST(ParseSize, ZeroIsRefused) { EXPECT_THROW(ParseSize("0", "--record-bytes"), InputError); }

TEST(FormatBytes, BinaryUnits) {
  EXPECT_EQ(FormatBytes(512), "512 B");
  EXPECT_EQ(FormatBytes(1536), "1.5 KiB");
  EXPECT_EQ(FormatBytes(1ULL << 30), "1 GiB");
}

}  // namespace
}  // namespace tb
