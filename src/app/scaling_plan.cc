#include "scaling_plan.h"

#include <algorithm>
#include <map>
#include <set>

#include "context.h"
#include "error.h"
#include "flags.h"

namespace tb {

int LaunchShape::nodes() const { return static_cast<int>(std::set<int>(node.begin(), node.end()).size()); }

std::vector<int> LaunchShape::RanksPerNode() const {
  std::vector<int> counts(static_cast<size_t>(nodes()), 0);
  for (int n : node) ++counts[static_cast<size_t>(n)];
  return counts;
}

LaunchShape GatherLaunchShape(const RankContext& ctx) {
  LaunchShape shape;
  shape.node.resize(static_cast<size_t>(ctx.world_size));
  shape.local_rank.resize(static_cast<size_t>(ctx.world_size));
  TB_CHECK_MPI(MPI_Allgather(&ctx.node_index, 1, MPI_INT, shape.node.data(), 1, MPI_INT, MPI_COMM_WORLD));
  TB_CHECK_MPI(MPI_Allgather(&ctx.local_rank, 1, MPI_INT, shape.local_rank.data(), 1, MPI_INT, MPI_COMM_WORLD));
  return shape;
}

bool ScalingPointPlan::Holds(int world_rank, int node, int local_rank) const {
  return layout ? node < nodes && local_rank < ranks_per_node : world_rank < k;
}

namespace {

// The first k ranks: the nodes they are on and how evenly.
ScalingPointPlan FirstRanks(int k, const LaunchShape& shape) {
  std::map<int, int> per_node;
  for (int r = 0; r < k; ++r) ++per_node[shape.node[static_cast<size_t>(r)]];
  ScalingPointPlan p;
  p.k = k;
  p.nodes = static_cast<int>(per_node.size());
  for (const auto& [node, count] : per_node) {
    p.ranks_per_node = std::max(p.ranks_per_node, count);
    p.even = p.even && count == per_node.begin()->second;
  }
  return p;
}

// "NxM", checked against the launch: N nodes that each hold at least M ranks.
ScalingPointPlan Layout(const std::string& item, const std::string& text, const LaunchShape& shape) {
  const size_t x = item.find('x');
  const IntRange positive = IntRange::Between(1, 1 << 20);
  ScalingPointPlan p;
  p.layout = true;
  p.nodes = static_cast<int>(ParseInteger(item.substr(0, x), "--scaling (nodes of '" + item + "')", positive));
  p.ranks_per_node = static_cast<int>(ParseInteger(item.substr(x + 1), "--scaling (ranks per node of '" + item + "')", positive));
  p.k = p.nodes * p.ranks_per_node;
  const std::vector<int> counts = shape.RanksPerNode();
  if (p.nodes > static_cast<int>(counts.size())) {
    throw InputError("--scaling " + text + ": layout " + item + " needs " + std::to_string(p.nodes) +
                     " nodes; this launch has " + std::to_string(counts.size()));
  }
  for (int n = 0; n < p.nodes; ++n) {
    if (counts[static_cast<size_t>(n)] < p.ranks_per_node) {
      throw InputError("--scaling " + text + ": layout " + item + " needs " + std::to_string(p.ranks_per_node) +
                       " ranks on node " + std::to_string(n) + ", which has " +
                       std::to_string(counts[static_cast<size_t>(n)]));
    }
  }
  return p;
}

// `nodes`: all ranks of the first 1, 2, 4, ... nodes and of all of them.
std::vector<ScalingPointPlan> EveryNodeCount(const LaunchShape& shape) {
  const std::vector<int> counts = shape.RanksPerNode();
  if (std::adjacent_find(counts.begin(), counts.end(), std::not_equal_to<>()) != counts.end()) {
    throw InputError("--scaling nodes needs the same number of ranks on every node; this launch has " +
                     std::to_string(*std::min_element(counts.begin(), counts.end())) + " to " +
                     std::to_string(*std::max_element(counts.begin(), counts.end())));
  }
  std::vector<ScalingPointPlan> points;
  const int nodes = static_cast<int>(counts.size());
  for (int n = 1; n <= nodes; n = n * 2 > nodes && n != nodes ? nodes : n * 2) {
    ScalingPointPlan p;
    p.layout = true;
    p.nodes = n;
    p.ranks_per_node = counts.front();
    p.k = n * counts.front();
    points.push_back(p);
  }
  return points;
}

}  // namespace

std::vector<ScalingPointPlan> ParseScaling(const std::string& text, const LaunchShape& shape) {
  const int world = shape.ranks();
  if (text.empty()) return {FirstRanks(world, shape)};
  if (text == "nodes") return EveryNodeCount(shape);
  std::vector<ScalingPointPlan> points;
  if (text == "pow2") {
    for (int k = 1; k <= world; k *= 2) points.push_back(FirstRanks(k, shape));
    return points;
  }
  const std::vector<std::string> items = SplitFlagList(text, "--scaling");
  const bool layouts = items.front().find('x') != std::string::npos;
  for (const std::string& item : items) {
    if ((item.find('x') != std::string::npos) != layouts) {
      throw InputError("--scaling " + text + " mixes rank counts and NxM layouts (give one kind)");
    }
    points.push_back(layouts ? Layout(item, text, shape)
                             : FirstRanks(static_cast<int>(ParseInteger(item, "--scaling", IntRange::Between(1, world))),
                                          shape));
    if (points.size() > 1 && points.back().k <= points[points.size() - 2].k) {
      throw InputError("--scaling must list increasing rank counts (got '" + text + "')");
    }
  }
  return points;
}

void ChooseAllReduce(const std::string& mode, bool mpi, std::vector<ScalingPointPlan>& points) {
  if (mode != "auto" && mode != "flat" && mode != "hierarchical") {
    throw InputError("unknown all-reduce '" + mode + "' for --allreduce (accepted: auto, flat, hierarchical)");
  }
  if (mode == "hierarchical" && !mpi) {
    throw InputError("--allreduce hierarchical is the mpi backend's; on --backend cuda NCCL chooses its own "
                     "topology-aware algorithm (use auto or flat)");
  }
  for (ScalingPointPlan& p : points) {
    if (mode == "hierarchical" && !p.even) {
      throw InputError("--allreduce hierarchical needs the same number of ranks on every node of a point; the " +
                       std::to_string(p.k) + "-rank point has up to " + std::to_string(p.ranks_per_node) +
                       " on some of its " + std::to_string(p.nodes) + " nodes and fewer on others");
    }
    p.hierarchical = mode == "hierarchical" || (mode == "auto" && mpi && p.even && p.nodes > 1);
  }
}

void CheckTensorParallelGroups(int tensor_parallel, const ScalingPointPlan& point, const LaunchShape& shape,
                               const NodeGroups& groups) {
  std::vector<int> members;
  for (int r = 0; r < shape.ranks(); ++r) {
    if (point.Holds(r, shape.node[r], shape.local_rank[r])) members.push_back(r);
  }
  for (size_t i = 0; i < members.size(); ++i) {
    const int first = members[i - i % static_cast<size_t>(tensor_parallel)];
    if (shape.node[members[i]] != shape.node[first]) {
      throw InputError("ranks " + std::to_string(first) + " and " + std::to_string(members[i]) + " of one " +
                       groups.name + " group of the " + std::to_string(point.k) + "-rank point are on different " +
                       "nodes: launch the ranks node by node (mpirun --map-by slot), or " + groups.allow_cross_node);
    }
  }
}

void CheckTensorParallelLayout(int tensor_parallel, const std::vector<ScalingPointPlan>& points, bool allow_cross_node,
                               const NodeGroups& groups) {
  const std::string t = std::to_string(tensor_parallel);
  for (const ScalingPointPlan& p : points) {
    const std::string point = std::to_string(p.k) + "-rank point (" + std::to_string(p.nodes) + " node" +
                              (p.nodes == 1 ? "" : "s") + ", up to " + std::to_string(p.ranks_per_node) + " per node)";
    if (p.k % tensor_parallel != 0) {
      throw InputError(std::string(groups.flag) + " " + t + " does not divide the " + point + " into groups");
    }
    if (allow_cross_node) continue;
    if (!p.even || p.ranks_per_node % tensor_parallel != 0) {
      throw InputError(std::string(groups.flag) + " " + t + " does not divide the ranks of each node of the " + point +
                       ": " + groups.name + " groups stay inside a node, on its fast link (" +
                       groups.allow_cross_node + " to span nodes)");
    }
  }
}

}  // namespace tb
