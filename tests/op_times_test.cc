// OpTimes: the interval after each mark goes to the kind marked, a wait goes to comm_model and the kind it interrupted
// resumes; WorkOf: a tensor parallel rank's share of the matmuls.
#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <vector>

#include "model_config.h"
#include "op_times.h"
#include "phase_clock.h"

namespace tb {
namespace {

// A clock whose k-th interval is intervals[k] seconds (as many as the marks taken, less one), with the ranges opened.
class ScriptedClock : public PhaseClock {
 public:
  ScriptedClock(std::vector<double> intervals, std::vector<std::string>* ranges)
      : intervals_(std::move(intervals)), ranges_(ranges) {}
  void Mark() override { ++marks_; }
  std::vector<double> Intervals() override {
    std::vector<double> taken(intervals_.begin(), intervals_.begin() + (marks_ - 1));
    marks_ = 0;
    return taken;
  }
  void Range(const char* name) override { ranges_->push_back(name != nullptr ? name : "-"); }

 private:
  std::vector<double> intervals_;
  std::vector<std::string>* ranges_;
  int marks_ = 0;
};

double Slot(const OpSeconds& s, OpKind kind, bool backward) { return s[static_cast<size_t>(OpSlot(kind, backward))]; }

TEST(OpTimes, AWaitIsCommModelsAndTheKindItInterruptedResumes) {
  std::vector<std::string> ranges;
  // attention 1 | wait 2 | attention 4 | mlp 8 | end
  OpTimes ops(std::make_unique<ScriptedClock>(std::vector<double>{1, 2, 4, 8}, &ranges));
  ops.Begin(OpKind::kAttention, false);
  ops.BeginWait();
  ops.EndWait();
  ops.Begin(OpKind::kMlp, false);
  ops.End();
  OpSeconds seconds{};
  ops.TakeInto(seconds);
  EXPECT_EQ(Slot(seconds, OpKind::kAttention, false), 5.0);
  EXPECT_EQ(Slot(seconds, OpKind::kMlp, false), 8.0);
  // comm_model is one row for the step, kept in backward's slot.
  EXPECT_EQ(Slot(seconds, OpKind::kCommModel, true), 2.0);
  EXPECT_EQ(Slot(seconds, OpKind::kCommModel, false), 0.0);
  EXPECT_EQ(ranges, (std::vector<std::string>{"attention", "comm_model", "attention", "mlp", "-"}));
}

TEST(OpTimes, AWaitOutsideMarkedWorkResumesNothing) {
  std::vector<std::string> ranges;
  // wait 3 | (nothing) 5 | layernorm 7 | end
  OpTimes ops(std::make_unique<ScriptedClock>(std::vector<double>{3, 5, 7}, &ranges));
  ops.BeginWait();
  ops.EndWait();
  ops.Begin(OpKind::kLayerNorm, true);
  ops.End();
  OpSeconds seconds{};
  ops.TakeInto(seconds);
  EXPECT_EQ(Slot(seconds, OpKind::kCommModel, true), 3.0);
  EXPECT_EQ(Slot(seconds, OpKind::kLayerNorm, true), 7.0);
  double total = 0;
  for (double s : seconds) total += s;
  EXPECT_EQ(total, 10.0);  // the unmarked 5 s are nobody's
}

TEST(OpTimesWork, ATensorParallelRankDoesItsShareOfTheMatmulsAndAllOfTheRest) {
  const ModelConfig config = FindPreset("tiny");
  for (const bool backward : {false, true}) {
    for (const OpKind kind : {OpKind::kAttention, OpKind::kMlp, OpKind::kLmHead}) {
      const OpWork whole = WorkOf(config, kind, backward, 64, 32, false, 1e6);
      const OpWork quarter = WorkOf(config, kind, backward, 64, 32, false, 1e6, 4);
      EXPECT_GT(whole.flops, 0);
      EXPECT_DOUBLE_EQ(quarter.flops * 4, whole.flops) << OpKindName(kind);
    }
    for (const OpKind kind : {OpKind::kEmbedding, OpKind::kLayerNorm, OpKind::kOptimizer}) {
      EXPECT_EQ(WorkOf(config, kind, backward, 64, 32, false, 1e6, 4).bytes,
                WorkOf(config, kind, backward, 64, 32, false, 1e6).bytes)
          << OpKindName(kind);
    }
    const OpWork comm = WorkOf(config, OpKind::kCommModel, backward, 64, 32, false, 1e6, 4);
    EXPECT_EQ(comm.flops, 0);
    EXPECT_EQ(comm.bytes, 0);
  }
}

// The matmul kinds' FLOPs over both passes, per token, are the MFU convention's (ModelFlopsPerToken): a dense model's,
// and an MoE model's active ones (its router and K experts per MoE block, dense blocks between them).
TEST(OpTimesWork, TheKindsAddUpToTheModelsFlopsPerToken) {
  ModelConfig every_other = FindPreset("moe-tiny");
  every_other.moe->every = 2;
  for (const ModelConfig& config : {FindPreset("tiny"), FindPreset("moe-tiny"), every_other}) {
    const int seq = 32;
    const double tokens = 2.0 * seq;
    double flops = 0;
    for (int k = 0; k < kOpKinds; ++k) {
      for (const bool backward : {false, true}) {
        flops += WorkOf(config, static_cast<OpKind>(k), backward, tokens, seq, true, 1e6).flops;
      }
    }
    EXPECT_NEAR(flops / tokens, ModelFlopsPerToken(config, seq), 1e-9 * flops / tokens)
        << config.name << (config.moe ? " every " + std::to_string(config.moe->every) : "");
  }
}

}  // namespace
}  // namespace tb
