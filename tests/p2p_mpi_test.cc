// The p2p matrix: the pure median/flagging logic on hand-made matrices, option validation, the report group
// and console lines, and real runs over MPI at every prefix of the world (1 rank up to all of them).
#include <gtest/gtest.h>
#include <mpi.h>

#include <cmath>
#include <limits>
#include <memory>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include "error.h"
#include "mpi_communicator.h"
#include "p2p.h"
#include "report.h"
#include "watchdog.h"

namespace tb {
namespace {

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

// Small enough to keep 4 oversubscribed ranks quick, large enough to be a real transfer.
P2pOptions SmallOptions() {
  P2pOptions options;
  options.size_bytes = 256 * 1024;
  options.iters = 4;
  options.warmup = 1;
  options.latency_iters = 20;
  return options;
}

// (3, 3) with every link at 100 GB/s except 1 -> 2 at 40.
P2pResult HandMadeResult() {
  P2pResult result;
  result.n = 3;
  result.uni_GBps = {kNaN, 100, 100, 100, kNaN, 40, 100, 100, kNaN};
  result.bidi_GBps = {kNaN, 180, 180, 180, kNaN, 90, 180, 90, kNaN};
  result.latency_us = {kNaN, 2, 2, 2, kNaN, 3, 2, 3, kNaN};
  result.median_uni_GBps = MedianOffDiagonal(result.uni_GBps, 3);
  result.median_bidi_GBps = MedianOffDiagonal(result.bidi_GBps, 3);
  result.median_uni_intra_GBps = MedianOffDiagonal(result.uni_GBps, 3, {}, LinkClass::kIntra);
  result.median_uni_inter_GBps = MedianOffDiagonal(result.uni_GBps, 3, {}, LinkClass::kInter);
  result.flagged = FlagWeakPairs(result.uni_GBps, 3, 0.8);
  return result;
}

const std::vector<std::string> kHosts = {"nodeA", "nodeB", "nodeC"};
const std::vector<std::string> kGpus = {"GPU0", "GPU1", "GPU2"};

std::vector<std::string> Tokens(const std::string& line) {
  std::istringstream stream(line);
  std::vector<std::string> tokens;
  for (std::string token; stream >> token;) tokens.push_back(token);
  return tokens;
}

std::string Joined(const std::vector<std::string>& lines) {
  std::string text;
  for (const std::string& line : lines) text += line + "\n";
  return text;
}

bool Contains(const std::vector<std::string>& lines, const std::string& wanted) {
  for (const std::string& line : lines) {
    if (line == wanted) return true;
  }
  return false;
}

TEST(P2pMedian, OddAndEvenCountsIgnoreDiagonalAndNaN) {
  // Diagonal entries are large on purpose: they must not count.
  EXPECT_DOUBLE_EQ(MedianOffDiagonal({1000, 1, 3, 1000}, 2), 2);
  EXPECT_DOUBLE_EQ(MedianOffDiagonal({kNaN, 5, 1, 9, kNaN, 7, 3, kNaN, kNaN}, 3), 5);
  EXPECT_DOUBLE_EQ(MedianOffDiagonal({kNaN, 4, 1, 9, kNaN, 7, 3, 2, kNaN}, 3), 3.5);
  EXPECT_TRUE(std::isnan(MedianOffDiagonal({kNaN}, 1)));
  EXPECT_TRUE(std::isnan(MedianOffDiagonal({kNaN, kNaN, kNaN, kNaN}, 2)));
  EXPECT_THROW(MedianOffDiagonal({1, 2, 3}, 2), std::logic_error);
}

TEST(P2pFlag, UniformMatrixFlagsNothing) {
  std::vector<double> uni = {kNaN, 50, 50, 50, kNaN, 50, 50, 50, kNaN};
  EXPECT_TRUE(FlagWeakPairs(uni, 3, 0.8).empty());
  EXPECT_TRUE(FlagWeakPairs({kNaN}, 1, 0.8).empty());
}

TEST(P2pFlag, OneSlowPairIsFlaggedWithItsFraction) {
  std::vector<FlaggedPair> flagged = HandMadeResult().flagged;
  ASSERT_EQ(flagged.size(), 1u);
  EXPECT_EQ(flagged[0].src, 1);
  EXPECT_EQ(flagged[0].dst, 2);
  EXPECT_DOUBLE_EQ(flagged[0].uni_GBps, 40);
  EXPECT_DOUBLE_EQ(flagged[0].fraction_of_median, 0.4);
}

// Two nodes of two ranks: the inter-node pairs (10) are far below the intra-node ones (100) and none is weak, since
// each class has its own median; one slow inter-node pair (2) and one slow intra-node pair (30) are.
TEST(P2pFlag, PairsAreJudgedWithinTheirLinkClass) {
  const std::vector<int> nodes = {0, 0, 1, 1};
  std::vector<double> uni(16, 10);
  for (int r = 0; r < 4; ++r) uni[static_cast<size_t>(r * 4 + r)] = kNaN;
  uni[0 * 4 + 1] = uni[1 * 4 + 0] = uni[3 * 4 + 2] = 100;
  uni[2 * 4 + 3] = 30;  // slow inside node 1
  EXPECT_EQ(ClassOf(nodes, 0, 1), LinkClass::kIntra);
  EXPECT_EQ(ClassOf(nodes, 1, 2), LinkClass::kInter);
  EXPECT_EQ(ClassOf({}, 1, 2), LinkClass::kIntra);
  EXPECT_DOUBLE_EQ(MedianOffDiagonal(uni, 4, nodes, LinkClass::kIntra), 100);
  EXPECT_DOUBLE_EQ(MedianOffDiagonal(uni, 4, nodes, LinkClass::kInter), 10);
  EXPECT_EQ(FlagWeakPairs(uni, 4, 0.8, nodes).size(), 1u);
  uni[0 * 4 + 3] = 2;  // slow across nodes
  std::vector<FlaggedPair> flagged = FlagWeakPairs(uni, 4, 0.8, nodes);
  ASSERT_EQ(flagged.size(), 2u);
  EXPECT_EQ(flagged[0].src, 0);
  EXPECT_EQ(flagged[0].dst, 3);
  EXPECT_EQ(flagged[0].link, LinkClass::kInter);
  EXPECT_DOUBLE_EQ(flagged[0].median_GBps, 10);
  EXPECT_DOUBLE_EQ(flagged[0].fraction_of_median, 0.2);
  EXPECT_EQ(flagged[1].src, 2);
  EXPECT_EQ(flagged[1].link, LinkClass::kIntra);
  EXPECT_DOUBLE_EQ(flagged[1].fraction_of_median, 0.3);
  // Judged as one class (median 10), the slow intra-node pair would hide among the inter-node ones.
  EXPECT_EQ(FlagWeakPairs(uni, 4, 0.8).size(), 1u);
  EXPECT_THROW(MedianOffDiagonal(uni, 4, {0, 1}), std::logic_error);
}

TEST(P2pFlag, ThresholdIsStrictAndUnmeasuredPairsAreNeverFlagged) {
  // median 100; 80 is exactly 0.8 x median and stays unflagged; NaN (not measured) is skipped.
  std::vector<double> uni = {kNaN, 100, 80, 100, kNaN, kNaN, 100, 100, kNaN};
  EXPECT_TRUE(FlagWeakPairs(uni, 3, 0.8).empty());
  std::vector<FlaggedPair> flagged = FlagWeakPairs(uni, 3, 0.9);
  ASSERT_EQ(flagged.size(), 1u);
  EXPECT_EQ(flagged[0].src, 0);
  EXPECT_EQ(flagged[0].dst, 2);
}

TEST(P2pOptions, InvalidSizesAndCountsAreInputErrorsNamingTheFlag) {
  auto message_for = [](P2pOptions options) -> std::string {
    try {
      ValidateP2pOptions(options);
    } catch (const InputError& error) {
      return error.what();
    }
    return "";
  };
  EXPECT_EQ(message_for(P2pOptions{}), "");
  for (uint64_t size : {uint64_t{0}, uint64_t{2}, uint64_t{6}, uint64_t{1000001}}) {
    P2pOptions options;
    options.size_bytes = size;
    std::string message = message_for(options);
    EXPECT_NE(message.find("--size"), std::string::npos) << size << ": " << message;
    EXPECT_EQ(message.find('\n'), std::string::npos);
  }
  P2pOptions latency;
  latency.latency_bytes = 3;
  EXPECT_NE(message_for(latency).find("--latency-size"), std::string::npos);
  P2pOptions iters;
  iters.iters = 0;
  EXPECT_NE(message_for(iters).find("--iters"), std::string::npos);
  P2pOptions warmup;
  warmup.warmup = -1;
  EXPECT_NE(message_for(warmup).find("--warmup"), std::string::npos);
  P2pOptions latency_iters;
  latency_iters.latency_iters = 0;
  EXPECT_NE(message_for(latency_iters).find("--latency-iters"), std::string::npos);
  P2pOptions threshold;
  threshold.threshold_fraction = 1.5;
  EXPECT_NE(message_for(threshold).find("--threshold"), std::string::npos);
}

TEST(P2pReport, GroupHoldsTheDocumentedSchema) {
  P2pResult result = HandMadeResult();
  P2pOptions options;
  Group group;
  AddP2pToReport(group, result, options, kHosts, kGpus);

  EXPECT_EQ(std::get<int64_t>(group.attributes.at("size_bytes")), 64 << 20);
  EXPECT_EQ(std::get<int64_t>(group.attributes.at("iters")), 20);
  EXPECT_EQ(std::get<int64_t>(group.attributes.at("latency_bytes")), 8);
  EXPECT_EQ(std::get<int64_t>(group.attributes.at("latency_iters")), 100);
  EXPECT_DOUBLE_EQ(std::get<double>(group.attributes.at("threshold_fraction")), 0.8);
  EXPECT_DOUBLE_EQ(std::get<double>(group.attributes.at("median_uni_GBps")), 100);
  EXPECT_DOUBLE_EQ(std::get<double>(group.attributes.at("median_bidi_GBps")), 180);
  EXPECT_EQ(std::get<int64_t>(group.attributes.at("complete")), 1);
  EXPECT_TRUE(std::isnan(std::get<double>(group.attributes.at("median_uni_inter_GBps"))));  // one node: no such pair
  EXPECT_EQ(std::get<int64_t>(group.attributes.at("nodes")), 1);
  EXPECT_EQ(group.attributes.size(), 11u);

  ASSERT_EQ(group.matrices.size(), 3u);
  for (const char* name : {"uni_bw_GBps", "bidi_bw_GBps", "latency_us"}) {
    const Matrix& matrix = group.matrices.at(name);
    EXPECT_EQ(matrix.rows, 3u) << name;
    EXPECT_EQ(matrix.cols, 3u) << name;
    EXPECT_EQ(matrix.values.size(), 9u) << name;
    EXPECT_FALSE(matrix.description.empty()) << name;
  }
  EXPECT_EQ(group.matrices.at("uni_bw_GBps").unit, "GB/s");
  EXPECT_EQ(group.matrices.at("bidi_bw_GBps").unit, "GB/s");
  EXPECT_EQ(group.matrices.at("latency_us").unit, "us");
  EXPECT_NE(group.matrices.at("uni_bw_GBps").description.find("row = sender"), std::string::npos);
  EXPECT_DOUBLE_EQ(group.matrices.at("uni_bw_GBps").at(1, 2), 40);

  const Table& flagged = group.tables.at("flagged");
  ASSERT_EQ(flagged.rows(), 1u);
  std::vector<std::string> names;
  for (const Column& column : flagged.columns) names.push_back(column.name);
  EXPECT_EQ(names, (std::vector<std::string>{"src_rank", "dst_rank", "src_host", "dst_host", "src_gpu", "dst_gpu",
                                             "uni_bw_GBps", "link", "median_GBps", "fraction_of_median"}));
  EXPECT_EQ(std::get<std::vector<std::string>>(flagged.Find("link")->values), std::vector<std::string>{"intra"});
  EXPECT_EQ(std::get<std::vector<double>>(flagged.Find("median_GBps")->values), std::vector<double>{100});
  EXPECT_EQ(std::get<std::vector<int64_t>>(flagged.Find("src_rank")->values), std::vector<int64_t>{1});
  EXPECT_EQ(std::get<std::vector<int64_t>>(flagged.Find("dst_rank")->values), std::vector<int64_t>{2});
  EXPECT_EQ(std::get<std::vector<std::string>>(flagged.Find("src_host")->values), std::vector<std::string>{"nodeB"});
  EXPECT_EQ(std::get<std::vector<std::string>>(flagged.Find("dst_gpu")->values), std::vector<std::string>{"GPU2"});
  EXPECT_EQ(flagged.Find("uni_bw_GBps")->unit, "GB/s");
  EXPECT_EQ(std::get<std::vector<double>>(flagged.Find("fraction_of_median")->values), std::vector<double>{0.4});
}

TEST(P2pReport, NothingFlaggedGivesAnEmptyTableWithAllColumns) {
  P2pResult result = HandMadeResult();
  result.flagged.clear();
  result.complete = false;
  Group group;
  AddP2pToReport(group, result, P2pOptions{}, kHosts, kGpus);
  const Table& flagged = group.tables.at("flagged");
  EXPECT_EQ(flagged.rows(), 0u);
  EXPECT_EQ(flagged.columns.size(), 10u);
  EXPECT_EQ(std::get<int64_t>(group.attributes.at("complete")), 0);
}

TEST(P2pReport, RankLabelsMustCoverEveryRank) {
  Group group;
  EXPECT_THROW(AddP2pToReport(group, HandMadeResult(), P2pOptions{}, {"nodeA"}, kGpus), std::logic_error);
  EXPECT_THROW(FormatP2p(HandMadeResult(), P2pOptions{}, kHosts, {}), std::logic_error);
}

TEST(P2pFormat, MatricesMediansAndWeakLinks) {
  std::vector<std::string> lines = FormatP2p(HandMadeResult(), P2pOptions{}, kHosts, {"GPU0", "", "GPU2"});
  SCOPED_TRACE(Joined(lines));

  EXPECT_TRUE(Contains(lines, "# Median unidirectional bandwidth : 100.00 GB/s"));
  EXPECT_TRUE(Contains(lines,
                       "# weak link: rank 1 (host nodeB) -> rank 2 (host nodeC, gpu GPU2): 40 GB/s = "
                       "0.40 x median of the intra-node pairs"));
  EXPECT_TRUE(Contains(lines, "# Weak links : 1 FLAGGED (below 0.80 x median)"));

  // Every matrix: a '#' title, a header of destination ranks, one row per source rank with '-' on the diagonal.
  int matrices = 0;
  for (size_t i = 0; i < lines.size(); ++i) {
    if (lines[i].rfind("# Unidirectional", 0) != 0 && lines[i].rfind("# Bidirectional", 0) != 0 &&
        lines[i].rfind("# Latency (us)", 0) != 0) {
      continue;
    }
    ++matrices;
    ASSERT_LT(i + 4, lines.size());
    EXPECT_EQ(Tokens(lines[i + 1]), (std::vector<std::string>{"#", "src\\dst", "0", "1", "2"}));
    for (int src = 0; src < 3; ++src) {
      std::vector<std::string> row = Tokens(lines[i + 2 + src]);
      ASSERT_EQ(row.size(), 4u) << lines[i + 2 + src];
      EXPECT_EQ(row[0], std::to_string(src));
      EXPECT_EQ(row[1 + src], "-");
    }
    if (lines[i].rfind("# Unidirectional", 0) == 0) {
      EXPECT_EQ(Tokens(lines[i + 3]), (std::vector<std::string>{"1", "100.00", "-", "40.00"}));
    }
  }
  EXPECT_EQ(matrices, 3);
}

TEST(P2pFormat, NoWeakLinksSaysOk) {
  P2pResult result = HandMadeResult();
  result.flagged.clear();
  std::vector<std::string> lines = FormatP2p(result, P2pOptions{}, kHosts, kGpus);
  EXPECT_EQ(lines.back(), "# Weak links : 0 OK");
}

class P2pMpiTest : public ::testing::Test {
 protected:
  void SetUp() override {
    MPI_Comm_rank(MPI_COMM_WORLD, &world_rank_);
    MPI_Comm_size(MPI_COMM_WORLD, &world_size_);
    comm_ = MakeMpiCommunicator(MPI_COMM_WORLD);
  }

