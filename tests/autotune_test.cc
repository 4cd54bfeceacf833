// The host-side rules of kernel autotuning (models/cuda/autotune.h), which the GEMMs and cuDNN attention use to pick
// among timed candidates: the median, the choice with its tie margin, and the record of a choice.
#include <gtest/gtest.h>

#include <cmath>
#include <optional>
#include <vector>

#include "cuda/autotune.h"
#include "model_config.h"
#include "transformer.h"

namespace tb::gpu {
namespace {

TEST(Autotune, MedianOfOddAndEvenCounts) {
  EXPECT_DOUBLE_EQ(MedianSeconds({3.0, 1.0, 2.0}), 2.0);
  EXPECT_DOUBLE_EQ(MedianSeconds({4.0, 1.0, 3.0, 2.0}), 2.5);
  EXPECT_DOUBLE_EQ(MedianSeconds({5.0, 1.0, 1.1, 9.0, 1.2}), 1.2);  // one slow outlier does not move it
  EXPECT_TRUE(std::isnan(MedianSeconds({})));
}

TEST(Autotune, ChoosesTheFastestMedian) {
  EXPECT_EQ(ChooseFastest({3.0, 1.0, 2.0}, 0.0), 1);
  EXPECT_EQ(ChooseFastest({1.0, 2.0, 3.0}, 0.0), 0);
  EXPECT_EQ(ChooseFastest({3.0, 2.0, 1.0}), 2);
}

TEST(Autotune, TiesGoToTheHeuristicsOrder) {
  EXPECT_EQ(ChooseFastest({2.0, 1.0, 1.0}, 0.0), 1);      // exact tie: the earlier
  EXPECT_EQ(ChooseFastest({1.0, 0.995}, 0.01), 0);        // within 1 %: the heuristic's first stays
  EXPECT_EQ(ChooseFastest({1.0, 0.98}, 0.01), 1);         // 2 % faster: taken
  EXPECT_EQ(ChooseFastest({1.2, 1.005, 1.0}, 0.01), 1);   // the first within the margin of the fastest
  EXPECT_EQ(ChooseFastest({1.0, 0.995}, 0.0), 1);         // no margin: strictly the fastest
}

TEST(Autotune, SkipsCandidatesThatFailed) {
  EXPECT_EQ(ChooseFastest({std::nullopt, 2.0, 1.5}), 2);
  EXPECT_EQ(ChooseFastest({std::nullopt, 1.0, std::nullopt}), 1);
  EXPECT_EQ(ChooseFastest({std::nullopt, std::nullopt}), -1);
  EXPECT_EQ(ChooseFastest({}), -1);
}

TEST(Autotune, RecordsTheChoiceAndTheFirstsTime) {
  const KernelChoice choice = MakeKernelChoice("gemm LinearForward BIAS", "m 8 n 4 k 2 op T,N D bf16",
                                               {2e-6, std::nullopt, 1e-6}, 2);
  EXPECT_EQ(choice.what, "gemm LinearForward BIAS");
  EXPECT_EQ(choice.shape, "m 8 n 4 k 2 op T,N D bf16");
  EXPECT_EQ(choice.candidates, 3);
  EXPECT_EQ(choice.chosen, 2);
  EXPECT_DOUBLE_EQ(choice.chosen_s, 1e-6);
  EXPECT_DOUBLE_EQ(choice.first_s, 2e-6);
}

TEST(Autotune, RecordsAnUntimedChoiceAsTheFirstWithNaNTimes) {
  const KernelChoice untimed = MakeKernelChoice("cudnn-sdpa forward", "B 1 T 2 NH 1 hd 8", {}, 0);
  EXPECT_EQ(untimed.candidates, 0);
  EXPECT_EQ(untimed.chosen, 0);
  EXPECT_TRUE(std::isnan(untimed.chosen_s));
  EXPECT_TRUE(std::isnan(untimed.first_s));
  const KernelChoice first_failed = MakeKernelChoice("g", "s", {std::nullopt, 1e-6}, 1);
  EXPECT_TRUE(std::isnan(first_failed.first_s));
  EXPECT_DOUBLE_EQ(first_failed.chosen_s, 1e-6);
  const KernelChoice none_ran = MakeKernelChoice("g", "s", {std::nullopt}, -1);
  EXPECT_EQ(none_ran.chosen, 0);
  EXPECT_TRUE(std::isnan(none_ran.chosen_s));
}

// The CPU backend times nothing: its list is empty, so train writes no kernel_choices table for it.
TEST(Autotune, TheCpuModelChoosesNothing) {
  const auto model = MakeCpuTransformer(CustomModel(1, 16, 2, 20, 4), 1);
  EXPECT_TRUE(model->kernel_choices().empty());
}

}  // namespace
}  // namespace tb::gpu
