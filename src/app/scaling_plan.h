// The points of `train --scaling`: how many ranks each runs on and which, and which gradient all-reduce it uses.
//   (none)        every rank, one point
//   1,2,4 | pow2  the first k ranks of the launch
//   nodes         every rank of the first 1, 2, 4, ... nodes (powers of two, and the node count itself)
//   1x2,2x2,4x2   explicit layouts NxM: the first M local ranks of each of the first N nodes
// Rank counts must increase from point to point (each point's group is train/k<ranks>).
#pragma once

#include <string>
#include <vector>

namespace tb {

// Where the launch's ranks are: node and local rank of each world rank.
struct LaunchShape {
  std::vector<int> node;
  std::vector<int> local_rank;
  int ranks() const { return static_cast<int>(node.size()); }
  int nodes() const;
  // The ranks of each node: one count per node.
  std::vector<int> RanksPerNode() const;
};

struct RankContext;
// Node and local rank of every rank of the launch. Collective over the world.
LaunchShape GatherLaunchShape(const RankContext& ctx);

struct ScalingPointPlan {
  int k = 1;
  int nodes = 1;            // nodes the point's ranks are on
  int ranks_per_node = 1;   // the most on any of them
  bool even = true;         // every node of the point holds ranks_per_node of its ranks
  bool layout = false;      // given as NxM (else the first k ranks)
  bool hierarchical = false;  // the gradient all-reduce (see ChooseAllReduce)
  bool Holds(int world_rank, int node, int local_rank) const;
};

// Throws InputError naming --scaling for a list that is not increasing, a count or layout the launch does not
// have, `nodes` on nodes of unequal rank counts, or a mix of counts and layouts.
std::vector<ScalingPointPlan> ParseScaling(const std::string& text, const LaunchShape& shape);

// --allreduce auto|flat|hierarchical on the mpi backend (`mpi`) or NCCL: auto is hierarchical on the points that
// span nodes evenly, flat elsewhere; hierarchical needs the mpi backend (NCCL picks its own topology-aware
// algorithm) and an even layout at every point. Sets each point's `hierarchical`; throws InputError.
void ChooseAllReduce(const std::string& mode, bool mpi, std::vector<ScalingPointPlan>& points);

// Groups of consecutive ranks that stay inside a node unless asked: tensor parallel's, and expert parallel's (with
// T = P = 1 its groups are consecutive ranks too). Their flag, their name and the flag that lets them span nodes.
struct NodeGroups {
  const char* flag;
  const char* name;
  const char* allow_cross_node;
};
inline constexpr NodeGroups kTensorParallelGroups{"--tensor-parallel", "tensor parallel", "--allow-cross-node-tp"};
inline constexpr NodeGroups kExpertParallelGroups{"--expert-parallel", "expert parallel", "--allow-cross-node-ep"};

// groups.flag T: groups of T ranks inside a node (every point's ranks per node a multiple of T, on every node
// alike), or anywhere with allow_cross_node (k a multiple of T); throws InputError naming the first point that does
// not divide. T = 1 passes.
void CheckTensorParallelLayout(int tensor_parallel, const std::vector<ScalingPointPlan>& points, bool allow_cross_node,
                               const NodeGroups& groups = kTensorParallelGroups);
// That each group of T consecutive ranks of `point` (its members in launch order: the groups train splits them
// into) lies on one node; throws InputError naming the first that does not (a launch that maps ranks across nodes
// round-robin).
void CheckTensorParallelGroups(int tensor_parallel, const ScalingPointPlan& point, const LaunchShape& shape,
                               const NodeGroups& groups = kTensorParallelGroups);

}  // namespace tb
