// The flags of `trainbench collectives` and their validation into SweepOptions: every mistake is one
// InputError line naming the flag and the accepted values.
#pragma once

#include <cstdint>
#include <string>

#include "communicator.h"
#include "moe_alltoall.h"
#include "sweep.h"

namespace tb {

struct CollectivesFlags {
  std::string min_bytes = "8";
  std::string max_bytes = "32M";
  int64_t step_factor = 2;
  std::string sizes;
  std::string ops = "all_reduce";
  std::string dtype = "float";
  std::string redop = "sum";
  int root = 0;
  int iters = 20;
  int warmup = 5;
  int check_iters = 1;
  int aggregate = 1;
  int cuda_graph = 0;
  std::string modes = "out-of-place,in-place";
  std::string split = "all";
  MoeFlags moe;  // --moe-*: the moe_alltoall point's layer
};

// How the launch's ranks sit on nodes (hosts): the input of --split.
struct NodeShape {
  int ranks = 1;
  int nodes = 1;
  int min_ranks_per_node = 1;
  int max_ranks_per_node = 1;
};

// Throws InputError when the split makes no sense for the launch: a communicator of one rank (intra with one rank
// per node, inter on one node), or nodes with different rank counts (their communicators would not be alike).
SplitPlan PlanSplit(const std::string& split, const NodeShape& shape);

// Validates the flags for a sweep on communicators of n_ranks (SplitPlan::ranks); `comm`, when given, is asked whether
// it supports the dtype (the MPI backend has no fp16/bf16) and can capture --cuda-graph's graphs (MPI cannot). Throws
// InputError.
// The sweep's operations are the collectives --ops names; moe_alltoall, which it also accepts, is not one of them
// (ValidateMoeFlags, moe_alltoall.h).
SweepOptions ValidateCollectivesFlags(const CollectivesFlags& flags, int n_ranks, const Communicator* comm);
// Whether --ops names moe_alltoall.
bool NamesMoeAllToAll(const CollectivesFlags& flags);

}  // namespace tb
