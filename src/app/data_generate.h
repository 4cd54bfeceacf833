// Writing a token-shard dataset from inside another command (`trainbench suite` writes one for its training
// phase), the way `trainbench data generate` writes it: shard i by rank i mod n, each fsynced and renamed.
#pragma once

#include <cstdint>
#include <string>

#include "context.h"

namespace tb {

struct DatasetRequest {
  std::string dir;           // created when missing; must not hold shards
  std::string tokens;        // token counts as `data generate` takes them ("4M")
  std::string shard_tokens;
  int64_t vocab = 50257;
  int64_t seed = 1234;
};

struct DatasetWritten {
  uint64_t bytes = 0;
  uint64_t shards = 0;
  uint64_t tokens = 0;
  double seconds = 0;     // until every rank had written its shards
  bool complete = false;  // false: a stop signal cut it short
};

// Collective over MPI_COMM_WORLD. The request is checked first, agreed by every rank (InputError: bad counts, a
// directory that cannot be created, holds shards, or lacks the space).
DatasetWritten WriteDataset(const DatasetRequest& request, const RankContext& ctx);

}  // namespace tb
