// `trainbench data generate`: writes a token-shard dataset for the data loader. Under mpirun the shards are
// split across ranks (shard i is written by rank i mod n) into one directory that every rank sees; shard i's
// tokens depend only on --seed and i, so the dataset is the same whatever the rank count.
// `trainbench data verify`: checks such a dataset (headers, consistency, every payload's checksum), split the
// same way.
#include <sys/statvfs.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>

#include "cli.h"
#include "data_generate.h"
#include "clock.h"
#include "commands.h"
#include "console.h"
#include "error.h"
#include "log.h"
#include "mpi_util.h"
#include "signals.h"
#include "token_dataset.h"
#include "units.h"

namespace tb {
namespace {

namespace fs = std::filesystem;

constexpr const char* kDataUsage =
    "usage: trainbench data generate --dir DIR --tokens N [options]   (see 'trainbench data generate --help')\n"
    "       trainbench data verify DIR [--threads N] [--quiet]        (see 'trainbench data verify --help')";

constexpr const char* kGenerateUsage =
    "usage: [mpirun -np N] trainbench data generate --dir DIR --tokens N [--shard-tokens N] [--vocab V]\n"
    "                                               [--distribution uniform|zipf] [--zipf-exponent S] [--seed S] [--force]\n"
    "Writes a dataset of token shards (DIR/shard-00000.tbs, ...: a 4096-byte header with magic, format version,\n"
    "dtype, token count, vocab and CRC-32C, then the tokens as uint16, or uint32 when the vocab exceeds 65536).\n"
    "Token counts take SI suffixes K=1e3, M=1e6, G=1e9, T=1e12 (20G, 1.5M) or plain and scientific numbers (2e10).\n"
    "Free space is checked first; existing shards are replaced only with --force. Each shard is written to a\n"
    "temporary name, fsynced and renamed. Under mpirun, shard i is written by rank i mod N (DIR must be shared).";

constexpr const char* kVerifyUsage =
    "usage: [mpirun -np N] trainbench data verify DIR [--threads N] [--quiet]\n"
    "Checks a token-shard dataset without changing it: every shard's header (magic, version, dtype, header CRC-32C,\n"
    "vocab, the token count against the file size), that all shards share dtype and vocab, that no unfinished\n"
    "write (shard-*.tbs.tmp) is left, and every payload's CRC-32C, streamed and read once (under mpirun, shard i\n"
    "by rank i mod N; --threads shards at a time per rank). Prints a line per bad file, then a summary.\n"
    "Exit code 0: the dataset is good; 2: it is damaged (or DIR is not a dataset).";

constexpr uint64_t kChunkTokens = 1 << 20;
constexpr double kProgressLineEvery_s = 10;
constexpr double kProgressBarEvery_s = 0.2;

struct GenerateFlags {
  std::string dir;
  std::string tokens;
  std::string shard_tokens = "100M";
  int64_t vocab = 50257;
  std::string distribution = "uniform";
  double zipf_exponent = 1.0;
  int64_t seed = 1234;
  bool force = false;
};

struct GeneratePlan {
  uint64_t tokens = 0;
  uint64_t shard_tokens = 0;
  uint64_t shards = 0;
  uint32_t token_bytes = 2;
  uint64_t bytes = 0;  // every shard file, headers included

  uint64_t TokensOf(uint64_t shard) const { return std::min(shard_tokens, tokens - shard * shard_tokens); }
};

// Progress of this rank's share on stderr (rank 0): a bar redrawn in place on a terminal, else a line every
// few seconds so that logs stay short.
class Progress {
 public:
  Progress(uint64_t total_tokens, uint32_t token_bytes, bool enabled)
      : total_(total_tokens), token_bytes_(token_bytes), enabled_(enabled), tty_(::isatty(2) == 1),
        start_s_(NowSeconds()), shown_s_(start_s_) {}

  void Update(uint64_t done) {
    if (!enabled_ || total_ == 0) return;
    const double now = NowSeconds();
    if (now - shown_s_ < (tty_ ? kProgressBarEvery_s : kProgressLineEvery_s) && done < total_) return;
    shown_s_ = now;
    const double fraction = static_cast<double>(done) / total_;
    const double rate = done * token_bytes_ / std::max(now - start_s_, 1e-9) / 1e9;
    const double eta_s = fraction > 0 ? (now - start_s_) * (1 - fraction) / fraction : 0;
    if (tty_) {
      constexpr int kWidth = 30;
      const int filled = static_cast<int>(fraction * kWidth);
      std::fprintf(stderr, "\r%3.0f%% [%s%s] %.3g of %.3g tokens, %.2f GB/s, ETA %.0f s ", fraction * 100,
                   std::string(filled, '#').c_str(), std::string(kWidth - filled, ' ').c_str(),
                   static_cast<double>(done), static_cast<double>(total_), rate, eta_s);
      if (done >= total_) std::fputc('\n', stderr);
    } else if (done < total_) {
      std::fprintf(stderr, "trainbench: generating: %.0f%% (%.3g of %.3g tokens on rank 0), %.2f GB/s, ETA %.0f s\n",
                   fraction * 100, static_cast<double>(done), static_cast<double>(total_), rate, eta_s);
    }
    std::fflush(stderr);
  }

