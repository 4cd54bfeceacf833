// The vocab-parallel formulas of models/vocab_parallel_math.h (what the CUDA kernels of models/cuda/tp_kernels.cu
// compute) on the CPU, against straightforward double-precision math. Small random rows of logits are split over T
// ranks as TensorParallelLayout splits wte (Vp/T rows each, the real tokens below V first, padding after); each rank
// runs its stages with the functions the kernels use, and the stages are combined as the group's all-reduces would
// combine them (max, then sum). The splits include a rank whose slice ends in padding, ranks holding padding only, and
// targets in another rank's slice.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <random>
#include <string>
#include <vector>

#include "vocab_parallel_math.h"

namespace tb {
namespace {

namespace vp = vocab_parallel;

struct Split {
  int vocab;         // V, the real tokens
  int vocab_padded;  // Vp
  int ranks;         // T
  std::string Name() const {
    return "V " + std::to_string(vocab) + ", Vp " + std::to_string(vocab_padded) + ", T " + std::to_string(ranks);
  }
};

// Rank r's slice: Vp/T rows from token id begin, the first `used` of them real.
struct Slice {
  int begin = 0, rows = 0, used = 0;
};

Slice SliceOf(const Split& split, int rank) {
  Slice s;
  s.rows = split.vocab_padded / split.ranks;
  s.begin = rank * s.rows;
  s.used = vp::UsedRows(split.vocab, s.begin, s.rows);
  return s;
}

// 37 real tokens in 48 rows over 3 ranks: the last holds 5 real and 11 padding rows. Over 4 ranks of 128 rows, the
// second holds 5 real rows and the last two padding only. One rank: the whole (padded) vocabulary.
const std::vector<Split> kSplits = {{37, 48, 3}, {37, 128, 4}, {100, 128, 1}, {97, 128, 2}};

// What the group computes for one row of logits over the whole padded vocabulary (the ranks' local rows one after
// the other): the loss, and every rank's local gradient in its place.
struct GroupRow {
  float loss = 0.0f;
  std::vector<float> grad;  // (Vp)
};

GroupRow GroupCrossEntropy(const Split& split, const std::vector<float>& logits, int target, float inverse_rows) {
  // Stage 1, then the all-reduce (max).
  float row_max = -INFINITY;
  for (int r = 0; r < split.ranks; ++r) {
    const Slice s = SliceOf(split, r);
    float local = -INFINITY;
    for (int j = 0; j < s.used; ++j) local = vp::MaxOf(local, logits[s.begin + j]);
    row_max = vp::MaxOf(row_max, local);
  }
  // Stage 2, then the all-reduce (sum) of the sums and of the target logits.
  float sum = 0.0f, target_logit = 0.0f;
  for (int r = 0; r < split.ranks; ++r) {
    const Slice s = SliceOf(split, r);
    float local = 0.0f;
    for (int j = 0; j < s.used; ++j) local += vp::ShiftedExp(logits[s.begin + j], row_max);
    sum += local;
    target_logit += vp::TargetLogit(logits.data() + s.begin, vp::LocalRow(target, s.begin, s.used));
  }
  // Stage 3 on every rank, over its local columns.
  GroupRow out;
  out.loss = vp::RowLoss(sum, row_max, target_logit);
  out.grad.resize(split.vocab_padded);
  for (int r = 0; r < split.ranks; ++r) {
    const Slice s = SliceOf(split, r);
    const int local_target = vp::LocalRow(target, s.begin, s.used);
    for (int j = 0; j < s.rows; ++j) {
      out.grad[s.begin + j] =
          vp::LogitGradient(logits[s.begin + j], j, s.used, local_target, row_max, 1.0f / sum, inverse_rows);
    }
  }
  return out;
}

// The same in double over the real columns: −log softmax(target), and (softmax − onehot) / N.
struct ReferenceRow {
  double loss = 0.0;
  std::vector<double> grad;  // (V)
};

ReferenceRow DoubleCrossEntropy(const std::vector<float>& logits, int vocab, int target, int rows) {
  double row_max = logits[0];
  for (int v = 1; v < vocab; ++v) row_max = std::max(row_max, static_cast<double>(logits[v]));
  double sum = 0.0;
  for (int v = 0; v < vocab; ++v) sum += std::exp(logits[v] - row_max);
  ReferenceRow out;
  out.loss = std::log(sum) + row_max - logits[target];
  for (int v = 0; v < vocab; ++v) out.grad.push_back((std::exp(logits[v] - row_max) / sum - (v == target)) / rows);
  return out;
}

// Random logits (stddev 3, so that the softmax is far from uniform); the padding columns hold large values, which
// would dominate the maximum and the sum if any stage read them.
std::vector<float> RandomRow(const Split& split, std::mt19937& generator) {
  std::normal_distribution<float> normal(0.0f, 3.0f);
  std::vector<float> logits(split.vocab_padded, 50.0f);
  for (int v = 0; v < split.vocab; ++v) logits[v] = normal(generator);
  return logits;
}

// The targets of the test rows: the first and the last real token (the first and the last rank holding real
// tokens), then random ones.
std::vector<int> Targets(const Split& split, std::mt19937& generator) {
  std::uniform_int_distribution<int> token(0, split.vocab - 1);
  std::vector<int> targets = {0, split.vocab - 1};
  while (targets.size() < 8) targets.push_back(token(generator));
  return targets;
}

TEST(VocabParallelMath, SlicesHoldEveryTokenOnce) {
  for (const Split& split : kSplits) {
    SCOPED_TRACE(split.Name());
    for (int token = 0; token < split.vocab_padded; ++token) {
      int holders = 0;
      int real_holders = 0;
      for (int r = 0; r < split.ranks; ++r) {
        const Slice s = SliceOf(split, r);
        const int local = vp::LocalRow(token, s.begin, s.rows);
        if (local >= 0) {
          ++holders;
          EXPECT_EQ(local, token - s.begin);
        }
        real_holders += vp::LocalRow(token, s.begin, s.used) >= 0;
      }
      EXPECT_EQ(holders, 1) << "token " << token;
      EXPECT_EQ(real_holders, token < split.vocab ? 1 : 0) << "token " << token;
    }
  }
  EXPECT_EQ(vp::UsedRows(37, 32, 16), 5);
  EXPECT_EQ(vp::UsedRows(37, 64, 32), 0);
  EXPECT_EQ(vp::UsedRows(100, 0, 128), 100);
  EXPECT_EQ(vp::LocalRow(15, 16, 16), -1);
  EXPECT_EQ(vp::LocalRow(16, 16, 16), 0);
  EXPECT_EQ(vp::LocalRow(31, 16, 16), 15);
  EXPECT_EQ(vp::LocalRow(32, 16, 16), -1);
}

TEST(VocabParallelMath, LossAndGradientMatchDoublePrecision) {
  std::mt19937 generator(7);
  for (const Split& split : kSplits) {
    SCOPED_TRACE(split.Name());
    const std::vector<int> targets = Targets(split, generator);
    const int rows = static_cast<int>(targets.size());
    for (int target : targets) {
      SCOPED_TRACE("target " + std::to_string(target));
      const std::vector<float> logits = RandomRow(split, generator);
      const GroupRow group = GroupCrossEntropy(split, logits, target, 1.0f / rows);
      const ReferenceRow reference = DoubleCrossEntropy(logits, split.vocab, target, rows);
      EXPECT_NEAR(group.loss, reference.loss, 1e-5 * std::max(1.0, std::fabs(reference.loss)));
      for (int v = 0; v < split.vocab; ++v) {
        EXPECT_NEAR(group.grad[v], reference.grad[v], 1e-7 + 1e-5 * std::fabs(reference.grad[v])) << "column " << v;
      }
      for (int v = split.vocab; v < split.vocab_padded; ++v) EXPECT_EQ(group.grad[v], 0.0f) << "padding column " << v;
    }
  }
}

// Only the rank holding the target subtracts the one-hot: every other rank's gradient is the softmax alone
// (non-negative), and its target logit is 0, so the group's sum is the target's logit exactly.
TEST(VocabParallelMath, TargetInAnotherSliceAddsNothing) {
  const Split split{37, 48, 3};
  std::mt19937 generator(11);
  const std::vector<float> logits = RandomRow(split, generator);
  const int target = 3;  // rank 0's
  const GroupRow group = GroupCrossEntropy(split, logits, target, 1.0f);
  for (int r = 0; r < split.ranks; ++r) {
    const Slice s = SliceOf(split, r);
    const int local_target = vp::LocalRow(target, s.begin, s.used);
    EXPECT_EQ(local_target, r == 0 ? target : -1);
    EXPECT_EQ(vp::TargetLogit(logits.data() + s.begin, local_target), r == 0 ? logits[target] : 0.0f);
    int negative = 0;
    for (int j = 0; j < s.rows; ++j) negative += group.grad[s.begin + j] < 0.0f;
    EXPECT_EQ(negative, r == 0 ? 1 : 0) << "rank " << r;
  }
}

// A slice of padding only has no maximum (−∞, which the max all-reduce ignores), no share of the sum and no
// gradient.
TEST(VocabParallelMath, PaddingOnlySliceContributesNothing) {
  const Split split{37, 128, 4};
  const Slice empty = SliceOf(split, 3);
  ASSERT_EQ(empty.used, 0);
  EXPECT_EQ(vp::MaxOf(-INFINITY, -2.5f), -2.5f);
  EXPECT_EQ(vp::MaxOf(-2.5f, -INFINITY), -2.5f);
  std::mt19937 generator(13);
  const std::vector<float> logits = RandomRow(split, generator);
  const GroupRow group = GroupCrossEntropy(split, logits, 36, 0.5f);
  for (int j = 0; j < empty.rows; ++j) EXPECT_EQ(group.grad[empty.begin + j], 0.0f);
  EXPECT_EQ(vp::TargetLogit(logits.data() + empty.begin, vp::LocalRow(36, empty.begin, empty.used)), 0.0f);
}

// The embedding's shares: each rank its rows, zeros elsewhere; their sum is the token's row bit for bit.
TEST(VocabParallelMath, EmbeddingSharesSumToTheTokensRow) {
  constexpr int kChannels = 5;
  std::mt19937 generator(17);
  std::normal_distribution<float> normal(0.0f, 0.02f);
  for (const Split& split : kSplits) {
    SCOPED_TRACE(split.Name());
    std::vector<float> wte(static_cast<size_t>(split.vocab_padded) * kChannels, 0.0f);
    for (size_t i = 0; i < static_cast<size_t>(split.vocab) * kChannels; ++i) wte[i] = normal(generator);
    for (int token : {0, split.vocab - 1, split.vocab / 2}) {
      for (int c = 0; c < kChannels; ++c) {
        float sum = 0.0f;
        for (int r = 0; r < split.ranks; ++r) {
          const Slice s = SliceOf(split, r);
          const float* local = wte.data() + static_cast<size_t>(s.begin) * kChannels;
          sum += vp::EmbeddingShare(local, vp::LocalRow(token, s.begin, s.rows), kChannels, c);
        }
        EXPECT_EQ(sum, wte[static_cast<size_t>(token) * kChannels + c]) << "token " << token << ", channel " << c;
      }
    }
  }
}

// The residual and the bias first, then the group's product: the CPU reference's order, bit for bit, and the sum to
// fp32 rounding.
TEST(VocabParallelMath, BiasResidualAddsResidualAndBiasFirst) {
  std::mt19937 generator(19);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  for (int i = 0; i < 100; ++i) {
    const float residual = normal(generator), bias = normal(generator), partial = normal(generator);
    const float expected = (residual + bias) + partial;
    EXPECT_EQ(vp::BiasResidual(residual, bias, partial), expected);
    const double exact = static_cast<double>(residual) + bias + partial;
    EXPECT_NEAR(vp::BiasResidual(residual, bias, partial), exact, 1e-6 * std::max(1.0, std::fabs(exact)));
  }
}

}  // namespace
}  // namespace tb
