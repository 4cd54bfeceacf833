#include "token_dataset.h"

#include <algorithm>
#include <atomic>
#include <cctype>
#include <cstdio>
#include <exception>
#include <filesystem>
#include <mutex>
#include <optional>
#include <system_error>
#include <thread>
#include <utility>

#include "clock.h"
#include "paths.h"

namespace tb {
namespace {

namespace fs = std::filesystem;

constexpr const char* kShardPrefix = "shard-";
constexpr const char* kShardSuffix = ".tbs";
constexpr const char* kPartialSuffix = ".tbs.tmp";  // ShardWriter's temporary name

// Entries of `dir` named kShardPrefix*`suffix`, whatever they are (files, links, directories, FIFOs), sorted: a
// dataset's check says what is wrong with each, instead of leaving it out unseen.
std::vector<std::string> ListNamed(const std::string& dir, const std::string& suffix) {
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) throw InputError("data directory '" + dir + "' does not exist or is not a directory");
  std::vector<std::string> paths;
  for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
    const std::string name = it->path().filename().string();
    if (name.starts_with(kShardPrefix) && name.ends_with(suffix)) paths.push_back(it->path().string());
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

// The index in a shard's file name, when the name is exactly ShardFileName(index).
std::optional<uint64_t> ShardIndexOf(const std::string& path) {
  const std::string name = fs::path(path).filename().string();
  const std::string digits = name.substr(std::char_traits<char>::length(kShardPrefix),
                                         name.size() - std::char_traits<char>::length(kShardPrefix) -
                                             std::char_traits<char>::length(kShardSuffix));
  if (digits.empty() || digits.size() > 18 ||
      !std::all_of(digits.begin(), digits.end(), [](char c) { return std::isdigit(static_cast<unsigned char>(c)); })) {
    return std::nullopt;
  }
  const uint64_t index = std::stoull(digits);
  if (ShardFileName(index) != name) return std::nullopt;
  return index;
}

// "" when `path` is a regular file, or a symbolic link to one (datasets are linked into place); else what it is.
std::string ShardKindProblem(const std::string& path) {
  const std::string problem = InputFileProblem(path);
  std::error_code ec;
  if (problem.empty() || !fs::is_symlink(path, ec)) return problem.empty() ? "" : "not a token shard: " + problem;
  const std::string target = fs::read_symlink(path, ec).string();
  if (problem == "no such file") return "a symbolic link to '" + target + "', which does not exist";
  return "a symbolic link to '" + target + "', not to a token shard: " + problem;
}

// One line per run of consecutive indices missing from 0 .. the highest present: a dataset's shards are numbered
// from 0 without a gap (data generate writes shard i for i = 0 .. shards-1).
std::vector<std::string> MissingShardLines(const std::string& dir, const std::vector<uint64_t>& sorted_indices) {
  std::vector<std::string> lines;
  const std::string why = ", though the shards go up to " + ShardFileName(sorted_indices.back()) +
                          " (deleted, or never written); rewrite the dataset with 'trainbench data generate --force'";
  uint64_t expected = 0;
  for (uint64_t index : sorted_indices) {
    if (index > expected) {
      const std::string first = (fs::path(dir) / ShardFileName(expected)).string();
      lines.push_back(index - expected == 1 ? first + ": missing" + why
                                            : first + " .. " + ShardFileName(index - 1) + ": missing (" +
                                                  std::to_string(index - expected) + " shards)" + why);
    }
    expected = index + 1;
  }
  return lines;
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
  std::vector<std::pair<uint64_t, std::string>> numbered;
  for (const std::string& path : paths) {
    if (const std::optional<uint64_t> index = ShardIndexOf(path)) {
      numbered.emplace_back(*index, path);
    } else {
      scan.bad_shards.push_back(path + ": not a shard's name: shards are named " + ShardFileName(0) + ", " +
                                ShardFileName(1) + ", ... by their index");
    }
  }
  std::sort(numbered.begin(), numbered.end());
  std::vector<uint64_t> indices;
  for (const auto& [index, path] : numbered) {
    indices.push_back(index);
    if (const std::string kind = ShardKindProblem(path); !kind.empty()) {
      scan.bad_shards.push_back(path + ": " + kind);
      continue;
    }
    try {
      std::string problem = Admit(scan.dataset, ShardFile{path, ReadShardHeader(path)});
      if (!problem.empty()) scan.bad_shards.push_back(std::move(problem));
    } catch (const InputError& e) {
      scan.bad_shards.push_back(e.what());
    }
  }
  if (!indices.empty()) scan.missing_shards = MissingShardLines(dir, indices);
  for (const std::string& path : ListPartialShardFiles(dir)) {
    scan.partial_files.push_back(path + ": an unfinished shard (its write was killed before the rename), so the "
                                        "dataset is incomplete; rewrite it with 'trainbench data generate --force'");
  }
  return scan;
}

std::vector<std::string> DatasetScan::Problems() const {
  std::vector<std::string> problems = bad_shards;
  problems.insert(problems.end(), missing_shards.begin(), missing_shards.end());
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