 private:
  uint64_t total_;
  uint32_t token_bytes_;
  bool enabled_;
  bool tty_;
  double start_s_;
  double shown_s_;
};

GeneratePlan PlanFromFlags(const GenerateFlags& f) {
  if (f.dir.empty()) throw InputError("--dir is required: the directory to write the shards to");
  if (f.tokens.empty()) throw InputError("--tokens is required: how many tokens to write (e.g. 20G)");
  GeneratePlan plan;
  plan.tokens = ParseTokenCount(f.tokens, "--tokens");
  plan.shard_tokens = ParseTokenCount(f.shard_tokens, "--shard-tokens");
  plan.shards = (plan.tokens + plan.shard_tokens - 1) / plan.shard_tokens;
  if (plan.shards > 99999) {
    throw InputError(Format("--tokens / --shard-tokens gives %llu shards; at most 99999 (raise --shard-tokens)",
                            static_cast<unsigned long long>(plan.shards)));
  }
  plan.token_bytes = TokenBytesForVocab(static_cast<uint64_t>(f.vocab));
  if (plan.tokens > (UINT64_MAX - plan.shards * kShardHeaderBytes) / plan.token_bytes) {
    throw InputError("--tokens " + f.tokens + " is too large");
  }
  plan.bytes = plan.tokens * plan.token_bytes + plan.shards * kShardHeaderBytes;
  return plan;
}

// The files a new dataset replaces: the shards of an earlier one, and unfinished shards of a killed write.
std::vector<std::string> OldShardFiles(const std::string& dir) {
  std::vector<std::string> old = ListShardFiles(dir);
  const std::vector<std::string> partial = ListPartialShardFiles(dir);
  old.insert(old.end(), partial.begin(), partial.end());
  return old;
}

// Rank 0's checks of the directory: it can be created, holds no shards (or --force), and has room.
void CheckDirectory(const GenerateFlags& f, const GeneratePlan& plan) {
  std::error_code ec;
  fs::create_directories(f.dir, ec);
  if (ec || !fs::is_directory(f.dir)) {
    throw InputError("cannot create --dir '" + f.dir + "': " + (ec ? ec.message() : "not a directory"));
  }
  if (::access(f.dir.c_str(), W_OK) != 0) throw InputError("cannot write to --dir '" + f.dir + "': permission denied");
  const std::vector<std::string> existing = OldShardFiles(f.dir);
  uint64_t reclaimed = 0;
  if (!existing.empty()) {
    if (!f.force) {
      throw InputError(Format("--dir '%s' already holds %zu token shard files; add --force to replace them", f.dir.c_str(),
                              existing.size()));
    }
    for (const std::string& path : existing) {
      // --force replaces files and links; a directory named like a shard is no shard of an earlier run.
      if (fs::is_directory(fs::symlink_status(path, ec))) {
        throw InputError("--force replaces shard files, but '" + path + "' is a directory; move it out of --dir");
      }
      const std::uintmax_t bytes = fs::is_regular_file(fs::symlink_status(path, ec)) ? fs::file_size(path, ec) : 0;
      if (!ec) reclaimed += bytes;
    }
  }
  struct statvfs st {};
  if (::statvfs(f.dir.c_str(), &st) != 0) throw InputError("cannot read the free space of --dir '" + f.dir + "'");
  const uint64_t available = static_cast<uint64_t>(st.f_bavail) * st.f_frsize + reclaimed;
  if (plan.bytes > available) {
    throw InputError(Format("not enough space in --dir '%s': the dataset needs %.3f GB (%llu tokens x %u B + "
                            "headers), the filesystem has %.3f GB free",
                            f.dir.c_str(), plan.bytes / 1e9, static_cast<unsigned long long>(plan.tokens),
                            plan.token_bytes, available / 1e9));
  }
}

struct Written {
  uint64_t bytes = 0;
  uint64_t shards = 0;
  uint64_t tokens = 0;
};

// Writes this rank's shards. Stops after the shard in progress on SIGTERM/SIGINT.
Written WriteShards(const GenerateFlags& f, const GeneratePlan& plan, const TokenGenerator& generator,
                    const RankContext& ctx, bool show_progress) {
  uint64_t mine = 0;
  for (uint64_t s = ctx.world_rank; s < plan.shards; s += ctx.world_size) mine += plan.TokensOf(s);
  Progress progress(mine, plan.token_bytes, show_progress);
  std::vector<uint32_t> chunk(kChunkTokens);  // room for either dtype
  uint64_t done = 0;
  Written written;
  for (uint64_t s = ctx.world_rank; s < plan.shards && PendingStopSignal() == 0; s += ctx.world_size) {
    ShardWriter writer((fs::path(f.dir) / ShardFileName(s)).string(), static_cast<uint64_t>(f.vocab));
    uint64_t state = TokenGenerator::StreamState(static_cast<uint64_t>(f.seed), s);
    for (uint64_t left = plan.TokensOf(s); left > 0;) {
      const uint64_t n = std::min(left, kChunkTokens);
      generator.Fill(chunk.data(), n, state);
      writer.Append(chunk.data(), n);
      left -= n;
      done += n;
      progress.Update(done);
    }
    writer.Finish();
    written.bytes += writer.header().file_bytes();
    written.tokens += writer.header().token_count;
    ++written.shards;
  }
  return written;
}

}  // namespace

DatasetWritten WriteDataset(const DatasetRequest& request, const RankContext& ctx) {
  GenerateFlags f;
  f.dir = request.dir;
  f.tokens = request.tokens;
  f.shard_tokens = request.shard_tokens;
  f.vocab = request.vocab;
  f.seed = request.seed;
  GeneratePlan plan;
  std::unique_ptr<TokenGenerator> generator;
  AgreeOnSetup([&] {
    plan = PlanFromFlags(f);
    generator = std::make_unique<TokenGenerator>(static_cast<uint64_t>(f.vocab), 0.0);
    if (ctx.world_rank == 0) CheckDirectory(f, plan);
  });
  const double start_s = NowSeconds();
  const Written mine = WriteShards(f, plan, *generator, ctx, false);
  uint64_t totals[3] = {mine.bytes, mine.shards, mine.tokens}, summed[3] = {0, 0, 0};
  TB_CHECK_MPI(MPI_Allreduce(totals, summed, 3, MPI_UINT64_T, MPI_SUM, MPI_COMM_WORLD));
  return {summed[0], summed[1], summed[2], NowSeconds() - start_s, summed[1] == plan.shards};
}

namespace {

// --force: the shards a previous `data generate` left in `dir`.
void RemoveOldShards(const std::string& dir) {
  for (const std::string& path : OldShardFiles(dir)) {
    std::error_code ec;
    if (!fs::remove(path, ec) && ec) throw RuntimeError("cannot remove old shard " + path + ": " + ec.message());
  }
}

// What every rank wrote together, printed and kept in the report's summary.
void RecordWritten(CommandRun& run, const std::string& dir, const Written& all, double seconds, bool interrupted) {
  const double GBps = all.bytes / seconds / 1e9;
  Print(Format("# %s %llu tokens in %llu shards, %.3f GB, to %s in %.2f s, %.3f GB/s%s",
               interrupted ? "interrupted: wrote" : "wrote", static_cast<unsigned long long>(all.tokens),
               static_cast<unsigned long long>(all.shards), all.bytes / 1e9, dir.c_str(), seconds, GBps,
               interrupted ? " (the dataset is incomplete)" : ""),
        true);
  Group& summary = schema::GroupOf(run.report().root, schema::kSummary);
  schema::Set(summary, schema::summary::tokens_written, static_cast<int64_t>(all.tokens));
  schema::Set(summary, schema::summary::shards_written, static_cast<int64_t>(all.shards));
  schema::Set(summary, schema::summary::bytes_written, static_cast<int64_t>(all.bytes));
  schema::Set(summary, schema::summary::seconds, seconds);
  schema::Set(summary, schema::summary::write_GBps, GBps);
}

int RunGenerate(const CommandInput& input, const std::vector<std::string>& args) {
  GenerateFlags f;
  CommonOptions common;
  po::options_description options("data generate options");
  options.add_options()
      ("dir", po::value(&f.dir), "directory to write the shards to (created if missing)")
      ("tokens", po::value(&f.tokens), "tokens in the dataset (e.g. 20G = 2e10)")
      ("shard-tokens", po::value(&f.shard_tokens)->default_value(f.shard_tokens), "tokens per shard (the last holds the rest)")
      ("vocab", Number(&f.vocab, IntRange::Between(2, int64_t{1} << 32))->default_value(f.vocab), "token ids are 0..vocab-1; uint16 up to 65536, else uint32")
      ("distribution", Choice(&f.distribution, {"uniform", "zipf"})->default_value(f.distribution),
       "zipf gives token t a probability proportional to 1/(t+1)^S")
      ("zipf-exponent", Number(&f.zipf_exponent, RealRange::AboveUpTo(0, 10))->default_value(f.zipf_exponent), "S of --distribution zipf")
      ("seed", Number(&f.seed, IntRange::AtLeast(0))->default_value(f.seed), "shard i's tokens depend only on the seed and i")
      ("force", po::bool_switch(&f.force), "replace the shards already in --dir");
  AddCommonOptions(options, common, false);

  GeneratePlan plan;
  std::unique_ptr<TokenGenerator> generator;
  CommandInput generate_input = input;
  generate_input.args = args;
  std::unique_ptr<CommandRun> run = StartCommand("data generate", generate_input, options, kGenerateUsage, common,
                                                 [&](CommandRun& r) {
    plan = PlanFromFlags(f);
    generator = std::make_unique<TokenGenerator>(static_cast<uint64_t>(f.vocab),
                                                 f.distribution == "zipf" ? f.zipf_exponent : 0.0);
    if (input.ctx.world_rank == 0) CheckDirectory(f, plan);
    r.RecordAsUsed("tokens", static_cast<int64_t>(plan.tokens));  // as counts, not as typed ("20G")
    r.RecordAsUsed("shard_tokens", static_cast<int64_t>(plan.shard_tokens));
  }, {Needs("zipf-exponent", "distribution", {"zipf"})});

  return run->RecordingFailures([&] {
    run->BeginMeasurement("data generate");
    // Old shards go before any rank writes, so that a smaller dataset leaves none of them behind.
    AgreeOnSetup([&] {
      if (input.ctx.world_rank == 0 && f.force) RemoveOldShards(f.dir);
    });
    Print(Format("# trainbench data generate: %llu tokens (%s, vocab %lld, %s) in %llu shards of %llu to %s, %d ranks",
                 static_cast<unsigned long long>(plan.tokens), TokenDtypeName(plan.token_bytes).c_str(),
                 static_cast<long long>(f.vocab), f.distribution.c_str(),
                 static_cast<unsigned long long>(plan.shards), static_cast<unsigned long long>(plan.shard_tokens),
                 f.dir.c_str(), input.ctx.world_size));
    const double start_s = NowSeconds();
    const Written mine = WriteShards(f, plan, *generator, input.ctx, input.ctx.world_rank == 0 && !common.quiet);
    uint64_t totals[3] = {mine.bytes, mine.shards, mine.tokens}, summed[3] = {0, 0, 0};
    TB_CHECK_MPI(MPI_Allreduce(totals, summed, 3, MPI_UINT64_T, MPI_SUM, MPI_COMM_WORLD));
    const double seconds = NowSeconds() - start_s;
    const bool interrupted = summed[1] < plan.shards;
    RecordWritten(*run, f.dir, Written{summed[0], summed[1], summed[2]}, seconds, interrupted);
    return run->Finish(interrupted);
  });
}

struct VerifyFlags {
  std::string dir;
  int threads = 4;
  bool quiet = false;
};

// Parses `data verify`'s flags; false when --help was given (and printed).
bool ParseVerifyFlags(const std::vector<std::string>& args, VerifyFlags& f) {
  po::options_description options("data verify options");
  options.add_options()
      ("dir", po::value(&f.dir), "the dataset's directory (or give it as the first argument)")
      ("threads", Number(&f.threads, IntRange::Between(1, 256))->default_value(f.threads), "shards checked at a time on each rank")
      ("quiet", po::bool_switch(&f.quiet), "print only the bad files and the summary")
      ("help,h", "show this help");
  std::vector<std::string> words;
  ParseSpec spec;
  spec.positional = "directory";
  spec.positional_target = &words;
  if (!ParseCommandLine("data verify", args, options, kVerifyUsage, spec)) return false;
  if (words.size() > 1 || (!words.empty() && !f.dir.empty())) {
    throw InputError("data verify checks one dataset: give its directory once (usage: trainbench data verify DIR)");
  }
  if (!words.empty()) f.dir = words.front();
  if (f.dir.empty()) throw InputError("no dataset given (usage: trainbench data verify DIR)");
  return true;
}

// Every problem the ranks found, on rank 0 (empty elsewhere), sorted by file: the header problems every rank
// found alike once, each rank's payload problems.
std::vector<std::string> GatherProblems(const DatasetScan& scan, const PayloadCheck& mine) {
  const std::vector<std::vector<std::string>> payloads = GatherStringLists(MPI_COMM_WORLD, mine.bad_shards);
  if (payloads.empty()) return {};  // not rank 0
  std::vector<std::string> problems = scan.Problems();
  for (const std::vector<std::string>& rank_problems : payloads) {
    problems.insert(problems.end(), rank_problems.begin(), rank_problems.end());
  }
  std::sort(problems.begin(), problems.end());
  return problems;
}

// Prints the dataset's bad files and the summary (rank 0); the exit code: 2 when anything is wrong.
int VerifyVerdict(const VerifyFlags& f, const DatasetScan& scan, const PayloadCheck& mine, const RankContext& ctx) {
  const std::vector<std::string> problems = GatherProblems(scan, mine);
  double bytes = static_cast<double>(mine.bytes), seconds = mine.seconds;
  TB_CHECK_MPI(MPI_Allreduce(MPI_IN_PLACE, &bytes, 1, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD));
  TB_CHECK_MPI(MPI_Allreduce(MPI_IN_PLACE, &seconds, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD));
  int damaged = problems.empty() ? 0 : 1;
  TB_CHECK_MPI(MPI_Bcast(&damaged, 1, MPI_INT, 0, MPI_COMM_WORLD));
  if (ctx.world_rank != 0) return damaged ? static_cast<int>(ExitCode::kInput) : 0;
  for (const std::string& line : problems) Print(line, true);
  const size_t files = scan.dataset.shards.size() + scan.bad_shards.size();
  Print(Format("# checked %zu shards, %.3f GB of payload in %.2f s (%.2f GB/s): %s", files, bytes / 1e9, seconds,
               seconds > 0 ? bytes / seconds / 1e9 : 0.0,
               damaged ? (std::to_string(problems.size()) + " bad files").c_str() : "all good"),
        true);
  if (!damaged) return 0;
  ErrorLine(Format("data directory '%s' is damaged: %zu bad files (listed above; the first: %s)", f.dir.c_str(),
                   problems.size(), problems.front().c_str()),
            false);
  return static_cast<int>(ExitCode::kInput);
}

int RunVerify(const CommandInput& input, const std::vector<std::string>& args) {
  VerifyFlags f;
  bool help = false;
  DatasetScan scan;
  AgreeOnSetup([&] {
    help = !ParseVerifyFlags(args, f);
    if (!help) scan = ScanTokenDataset(f.dir);
  });
  if (help) return 0;
  SetQuiet(f.quiet);
  const TokenDataset& dataset = scan.dataset;
  Print(Format("# trainbench data verify: %s: %zu shards, %llu tokens (%s, vocab %llu); %d ranks x %d threads",
               f.dir.c_str(), dataset.shards.size() + scan.bad_shards.size(),
               static_cast<unsigned long long>(dataset.total_tokens), TokenDtypeName(dataset.token_bytes).c_str(),
               static_cast<unsigned long long>(dataset.vocab), input.ctx.world_size, f.threads));
  const PayloadCheck mine = VerifyPayloads(dataset, input.ctx.world_rank, input.ctx.world_size, f.threads);
  return VerifyVerdict(f, scan, mine, input.ctx);
}

}  // namespace

int RunDataCommand(const CommandInput& input) {
  const std::string sub = input.args.empty() ? "" : input.args[0];
  const std::vector<std::string> rest(input.args.begin() + (input.args.empty() ? 0 : 1), input.args.end());
  if (sub == "generate") return RunGenerate(input, rest);
  if (sub == "verify") return RunVerify(input, rest);
  if (sub == "--help" || sub == "-h") {
    Print(std::string(kDataUsage) + "\nsubcommands:\n  generate      write a token-shard dataset for the data loader\n"
                                    "  verify        check a dataset's headers and payload checksums",
          true);
    return 0;
  }
  AgreeOnSetup([&] {
    throw InputError(sub.empty() ? "trainbench data: no subcommand given (accepted: generate, verify; see 'trainbench data --help')"
                                 : "unknown subcommand '" + sub + "' for trainbench data (accepted: generate, verify)");
  });
  return static_cast<int>(ExitCode::kInput);
}

}  // namespace tb
