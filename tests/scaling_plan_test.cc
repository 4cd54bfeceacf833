// train --scaling's points (src/app/scaling_plan.h): rank counts, node counts and NxM layouts against the launch's
// nodes, and the choice of the gradient all-reduce per point.
#include <gtest/gtest.h>

#include "error.h"
#include "scaling_plan.h"

namespace tb {
namespace {

// `nodes` nodes of `per_node` ranks, numbered node by node.
LaunchShape Even(int nodes, int per_node) {
  LaunchShape shape;
  for (int n = 0; n < nodes; ++n) {
    for (int l = 0; l < per_node; ++l) {
      shape.node.push_back(n);
      shape.local_rank.push_back(l);
    }
  }
  return shape;
}

std::string ErrorOf(const std::string& text, const LaunchShape& shape) {
  try {
    ParseScaling(text, shape);
  } catch (const InputError& e) {
    return e.what();
  }
  return "";
}

TEST(ScalingPlan, RankCountsAreTheFirstRanksWithTheirNodes) {
  const std::vector<ScalingPointPlan> points = ParseScaling("1,2,3,8", Even(4, 2));
  ASSERT_EQ(points.size(), 4u);
  EXPECT_EQ(points[1].nodes, 1);
  EXPECT_EQ(points[1].ranks_per_node, 2);
  EXPECT_TRUE(points[1].even);
  EXPECT_EQ(points[2].nodes, 2);  // ranks 0, 1 on node 0 and rank 2 on node 1
  EXPECT_FALSE(points[2].even);
  EXPECT_EQ(points[3].nodes, 4);
  EXPECT_TRUE(points[3].Holds(7, 3, 1));
  EXPECT_FALSE(points[2].Holds(3, 1, 1));
  EXPECT_EQ(ParseScaling("", Even(2, 2)).front().k, 4);
  EXPECT_EQ(ParseScaling("pow2", Even(3, 2)).back().k, 4);
}

TEST(ScalingPlan, LayoutsTakeTheFirstLocalRanksOfTheFirstNodes) {
  const std::vector<ScalingPointPlan> points = ParseScaling("1x2,2x2,4x2", Even(4, 2));
  ASSERT_EQ(points.size(), 3u);
  EXPECT_EQ(points[1].k, 4);
  EXPECT_EQ(points[2].k, 8);
  EXPECT_TRUE(points[0].layout);
  const ScalingPointPlan one_each = ParseScaling("4x1", Even(4, 2)).front();
  EXPECT_EQ(one_each.k, 4);
  EXPECT_TRUE(one_each.Holds(6, 3, 0));   // node 3's first rank
  EXPECT_FALSE(one_each.Holds(1, 0, 1));  // node 0's second rank
}

TEST(ScalingPlan, NodesRunsPowersOfTwoAndEveryNode) {
  std::vector<int> ks;
  for (const ScalingPointPlan& p : ParseScaling("nodes", Even(3, 2))) ks.push_back(p.k);
  EXPECT_EQ(ks, (std::vector<int>{2, 4, 6}));
  ks.clear();
  for (const ScalingPointPlan& p : ParseScaling("nodes", Even(4, 1))) ks.push_back(p.k);
  EXPECT_EQ(ks, (std::vector<int>{1, 2, 4}));
}

TEST(ScalingPlan, BadListsAreInputErrorsNamingScaling) {
  LaunchShape uneven = Even(2, 2);
  uneven.node.push_back(1);
  uneven.local_rank.push_back(2);
  EXPECT_NE(ErrorOf("nodes", uneven).find("--scaling nodes needs the same number of ranks on every node"),
            std::string::npos);
  EXPECT_NE(ErrorOf("4x1", Even(2, 2)).find("needs 4 nodes; this launch has 2"), std::string::npos);
  EXPECT_NE(ErrorOf("2x3", Even(2, 2)).find("needs 3 ranks on node 0, which has 2"), std::string::npos);
  EXPECT_NE(ErrorOf("2,1x2", Even(2, 2)).find("mixes rank counts and NxM layouts"), std::string::npos);
  EXPECT_NE(ErrorOf("2x2,1x2", Even(2, 2)).find("increasing rank counts"), std::string::npos);
  EXPECT_NE(ErrorOf("2x,1x2", Even(2, 2)).find("--scaling"), std::string::npos);
  EXPECT_NE(ErrorOf("0x2", Even(2, 2)).find("--scaling"), std::string::npos);
  EXPECT_NE(ErrorOf("5", Even(2, 2)).find("--scaling"), std::string::npos);
}

// Tensor parallel groups of T stay inside a node unless allowed across; k must divide into groups either way.
TEST(ScalingPlan, TensorParallelGroupsStayInsideANode) {
  const LaunchShape shape = Even(2, 4);
  const std::vector<ScalingPointPlan> points = ParseScaling("4,8", shape);
  EXPECT_NO_THROW(CheckTensorParallelLayout(4, points, false));
  EXPECT_NO_THROW(CheckTensorParallelLayout(2, points, false));
  for (const ScalingPointPlan& p : points) EXPECT_NO_THROW(CheckTensorParallelGroups(4, p, shape));
  EXPECT_THROW(CheckTensorParallelLayout(8, points, false), InputError);  // 4 does not divide into groups of 8
  const std::vector<ScalingPointPlan> across = ParseScaling("8", shape);
  try {
    CheckTensorParallelLayout(8, across, false);
    ADD_FAILURE() << "a group of 8 spans the two 4-rank nodes";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("--allow-cross-node-tp"), std::string::npos) << e.what();
  }
  EXPECT_NO_THROW(CheckTensorParallelLayout(8, across, true));
  EXPECT_THROW(CheckTensorParallelLayout(3, across, true), InputError);
  // Ranks mapped round-robin over the nodes: rank 0 on node 0, rank 1 on node 1, ... a group of 2 spans both.
  LaunchShape round_robin;
  for (int r = 0; r < 8; ++r) {
    round_robin.node.push_back(r % 2);
    round_robin.local_rank.push_back(r / 2);
  }
  const std::vector<ScalingPointPlan> rr = ParseScaling("2x4", round_robin);
  EXPECT_NO_THROW(CheckTensorParallelLayout(2, rr, false));
  EXPECT_THROW(CheckTensorParallelGroups(2, rr.front(), round_robin), InputError);
}

TEST(ScalingPlan, AutoIsHierarchicalAcrossEvenNodesOnMpi) {
  std::vector<ScalingPointPlan> points = ParseScaling("1,2,3,4", Even(2, 2));
  ChooseAllReduce("auto", true, points);
  EXPECT_FALSE(points[1].hierarchical);  // one node
  EXPECT_FALSE(points[2].hierarchical);  // 2 + 1 ranks
  EXPECT_TRUE(points[3].hierarchical);
  ChooseAllReduce("auto", false, points);
  EXPECT_FALSE(points[3].hierarchical);  // NCCL's own
  ChooseAllReduce("flat", true, points);
  EXPECT_FALSE(points[3].hierarchical);
  auto error_of = [&](const std::string& mode, bool mpi) -> std::string {
    try {
      ChooseAllReduce(mode, mpi, points);
    } catch (const InputError& e) {
      return e.what();
    }
    return "";
  };
  EXPECT_NE(error_of("hierarchical", true).find("same number of ranks on every node of a point"), std::string::npos);
  EXPECT_NE(error_of("hierarchical", false).find("is the mpi backend's"), std::string::npos);
  EXPECT_NE(error_of("ring", true).find("accepted: auto, flat, hierarchical"), std::string::npos);
}

}  // namespace
}  // namespace tb
