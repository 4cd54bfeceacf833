// Token shards and the data loader: the shard format and every way a shard can be bad; sampling (every sample
// exactly once per epoch across ranks, simulated in one process); resume; O_DIRECT; raw mode; record sizes;
// the throttle and latency arithmetic; allocator hook and shutdown.
#include <gtest/gtest.h>
#include <sched.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "checksum.h"
#include "clock.h"
#include "data_loader.h"
#include "error.h"
#include "spin_wait.h"
#include "token_batch.h"
#include "token_dataset.h"
#include "token_shard.h"

namespace tb {
namespace {

namespace fs = std::filesystem;

// A fresh directory under the working directory (the build tree: a real disk, where /tmp may be tmpfs).
class TempDir {
 public:
  TempDir() {
    std::string pattern = (fs::current_path() / "data_test_XXXXXX").string();
    if (!::mkdtemp(pattern.data())) throw std::runtime_error("mkdtemp failed");
    path_ = pattern;
  }
  ~TempDir() { fs::remove_all(path_); }
  const std::string& path() const { return path_; }
  std::string operator/(const std::string& name) const { return (fs::path(path_) / name).string(); }

 private:
  std::string path_;
};

void WriteShard(const std::string& path, uint64_t vocab, const std::vector<uint32_t>& tokens) {
  ShardWriter writer(path, vocab);
  if (writer.token_bytes() == 2) {
    std::vector<uint16_t> narrow(tokens.begin(), tokens.end());
    writer.Append(narrow.data(), narrow.size());
  } else {
    writer.Append(tokens.data(), tokens.size());
  }
  writer.Finish();
}

// Shards whose tokens count up from 0 across the whole dataset, so a token names its own place.
std::vector<std::vector<uint32_t>> CountingShards(const std::string& dir, uint64_t vocab, const std::vector<size_t>& sizes) {
  std::vector<std::vector<uint32_t>> shards;
  uint32_t next = 0;
  for (size_t i = 0; i < sizes.size(); ++i) {
    std::vector<uint32_t> tokens(sizes[i]);
    for (uint32_t& t : tokens) t = static_cast<uint32_t>(next++ % vocab);
    WriteShard((fs::path(dir) / ShardFileName(i)).string(), vocab, tokens);
    shards.push_back(std::move(tokens));
  }
  return shards;
}

// The seq+1 tokens of every sample: records of `record_tokens` back to back in each shard, tails dropped.
std::vector<std::vector<uint32_t>> ExpectedSamples(const std::vector<std::vector<uint32_t>>& shards, int seq,
                                                   size_t record_tokens) {
  std::vector<std::vector<uint32_t>> samples;
  for (const auto& shard : shards) {
    for (size_t start = 0; start + record_tokens <= shard.size(); start += record_tokens) {
      samples.emplace_back(shard.begin() + start, shard.begin() + start + seq + 1);
    }
  }
  return samples;
}

// A batch as the model gets it: int32 inputs and targets (every id accepted unless `vocab` says otherwise).
struct Unpacked {
  std::vector<int32_t> inputs, targets;
  bool operator==(const Unpacked&) const = default;
};
Unpacked Unpack(const LoaderBatch& b, uint64_t vocab = uint64_t{1} << 32) {
  Unpacked u;
  u.inputs.resize(static_cast<size_t>(b.tokens.batch) * b.tokens.seq);
  u.targets.resize(u.inputs.size());
  UnpackTokens(b.tokens, vocab, u.inputs.data(), u.targets.data());
  return u;
}

void ExpectBatchMatches(const LoaderBatch& b, const std::vector<std::vector<uint32_t>>& expected) {
  const Unpacked u = Unpack(b);
  const int seq = b.tokens.seq;
  for (int row = 0; row < b.tokens.batch; ++row) {
    ASSERT_LT(b.samples[row], expected.size());
    const std::vector<uint32_t>& want = expected[b.samples[row]];
    for (int k = 0; k < seq; ++k) {
      ASSERT_EQ(u.inputs[row * seq + k], static_cast<int32_t>(want[k])) << "sample " << b.samples[row] << " token " << k;
      ASSERT_EQ(u.targets[row * seq + k], static_cast<int32_t>(want[k + 1])) << "sample " << b.samples[row];
    }
  }
}

// Takes `batches` batches, checks each against `expected`, and returns the samples they held.
std::set<uint64_t> NextBatchesMatch(DataLoader& loader, int batches,
                                    const std::vector<std::vector<uint32_t>>& expected) {
  std::set<uint64_t> seen;
  for (int i = 0; i < batches; ++i) {
    const LoaderBatch& b = loader.Next();
    ExpectBatchMatches(b, expected);
    seen.insert(b.samples.begin(), b.samples.end());
  }
  return seen;
}

// Raw mode's samples of one file: each whole record of `record` bytes gives its first `tokens` little-endian
// uint16 values modulo `vocab`.
void AppendRawSamples(const std::vector<unsigned char>& bytes, size_t record, int tokens, uint32_t vocab,
                      std::vector<std::vector<uint32_t>>& samples) {
  for (size_t start = 0; start + record <= bytes.size(); start += record) {
    std::vector<uint32_t> sample;
    for (int k = 0; k < tokens; ++k) sample.push_back((bytes[start + 2 * k] | bytes[start + 2 * k + 1] << 8) % vocab);
    samples.push_back(sample);
  }
}

void PatchBytes(const std::string& path, uint64_t offset, const std::vector<unsigned char>& bytes) {
  std::fstream f(path, std::ios::in | std::ios::out | std::ios::binary);
  f.seekp(static_cast<std::streamoff>(offset));
  f.write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
}

std::string InputErrorOf(const std::function<void()>& action) {
  try {
    action();
  } catch (const InputError& e) {
    return e.what();
  }
  return "(no InputError)";
}

// ---- counts and the shard format ----------------------------------------------------------------------------

TEST(TokenCount, SuffixesAndScientific) {
  EXPECT_EQ(ParseTokenCount("20G", "--tokens"), 20000000000ull);
  EXPECT_EQ(ParseTokenCount("100M", "--tokens"), 100000000ull);
  EXPECT_EQ(ParseTokenCount("1.5K", "--tokens"), 1500ull);
  EXPECT_EQ(ParseTokenCount("2T", "--tokens"), 2000000000000ull);
  EXPECT_EQ(ParseTokenCount("2e10", "--tokens"), 20000000000ull);
  EXPECT_EQ(ParseTokenCount("18446744073709551615", "--tokens"), 18446744073709551615ull);
  for (const char* bad : {"", "0", "1.5", "abc", "5X", "-3", "1e", "0.0001K", "inf", "99999999999999999999"}) {
    EXPECT_NE(InputErrorOf([&] { ParseTokenCount(bad, "--tokens"); }).find("for --tokens"), std::string::npos) << bad;
  }
}

TEST(TokenShard, RoundTripBothDtypes) {
  TempDir dir;
  for (uint64_t vocab : {uint64_t{50257}, uint64_t{65536}, uint64_t{65537}, uint64_t{1} << 32}) {
    const std::string path = dir / "s.tbs";
    std::vector<uint32_t> tokens = {0, 1, 2, static_cast<uint32_t>(vocab - 1)};
    WriteShard(path, vocab, tokens);
    EXPECT_FALSE(fs::exists(path + ".tmp"));
    const ShardHeader h = ReadShardHeader(path);
    EXPECT_EQ(h.token_bytes, vocab <= 65536 ? 2u : 4u) << vocab;
    EXPECT_EQ(h.token_count, 4u);
    EXPECT_EQ(h.vocab, vocab);
    EXPECT_EQ(fs::file_size(path), kShardHeaderBytes + 4 * h.token_bytes);
    EXPECT_NO_THROW(VerifyShardPayload(path, h));
  }
}

TEST(TokenShard, UnfinishedWriterLeavesNothing) {
  TempDir dir;
  {
    ShardWriter writer(dir / "s.tbs", 100);
    const uint16_t t[2] = {1, 2};
    writer.Append(t, 2);
  }
  EXPECT_TRUE(fs::is_empty(dir.path()));
}

class CorruptShard : public ::testing::Test {
 protected:
  void SetUp() override {
    path_ = dir_ / ShardFileName(0);
    std::vector<uint32_t> tokens(1000);
    for (size_t i = 0; i < tokens.size(); ++i) tokens[i] = static_cast<uint32_t>(i * 7 % 50257);
    WriteShard(path_, 50257, tokens);
  }
  TempDir dir_;
  std::string path_;
};

TEST_F(CorruptShard, BadMagic) {
  PatchBytes(path_, 0, {'X'});
  EXPECT_EQ(InputErrorOf([&] { ReadShardHeader(path_); }),
            path_ + ": not a trainbench token shard: bad magic at byte 0 (want \"TBTOKENS\")");
}

TEST_F(CorruptShard, BadDtype) {
  PatchBytes(path_, 16, {3});
  EXPECT_EQ(InputErrorOf([&] { ReadShardHeader(path_); }),
            path_ + ": bad token dtype 3 at byte 16 (want 2 = uint16 or 4 = uint32)");
}

TEST_F(CorruptShard, HeaderChecksum) {
  PatchBytes(path_, 24, {0x01});  // the token count
  EXPECT_NE(InputErrorOf([&] { ReadShardHeader(path_); }).find(path_ + ": header checksum mismatch at byte 40"),
            std::string::npos);
}

TEST_F(CorruptShard, DtypeThatCannotHoldTheVocab) {
  PatchBytes(path_, 32, {0x00, 0x00, 0x02});  // vocab 131072 in a uint16 shard, with a header CRC to match
  std::vector<unsigned char> header(40);
  std::ifstream(path_, std::ios::binary).read(reinterpret_cast<char*>(header.data()), 40);
  const uint32_t crc = Crc32c(header.data(), header.size());
  PatchBytes(path_, 40, {static_cast<unsigned char>(crc), static_cast<unsigned char>(crc >> 8),
                         static_cast<unsigned char>(crc >> 16), static_cast<unsigned char>(crc >> 24)});
  EXPECT_EQ(InputErrorOf([&] { ReadShardHeader(path_); }),
            path_ + ": vocab 131072 at byte 32 does not match dtype uint16 at byte 16");
}

TEST_F(CorruptShard, BadVersion) {
  PatchBytes(path_, 8, {9});
  EXPECT_EQ(InputErrorOf([&] { ReadShardHeader(path_); }),
            path_ + ": unsupported format version 9 at byte 8 (this trainbench reads version 1)");
}

TEST_F(CorruptShard, BadPayloadChecksum) {
  PatchBytes(path_, kShardHeaderBytes + 100, {0xFF});
  const ShardHeader h = ReadShardHeader(path_);  // the header alone is fine
  const std::string error = InputErrorOf([&] { VerifyShardPayload(path_, h); });
  EXPECT_NE(error.find(path_ + ": payload checksum mismatch: bytes 4096..6096 give 0x"), std::string::npos) << error;
  EXPECT_NE(error.find("the header at byte 20 says 0x"), std::string::npos) << error;
}

TEST_F(CorruptShard, Truncated) {
  fs::resize_file(path_, 4096 + 10);
  EXPECT_EQ(InputErrorOf([&] { ReadShardHeader(path_); }),
            path_ + ": truncated at byte 4106: header says 1000 tokens (6096 bytes), file has 4106");
  fs::resize_file(path_, 100);
  EXPECT_EQ(InputErrorOf([&] { ReadShardHeader(path_); }),
            path_ + ": truncated at byte 100: the header needs 4096 bytes, file has 100");
}

TEST_F(CorruptShard, TrailingBytes) {
  fs::resize_file(path_, 6096 + 2);
  EXPECT_EQ(InputErrorOf([&] { ReadShardHeader(path_); }),
            path_ + ": unexpected bytes after byte 6096: header says 1000 tokens (6096 bytes), file has 6098");
}

TEST_F(CorruptShard, DatasetChecksNameTheFile) {
  WriteShard(dir_ / ShardFileName(1), 50257, std::vector<uint32_t>(10, 1));
  const PayloadCheck good = VerifyPayloads(OpenTokenDataset(dir_.path()), 0, 1, 2);
  EXPECT_TRUE(good.bad_shards.empty());
  EXPECT_EQ(good.shards, 2u);
  EXPECT_EQ(good.bytes, 1010u * 2);
  PatchBytes(path_, kShardHeaderBytes + 2, {0x12});
  const TokenDataset dataset = OpenTokenDataset(dir_.path());  // headers only: still fine
  EXPECT_EQ(dataset.shards.size(), 2u);
  EXPECT_EQ(dataset.total_tokens, 1010u);
  const PayloadCheck bad = VerifyPayloads(dataset, 0, 1, 1);
  ASSERT_EQ(bad.bad_shards.size(), 1u);
  EXPECT_NE(bad.bad_shards[0].find(path_ + ": payload checksum mismatch"), std::string::npos) << bad.bad_shards[0];
}

// Ranks split the payload check: every shard is read by exactly one part, whatever the thread count, and a corrupt
// one is found by the part that holds it.
TEST(TokenDatasetCheck, PartsShareTheShardsOnce) {
  TempDir dir;
  CountingShards(dir.path(), 50257, {100, 200, 300, 400, 500});
  PatchBytes(dir / ShardFileName(3), kShardHeaderBytes + 10, {0xAB});
  const TokenDataset dataset = OpenTokenDataset(dir.path());
  for (int threads : {1, 3, 8}) {
    uint64_t shards = 0, bytes = 0;
    std::vector<std::string> bad;
    for (int part = 0; part < 3; ++part) {
      const PayloadCheck check = VerifyPayloads(dataset, part, 3, threads);
      shards += check.shards;
      bytes += check.bytes;
      bad.insert(bad.end(), check.bad_shards.begin(), check.bad_shards.end());
      EXPECT_EQ(check.bad_shards.size(), part == 0 ? 1u : 0u) << "shard 3 is part 0's (3 mod 3)";
    }
    EXPECT_EQ(shards, 5u);
    EXPECT_EQ(bytes, 1500u * 2);
    ASSERT_EQ(bad.size(), 1u);
    EXPECT_EQ(bad[0].rfind(dir / ShardFileName(3) + ": payload checksum mismatch", 0), 0u) << bad[0];
  }
}

// Every problem the headers show is listed (one line each, naming the file); OpenTokenDataset refuses with the
// first and counts the rest. An unfinished write's temporary file is not a shard, but it is a problem.
TEST(TokenDatasetCheck, ScanListsEveryProblem) {
  TempDir dir;
  CountingShards(dir.path(), 50257, {100, 100, 100});
  PatchBytes(dir / ShardFileName(0), 0, {'X'});
  fs::resize_file(dir / ShardFileName(2), 4096 + 10);
  std::ofstream(dir / (ShardFileName(3) + ".tmp")) << "partial";
  const DatasetScan scan = ScanTokenDataset(dir.path());
  ASSERT_EQ(scan.bad_shards.size(), 2u);
  EXPECT_EQ(scan.bad_shards[0].rfind(dir / ShardFileName(0) + ": not a trainbench token shard", 0), 0u);
  EXPECT_EQ(scan.bad_shards[1].rfind(dir / ShardFileName(2) + ": truncated at byte 4106", 0), 0u);
  ASSERT_EQ(scan.partial_files.size(), 1u);
  EXPECT_EQ(scan.partial_files[0].rfind(dir / ShardFileName(3) + ".tmp: an unfinished shard", 0), 0u);
  ASSERT_EQ(scan.dataset.shards.size(), 1u);
  EXPECT_EQ(scan.dataset.shards[0].path, dir / ShardFileName(1));
  const std::string error = InputErrorOf([&] { OpenTokenDataset(dir.path()); });
  EXPECT_EQ(error.rfind(dir / ShardFileName(0) + ": not a trainbench token shard", 0), 0u) << error;
  EXPECT_NE(error.find("(and 2 more problems in '" + dir.path() + "'; 'trainbench data verify " + dir.path() +
                       "' lists them)"),
            std::string::npos)
      << error;
}

TEST_F(CorruptShard, OutOfVocabTokenFailsUnpackWithFileAndOffset) {
  // A payload byte flipped without the checksum being verified: unpacking the batch (the model's SetBatch)
  // refuses the token and names where the loader read it.
  PatchBytes(path_, kShardHeaderBytes + 2 * 5, {0xFF, 0xFF});  // token 5 = 65535 >= 50257
  DataLoaderOptions o;
  o.dir = dir_.path();
  o.seq = 9;  // samples of 10 tokens: token 5 is in sample 0
  o.batch = 100;
  o.workers = 2;
  DataLoader loader(o);
  const LoaderBatch& b = loader.Next();
  EXPECT_EQ(InputErrorOf([&] { Unpack(b, 50257); }), path_ + ": corrupt token 65535 at byte 4106 (vocab 50257)");
}

// ---- unpacking a batch into the model's ids -----------------------------------------------------------------

// Windows of uint16 and uint32 tokens: inputs are tokens [0, seq), targets [1, seq], for every width and length.
TEST(UnpackTokensTest, WindowsWidenIntoInputsAndTargets) {
  for (int seq : {1, 2, 7, 8, 9, 33, 100}) {
    for (int width : {2, 4}) {
      const int batch = 3;
      std::vector<unsigned char> bytes(static_cast<size_t>(batch) * (seq + 1) * width + 1);  // +1: windows unaligned
      TokenBatch b;
      b.batch = batch;
      b.seq = seq;
      b.token_bytes = width;
      std::vector<std::vector<uint32_t>> want(batch);
      for (int i = 0; i < batch; ++i) {
        unsigned char* window = bytes.data() + 1 + static_cast<size_t>(i) * (seq + 1) * width;
        b.windows.push_back(window);
        for (int k = 0; k <= seq; ++k) {
          const uint32_t token = width == 2 ? static_cast<uint32_t>(60000 - 7 * i - k) : 3000000000u - i - k;
          want[i].push_back(token);
          std::memcpy(window + static_cast<size_t>(k) * width, &token, width);  // little-endian host
        }
      }
      std::vector<int32_t> inputs(static_cast<size_t>(batch) * seq, -1), targets(inputs.size(), -1);
      UnpackTokens(b, uint64_t{1} << 32, inputs.data(), targets.data());
      for (int i = 0; i < batch; ++i) {
        for (int k = 0; k < seq; ++k) {
          ASSERT_EQ(static_cast<uint32_t>(inputs[i * seq + k]), want[i][k]) << seq << " " << width << " " << i << " " << k;
          ASSERT_EQ(static_cast<uint32_t>(targets[i * seq + k]), want[i][k + 1]) << seq << " " << width;
        }
      }
    }
  }
}

TEST(UnpackTokensTest, IdsOutsideTheVocabulary) {
  const uint16_t tokens[2][5] = {{1, 2, 3, 4, 5}, {6, 7, 99, 8, 9}};
  TokenBatch b;
  b.batch = 2;
  b.seq = 4;
  b.token_bytes = 2;
  b.windows = {reinterpret_cast<const unsigned char*>(tokens[0]), reinterpret_cast<const unsigned char*>(tokens[1])};
  std::vector<int32_t> in(8), tg(8);
  EXPECT_EQ(InputErrorOf([&] { UnpackTokens(b, 50, in.data(), tg.data()); }),
            "token 99 at sequence 1, position 2 is outside the vocabulary [0, 50)");
  b.origin = [](int window, int token) { return TokenOrigin{"f" + std::to_string(window), 4096u + 2u * token}; };
  EXPECT_EQ(InputErrorOf([&] { UnpackTokens(b, 50, in.data(), tg.data()); }), "f1: corrupt token 99 at byte 4100 (vocab 50)");
  EXPECT_NO_THROW(UnpackTokens(b, 100, in.data(), tg.data()));
  // Raw files: ids wrap into the vocabulary instead.
  b.wrap_vocab = 50;
  UnpackTokens(b, 50, in.data(), tg.data());
  EXPECT_EQ(in, (std::vector<int32_t>{1, 2, 3, 4, 6, 7, 49, 8}));
  EXPECT_EQ(tg, (std::vector<int32_t>{2, 3, 4, 5, 7, 49, 8, 9}));
  // The last token (a target only) is checked too.
  const uint16_t last[5] = {1, 2, 3, 4, 77};
  TokenBatch one;
  one.batch = 1;
  one.seq = 4;
  one.token_bytes = 2;
  one.windows = {reinterpret_cast<const unsigned char*>(last)};
  EXPECT_EQ(InputErrorOf([&] { UnpackTokens(one, 50, in.data(), tg.data()); }),
            "token 77 at sequence 0, position 4 is outside the vocabulary [0, 50)");
  one.token_bytes = 3;
  EXPECT_EQ(InputErrorOf([&] { UnpackTokens(one, 50, in.data(), tg.data()); }), "token width 3 bytes (want 2 or 4)");
  one.token_bytes = 2;
  one.batch = 2;
  EXPECT_EQ(InputErrorOf([&] { UnpackTokens(one, 50, in.data(), tg.data()); }), "a token batch of 2 sequences with 1 windows");
  one.seq = 0;
  EXPECT_NE(InputErrorOf([&] { UnpackTokens(one, 50, in.data(), tg.data()); }).find("at least one sequence"), std::string::npos);
}

TEST(UnpackTokensTest, ArraysAreCopiedAndChecked) {
  std::vector<int32_t> inputs = {1, 2, 3, 4, 5, 6}, targets = {2, 3, 4, 5, 6, 7};
  std::vector<int32_t> in(6), tg(6);
  UnpackTokens(TokenArrays(inputs.data(), targets.data(), 2, 3), 8, in.data(), tg.data());
  EXPECT_EQ(in, inputs);
  EXPECT_EQ(tg, targets);
  EXPECT_EQ(InputErrorOf([&] { UnpackTokens(TokenArrays(inputs.data(), targets.data(), 2, 3), 7, in.data(), tg.data()); }),
            "target token 7 at sequence 1, position 2 is outside the vocabulary [0, 7)");
  inputs[1] = -3;
  EXPECT_EQ(InputErrorOf([&] { UnpackTokens(TokenArrays(inputs.data(), targets.data(), 2, 3), 8, in.data(), tg.data()); }),
            "input token -3 at sequence 0, position 1 is outside the vocabulary [0, 8)");
}

// The listing the loader, train and data verify share: a gap in the numbering is a missing shard (one line per run
// of missing indices); anything named like a shard that is no shard file is named with what it is; a symbolic link
// to a shard file is a shard; the shards come in index order.
TEST(TokenDatasetCheck, ListingNamesGapsAndWhatIsNoShard) {
  TempDir dir;
  CountingShards(dir.path(), 1000, {10, 10, 10, 10, 10, 10, 10});  // shards 0..6
  fs::remove(dir / ShardFileName(1));
  fs::remove(dir / ShardFileName(3));
  fs::remove(dir / ShardFileName(4));
  DatasetScan scan = ScanTokenDataset(dir.path());
  ASSERT_EQ(scan.missing_shards.size(), 2u);
  EXPECT_EQ(scan.missing_shards[0], dir / ShardFileName(1) + ": missing, though the shards go up to shard-00006.tbs "
                                                              "(deleted, or never written); rewrite the dataset with "
                                                              "'trainbench data generate --force'");
  EXPECT_EQ(scan.missing_shards[1].rfind(dir / ShardFileName(3) + " .. shard-00004.tbs: missing (2 shards), though", 0),
            0u)
      << scan.missing_shards[1];
  EXPECT_TRUE(scan.bad_shards.empty());
  EXPECT_EQ(scan.dataset.shards.size(), 4u);
  EXPECT_EQ(InputErrorOf([&] { OpenTokenDataset(dir.path()); }).rfind(dir / ShardFileName(1) + ": missing", 0), 0u);

  // The gaps filled with things that are no shard files: each is named, none is missing any more.
  fs::create_directory(dir / ShardFileName(1));
  ASSERT_EQ(::mkfifo((dir / ShardFileName(3)).c_str(), 0644), 0);  // never opened for reading: it would block
  fs::create_symlink(dir / "nowhere.tbs", dir / ShardFileName(4));
  fs::create_directory(dir / "elsewhere");
  fs::create_symlink(dir / "elsewhere", dir / ShardFileName(7));
  std::ofstream(dir / "shard-8.tbs") << "x";  // not ShardFileName(8)
  scan = ScanTokenDataset(dir.path());
  EXPECT_TRUE(scan.missing_shards.empty()) << scan.missing_shards.front();
  ASSERT_EQ(scan.bad_shards.size(), 5u);
  EXPECT_EQ(scan.bad_shards[0], dir / "shard-8.tbs: not a shard's name: shards are named shard-00000.tbs, "
                                      "shard-00001.tbs, ... by their index");
  EXPECT_EQ(scan.bad_shards[1], dir / ShardFileName(1) + ": not a token shard: it is a directory");
  EXPECT_EQ(scan.bad_shards[2], dir / ShardFileName(3) + ": not a token shard: it is a FIFO, not a regular file");
  EXPECT_EQ(scan.bad_shards[3], dir / ShardFileName(4) + ": a symbolic link to '" + dir / "nowhere.tbs" +
                                    "', which does not exist");
  EXPECT_EQ(scan.bad_shards[4], dir / ShardFileName(7) + ": a symbolic link to '" + dir / "elsewhere" +
                                    "', not to a token shard: it is a directory");

  // A link to a shard file is a shard (datasets are linked into place), read through the link, in index order.
  TempDir linked;
  TempDir source;
  CountingShards(source.path(), 1000, {10, 20, 30});
  fs::create_symlink(source / ShardFileName(0), linked / ShardFileName(0));
  fs::create_symlink(fs::path("..") / fs::path(source.path()).filename() / ShardFileName(1), linked / ShardFileName(1));
  fs::copy_file(source / ShardFileName(2), linked / ShardFileName(2));
  const TokenDataset dataset = OpenTokenDataset(linked.path());
  ASSERT_EQ(dataset.shards.size(), 3u);
  EXPECT_EQ(dataset.total_tokens, 60u);
  for (size_t i = 0; i < dataset.shards.size(); ++i) EXPECT_EQ(dataset.shards[i].path, linked / ShardFileName(i));
  EXPECT_TRUE(VerifyPayloads(dataset, 0, 1, 2).bad_shards.empty());
}

TEST(TokenDatasetCheck, DirectoryProblems) {
  TempDir dir;
  EXPECT_NE(InputErrorOf([&] { OpenTokenDataset(dir / "missing"); }).find("does not exist"), std::string::npos);
  EXPECT_NE(InputErrorOf([&] { OpenTokenDataset(dir.path()); }).find("holds no token shards"), std::string::npos);
  WriteShard(dir / ShardFileName(0), 1000, {1, 2, 3});
  WriteShard(dir / ShardFileName(1), 70000, {1, 2, 3});
  EXPECT_NE(InputErrorOf([&] { OpenTokenDataset(dir.path()); })
                .find(dir / ShardFileName(1) + ": dtype uint32, vocab 70000 differ from"),
            std::string::npos);
}

TEST(TokenGeneratorTest, UniformCoversTheVocabEvenly) {
  const TokenGenerator generator(10, 0);
  std::vector<uint16_t> tokens(1000001);
  uint64_t state = TokenGenerator::StreamState(1, 0);
  generator.Fill(tokens.data(), tokens.size(), state);
  std::vector<int> counts(10);
  for (uint16_t t : tokens) ++counts.at(t);
  for (int c : counts) EXPECT_NEAR(c / 1e6, 0.1, 0.002);
}

TEST(TokenGeneratorTest, ZipfFrequenciesFollowThePowerLaw) {
  const int vocab = 100;
  const TokenGenerator generator(vocab, 1.0);
  std::vector<uint16_t> tokens(4000000);
  uint64_t state = TokenGenerator::StreamState(2, 0);
  generator.Fill(tokens.data(), tokens.size(), state);
  std::vector<double> counts(vocab);
  for (uint16_t t : tokens) counts.at(t) += 1;
  double harmonic = 0;
  for (int t = 1; t <= vocab; ++t) harmonic += 1.0 / t;
  for (int t : {0, 1, 9, 99}) {
    const double want = 1.0 / (t + 1) / harmonic;
    EXPECT_NEAR(counts[t] / tokens.size(), want, 0.03 * want + 1e-4) << "token " << t;
  }
}

TEST(TokenGeneratorTest, StreamsDependOnSeedAndIndexOnly) {
  const TokenGenerator generator(70000, 0);
  auto stream = [&](uint64_t seed, uint64_t index) {
    std::vector<uint32_t> tokens(64);
    uint64_t state = TokenGenerator::StreamState(seed, index);
    generator.Fill(tokens.data(), tokens.size(), state);
    return tokens;
  };
  EXPECT_EQ(stream(1, 3), stream(1, 3));
  EXPECT_NE(stream(1, 3), stream(1, 4));
  EXPECT_NE(stream(1, 3), stream(2, 3));
  for (uint32_t t : stream(1, 3)) EXPECT_LT(t, 70000u);
}

// ---- sampling -----------------------------------------------------------------------------------------------

TEST(SamplePlanTest, EachEpochIsAPermutation) {
  for (uint64_t n : {uint64_t{1}, uint64_t{2}, uint64_t{5}, uint64_t{64}, uint64_t{1000}, uint64_t{4097}}) {
    SamplePlan plan(n, 1, 1, 42);
    std::vector<uint64_t> epoch0, epoch1;
    for (uint64_t b = 0; b < plan.batches_per_epoch(); ++b) {
      epoch0.push_back(plan.Sample(0, b, 0, 0));
      epoch1.push_back(plan.Sample(1, b, 0, 0));
    }
    std::vector<uint64_t> sorted = epoch0;
    std::sort(sorted.begin(), sorted.end());
    for (uint64_t i = 0; i < n; ++i) ASSERT_EQ(sorted[i], i) << "n=" << n;
    if (n >= 64) {
      std::vector<uint64_t> other_seed;
      SamplePlan other(n, 1, 1, 43);
      for (uint64_t b = 0; b < n; ++b) other_seed.push_back(other.Sample(0, b, 0, 0));
      EXPECT_NE(epoch0, epoch1) << "epochs must be shuffled differently";
      EXPECT_NE(epoch0, other_seed) << "seeds must shuffle differently";
    }
  }
}

// Loaders for n ranks in one process: together they read every sample exactly once per epoch, with the right
// tokens, and each rank's shares are disjoint.
TEST(DataLoaderTest, EverySampleOncePerEpochAcrossRanks) {
  TempDir dir;
  const int seq = 7;
  const auto shards = CountingShards(dir.path(), 1u << 20, {1000, 333, 2049, 17, 800});
  const auto expected = ExpectedSamples(shards, seq, seq + 1);
  const uint64_t samples = expected.size();
  for (int world : {1, 2, 3, 4}) {
    const int batch = 5;
    std::vector<std::unique_ptr<DataLoader>> loaders;
    for (int r = 0; r < world; ++r) {
      DataLoaderOptions o;
      o.dir = dir.path();
      o.seq = seq;
      o.batch = batch;
      o.rank = r;
      o.world = world;
      o.seed = 7;
      o.workers = 3;
      o.prefetch = 2;
      loaders.push_back(std::make_unique<DataLoader>(o));
    }
    const LoaderStats stats = loaders[0]->stats();
    ASSERT_EQ(stats.samples, samples);
    const uint64_t per_epoch = stats.batches_per_epoch;
    EXPECT_EQ(per_epoch, samples / (world * batch));
    EXPECT_EQ(stats.dropped_per_epoch, samples - per_epoch * world * batch);
    for (uint64_t epoch = 0; epoch < 2; ++epoch) {
      std::map<uint64_t, int> reads;
      for (uint64_t b = 0; b < per_epoch; ++b) {
        for (int r = 0; r < world; ++r) {
          const LoaderBatch& got = loaders[r]->Next();
          ASSERT_EQ(got.position, (LoaderPosition{epoch, b, 7}));
          ExpectBatchMatches(got, expected);
          for (uint64_t s : got.samples) ++reads[s];
        }
      }
      EXPECT_EQ(reads.size(), per_epoch * world * batch) << "world " << world << " epoch " << epoch;
      for (const auto& [sample, count] : reads) ASSERT_EQ(count, 1) << "sample " << sample << " world " << world;
    }
  }
}

// The consumer polls where a core is spare and workers yield after each claim where they outnumber the CPUs:
// with the process on one CPU and on all of them, 1 and 3 workers, every batch still comes back whole and in order.
TEST(DataLoaderTest, BatchesComeBackInOrderWhateverCpusTheWorkersHave) {
  TempDir dir;
  const int seq = 9;
  const auto shards = CountingShards(dir.path(), 1u << 20, {700, 301});
  const auto expected = ExpectedSamples(shards, seq, seq + 1);
  cpu_set_t all;
  ASSERT_EQ(::sched_getaffinity(0, sizeof(all), &all), 0);
  cpu_set_t one;
  CPU_ZERO(&one);
  for (int cpu = 0; cpu < CPU_SETSIZE; ++cpu) {
    if (CPU_ISSET(cpu, &all)) {
      CPU_SET(cpu, &one);
      break;
    }
  }
  for (const cpu_set_t* cpus : {&one, &all}) {
    ASSERT_EQ(::sched_setaffinity(0, sizeof(*cpus), cpus), 0);  // the loader's threads inherit it
    for (int workers : {1, 3}) {
      DataLoaderOptions o;
      o.dir = dir.path();
      o.seq = seq;
      o.batch = 7;
      o.workers = workers;
      o.prefetch = 3;
      DataLoader loader(o);
      const uint64_t per_epoch = loader.stats().batches_per_epoch;
      ASSERT_EQ(per_epoch, expected.size() / 7);
      for (uint64_t b = 0; b < 5 * per_epoch; ++b) {
        const LoaderBatch& got = loader.Next();
        ASSERT_EQ(got.position, (LoaderPosition{b / per_epoch, b % per_epoch, o.seed}))
            << workers << " workers on " << CPU_COUNT(cpus) << " CPUs";
        ExpectBatchMatches(got, expected);
      }
    }
  }
  ASSERT_EQ(::sched_setaffinity(0, sizeof(all), &all), 0);
}

// ---- resume -------------------------------------------------------------------------------------------------

TEST(DataLoaderTest, ResumeFromSavedPositionGivesTheSameBatches) {
  TempDir dir;
  const int seq = 15;
  CountingShards(dir.path(), 50257, {700, 500});
  DataLoaderOptions o;
  o.dir = dir.path();
  o.seq = seq;
  o.batch = 3;
  o.rank = 1;
  o.world = 2;
  o.seed = 99;
  o.workers = 2;
  o.prefetch = 3;
  struct Seen {
    LoaderPosition position;
    std::vector<uint64_t> samples;
    Unpacked tokens;
    bool operator==(const Seen&) const = default;
  };
  auto copy = [&](const LoaderBatch& b) { return Seen{b.position, b.samples, Unpack(b)}; };
  const int total = 25, saved_at = 11;  // 12 global batches per epoch: crosses two epoch boundaries
  std::vector<Seen> uninterrupted;
  LoaderPosition saved;
  {
    DataLoader loader(o);
    ASSERT_EQ(loader.stats().batches_per_epoch, 12u);
    for (int i = 0; i < total; ++i) {
      if (i == saved_at) saved = loader.Position();
      uninterrupted.push_back(copy(loader.Next()));
    }
  }
  EXPECT_EQ(saved, (LoaderPosition{0, 11, 99}));
  o.resume = saved;
  DataLoader resumed(o);
  EXPECT_EQ(resumed.Position(), saved);
  for (int i = saved_at; i < total; ++i) ASSERT_EQ(copy(resumed.Next()), uninterrupted[i]) << "batch " << i;

  o.resume = LoaderPosition{0, 0, 98};
  EXPECT_NE(InputErrorOf([&] { DataLoader bad(o); }).find("resume with the same seed"), std::string::npos);
  o.resume = LoaderPosition{0, 12, 99};
  EXPECT_NE(InputErrorOf([&] { DataLoader bad(o); }).find("past the 12 global batches per epoch"), std::string::npos);
}

// ---- record sizes, raw mode, O_DIRECT -----------------------------------------------------------------------

TEST(DataLoaderTest, RecordBytesReadsLargerRecords) {
  TempDir dir;
  const auto shards = CountingShards(dir.path(), 1000, {4096, 3000});
  DataLoaderOptions o;
  o.dir = dir.path();
  o.seq = 9;
  o.batch = 2;
  o.record_bytes = 1000;  // 500 uint16 tokens per record, the first 10 are the sample
  DataLoader loader(o);
  EXPECT_EQ(loader.stats().samples, 8u + 6u);
  const auto expected = ExpectedSamples(shards, o.seq, 500);
  for (int i = 0; i < 7; ++i) {
    const LoaderBatch& b = loader.Next();
    EXPECT_EQ(b.stats.bytes_read, 2000u);
    ExpectBatchMatches(b, expected);
  }
  o.record_bytes = 19;
  EXPECT_EQ(InputErrorOf([&] { DataLoader bad(o); }),
            "--record-bytes 19 is smaller than one sample: (9 + 1) tokens x 2 B = 20 B");
}

TEST(DataLoaderTest, RawModeReadsAnyFiles) {
  TempDir dir;
  fs::create_directories(dir / "sub/deeper");
  std::map<std::string, std::vector<unsigned char>> files;
  unsigned seed = 1;
  for (const auto& [name, size] : std::vector<std::pair<std::string, size_t>>{
           {"a.bin", 200}, {"b.jpg", 64}, {"c.txt", 10}, {"sub/deeper/d", 130}, {"sub/e", 640}}) {
    std::vector<unsigned char> bytes(size);
    for (unsigned char& c : bytes) c = static_cast<unsigned char>((seed = seed * 1103515245 + 12345) >> 16);
    std::ofstream(dir / name, std::ios::binary).write(reinterpret_cast<const char*>(bytes.data()), size);
    files[dir / name] = bytes;
  }
  DataLoaderOptions o;
  o.dir = dir.path();
  o.raw = true;
  o.raw_vocab = 1000;
  o.seq = 15;  // 16 uint16 tokens: 32 bytes of each 64-byte record
  o.record_bytes = 64;
  o.batch = 2;
  o.workers = 2;
  DataLoader loader(o);
  EXPECT_EQ(loader.stats().files, 4u);  // c.txt holds no whole record
  // Sorted paths: a.bin (3 records), b.jpg (1), sub/deeper/d (2), sub/e (10).
  std::vector<std::vector<uint32_t>> expected;
  for (const auto& [path, bytes] : files) AppendRawSamples(bytes, 64, 16, 1000, expected);  // std::map: sorted
  ASSERT_EQ(loader.stats().samples, expected.size());
  ASSERT_EQ(expected.size(), 16u);
  EXPECT_EQ(NextBatchesMatch(loader, 8, expected).size(), 16u);
}

// More files than descriptors to spare: the first half of the soft limit stay open, the others are opened for
// each read, and every sample still comes back right.
TEST(DataLoaderTest, FilesBeyondTheDescriptorBudgetAreOpenedPerRead) {
  TempDir dir;
  const int files = 40;
  std::vector<std::vector<uint32_t>> expected;
  for (int f = 0; f < files; ++f) {
    std::vector<unsigned char> bytes(64);
    for (size_t i = 0; i < bytes.size(); ++i) bytes[i] = static_cast<unsigned char>(f * 3 + i);
    char name[16];
    std::snprintf(name, sizeof name, "f%03d", f);  // sorted as the loader sorts
    std::ofstream(dir / name, std::ios::binary).write(reinterpret_cast<const char*>(bytes.data()), 64);
    AppendRawSamples(bytes, 32, 16, 50000, expected);
  }
  // The soft descriptor limit lowered for this test, and given back however it ends.
  struct LowFileLimit {
    rlimit saved{};
    explicit LowFileLimit(rlim_t soft) {
      if (::getrlimit(RLIMIT_NOFILE, &saved) != 0) throw std::runtime_error("getrlimit failed");
      rlimit low = saved;
      low.rlim_cur = soft;
      if (::setrlimit(RLIMIT_NOFILE, &low) != 0) throw std::runtime_error("setrlimit failed");
    }
    ~LowFileLimit() { ::setrlimit(RLIMIT_NOFILE, &saved); }
  } limit(48);  // a budget of 24 descriptors for the loader
  DataLoaderOptions o;
  o.dir = dir.path();
  o.raw = true;
  o.raw_vocab = 50000;
  o.seq = 15;
  o.record_bytes = 32;
  o.batch = 4;
  o.workers = 2;
  for (ReadMethod read : {ReadMethod::kPread, ReadMethod::kMmap}) {  // mmap: the files kept open, the rest pread
    o.read = read;
    DataLoader loader(o);
    EXPECT_EQ(loader.stats().files, 40u);
    EXPECT_EQ(loader.stats().open_files, 24u);
    EXPECT_EQ(loader.stats().mapped_files, read == ReadMethod::kMmap ? 24u : 0u);
    EXPECT_EQ(NextBatchesMatch(loader, 20, expected).size(), 80u);
  }
}

TEST(DataLoaderTest, DirectIoReadsTheSameBatches) {
  TempDir dir;
  const int seq = 100;  // 202-byte records: most straddle 4096-byte blocks, the last ones end the file
  const auto shards = CountingShards(dir.path(), 50257, {5000, 10000, 203});
  DataLoaderOptions o;
  o.dir = dir.path();
  o.seq = seq;
  o.batch = 4;
  o.workers = 2;
  DataLoader buffered(o);
  o.direct_io = true;
  std::unique_ptr<DataLoader> direct;
  try {
    direct = std::make_unique<DataLoader>(o);
  } catch (const InputError& e) {
    if (std::string(e.what()).find("refuses O_DIRECT") != std::string::npos) {
      GTEST_SKIP() << "the filesystem of " << dir.path() << " refuses O_DIRECT: " << e.what();
    }
    throw;
  }
  const auto expected = ExpectedSamples(shards, seq, seq + 1);
  const uint64_t per_epoch = buffered.stats().batches_per_epoch;
  for (uint64_t i = 0; i < per_epoch; ++i) {
    const LoaderBatch& a = buffered.Next();
    const LoaderBatch& b = direct->Next();
    ASSERT_EQ(a.samples, b.samples);
    ExpectBatchMatches(b, expected);
    EXPECT_EQ(b.stats.bytes_read % 4096, 0u);
    EXPECT_GE(b.stats.bytes_read, a.stats.bytes_read);
  }
}

// --read mmap: the records are copied from maps of the files, and the batches are those pread gives, record for
// record, including the records that end a file and a file too short for any record.
TEST(DataLoaderTest, MmapReadsTheSameBatches) {
  TempDir dir;
  const int seq = 100;
  const auto shards = CountingShards(dir.path(), 50257, {5000, 10000, 203, 50});
  DataLoaderOptions o;
  o.dir = dir.path();
  o.seq = seq;
  o.batch = 4;
  o.workers = 3;
  o.read = ReadMethod::kPread;
  DataLoader buffered(o);
  o.read = ReadMethod::kMmap;
  DataLoader mapped(o);
  EXPECT_EQ(buffered.stats().mapped_files, 0u);
  EXPECT_EQ(mapped.stats().files, 3u);
  EXPECT_EQ(mapped.stats().mapped_files, 3u);
  const auto expected = ExpectedSamples(shards, seq, seq + 1);
  const uint64_t per_epoch = buffered.stats().batches_per_epoch;
  for (uint64_t i = 0; i < per_epoch + 2; ++i) {  // into the second epoch
    const LoaderBatch& a = buffered.Next();
    const LoaderBatch& b = mapped.Next();
    ASSERT_EQ(a.samples, b.samples);
    ExpectBatchMatches(b, expected);
    EXPECT_EQ(b.stats.bytes_read, a.stats.bytes_read);
  }
}

// --read auto maps a dataset whose records fit map_limit_bytes (default a quarter of memory), else reads with
// pread, and never maps under O_DIRECT; --read pread and mmap are what they say.
TEST(DataLoaderTest, AutoMapsADatasetThatFitsTheLimit) {
  TempDir dir;
  CountingShards(dir.path(), 50257, {5000, 10000});  // 49 + 99 records of 101 tokens: 148 x 202 B = 29896 B
  DataLoaderOptions o;
  o.dir = dir.path();
  o.seq = 100;
  auto mapped = [&](ReadMethod read, uint64_t limit) {
    o.read = read;
    o.map_limit_bytes = limit;
    return DataLoader(o).stats().mapped_files;
  };
  EXPECT_EQ(mapped(ReadMethod::kAuto, 0), 2u);  // a quarter of this host's memory
  EXPECT_EQ(mapped(ReadMethod::kAuto, 29896), 2u);
  EXPECT_EQ(mapped(ReadMethod::kAuto, 29895), 0u);
  EXPECT_EQ(mapped(ReadMethod::kPread, 0), 0u);
  EXPECT_EQ(mapped(ReadMethod::kMmap, 1), 2u);
  o.direct_io = true;
  try {
    EXPECT_EQ(mapped(ReadMethod::kAuto, 0), 0u);
  } catch (const InputError& e) {
    if (std::string(e.what()).find("refuses O_DIRECT") == std::string::npos) throw;
  }
  EXPECT_EQ(ParseReadMethod("auto"), ReadMethod::kAuto);
  EXPECT_EQ(ParseReadMethod("mmap"), ReadMethod::kMmap);
  EXPECT_EQ(InputErrorOf([] { ParseReadMethod("mapped"); }), "--read 'mapped' is none of auto, pread, mmap");
}

// ---- emulated slow storage ----------------------------------------------------------------------------------

// A consumer that does nothing but take batches waits, in total, for the bytes it consumed at the throttle rate.
// The wait is made long (2 s) so that a busy machine's scheduling delays stay far inside the bounds.
TEST(DataLoaderTest, ThrottleProducesThePredictedWait) {
  TempDir dir;
  CountingShards(dir.path(), 50257, {2048 * 64});
  DataLoaderOptions o;
  o.dir = dir.path();
  o.seq = 2047;  // 4096-byte samples
  o.batch = 4;
  o.workers = 3;
  o.prefetch = 2;
  o.io_throttle_MBps = 0.1;
  const int batches = 12;
  DataLoader loader(o);
  double wait_s = 0;
  for (int i = 0; i < batches; ++i) {
    const double start = NowSeconds();
    loader.Next();
    wait_s += NowSeconds() - start;
  }
  const double predicted_s = batches * o.batch * 4096.0 / (o.io_throttle_MBps * 1e6);  // 1.97 s
  EXPECT_GT(wait_s, 0.9 * predicted_s);
  EXPECT_LT(wait_s, 1.5 * predicted_s);
  EXPECT_NEAR(loader.stats().wait_s, wait_s, 0.02 * predicted_s);
  EXPECT_EQ(loader.stats().bytes_read, uint64_t{batches} * o.batch * 4096);
}

TEST(DataLoaderTest, LatencyPerReadOverlapsAcrossWorkers) {
  TempDir dir;
  CountingShards(dir.path(), 50257, {64 * 100});
  DataLoaderOptions o;
  o.dir = dir.path();
  o.seq = 63;
  o.batch = 4;
  o.workers = 2;
  o.prefetch = 1;
  o.io_latency_ms = 200;  // long against a busy machine's wake-up delays
  const int batches = 5;
  DataLoader loader(o);
  double wait_s = 0;
  for (int i = 0; i < batches; ++i) {
    const double start = NowSeconds();
    const LoaderBatch& b = loader.Next();
    wait_s += NowSeconds() - start;
    EXPECT_GE(b.stats.read_s, o.batch * 0.2);
  }
  // Two workers halve it: one worker alone would take twice the upper bound's 1.5x.
  const double predicted_s = batches * o.batch * 0.2 / o.workers;  // 2 s
  EXPECT_GT(wait_s, 0.9 * predicted_s);
  EXPECT_LT(wait_s, 1.5 * predicted_s);
}

// ---- buffers, queue, shutdown, flags ------------------------------------------------------------------------

// Every window lies in the one allocation, the windows of a batch are distinct rows, and a batch stays intact while
// the workers fill every other row (a claim takes the rows last read on its CPU first, and another CPU's when those
// run out, as they do once the slow consumer lets the ring fill).
TEST(DataLoaderTest, BuffersComeFromTheAllocatorAndStayValidUntilNext) {
  TempDir dir;
  const auto shards = CountingShards(dir.path(), 50257, {5000});
  const auto expected = ExpectedSamples(shards, 31, 32);
  std::map<const unsigned char*, size_t> live;
  auto inside = [&](const unsigned char* p, size_t bytes) {
    for (const auto& [start, size] : live) {
      if (p >= start && p + bytes <= start + size) return true;
    }
    return false;
  };
  for (const auto& [batch, workers] : {std::pair{2, 2}, {5, 3}, {3, 4}}) {
    SCOPED_TRACE("batch " + std::to_string(batch) + ", " + std::to_string(workers) + " workers");
    int allocations = 0;
    {
      DataLoaderOptions o;
      o.dir = dir.path();
      o.seq = 31;
      o.batch = batch;
      o.prefetch = 3;
      o.workers = workers;
      o.allocator = {[&](size_t bytes) {
                       ++allocations;
                       void* p = std::malloc(bytes);
                       live[static_cast<const unsigned char*>(p)] = bytes;
                       return p;
                     },
                     [&](void* p) {
                       live.erase(static_cast<const unsigned char*>(p));
                       std::free(p);
                     }};
      DataLoader loader(o);
      EXPECT_EQ(allocations, 1);  // every row buffer at once
      for (int i = 0; i < 10; ++i) {
        const LoaderBatch& b = loader.Next();
        std::set<const unsigned char*> rows;
        for (const unsigned char* window : b.tokens.windows) {
          EXPECT_TRUE(inside(window, (31 + 1) * 2));
          rows.insert(window);
        }
        EXPECT_EQ(rows.size(), static_cast<size_t>(batch)) << "two windows share a row";
        for (auto it = rows.begin(); std::next(it) != rows.end(); ++it) EXPECT_GE(*std::next(it) - *it, (31 + 1) * 2);
        // The workers fill the other rows meanwhile; this batch must stay intact.
        std::this_thread::sleep_for(std::chrono::milliseconds(5));
        ExpectBatchMatches(b, expected);
        if (i >= 3) {
          EXPECT_EQ(b.stats.queue_depth, o.prefetch) << "a slow consumer finds the queue full";
        }
      }
    }
    EXPECT_TRUE(live.empty());
  }
}

TEST(DataLoaderTest, FailedAllocationIsReportedAndLeaksNothing) {
  TempDir dir;
  CountingShards(dir.path(), 50257, {5000});
  int allocations = 0;
  DataLoaderOptions o;
  o.dir = dir.path();
  o.seq = 31;
  o.allocator = {[&](size_t) -> void* {
                   ++allocations;
                   throw RuntimeError("pinned memory exhausted");
                 },
                 [&](void*) { ADD_FAILURE() << "released what was never allocated"; }};
  EXPECT_THROW(DataLoader loader(o), RuntimeError);
  EXPECT_EQ(allocations, 1);
}

TEST(DataLoaderTest, DefaultBuffersAreAlignedAndLargeOnesOfferedHugePages) {
  for (bool huge : {true, false}) {
    const HostAllocator allocator = AlignedHostAllocator(huge);
    for (size_t bytes : {size_t{1}, size_t{4096}, size_t{200000}, size_t{256} << 10, size_t{5} << 20}) {
      void* p = allocator.allocate(bytes);
      const auto address = reinterpret_cast<uintptr_t>(p);
      EXPECT_EQ(address % 4096, 0u) << bytes;
      if (huge && bytes >= (size_t{256} << 10)) {
        EXPECT_EQ(address % (size_t{2} << 20), 0u) << bytes;
      }
      std::memset(p, 0xAB, bytes);  // the whole block is usable
      allocator.release(p);
    }
  }
}

TEST(DataLoaderTest, DestructorStopsThrottledWorkersPromptly) {
  TempDir dir;
  CountingShards(dir.path(), 50257, {64 * 100});
  DataLoaderOptions o;
  o.dir = dir.path();
  o.seq = 63;
  o.io_throttle_MBps = 0.000001;  // 128 s per 128-byte read
  o.io_latency_ms = 600000;       // and 10 minutes of latency: "promptly" is any time far below that
  const double start = NowSeconds();
  {
    DataLoader loader(o);
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  EXPECT_LT(NowSeconds() - start, 20.0);
}

// A ring larger than the host can hold is refused before anything is allocated, naming what to lower. A sparse
// file provides records as large as the host's memory without taking disk space.
TEST(DataLoaderTest, ARingTooLargeForTheHostIsRefused) {
  TempDir dir;
  const uint64_t memory = static_cast<uint64_t>(::sysconf(_SC_PHYS_PAGES)) * static_cast<uint64_t>(::sysconf(_SC_PAGESIZE));
  {
    std::ofstream(dir / "huge.bin").put('x');
  }
  fs::resize_file(dir / "huge.bin", memory);
  DataLoaderOptions o;
  o.dir = dir.path();
  o.raw = true;
  o.seq = 15;
  o.batch = 1;
  o.prefetch = 1;
  o.record_bytes = memory / 2;  // 2 records; a ring of 2 batches of one = the host's memory
  const std::string error = InputErrorOf([&] { DataLoader loader(o); });
  EXPECT_NE(error.find("a quarter of this host's memory; lower --prefetch, --record-bytes or --micro-batch"),
            std::string::npos) << error;
  o.ring_limit_bytes = 100;  // 2 batches of one 64-byte record: 128 B
  o.record_bytes = 64;
  EXPECT_NE(InputErrorOf([&] { DataLoader loader(o); }).find("would take 128 B (2 batches = --prefetch + 1, of 1 records of 64 B), more than 100 B;"), std::string::npos);
}

TEST(DataLoaderTest, BadOptionsNameTheFlag) {
  TempDir dir;
  CountingShards(dir.path(), 50257, {1000});
  DataLoaderOptions o;
  o.dir = dir.path();
  o.seq = 63;
  auto error = [&](auto change) {
    DataLoaderOptions bad = o;
    change(bad);
    return InputErrorOf([&] { DataLoader loader(bad); });
  };
  EXPECT_EQ(error([](DataLoaderOptions& b) { b.workers = 0; }), "--loader-workers must be at least 1");
  EXPECT_EQ(error([](DataLoaderOptions& b) { b.prefetch = 0; }), "--prefetch must be at least 1 batch");
  EXPECT_EQ(error([](DataLoaderOptions& b) { b.io_throttle_MBps = -1; }), "--io-throttle must be >= 0 MB/s (0 = no limit)");
  EXPECT_EQ(error([](DataLoaderOptions& b) { b.io_latency_ms = -1; }), "--io-latency-ms must be >= 0");
  EXPECT_EQ(error([](DataLoaderOptions& b) {
              b.read = ReadMethod::kMmap;
              b.direct_io = true;
            }),
            "--read mmap and --direct-io exclude each other: a map reads through the page cache");
  EXPECT_NE(error([](DataLoaderOptions& b) { b.batch = 100; }).find("fewer than one global batch"), std::string::npos);
  EXPECT_NE(error([&](DataLoaderOptions& b) { b.dir = dir / "nope"; }).find("does not exist"), std::string::npos);
}

}  // namespace
}  // namespace tb

// Next()'s poll before it sleeps, spinning on its core or yielding it: true as soon as the condition holds (set by
// another thread), false once the time is up, never before it; and which way it waits for how many workers.
TEST(SpinWait, ReturnsWhenDoneOrWhenTimeIsUp) {
  for (const bool yield_core : {false, true}) {
    SCOPED_TRACE(yield_core ? "yielding" : "spinning");
    EXPECT_TRUE(tb::SpinUntil([] { return true; }, 0, yield_core));
    std::atomic<bool> flag{false};
    std::thread setter([&] { flag.store(true, std::memory_order_release); });
    EXPECT_TRUE(tb::SpinUntil([&] { return flag.load(std::memory_order_acquire); }, 60.0, yield_core));
    setter.join();
    const double start = tb::NowSeconds();
    EXPECT_FALSE(tb::SpinUntil([] { return false; }, 0.01, yield_core));
    EXPECT_GE(tb::NowSeconds() - start, 0.01);
  }
  const int cpus = tb::CpusAvailable();
  EXPECT_GE(cpus, 1);
  // How a consumer waits: polls spinning with a core spare, sleeps at once with every CPU a producer's, polls
  // yielding with more producers than CPUs.
  EXPECT_GT(tb::ConsumerWaitFor(cpus - 1).poll_s, 0);
  EXPECT_FALSE(tb::ConsumerWaitFor(cpus - 1).oversubscribed);
  EXPECT_EQ(tb::ConsumerWaitFor(cpus).poll_s, 0);
  EXPECT_FALSE(tb::ConsumerWaitFor(cpus).oversubscribed);
  EXPECT_GT(tb::ConsumerWaitFor(cpus + 1).poll_s, 0);
  EXPECT_TRUE(tb::ConsumerWaitFor(cpus + 1).oversubscribed);
}
