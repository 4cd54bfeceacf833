#include "token_dataset.h"

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <exception>
#include <filesystem>
#include <mutex>
#include <system_error>
#include <thread>

#include "clock.h"

namespace tb {
namespace {

namespace fs = std::filesystem;

constexpr const char* kShardPrefix = "shard-";
constexpr const char* kShardSuffix = ".tbs";
constexpr const char* kPartialSuffix = ".tbs.tmp";  // ShardWriter's temporary name

// Regular files in `dir` named kShardPrefix*`suffix`, sorted.
std::vector<std::string> ListNamed(const std::string& dir, const std::string& suffix) {
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) throw InputError("data directory '" + dir + "' does not exist or is not a directory");
  std::vector<std::string> paths;
  for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
    const std::string name = it->path().filename().string();
    if (name.starts_with(kShardPrefix) && name.ends_with(suffix) && it->is_regular_file()) {
      paths.push_back(it->path().string());
    }
  }
  if (ec) throw InputError("cannot list data directory '" + dir + "': " + ec.message());
  std::sort(paths.begin(), paths.end());
  return paths;
}

// Adds `shard` to the dataset, or says why it does not belong: every shard shares the first good one's dtype and
// vocab. Empty when added.
std::string Admit(TokenDataset& dataset, ShardFile shard) {
  const ShardHeader& h = shard.header;
  if (dataset.shards.empty()) {
    dataset.token_bytes = h.token_bytes;
    dataset.vocab = h.vocab;
  } else if (h.token_bytes != dataset.token_bytes || h.vocab != dataset.vocab) {
    return shard.path + ": dtype " + TokenDtypeName(h.token_bytes) + ", vocab " + std::to_string(h.vocab) +
           " differ from " + dataset.shards.front().path + " (" + TokenDtypeName(dataset.token_bytes) + ", vocab " +
           std::to_string(dataset.vocab) + ")";
  }
  dataset.total_tokens += h.token_count;
  dataset.shards.push_back(std::move(shard));
  return "";
}

}  // namespace

std::string ShardFileName(uint64_t index) {
  char name[32];
  std::snprintf(name, sizeof name, "shard-%05llu.tbs", static_cast<unsigned long long>(index));
  return name;
}

std::vector<std::string> ListShardFiles(const std::string& dir) { return ListNamed(dir, kShardSuffix); }

std::vector<std::string> ListPartialShardFiles(const std::string& dir) { return ListNamed(dir, kPartialSuffix); }

DatasetScan ScanTokenDataset(const std::string& dir) {
  DatasetScan scan;
  scan.dataset.dir = dir;
  const std::vector<std::string> paths = ListShardFiles(dir);
  if (paths.empty()) {
    throw InputError("data directory '" + dir + "' holds no token shards (shard-*.tbs); write some with "
                     "'trainbench data generate --dir " + dir + " --tokens N'");
  }
  for (const std::string& path : paths) {
    try {
      std::string problem = Admit(scan.dataset, ShardFile{path, ReadShardHeader(path)});
      if (!problem.empty()) scan.bad_shards.push_back(std::move(problem));
    } catch (const InputError& e) {
      scan.bad_shards.push_back(e.what());
    }
  }
  for (const std::string& path : ListPartialShardFiles(dir)) {
    scan.partial_files.push_back(path + ": an unfinished shard (its write was killed before the rename), so the "
                                        "dataset is incomplete; rewrite it with 'trainbench data generate --force'");
  }
  return scan;
}

std::vector<std::string> DatasetScan::Problems() const {
  std::vector<std::string> problems = bad_shards;
  problems.insert(problems.end(), partial_files.begin(), partial_files.end());
  return problems;
}

TokenDataset OpenTokenDataset(const std::string& dir) {
  DatasetScan scan = ScanTokenDataset(dir);
  const std::vector<std::string> problems = scan.Problems();
  if (!problems.empty()) throw FirstProblem(problems, dir);
  return std::move(scan.dataset);
}

PayloadCheck VerifyPayloads(const TokenDataset& dataset, int part, int parts, int threads) {
  std::vector<const ShardFile*> mine;
  for (size_t i = static_cast<size_t>(part); i < dataset.shards.size(); i += static_cast<size_t>(parts)) {
    mine.push_back(&dataset.shards[i]);
  }
  std::vector<std::string> problems(mine.size());
  std::atomic<size_t> next{0};
  std::mutex failure_mutex;
  std::exception_ptr failure;
  auto work = [&] {
    for (size_t i = next++; i < mine.size(); i = next++) {
      try {
        VerifyShardPayload(mine[i]->path, mine[i]->header);
      } catch (const InputError& e) {
        problems[i] = e.what();
      } catch (...) {
        std::lock_guard<std::mutex> lock(failure_mutex);
        if (!failure) failure = std::current_exception();
        next = mine.size();  // the others stop after their shard in progress
      }
    }
  };
  const double start_s = NowSeconds();
  {
    std::vector<std::jthread> pool;
    const size_t count = std::min(mine.size(), static_cast<size_t>(std::max(threads, 1)));
    for (size_t t = 0; t < count; ++t) pool.emplace_back(work);
  }
  if (failure) std::rethrow_exception(failure);
  PayloadCheck check;
  check.seconds = NowSeconds() - start_s;
  check.shards = mine.size();
  for (const ShardFile* shard : mine) check.bytes += shard->header.payload_bytes();
  for (std::string& problem : problems) {
    if (!problem.empty()) check.bad_shards.push_back(std::move(problem));
  }
  return check;
}

InputError FirstProblem(const std::vector<std::string>& problems, const std::string& dir) {
  if (problems.size() == 1) return InputError(problems.front());
  return InputError(problems.front() + " (and " + std::to_string(problems.size() - 1) + " more problems in '" + dir +
                    "'; 'trainbench data verify " + dir + "' lists them)");
}

}  // namespace tb
