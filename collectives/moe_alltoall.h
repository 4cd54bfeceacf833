// `collectives --ops moe_alltoall`: the token exchange of a mixture-of-experts layer under expert parallelism, timed
// and verified. Each rank holds `tokens` tokens of `hidden` bf16 elements and routes each to `top_k` distinct experts
// of `experts`, drawn uniformly from a seeded generator (the same draws on every rank and every run); expert e lives
// on rank e / (experts / ranks). Dispatch sends each token once to every rank holding one of its experts (as DeepEP's
// normal kernels do: a token with two experts on one rank crosses once), an AllToAllV of whole rows; combine sends
// the rows back along the same blocks, the reverse AllToAllV. The routing is planned before timing (DeepEP's benchmark
// times its cached dispatch too), so the times are the data's movement alone.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "communicator.h"
#include "report.h"
#include "watchdog.h"

namespace tb {

// The name --ops gives the point; `all` does not include it (its default shape moves hundreds of MB per rank).
inline constexpr const char* kMoeAllToAllOp = "moe_alltoall";

// One point's layer: DeepEP's normal-kernel benchmark by default (4096 tokens, hidden 7168, top-8).
struct MoeShape {
  int64_t tokens = 4096;  // per rank
  int64_t hidden = 7168;  // bf16 elements per token
  int top_k = 8;
  int experts = 256;
  uint64_t seed = 1;
};

// DeepEP's test default: 256 experts rounded down to a multiple of the ranks, and one per rank at least.
int DefaultMoeExperts(int ranks);

// The ranks that token `token` of rank `rank` goes to in dispatch, ascending, each once.
std::vector<int> TokenDestinations(const MoeShape& shape, int ranks, int rank, int64_t token);

// Tokens each rank sends each in dispatch: rows[from * ranks + to]. The same on every rank (the draws are).
struct MoeTraffic {
  int ranks = 1;
  int64_t hidden = 0;
  std::vector<int64_t> rows;
  std::vector<int> node_of;  // each rank's node; empty: all on one

  int64_t Rows(int from, int to) const { return rows[static_cast<size_t>(from) * ranks + to]; }
  int64_t SentRows(int rank) const;      // dispatch sends = combine receives
  int64_t ReceivedRows(int rank) const;  // dispatch receives = combine sends
  // Mean over ranks of the bytes each sends in dispatch (= receives; = sends and receives in combine).
  double BytesPerRank() const;
  int64_t MaxSentBytes() const;      // the busiest sender of dispatch
  int64_t MaxReceivedBytes() const;  // the busiest receiver of dispatch, sender of combine
  double LocalFraction() const;      // share of the rows that stay on their rank
  double InterNodeFraction() const;  // share of the rows that cross to another node
};
MoeTraffic PlanMoeTraffic(const MoeShape& shape, int ranks);

// The flags of the point, as `collectives` declares them.
struct MoeFlags {
  std::string tokens = "4096";
  int64_t hidden = 7168;
  int top_k = 8;
  int experts = 0;  // 0: DefaultMoeExperts
  int64_t seed = 1;
};

struct MoeOptions {
  std::vector<int64_t> tokens;  // a point per value, in the order given
  MoeShape shape;               // every field but tokens
  std::vector<int> node_of;     // each rank's node (the launch's); empty: all on one
  int iters = 20;
  int warmup = 5;
  int check_iters = 1;
  Watchdog* watchdog = nullptr;
  std::function<bool()> stop_requested;      // asked between points; must agree across ranks
  std::function<void()> before_timed_batch;  // called before each timed batch (the CLI's test faults)
};

// Checks the flags for a launch of `ranks` ranks, all on one communicator (`split` must be `all`), before any work:
// each a one-line InputError. `mpi` adds MPI_Alltoallv's int counts: no rank may send or receive more than INT_MAX
// elements at any point. The iterations, warm-up and verified runs are the sweep's: the caller sets them.
MoeOptions ValidateMoeFlags(const MoeFlags& flags, int ranks, const std::string& split, bool mpi);

// The bytes one rank allocates at the largest point: dispatch's send and receive buffers and combine's receive buffer
// (combine sends from dispatch's receive buffer, where an expert's outputs would be), for the busiest rank.
double MoeBufferBytes(const MoeOptions& options, int ranks);

struct MoePhaseResult {
  double time_us = 0;           // max over ranks of each rank's mean time
  double time_rank_min_us = 0;
  double time_rank_avg_us = 0;
  double GBps = 0;              // bytes per rank / time_us, GB = 1e9 bytes
  double inter_node_GBps = 0;   // the mean bytes a rank sends to other nodes / time_us; NaN on one node
  int64_t wrong = -1;           // elements (16-bit words) that failed verification over every rank; -1: not checked
  std::string wrong_sources;    // the ranks whose rows arrived wrong, comma-separated
};

struct MoePointResult {
  int64_t tokens = 0;
  double bytes_per_rank = 0;
  int64_t max_sent_bytes = 0;
  int64_t max_received_bytes = 0;
  double local_fraction = 0;
  double inter_node_fraction = 0;
  MoePhaseResult dispatch;
  MoePhaseResult combine;
};

struct MoeResult {
  std::vector<MoePointResult> points;
  bool complete = true;  // false when stopped by a signal
  int64_t wrong_total = 0;
};

// Runs every point. `on_point` is called on every rank after each (rank 0 prints). Collective over comm.
MoeResult RunMoeAllToAll(Communicator& comm, const MoeOptions& options,
                         const std::function<void(const MoePointResult&)>& on_point);

std::vector<std::string> MoeHeaderLines(const MoeOptions& options, int ranks);
std::string MoeRowLine(const MoePointResult& point);

// Writes the moe_alltoall group (report schema, results/README.md).
void AddMoeToReport(Report& report, const MoeResult& result, const MoeOptions& options, int ranks);

}  // namespace tb
