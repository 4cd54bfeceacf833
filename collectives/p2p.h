// The p2p measurement: for every rank pair, unidirectional and bidirectional bandwidth at one message size and
// small-message latency, as n x n matrices, with the pairs whose bandwidth falls well below the median of their
// class flagged as weak links: pairs on one node (intra) and pairs across nodes (inter) are judged apart, since an
// inter-node pair below the NVLink pairs' median is no weak link. Works on any Communicator (MPI host memory or NCCL device memory).
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "communicator.h"
#include "report.h"
#include "watchdog.h"

namespace tb {

struct P2pOptions {
  uint64_t size_bytes = uint64_t{64} << 20;  // bandwidth message size; a multiple of 4 (sent as float32)
  int iters = 20;                            // timed messages per pair and direction
  int warmup = 3;                            // untimed messages before each timed loop
  uint64_t latency_bytes = 8;                // ping-pong message size; a multiple of 4
  int latency_iters = 100;                   // timed round trips per pair
  double threshold_fraction = 0.8;           // flag a pair below this fraction of its class's median bandwidth
  std::vector<int> rank_nodes;               // node of each rank; empty: every rank on one node
  Watchdog* watchdog = nullptr;              // guards every measured phase when set
  // Called on every rank before each pair; must return the same answer on every rank (the caller agrees on it,
  // e.g. after a signal). When it returns true, measuring stops and the result is marked incomplete.
  std::function<bool()> stop_requested;
};

enum class LinkClass { kIntra, kInter };
const char* LinkClassName(LinkClass link);  // "intra", "inter"

// The class of the pair (a, b): intra when both ranks are on one node (always, when `rank_nodes` is empty).
LinkClass ClassOf(const std::vector<int>& rank_nodes, int a, int b);

struct FlaggedPair {
  int src = 0;
  int dst = 0;
  double uni_GBps = 0;
  LinkClass link = LinkClass::kIntra;
  double median_GBps = 0;          // the median unidirectional bandwidth of the pairs of its class
  double fraction_of_median = 0;   // uni_GBps / median_GBps
};

struct P2pResult {
  int n = 0;
  std::vector<double> uni_GBps;    // (n, n) row = sender, col = receiver; NaN on the diagonal and unmeasured pairs
  std::vector<double> bidi_GBps;   // (n, n) symmetric; bytes moved both ways / time
  std::vector<double> latency_us;  // (n, n) symmetric; half the mean round-trip time
  double median_uni_GBps = 0;      // over the measured off-diagonal entries; NaN when there are none
  double median_bidi_GBps = 0;
  double median_uni_intra_GBps = 0;  // over the pairs on one node; NaN when there are none
  double median_uni_inter_GBps = 0;  // over the pairs across nodes; NaN when there are none
  int nodes = 1;
  std::vector<FlaggedPair> flagged;  // ordered pairs below threshold_fraction x their class's median, row-major
  bool complete = true;              // false when stop_requested ended the measurement early
};

// Throws InputError naming the flag when an option is out of range (sizes not a positive multiple of 4,
// iteration counts, threshold). RunP2p calls it; the CLI may call it before any communication.
void ValidateP2pOptions(const P2pOptions& options);

// Measures every pair, one at a time while the other ranks wait at a barrier. Collective over `comm`; the
// timings are shared over comm.host_comm(), so every rank returns the full result.
P2pResult RunP2p(Communicator& comm, const P2pOptions& options);

// The median of `values` (the mean of the middle two for an even count); NaN when there are none.
double MedianOf(std::vector<double> values);

// Median of the off-diagonal, non-NaN entries of an (n, n) row-major matrix, of the pairs of class `only` when given
// (by rank_nodes); NaN when there are none.
double MedianOffDiagonal(const std::vector<double>& matrix, int n, const std::vector<int>& rank_nodes = {},
                         std::optional<LinkClass> only = std::nullopt);

// Ordered pairs (row-major) whose bandwidth is below fraction x the median of their class.
std::vector<FlaggedPair> FlagWeakPairs(const std::vector<double>& uni_GBps, int n, double fraction,
                                       const std::vector<int>& rank_nodes = {});

// Fills the `p2p` group: attributes, matrices uni_bw_GBps, bidi_bw_GBps, latency_us and the `flagged` table.
// rank_hosts and rank_gpus hold one entry per rank (gpu "" or "cpu" for a rank without one).
void AddP2pToReport(Group& p2p_group, const P2pResult& result, const P2pOptions& options,
                    const std::vector<std::string>& rank_hosts, const std::vector<std::string>& rank_gpus);

// Console lines in the nccl-tests spirit: '#' metadata, the three matrices, medians, weak links and a verdict.
std::vector<std::string> FormatP2p(const P2pResult& result, const P2pOptions& options,
                                   const std::vector<std::string>& rank_hosts,
                                   const std::vector<std::string>& rank_gpus);

}  // namespace tb
