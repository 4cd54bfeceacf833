// Bus-bandwidth factors, count rules, element conversions and the expected values of every collective,
// the latter checked against a direct host simulation of each operation on n ranks' inputs.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "collective.h"
#include "error.h"

namespace tb {
namespace {

TEST(BusFactor, MatchesNcclTestsDefinitions) {
  for (int n : {1, 2, 4, 8, 16}) {
    EXPECT_DOUBLE_EQ(kAllReduce.bus_factor(n), 2.0 * (n - 1) / n) << n;
    EXPECT_DOUBLE_EQ(kReduceScatter.bus_factor(n), static_cast<double>(n - 1) / n) << n;
    EXPECT_DOUBLE_EQ(kAllGather.bus_factor(n), static_cast<double>(n - 1) / n) << n;
    EXPECT_DOUBLE_EQ(kAllToAll.bus_factor(n), static_cast<double>(n - 1) / n) << n;
    EXPECT_DOUBLE_EQ(kBroadcast.bus_factor(n), 1.0) << n;
    EXPECT_DOUBLE_EQ(kReduce.bus_factor(n), 1.0) << n;
    EXPECT_DOUBLE_EQ(kSendRecv.bus_factor(n), 1.0) << n;
  }
  EXPECT_DOUBLE_EQ(kAllReduce.bus_factor(8), 1.75);
}

TEST(Counts, RoundToWholeElementsPerRank) {
  // all_gather of 1000 B of float over 3 ranks: 83 elements each, S = 3*83*4 = 996 B.
  CollectiveCounts c = kAllGather.counts(1000, 4, 3, 2);
  EXPECT_EQ(c.op_count, 83u);
  EXPECT_EQ(c.send_elements, 83u);
  EXPECT_EQ(c.recv_elements, 249u);
  EXPECT_EQ(c.size_bytes, 996u);
  EXPECT_EQ(c.in_place_send_offset, 2u * 83);
  // reduce_scatter: S is the input size; rank 1 receives block 1.
  c = kReduceScatter.counts(1024, 4, 4, 1);
  EXPECT_EQ(c.op_count, 64u);
  EXPECT_EQ(c.send_elements, 256u);
  EXPECT_EQ(c.recv_elements, 64u);
  EXPECT_EQ(c.in_place_recv_offset, 64u);
  EXPECT_EQ(c.size_bytes, 1024u);
  // all_reduce: 10 B of double is one element.
  c = kAllReduce.counts(10, 8, 4, 0);
  EXPECT_EQ(c.op_count, 1u);
  EXPECT_EQ(c.size_bytes, 8u);
  // too small for one element per rank
  EXPECT_EQ(kAllToAll.counts(8, 4, 4, 0).op_count, 0u);
}

TEST(Elements, HalfAndBFloat16RoundTripSmallIntegers) {
  std::vector<uint16_t> buffer(1);
  for (double v : {0.0, 1.0, 3.0, 255.0, 256.0, 2048.0, -7.0}) {
    StoreElement(DataType::kFloat16, buffer.data(), 0, v);
    EXPECT_EQ(LoadElement(DataType::kFloat16, buffer.data(), 0), v);
    StoreElement(DataType::kBFloat16, buffer.data(), 0, v);
    EXPECT_EQ(LoadElement(DataType::kBFloat16, buffer.data(), 0), v);
  }
  // Known encodings: 1.0 = 0x3c00 (half), 0x3f80 (bfloat16).
  StoreElement(DataType::kFloat16, buffer.data(), 0, 1.0);
  EXPECT_EQ(buffer[0], 0x3c00);
  StoreElement(DataType::kBFloat16, buffer.data(), 0, 1.0);
  EXPECT_EQ(buffer[0], 0x3f80);
  // Rounding: 2049 is not representable in half (spacing 2 above 2048): round to even 2048.
  EXPECT_EQ(RoundForType(DataType::kFloat16, 2049.0), 2048.0);
  EXPECT_EQ(RoundForType(DataType::kBFloat16, 257.0), 256.0);
  EXPECT_EQ(RoundForType(DataType::kInt32, 2.5), 2.0);
}

TEST(Elements, MatchingIsExactForIntsAndTolerantForRoundedFloats) {
  EXPECT_TRUE(ValueMatches(DataType::kInt32, 6, 6, 4));
  EXPECT_FALSE(ValueMatches(DataType::kInt32, 7, 6, 4));
  EXPECT_TRUE(ValueMatches(DataType::kFloat32, 6, 6, 4));
  EXPECT_FALSE(ValueMatches(DataType::kFloat32, 6.01, 6, 4));
  EXPECT_FALSE(ValueMatches(DataType::kFloat32, std::nan(""), 6, 4));
  EXPECT_FALSE(ValueMatches(DataType::kFloat64, kSentinel, 0, 4));
}

TEST(Elements, InputsAreSmallNonNegativeIntegers) {
  for (int r = 0; r < 64; ++r) {
    for (size_t i = 0; i < 64; ++i) {
      double v = InputValue(r, i);
      EXPECT_GE(v, 0);
      EXPECT_LE(v, 3);
      EXPECT_EQ(v, std::floor(v));
    }
  }
}

// Direct simulation: what rank `rank` should hold after the operation, from every rank's input.
std::vector<double> Simulate(const CollectiveDef& def, int n, int rank, size_t block, ReduceOp op, int root) {
  auto reduce = [&](size_t i) {
    double acc = 0;
    for (int r = 0; r < n; ++r) {
      double v = InputValue(r, i);
      if (r == 0) acc = v;
      else if (op == ReduceOp::kMax) acc = std::max(acc, v);
      else if (op == ReduceOp::kMin) acc = std::min(acc, v);
      else acc += v;
    }
    return op == ReduceOp::kAvg ? acc / n : acc;
  };
  std::vector<double> out;
  const std::string name = def.name;
  if (name == "all_reduce" || (name == "reduce" && rank == root)) {
    for (size_t i = 0; i < block; ++i) out.push_back(reduce(i));
  } else if (name == "all_gather") {
    for (int r = 0; r < n; ++r)
      for (size_t j = 0; j < block; ++j) out.push_back(InputValue(r, j));
  } else if (name == "reduce_scatter") {
    for (size_t j = 0; j < block; ++j) out.push_back(reduce(rank * block + j));
  } else if (name == "alltoall") {
    for (int r = 0; r < n; ++r)
      for (size_t j = 0; j < block; ++j) out.push_back(InputValue(r, rank * block + j));
  } else if (name == "broadcast") {
    for (size_t i = 0; i < block; ++i) out.push_back(InputValue(root, i));
  } else if (name == "sendrecv") {
    for (size_t i = 0; i < block; ++i) out.push_back(InputValue((rank + n - 1) % n, i));
  }
  return out;
}

TEST(Expected, AgreesWithDirectSimulationForEveryCollective) {
  for (const CollectiveDef* def : AllCollectives()) {
    for (int n : {1, 2, 3, 4}) {
      for (int rank = 0; rank < n; ++rank) {
        for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kMax, ReduceOp::kMin, ReduceOp::kAvg}) {
          const int root = n - 1;
          CollectiveCounts c = def->counts(12 * 4 * n, 4, n, rank);
          std::vector<double> want = Simulate(*def, n, rank, c.op_count, op, root);
          size_t checked = 0;
          for (size_t i = 0; i < c.recv_elements; ++i) {
            double value = 0;
            if (!ExpectedValue(def->expected(c, rank, n, op, root), i, &value)) continue;
            ASSERT_LT(checked, want.size()) << def->name;
            EXPECT_DOUBLE_EQ(value, want[checked]) << def->name << " n=" << n << " rank=" << rank << " i=" << i;
            ++checked;
          }
          EXPECT_EQ(checked, want.size()) << def->name << " n=" << n << " rank=" << rank;
        }
      }
    }
  }
}

TEST(Registry, FindsByNameAndRejectsUnknown) {
  EXPECT_EQ(&FindCollective("all_reduce", "--ops"), &kAllReduce);
  EXPECT_EQ(AllCollectives().size(), 7u);
  try {
    FindCollective("allreduce", "--ops");
    FAIL();
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("unknown operation 'allreduce' for --ops"), std::string::npos);
  }
}

}  // namespace
}  // namespace tb
