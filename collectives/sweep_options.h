// The flags of `trainbench collectives` and their validation into SweepOptions: every mistake is one
// InputError line naming the flag and the accepted values.
#pragma once

#include <cstdint>
#include <string>

#include "communicator.h"
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
  std::string modes = "out-of-place,in-place";
};

// Validates the flags for a launch of n_ranks; `comm`, when given, is asked whether it supports the dtype
// (the MPI backend has no fp16/bf16). Throws InputError.
SweepOptions ValidateCollectivesFlags(const CollectivesFlags& flags, int n_ranks, const Communicator* comm);

}  // namespace tb
