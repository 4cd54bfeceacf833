// `train --repeats` (models/train_repeats.h): the spread of a figure (median of odd and even counts, sample CV,
// NaN values left out), the median repeat, each repeat's figures from its steps and checkpoints, and what goes
// into the report. Every expected value is worked by hand in its comment.
#include "train_repeats.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <stdexcept>
#include <string>
#include <vector>

#include "schema.h"

namespace tb {
namespace {

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

TEST(Spread, OddCountTakesTheMiddleAndTheSampleDeviation) {
  // 8, 10, 12: mean 10, squares 4 + 0 + 4 = 8, sample variance 8 / 2 = 4, sd 2, CV 0.2.
  const Spread s = SpreadOf({12, 8, 10});
  EXPECT_EQ(s.count, 3u);
  EXPECT_DOUBLE_EQ(s.median, 10);
  EXPECT_DOUBLE_EQ(s.min, 8);
  EXPECT_DOUBLE_EQ(s.max, 12);
  EXPECT_DOUBLE_EQ(s.cv, 0.2);
}

TEST(Spread, EvenCountAveragesTheMiddleTwo) {
  // 1, 2, 4, 9: median (2 + 4) / 2 = 3; mean 4, squares 9 + 4 + 0 + 25 = 38, variance 38/3, CV sqrt(38/3) / 4.
  const Spread s = SpreadOf({9, 1, 4, 2});
  EXPECT_DOUBLE_EQ(s.median, 3);
  EXPECT_DOUBLE_EQ(s.cv, std::sqrt(38.0 / 3.0) / 4.0);
}

TEST(Spread, OneValueHasNoSpreadAndNaNsAreLeftOut) {
  const Spread one = SpreadOf({5});
  EXPECT_EQ(one.count, 1u);
  EXPECT_DOUBLE_EQ(one.median, 5);
  EXPECT_TRUE(std::isnan(one.cv)) << "one repeat says nothing of the spread";
  const Spread some = SpreadOf({kNaN, 4, kNaN, 6});
  EXPECT_EQ(some.count, 2u);
  EXPECT_DOUBLE_EQ(some.median, 5);
  const Spread none = SpreadOf({kNaN, kNaN});
  EXPECT_EQ(none.count, 0u);
  EXPECT_TRUE(std::isnan(none.median));
}

RepeatFigures Tokens(double tokens_per_s) {
  RepeatFigures f;
  f.tokens_per_s = tokens_per_s;
  return f;
}

TEST(MedianRepeat, TheMiddleOneByThroughputAndTheSlowerOfTwo) {
  EXPECT_EQ(MedianRepeat({Tokens(300), Tokens(100), Tokens(200)}), 2u);
  EXPECT_EQ(MedianRepeat({Tokens(400), Tokens(100), Tokens(300), Tokens(200)}), 3u) << "200, the slower of 200 and 300";
  EXPECT_EQ(MedianRepeat({Tokens(7)}), 0u);
  EXPECT_THROW(MedianRepeat({}), std::invalid_argument);
}

StepRecord Step(int step, bool warmup, double step_s, double data_wait_s, double stall_s) {
  StepRecord r;
  r.step = step;
  r.warmup = warmup;
  r.step_s = step_s;
  r.data_wait_s = data_wait_s;
  r.checkpoint_stall_s = stall_s;
  return r;
}

TEST(RepeatFigures, SharesFromTheMeasuredStepsAndTheCheckpointRate) {
  ScalingPoint point;
  point.tokens_per_s = 1000;
  point.step_s = 0.5;
  point.mfu_peak = kNaN;
  point.mfu_measured = 0.4;
  point.comm_exposed_s = 0.01;
  // Two ranks, a warm-up step each (left out) and two measured: step time 1 + 1 + 1 + 1 = 4 s, data wait
  // 0.1 + 0.3 = 0.4 s (10%), checkpoint stall 0.2 s (5%).
  std::vector<RankSteps> ranks(2);
  ranks[0].steps = {Step(0, true, 9, 9, 9), Step(1, false, 1, 0.1, 0.2), Step(2, false, 1, 0, 0)};
  ranks[1].steps = {Step(0, true, 9, 9, 9), Step(1, false, 1, 0.3, 0), Step(2, false, 1, 0, 0)};
  // Two checkpoints of two slices each: 4e9 + 4e9 bytes; slowest slice writes 2 s and 3 s: 8e9 B / 5 s = 1.6 GB/s.
  Group io;
  io.tables["checkpoints"]
      .Add("step", "", std::vector<int64_t>{2, 2, 4, 4})
      .Add("bytes", "B", std::vector<int64_t>{2000000000, 2000000000, 2000000000, 2000000000})
      .Add("write_s", "s", std::vector<double>{2, 1, 1, 3});
  const RepeatFigures f = FiguresOf(point, ranks, &io);
  EXPECT_DOUBLE_EQ(f.tokens_per_s, 1000);
  EXPECT_DOUBLE_EQ(f.mfu_measured_gemm, 0.4);
  EXPECT_DOUBLE_EQ(f.data_wait_share, 0.1);
  EXPECT_DOUBLE_EQ(f.checkpoint_stall_share, 0.05);
  EXPECT_DOUBLE_EQ(f.checkpoint_write_GBps, 1.6);
  EXPECT_TRUE(std::isnan(FiguresOf(point, ranks, nullptr).checkpoint_write_GBps)) << "no checkpoints: no rate";
}

TEST(RepeatFigures, ReportHoldsEveryRepeatAndTheSpread) {
  std::vector<RepeatFigures> repeats = {Tokens(300), Tokens(100), Tokens(200)};
  for (size_t i = 0; i < repeats.size(); ++i) repeats[i].step_s = 1.0 / repeats[i].tokens_per_s;
  Group point;
  AddRepeatsToReport(point, repeats, MedianRepeat(repeats));
  namespace p = schema::point;
  EXPECT_EQ(*schema::Find(&point, p::repeat_count), 3);
  EXPECT_EQ(*schema::Find(&point, p::median_repeat), 3) << "1-based: the third repeat ran at 200 tokens/s";
  const Table* table = schema::FindTable(&point, p::kRepeats);
  ASSERT_NE(table, nullptr);
  EXPECT_EQ(*schema::Values(*table, p::repeats::repeat), (std::vector<int64_t>{1, 2, 3}));
  EXPECT_EQ(*schema::Values(*table, p::repeats::tokens_per_s), (std::vector<double>{300, 100, 200}));
  const Table* spread = schema::FindTable(&point, p::kSpread);
  ASSERT_NE(spread, nullptr);
  EXPECT_EQ(schema::Values(*spread, p::spread::figure)->front(), "tokens_per_s");
  EXPECT_DOUBLE_EQ(schema::Values(*spread, p::spread::median)->front(), 200);
  EXPECT_DOUBLE_EQ(schema::Values(*spread, p::spread::cv)->front(), 0.5) << "mean 200, sample sd 100";
  EXPECT_EQ(schema::Values(*spread, p::spread::figure)->size(), RepeatFigureNames().size());
}

TEST(RepeatFigures, ConsoleLineSaysWhenTheSpreadIsUnknown) {
  EXPECT_EQ(SpreadLine({Tokens(5)}, 0), "#   1 run: spread unknown (--repeats N measures it)");
  const std::string line = SpreadLine({Tokens(300), Tokens(100), Tokens(200)}, 2);
  EXPECT_NE(line.find("over 3 repeats (the figures above are repeat 3's, at the median): tokens/s median 200 "
                      "(min 100, max 300, CV 50.0%)"),
            std::string::npos)
      << line;
}

}  // namespace
}  // namespace tb
