// The MoE point's routing and traffic, and its flags' checks: everything decided before a byte moves.
#include "moe_alltoall.h"

#include <algorithm>
#include <climits>

#include "console.h"
#include "error.h"
#include "flags.h"
#include "random.h"

namespace tb {

int DefaultMoeExperts(int ranks) { return std::max(ranks, 256 / ranks * ranks); }

namespace {

// The top_k distinct experts of one token, uniform over the subsets of that size (Floyd's sampling: exactly top_k
// draws, whatever top_k is against experts).
std::vector<int> TokenExperts(const MoeShape& shape, int rank, int64_t token) {
  const uint64_t rank_and_token = (static_cast<uint64_t>(rank) << 40) ^ static_cast<uint64_t>(token);
  uint64_t state = SplitMix64(shape.seed) ^ SplitMix64(rank_and_token);
  std::vector<int> chosen;
  chosen.reserve(static_cast<size_t>(shape.top_k));
  for (int j = shape.experts - shape.top_k; j < shape.experts; ++j) {
    const int draw = static_cast<int>(NextSplitMix64(state) % static_cast<uint64_t>(j + 1));
    const bool taken = std::find(chosen.begin(), chosen.end(), draw) != chosen.end();
    chosen.push_back(taken ? j : draw);
  }
  return chosen;
}

}  // namespace

std::vector<int> TokenDestinations(const MoeShape& shape, int ranks, int rank, int64_t token) {
  const int experts_per_rank = shape.experts / ranks;
  std::vector<int> destinations;
  for (const int expert : TokenExperts(shape, rank, token)) destinations.push_back(expert / experts_per_rank);
  std::sort(destinations.begin(), destinations.end());
  destinations.erase(std::unique(destinations.begin(), destinations.end()), destinations.end());
  return destinations;
}

MoeTraffic PlanMoeTraffic(const MoeShape& shape, int ranks) {
  MoeTraffic traffic;
  traffic.ranks = ranks;
  traffic.hidden = shape.hidden;
  traffic.rows.assign(static_cast<size_t>(ranks) * ranks, 0);
  for (int from = 0; from < ranks; ++from) {
    for (int64_t token = 0; token < shape.tokens; ++token) {
      for (const int to : TokenDestinations(shape, ranks, from, token)) {
        ++traffic.rows[static_cast<size_t>(from) * ranks + to];
      }
    }
  }
  return traffic;
}

int64_t MoeTraffic::SentRows(int rank) const {
  int64_t sum = 0;
  for (int to = 0; to < ranks; ++to) sum += Rows(rank, to);
  return sum;
}

int64_t MoeTraffic::ReceivedRows(int rank) const {
  int64_t sum = 0;
  for (int from = 0; from < ranks; ++from) sum += Rows(from, rank);
  return sum;
}

namespace {

constexpr int64_t kBf16Bytes = 2;

}  // namespace

double MoeTraffic::BytesPerRank() const {
  int64_t rows_total = 0;
  for (const int64_t r : rows) rows_total += r;
  return static_cast<double>(rows_total) * hidden * kBf16Bytes / ranks;
}

int64_t MoeTraffic::MaxSentBytes() const {
  int64_t most = 0;
  for (int r = 0; r < ranks; ++r) most = std::max(most, SentRows(r));
  return most * hidden * kBf16Bytes;
}

int64_t MoeTraffic::MaxReceivedBytes() const {
  int64_t most = 0;
  for (int r = 0; r < ranks; ++r) most = std::max(most, ReceivedRows(r));
  return most * hidden * kBf16Bytes;
}

double MoeTraffic::LocalFraction() const {
  int64_t local = 0, total = 0;
  for (int r = 0; r < ranks; ++r) {
    local += Rows(r, r);
    total += SentRows(r);
  }
  return total > 0 ? static_cast<double>(local) / static_cast<double>(total) : 0.0;
}

double MoeTraffic::InterNodeFraction() const {
  if (node_of.empty()) return 0.0;
  int64_t crossing = 0, total = 0;
  for (int from = 0; from < ranks; ++from) {
    for (int to = 0; to < ranks; ++to) {
      if (node_of[static_cast<size_t>(from)] != node_of[static_cast<size_t>(to)]) crossing += Rows(from, to);
    }
    total += SentRows(from);
  }
  return total > 0 ? static_cast<double>(crossing) / static_cast<double>(total) : 0.0;
}

namespace {

// The experts: the default, or as given, spread evenly over the ranks and at least top_k of them.
int CheckedExperts(const MoeFlags& f, int ranks) {
  const int experts = f.experts > 0 ? f.experts : DefaultMoeExperts(ranks);
  if (f.top_k > experts) {
    throw InputError(Format("--moe-top-k %d is more than the %d experts (--moe-experts): a token picks distinct "
                            "experts", f.top_k, experts));
  }
  if (experts % ranks != 0) {
    throw InputError(Format("--moe-experts %d does not divide over the %d ranks: every rank holds experts / ranks of "
                            "them (give a multiple of %d)", experts, ranks, ranks));
  }
  return experts;
}

// MPI_Alltoallv counts and offsets are ints: at every point, no rank may send or receive more elements.
void CheckMpiCounts(const MoeOptions& o, int ranks) {
  MoeShape shape = o.shape;
  for (const int64_t tokens : o.tokens) {
    shape.tokens = tokens;
    const MoeTraffic traffic = PlanMoeTraffic(shape, ranks);
    const int64_t most = std::max(traffic.MaxSentBytes(), traffic.MaxReceivedBytes()) / kBf16Bytes;
    if (most > INT_MAX) {
      throw InputError(Format("--moe-tokens %lld: a rank would move %lld elements in one exchange, beyond "
                              "MPI_Alltoallv's int counts (%d) on the cpu backend; use fewer tokens, a smaller "
                              "--moe-hidden, or the cuda backend",
                              static_cast<long long>(tokens), static_cast<long long>(most), INT_MAX));
    }
  }
}

}  // namespace

MoeOptions ValidateMoeFlags(const MoeFlags& f, int ranks, const std::string& split, bool mpi) {
  if (split != "all") {
    throw InputError("--ops " + std::string(kMoeAllToAllOp) + " runs on every rank at once: it cannot go with "
                     "--split " + split + " (give --split all, or leave it out)");
  }
  MoeOptions o;
  o.tokens = ParseIntegerList(f.tokens, "--moe-tokens", IntRange::Between(1, int64_t{1} << 24));
  o.shape.hidden = f.hidden;
  o.shape.top_k = f.top_k;
  o.shape.experts = CheckedExperts(f, ranks);
  o.shape.seed = static_cast<uint64_t>(f.seed);
  if (mpi) CheckMpiCounts(o, ranks);
  return o;
}

double MoeBufferBytes(const MoeOptions& o, int ranks) {
  double most = 0;
  MoeShape shape = o.shape;
  for (const int64_t tokens : o.tokens) {
    shape.tokens = tokens;
    const MoeTraffic traffic = PlanMoeTraffic(shape, ranks);
    const double sent = static_cast<double>(traffic.MaxSentBytes());
    most = std::max(most, 2.0 * sent + static_cast<double>(traffic.MaxReceivedBytes()));
  }
  return most;
}

}  // namespace tb
