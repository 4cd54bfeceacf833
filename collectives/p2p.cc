#include "p2p.h"

#include "schema.h"

#include <algorithm>
#include <set>
#include <cmath>
#include <limits>
#include <memory>
#include <stdexcept>
#include <utility>

#include "clock.h"
#include "console.h"
#include "error.h"
#include "timed_phase.h"
#include "units.h"

namespace tb {
namespace {

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
constexpr double kBytesPerGB = 1e9;

void CheckRankLabels(const P2pResult& result, const std::vector<std::string>& rank_hosts,
                     const std::vector<std::string>& rank_gpus) {
  if (rank_hosts.size() != static_cast<size_t>(result.n) || rank_gpus.size() != static_cast<size_t>(result.n)) {
    throw std::logic_error(
        Format("p2p: %zu hosts and %zu gpus given for %d ranks", rank_hosts.size(), rank_gpus.size(), result.n));
  }
}

// Seconds per pair on this rank (0 where it took no part), laid out as three (n, n) matrices back to back so
// that one MAX all-reduce yields each pair's time as its slower side saw it.
struct PairSeconds {
  explicit PairSeconds(int n) : n(n), values(3 * static_cast<size_t>(n) * n, 0.0) {}
  double& uni(int src, int dst) { return values[static_cast<size_t>(src) * n + dst]; }
  double& bidi(int a, int b) { return values[(static_cast<size_t>(n) + a) * n + b]; }
  double& latency(int a, int b) { return values[(2 * static_cast<size_t>(n) + a) * n + b]; }

