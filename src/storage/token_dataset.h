// A token dataset: the shards `trainbench data generate` writes into one directory (shard-00000.tbs, ...), and the
// two checks `train --data` and `data verify` run on it: the headers (cheap: 44 bytes per shard, run on every rank
// before any work starts) and the payload checksums (every byte read once, split over ranks and threads).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "error.h"
#include "token_shard.h"

namespace tb {

struct ShardFile {
  std::string path;
  ShardHeader header;
};

struct TokenDataset {
  std::string dir;
  std::vector<ShardFile> shards;  // by index
  uint32_t token_bytes = 0;
  uint64_t vocab = 0;
  uint64_t total_tokens = 0;
};

// The name of shard `index`: "shard-00003.tbs".
std::string ShardFileName(uint64_t index);
// Entries of `dir` named like shards ("shard-*.tbs"), whatever they are (a directory or FIFO so named is listed
// too, for the checks to name it), sorted; empty when there are none. InputError when `dir` is missing.
std::vector<std::string> ListShardFiles(const std::string& dir);
// Unfinished shards in `dir` ("shard-*.tbs.tmp": a ShardWriter that never reached Finish), sorted.
std::vector<std::string> ListPartialShardFiles(const std::string& dir);

// What the file names and headers say about a directory of shards; every problem is one line naming the file.
// The rules: a shard is named ShardFileName(i) and the indices run from 0 without a gap; a shard is a regular file,
// or a symbolic link to one (followed: datasets are linked into place), never a dangling link, a link to anything
// else, a directory, FIFO or device so named. A dataset records no shard count, so a missing last shard is not seen.
struct DatasetScan {
  TokenDataset dataset;                    // the shards whose headers are good and agree with the first good one
  std::vector<std::string> bad_shards;     // names and kinds that are no shard; header problems; dtype or vocab
                                           // differing from the first good shard
  std::vector<std::string> missing_shards; // gaps in the numbering, one line per run of missing indices
  std::vector<std::string> partial_files;  // unfinished shards: a write was killed, so the dataset is incomplete

  // Every problem the names and headers show: bad_shards, missing_shards, then partial_files.
  std::vector<std::string> Problems() const;
};
// InputError only when `dir` is missing or cannot be listed, or holds nothing named like a shard.
DatasetScan ScanTokenDataset(const std::string& dir);

// The header checks of every shard, without reading payloads: the first problem ScanTokenDataset finds is an
// InputError (FirstProblem). Meant to run before any rank starts work.
TokenDataset OpenTokenDataset(const std::string& dir);

struct PayloadCheck {
  std::vector<std::string> bad_shards;  // one line each, naming the file, in shard order
  uint64_t shards = 0;                  // checked by this part
  uint64_t bytes = 0;                   // payload bytes read by this part
  double seconds = 0;                   // wall time of the check
};
// The payload CRC-32C of shards part, part + parts, part + 2 parts, ... of `dataset` (ranks split a dataset this
// way), on `threads` threads, each streaming one shard at a time (VerifyShardPayload). A corrupt or unreadable
// shard is a line of bad_shards; anything else (out of memory) is thrown.
PayloadCheck VerifyPayloads(const TokenDataset& dataset, int part, int parts, int threads);

// The first of `problems` (one line naming the file), with how many more there are and how to list them all.
InputError FirstProblem(const std::vector<std::string>& problems, const std::string& dir);

}  // namespace tb
