// Why cost's decision came out as it did (results/analysis/cost_reasons.h), on worked examples: the shares of the
// training time and of the cost, the dominant ones, and the reason the winner beats its runner-up.
#include "cost_reasons.h"

#include <gtest/gtest.h>

#include <numeric>
#include <string>
#include <vector>

namespace tb {
namespace {

PricedConfig Config(const std::string& name, const std::string& config, int nodes, double exposed, double data,
                    double work_hours, double overhead_hours, double total_usd, double job_usd_per_hour = 100) {
  PricedConfig p;
  p.name = name;
  p.config = config;
  p.nodes = nodes;
  p.exposed_share = exposed;
  p.data_wait_share = data;
  p.cost.work_hours = work_hours;
  p.cost.checkpoint_overhead_hours = overhead_hours;
  p.cost.time_to_train_hours = work_hours + overhead_hours;
  p.cost.total_usd = total_usd;
  p.cost.gpu_usd = total_usd * 0.9;
  p.cost.retry_usd = total_usd * 0.1;
  p.cost.job_usd_per_hour = job_usd_per_hour;
  return p;
}

double Sum(const std::vector<Share>& shares) {
  return std::accumulate(shares.begin(), shares.end(), 0.0, [](double s, const Share& x) { return s + x.fraction; });
}

TEST(CostReasons, TimeSharesAddUpWithTheCheckpointOverhead) {
  // 9 h of work and 1 h of checkpoint overhead: the step's shares take 90% of the time. Exposed 10% of the step is
  // 9% of the training time, data wait 20% is 18%, compute the remaining 70% of the step is 63%, checkpoints 10%.
  const std::vector<Share> shares = TimeShares(Config("a", "a", 2, 0.1, 0.2, 9, 1, 100));
  ASSERT_EQ(shares.size(), 4u);
  EXPECT_EQ(shares[0].part, "compute");
  EXPECT_NEAR(shares[0].fraction, 0.63, 1e-12);
  EXPECT_EQ(shares[1].part, "exposed inter-node communication") << "two nodes: the all-reduce crosses them";
  EXPECT_NEAR(shares[1].fraction, 0.09, 1e-12);
  EXPECT_NEAR(shares[2].fraction, 0.18, 1e-12);
  EXPECT_NEAR(shares[3].fraction, 0.10, 1e-12);
  EXPECT_NEAR(Sum(shares), 1, 1e-12);
  EXPECT_EQ(TimeShares(Config("b", "b", 1, 0.1, 0, 1, 0, 1))[1].part, "exposed intra-node communication");
}

TEST(CostReasons, CostSharesAndTheDominantOnes) {
  PricedConfig p = Config("a", "a", 1, 0.5, 0.1, 10, 0, 200);
  p.cost.gpu_usd = 150;
  p.cost.retry_usd = 20;
  p.cost.provisioning_usd = 30;
  const std::vector<Share> cost = CostShares(p.cost);
  EXPECT_NEAR(Sum(cost), 1, 1e-12);
  EXPECT_EQ(Dominant(cost).part, "GPU hours");
  EXPECT_DOUBLE_EQ(Dominant(cost).fraction, 0.75);
  // The step: exposed 50%, data 10%, compute 40%: exposed communication dominates.
  EXPECT_EQ(DominantText(p), "exposed intra-node communication 50% of the training time, GPU hours 75% of the cost");
}

TEST(CostReasons, TheLoserIsNamedWithThePartItSpendsMoreOn) {
  const PricedConfig nvlink = Config("1x8 on nvlink", "run 1x8", 1, 0.04, 0, 10, 0, 100);
  const PricedConfig pcie = Config("2x4 on pcie", "run 2x4", 2, 0.31, 0.02, 12, 0, 130);
  EXPECT_EQ(WhyBeats(nvlink, pcie), "2x4 on pcie loses on exposed inter-node communication: 31% of the training time vs 4%");
  // The same measurement on two offerings: the price per job-hour.
  const PricedConfig dearer = Config("1x8 on aws", "run 1x8", 1, 0.04, 0, 10, 0, 400, 98.32);
  const PricedConfig cheaper = Config("1x8 on lambda", "run 1x8", 1, 0.04, 0, 10, 0, 240, 23.92);
  EXPECT_EQ(WhyBeats(cheaper, dearer),
            "1x8 on aws loses on price: $98.32 vs $23.92 per job-hour for the same measurement");
  // Shares within a point of each other: the work itself, its hours and their price.
  const PricedConfig slower = Config("k4 on x", "other 1x4", 1, 0.045, 0, 20, 0, 200, 50);
  EXPECT_EQ(WhyBeats(nvlink, slower),
            "k4 on x loses on the work itself: 20 h of it at $50.00 per hour vs 10 h at $100.00");
}

TEST(CostReasons, TheRunnerUpIsAnotherLayoutWhenThereIsOne) {
  // Rows: the winner's layout on a dearer offering (2nd cheapest), another layout (3rd).
  const std::vector<PricedConfig> rows = {Config("1x8 on lambda", "r 1x8", 1, 0.04, 0, 10, 0, 100, 10),
                                          Config("1x8 on aws", "r 1x8", 1, 0.04, 0, 10, 0, 150, 15),
                                          Config("2x4 on lambda", "r 2x4", 2, 0.31, 0, 12, 0, 180, 15)};
  CostDecision d;
  d.cheapest = 0;
  d.fastest = 0;
  d.cheapest_within_deadline = 0;
  const DecisionReasons why = ExplainDecision(rows, d, 11.0);
  EXPECT_EQ(why.cheapest, "2x4 on lambda loses on exposed inter-node communication: 31% of the training time vs 4%");
  EXPECT_EQ(why.fastest, why.cheapest);
  // Within 11 h only the 1x8 rows train: the same layout on aws is the runner-up.
  EXPECT_EQ(why.deadline, "1x8 on aws loses on price: $15.00 vs $10.00 per job-hour for the same measurement");
  // A runner-up within 1% of the winner's total is called a near tie first.
  const std::vector<PricedConfig> tie = {Config("4x8 on lambda", "r 4x8", 4, 0.15, 0, 1.45, 0, 139.30, 95.68),
                                         Config("2x8 on lambda", "r 2x8", 2, 0.15, 0, 2.9, 0, 139.40, 47.84)};
  CostDecision first;
  first.cheapest = 0;
  EXPECT_EQ(ExplainDecision(tie, first, std::nullopt).cheapest,
            "a near tie, within 1% ($139.30 vs $139.40): 2x8 on lambda loses on the work itself: 2.9 h of it at "
            "$47.84 per hour vs 1.45 h at $95.68");
  const DecisionReasons alone = ExplainDecision({rows[0]}, d, 11.0);
  EXPECT_EQ(alone.cheapest, "the only configuration priced");
  EXPECT_EQ(alone.deadline, "the only configuration within the deadline");
  EXPECT_TRUE(ExplainDecision(rows, CostDecision{}, std::nullopt).cheapest.empty());
}

}  // namespace
}  // namespace tb