  int n;
  std::vector<double> values;
};

// Measures the pair {low, high} (low < high): both directions, bidirectional, then the ping-pong.
void MeasurePair(Communicator& comm, const P2pOptions& options, CommBuffer& send, CommBuffer& recv, int low, int high,
                 PairSeconds& seconds) {
  const int rank = comm.rank();
  const bool in_pair = rank == low || rank == high;
  const int peer = rank == low ? high : low;
  const size_t count = options.size_bytes / kMessageElementBytes;
  const size_t latency_count = options.latency_bytes / kMessageElementBytes;
  const unsigned long long size = options.size_bytes;
  // The skipped side still gets a real buffer: MPI checks the pointer even when the peer is MPI_PROC_NULL.
  auto send_to = [&](int to, size_t elements) {
    comm.SendRecv(send.data(), to, recv.data(), -1, elements, DataType::kFloat32);
  };
  auto receive_from = [&](int from, size_t elements) {
    comm.SendRecv(send.data(), -1, recv.data(), from, elements, DataType::kFloat32);
  };

  for (const std::pair<int, int>& direction : {std::pair{low, high}, std::pair{high, low}}) {
    const int src = direction.first, dst = direction.second;
    auto describe = [&] {
      return Format("p2p unidirectional %d->%d, %llu B, %d iterations", src, dst, size, options.iters);
    };
    double elapsed_s = TimePhase(comm, options.watchdog, describe, in_pair, options.warmup, options.iters, [&] {
      if (rank == src) {
        send_to(dst, count);
      } else {
        receive_from(src, count);
      }
    });
    if (in_pair) seconds.uni(src, dst) = elapsed_s;
  }

  auto describe_bidi = [&] {
    return Format("p2p bidirectional %d<->%d, %llu B, %d iterations", low, high, size, options.iters);
  };
  double elapsed_s = TimePhase(comm, options.watchdog, describe_bidi, in_pair, options.warmup, options.iters,
                               [&] { comm.SendRecv(send.data(), peer, recv.data(), peer, count, DataType::kFloat32); });
  if (in_pair) seconds.bidi(low, high) = seconds.bidi(high, low) = elapsed_s;

  auto describe_latency = [&] {
    return Format("p2p latency %d<->%d, %llu B, %d round trips", low, high,
                  static_cast<unsigned long long>(options.latency_bytes), options.latency_iters);
  };
  elapsed_s = TimePhase(comm, options.watchdog, describe_latency, in_pair, options.warmup, options.latency_iters, [&] {
    // The lower rank serves, the higher one answers: one round trip per step.
    if (rank == low) {
      send_to(peer, latency_count);
      receive_from(peer, latency_count);
    } else {
      receive_from(peer, latency_count);
      send_to(peer, latency_count);
    }
  });
  if (in_pair) seconds.latency(low, high) = seconds.latency(high, low) = elapsed_s;
}

// Converts each pair's seconds with `convert`; NaN where the pair was not measured (0 seconds).
template <typename Convert>
std::vector<double> FromSeconds(const double* seconds, size_t entries, const Convert& convert) {
  std::vector<double> values(entries, kNaN);
  for (size_t i = 0; i < entries; ++i) {
    if (seconds[i] > 0) values[i] = convert(seconds[i]);
  }
  return values;
}

std::string RankLabel(int rank, const std::vector<std::string>& rank_hosts, const std::vector<std::string>& rank_gpus) {
  std::string label = Format("rank %d (host %s", rank, rank_hosts[rank].c_str());
  if (!rank_gpus[rank].empty()) label += ", gpu " + rank_gpus[rank];
  return label + ")";
}

// Title line, destination-rank header and one row per source rank, "-" on the diagonal.
void AppendMatrix(std::vector<std::string>& lines, const std::string& title, const std::vector<double>& values, int n) {
  std::vector<TextTable::ColumnSpec> columns = {{"src\\dst", "", 8}};
  for (int dst = 0; dst < n; ++dst) columns.push_back({std::to_string(dst), "", 9});
  TextTable table(std::move(columns));
  lines.push_back("#");
  lines.push_back("# " + title);
  for (std::string& line : table.HeaderLines()) lines.push_back(std::move(line));
  for (int src = 0; src < n; ++src) {
    std::vector<std::string> cells = {std::to_string(src)};
    for (int dst = 0; dst < n; ++dst) {
      cells.push_back(src == dst ? "-" : FormatFixed(values[static_cast<size_t>(src) * n + dst], 2));
    }
    lines.push_back(table.Row(cells));
  }
}

}  // namespace

void ValidateP2pOptions(const P2pOptions& options) {
  CheckMessageSize(options.size_bytes, "--size");
  CheckMessageSize(options.latency_bytes, "--latency-size");
  if (options.iters < 1) throw InputError(Format("invalid --iters %d: must be at least 1", options.iters));
  if (options.warmup < 0) throw InputError(Format("invalid --warmup %d: must be 0 or more", options.warmup));
  if (options.latency_iters < 1) {
    throw InputError(Format("invalid --latency-iters %d: must be at least 1", options.latency_iters));
  }
  if (!(options.threshold_fraction > 0 && options.threshold_fraction <= 1)) {
    throw InputError(
        Format("invalid --threshold %g: must be a fraction of the median in (0, 1]", options.threshold_fraction));
  }
}

P2pResult RunP2p(Communicator& comm, const P2pOptions& options) {
  ValidateP2pOptions(options);
  const int n = comm.size();
  P2pResult result;
  result.n = n;
  const size_t entries = static_cast<size_t>(n) * n;
  result.uni_GBps.assign(entries, kNaN);
  result.bidi_GBps.assign(entries, kNaN);
  result.latency_us.assign(entries, kNaN);
  result.median_uni_GBps = result.median_bidi_GBps = kNaN;
  if (n < 2) return result;

  const size_t buffer_bytes = std::max(options.size_bytes, options.latency_bytes);
  std::unique_ptr<CommBuffer> send = AllocateFilled(comm, buffer_bytes);
  std::unique_ptr<CommBuffer> recv = AllocateFilled(comm, buffer_bytes);

  PairSeconds seconds(n);
  for (int low = 0; low < n && result.complete; ++low) {
    for (int high = low + 1; high < n; ++high) {
      if (options.stop_requested && options.stop_requested()) {
        result.complete = false;
        break;
      }
      MeasurePair(comm, options, *send, *recv, low, high, seconds);
    }
  }

  TB_CHECK_MPI(MPI_Allreduce(MPI_IN_PLACE, seconds.values.data(), static_cast<int>(seconds.values.size()), MPI_DOUBLE,
                             MPI_MAX, comm.host_comm()));
  const double* pair_seconds = seconds.values.data();
  const double moved_GB = static_cast<double>(options.size_bytes) * options.iters / kBytesPerGB;
  result.uni_GBps = FromSeconds(pair_seconds, entries, [&](double s) { return moved_GB / s; });
  result.bidi_GBps = FromSeconds(pair_seconds + entries, entries, [&](double s) { return 2 * moved_GB / s; });
  result.latency_us = FromSeconds(pair_seconds + 2 * entries, entries,
                                  [&](double s) { return s * 1e6 / (2.0 * options.latency_iters); });

  result.median_uni_GBps = MedianOffDiagonal(result.uni_GBps, n);
  result.median_bidi_GBps = MedianOffDiagonal(result.bidi_GBps, n);
  result.nodes = std::max<int>(1, static_cast<int>(std::set<int>(options.rank_nodes.begin(), options.rank_nodes.end()).size()));
  result.median_uni_intra_GBps = MedianOffDiagonal(result.uni_GBps, n, options.rank_nodes, LinkClass::kIntra);
  result.median_uni_inter_GBps = MedianOffDiagonal(result.uni_GBps, n, options.rank_nodes, LinkClass::kInter);
  result.flagged = FlagWeakPairs(result.uni_GBps, n, options.threshold_fraction, options.rank_nodes);
  return result;
}

const char* LinkClassName(LinkClass link) { return link == LinkClass::kIntra ? "intra" : "inter"; }

LinkClass ClassOf(const std::vector<int>& rank_nodes, int a, int b) {
  if (rank_nodes.empty()) return LinkClass::kIntra;
  return rank_nodes.at(static_cast<size_t>(a)) == rank_nodes.at(static_cast<size_t>(b)) ? LinkClass::kIntra
                                                                                        : LinkClass::kInter;
}

double MedianOf(std::vector<double> values) {
  if (values.empty()) return kNaN;
  std::sort(values.begin(), values.end());
  const size_t middle = values.size() / 2;
  return values.size() % 2 == 1 ? values[middle] : (values[middle - 1] + values[middle]) / 2;
}

double MedianOffDiagonal(const std::vector<double>& matrix, int n, const std::vector<int>& rank_nodes,
                         std::optional<LinkClass> only) {
  if (n < 0 || matrix.size() != static_cast<size_t>(n) * n ||
      (!rank_nodes.empty() && rank_nodes.size() != static_cast<size_t>(n))) {
    throw std::logic_error(Format("MedianOffDiagonal: %zu values and %zu nodes for a %d x %d matrix", matrix.size(),
                                  rank_nodes.size(), n, n));
  }
  std::vector<double> values;
  for (int r = 0; r < n; ++r) {
    for (int c = 0; c < n; ++c) {
      double value = matrix[static_cast<size_t>(r) * n + c];
      if (only && ClassOf(rank_nodes, r, c) != *only) continue;
      if (r != c && !std::isnan(value)) values.push_back(value);
    }
  }
  return MedianOf(std::move(values));
}

std::vector<FlaggedPair> FlagWeakPairs(const std::vector<double>& uni_GBps, int n, double fraction,
                                       const std::vector<int>& rank_nodes) {
  const double medians[2] = {MedianOffDiagonal(uni_GBps, n, rank_nodes, LinkClass::kIntra),
                             MedianOffDiagonal(uni_GBps, n, rank_nodes, LinkClass::kInter)};
  std::vector<FlaggedPair> flagged;
  for (int src = 0; src < n; ++src) {
    for (int dst = 0; dst < n; ++dst) {
      const double value = uni_GBps[static_cast<size_t>(src) * n + dst];
      const LinkClass link = ClassOf(rank_nodes, src, dst);
      const double median = medians[link == LinkClass::kIntra ? 0 : 1];
      // NaN compares false, so the diagonal, unmeasured pairs and a class without a median are never flagged.
      if (src != dst && value < fraction * median) flagged.push_back({src, dst, value, link, median, value / median});
    }
  }
  return flagged;
}

void AddP2pToReport(Group& p2p_group, const P2pResult& result, const P2pOptions& options,
                    const std::vector<std::string>& rank_hosts, const std::vector<std::string>& rank_gpus) {
  namespace s = schema::p2p;
  CheckRankLabels(result, rank_hosts, rank_gpus);
  schema::Set(p2p_group, s::size_bytes, static_cast<int64_t>(options.size_bytes));
  schema::Set(p2p_group, s::iters, options.iters);
  schema::Set(p2p_group, s::latency_bytes, static_cast<int64_t>(options.latency_bytes));
  schema::Set(p2p_group, s::latency_iters, options.latency_iters);
  schema::Set(p2p_group, s::threshold_fraction, options.threshold_fraction);
  schema::Set(p2p_group, s::median_uni_GBps, result.median_uni_GBps);
  schema::Set(p2p_group, s::median_bidi_GBps, result.median_bidi_GBps);
  schema::Set(p2p_group, s::median_uni_intra_GBps, result.median_uni_intra_GBps);
  schema::Set(p2p_group, s::median_uni_inter_GBps, result.median_uni_inter_GBps);
  schema::Set(p2p_group, s::nodes, result.nodes);
  schema::Set(p2p_group, s::complete, result.complete ? 1 : 0);

  const size_t n = static_cast<size_t>(result.n);
  schema::SetMatrix(p2p_group, s::uni_bw_GBps, n, n, result.uni_GBps);
  schema::SetMatrix(p2p_group, s::bidi_bw_GBps, n, n, result.bidi_GBps);
  schema::SetMatrix(p2p_group, s::latency_us, n, n, result.latency_us);

  namespace f = s::flagged;
  schema::RecordTable<FlaggedPair>(s::kFlagged)
      .Column(f::src_rank, [](const FlaggedPair& p) { return p.src; })
      .Column(f::dst_rank, [](const FlaggedPair& p) { return p.dst; })
      .Column(f::src_host, [&](const FlaggedPair& p) { return rank_hosts[p.src]; })
      .Column(f::dst_host, [&](const FlaggedPair& p) { return rank_hosts[p.dst]; })
      .Column(f::src_gpu, [&](const FlaggedPair& p) { return rank_gpus[p.src]; })
      .Column(f::dst_gpu, [&](const FlaggedPair& p) { return rank_gpus[p.dst]; })
      .Column(f::uni_bw_GBps, [](const FlaggedPair& p) { return p.uni_GBps; })
      .Column(f::link, [](const FlaggedPair& p) { return std::string(LinkClassName(p.link)); })
      .Column(f::median_GBps, [](const FlaggedPair& p) { return p.median_GBps; })
      .Column(f::fraction_of_median, [](const FlaggedPair& p) { return p.fraction_of_median; })
      .Write(p2p_group, result.flagged);
}

std::vector<std::string> FormatP2p(const P2pResult& result, const P2pOptions& options,
                                   const std::vector<std::string>& rank_hosts,
                                   const std::vector<std::string>& rank_gpus) {
  CheckRankLabels(result, rank_hosts, rank_gpus);
  std::vector<std::string> lines = {
      Format("# p2p: %d ranks, one pair at a time while the others wait; GB = 1e9 bytes", result.n),
      Format("# Message size : %llu B (%s), %d iterations after %d warm-up",
             static_cast<unsigned long long>(options.size_bytes), FormatBytes(options.size_bytes).c_str(),
             options.iters, options.warmup),
      Format("# Latency size : %llu B, %d round trips (latency = half the mean round trip)",
             static_cast<unsigned long long>(options.latency_bytes), options.latency_iters),
  };
  AppendMatrix(lines, "Unidirectional bandwidth (GB/s), row = sender, col = receiver", result.uni_GBps, result.n);
  AppendMatrix(lines, "Bidirectional bandwidth (GB/s), both ways at once", result.bidi_GBps, result.n);
  AppendMatrix(lines, "Latency (us)", result.latency_us, result.n);
  lines.push_back("#");
  lines.push_back("# Median unidirectional bandwidth : " + FormatFixed(result.median_uni_GBps, 2) + " GB/s");
  lines.push_back("# Median bidirectional bandwidth  : " + FormatFixed(result.median_bidi_GBps, 2) + " GB/s");
  if (result.nodes > 1) {
    const auto rate = [](double GBps) { return std::isnan(GBps) ? std::string("none") : Format("%.3g GB/s", GBps); };
    lines.push_back("# Median unidirectional, intra-node pairs : " + rate(result.median_uni_intra_GBps) +
                    "; inter-node pairs : " + rate(result.median_uni_inter_GBps) + " (" +
                    std::to_string(result.nodes) + " nodes; weak links are judged within their class)");
  }
  if (!result.complete) lines.push_back("# Incomplete: stopped before every pair was measured (N/A = not measured)");
  for (const FlaggedPair& pair : result.flagged) {
    lines.push_back(Format("# weak link: %s -> %s: %.3g GB/s = %.2f x median of the %s-node pairs",
                           RankLabel(pair.src, rank_hosts, rank_gpus).c_str(),
                           RankLabel(pair.dst, rank_hosts, rank_gpus).c_str(), pair.uni_GBps, pair.fraction_of_median,
                           LinkClassName(pair.link)));
  }
  if (result.flagged.empty()) {
    lines.push_back("# Weak links : 0 OK");
  } else {
    lines.push_back(
        Format("# Weak links : %zu FLAGGED (below %.2f x median)", result.flagged.size(), options.threshold_fraction));
  }
  return lines;
}

}  // namespace tb