  // The same vector on every rank, compared bit for bit with rank 0's (NaN included).
  static void ExpectSameOnEveryRank(MPI_Comm comm, std::vector<double> values) {
    std::vector<double> root_values = values;
    MPI_Bcast(root_values.data(), static_cast<int>(root_values.size()), MPI_DOUBLE, 0, comm);
    for (size_t i = 0; i < values.size(); ++i) {
      EXPECT_TRUE(values[i] == root_values[i] || (std::isnan(values[i]) && std::isnan(root_values[i]))) << i;
    }
  }

  int world_rank_ = 0;
  int world_size_ = 1;
  std::unique_ptr<Communicator> comm_;
};

TEST_F(P2pMpiTest, EveryPrefixGivesFullMatricesOnEveryRank) {
  Watchdog watchdog(120, [](const std::string& operation, double) { ADD_FAILURE() << "watchdog: " << operation; });
  P2pOptions options = SmallOptions();
  options.watchdog = &watchdog;
  int stop_calls = 0;
  options.stop_requested = [&stop_calls] {
    ++stop_calls;
    return false;
  };

  for (int k = 1; k <= world_size_; ++k) {
    SCOPED_TRACE("ranks: " + std::to_string(k));
    std::unique_ptr<Communicator> sub = comm_->Prefix(k);
    if (!sub) continue;
    stop_calls = 0;
    P2pResult result = RunP2p(*sub, options);
    const size_t entries = static_cast<size_t>(k) * k;
    ASSERT_EQ(result.n, k);
    ASSERT_EQ(result.uni_GBps.size(), entries);
    ASSERT_EQ(result.bidi_GBps.size(), entries);
    ASSERT_EQ(result.latency_us.size(), entries);
    EXPECT_TRUE(result.complete);
    EXPECT_EQ(stop_calls, k * (k - 1) / 2);  // asked once before each unordered pair

    for (int r = 0; r < k; ++r) {
      for (int c = 0; c < k; ++c) {
        size_t i = static_cast<size_t>(r) * k + c;
        if (r == c) {
          EXPECT_TRUE(std::isnan(result.uni_GBps[i]));
          EXPECT_TRUE(std::isnan(result.bidi_GBps[i]));
          EXPECT_TRUE(std::isnan(result.latency_us[i]));
          continue;
        }
        EXPECT_TRUE(std::isfinite(result.uni_GBps[i]) && result.uni_GBps[i] > 0) << r << "->" << c;
        EXPECT_TRUE(std::isfinite(result.bidi_GBps[i]) && result.bidi_GBps[i] > 0) << r << "<->" << c;
        EXPECT_TRUE(std::isfinite(result.latency_us[i]) && result.latency_us[i] > 0) << r << "<->" << c;
        EXPECT_EQ(result.bidi_GBps[i], result.bidi_GBps[static_cast<size_t>(c) * k + r]);
        EXPECT_EQ(result.latency_us[i], result.latency_us[static_cast<size_t>(c) * k + r]);
      }
    }

    if (k == 1) {
      EXPECT_TRUE(std::isnan(result.median_uni_GBps));
      EXPECT_TRUE(std::isnan(result.median_bidi_GBps));
    } else {
      EXPECT_DOUBLE_EQ(result.median_uni_GBps, MedianOffDiagonal(result.uni_GBps, k));
      EXPECT_DOUBLE_EQ(result.median_bidi_GBps, MedianOffDiagonal(result.bidi_GBps, k));
      EXPECT_GT(result.median_uni_GBps, 0);
    }
    std::vector<FlaggedPair> expected = FlagWeakPairs(result.uni_GBps, k, options.threshold_fraction);
    ASSERT_EQ(result.flagged.size(), expected.size());
    for (size_t f = 0; f < expected.size(); ++f) {
      EXPECT_EQ(result.flagged[f].src, expected[f].src);
      EXPECT_EQ(result.flagged[f].dst, expected[f].dst);
    }

    MPI_Comm host = sub->host_comm();
    ExpectSameOnEveryRank(host, result.uni_GBps);
    ExpectSameOnEveryRank(host, result.bidi_GBps);
    ExpectSameOnEveryRank(host, result.latency_us);

    std::vector<std::string> labels(static_cast<size_t>(k), "cpu");
    Group group;
    AddP2pToReport(group, result, options, labels, labels);
    EXPECT_EQ(group.matrices.at("uni_bw_GBps").values.size(), entries);
    EXPECT_EQ(group.tables.at("flagged").rows(), result.flagged.size());
    EXPECT_FALSE(FormatP2p(result, options, labels, labels).empty());
  }
}

TEST_F(P2pMpiTest, StopBeforeTheFirstPairMeasuresNothing) {
  P2pOptions options = SmallOptions();
  options.stop_requested = [] { return true; };
  P2pResult result = RunP2p(*comm_, options);
  EXPECT_EQ(result.n, world_size_);
  EXPECT_EQ(result.complete, world_size_ < 2);  // one rank has no pair to be stopped before
  for (double value : result.uni_GBps) EXPECT_TRUE(std::isnan(value));
  for (double value : result.bidi_GBps) EXPECT_TRUE(std::isnan(value));
  for (double value : result.latency_us) EXPECT_TRUE(std::isnan(value));
  EXPECT_TRUE(std::isnan(result.median_uni_GBps));
  EXPECT_TRUE(result.flagged.empty());
}

TEST_F(P2pMpiTest, StopAfterTheFirstPairKeepsItAndMarksTheRestUnmeasured) {
  if (world_size_ < 3) GTEST_SKIP() << "needs 3 or more ranks for a second pair";
  P2pOptions options = SmallOptions();
  int calls = 0;
  options.stop_requested = [&calls] { return ++calls > 1; };
  P2pResult result = RunP2p(*comm_, options);
  const int n = world_size_;
  EXPECT_FALSE(result.complete);
  EXPECT_GT(result.uni_GBps[0 * n + 1], 0);
  EXPECT_GT(result.uni_GBps[1 * n + 0], 0);
  EXPECT_GT(result.bidi_GBps[0 * n + 1], 0);
  EXPECT_GT(result.latency_us[1 * n + 0], 0);
  EXPECT_TRUE(std::isnan(result.uni_GBps[0 * n + 2]));
  EXPECT_TRUE(std::isnan(result.bidi_GBps[2 * n + 1]));
  EXPECT_TRUE(std::isnan(result.latency_us[1 * n + 2]));
  EXPECT_FALSE(std::isnan(result.median_uni_GBps));
}

TEST_F(P2pMpiTest, InvalidSizeThrowsOnEveryRankBeforeAnyTraffic) {
  P2pOptions options = SmallOptions();
  options.size_bytes = 10;
  EXPECT_THROW(RunP2p(*comm_, options), InputError);
  // The communicator still works: nothing was left half-sent.
  comm_->Barrier();
}

}  // namespace
}  // namespace tb
