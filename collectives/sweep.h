// The collectives sweep: for each operation and size, warm up, time, verify, and report in the style of
// nccl-tests. Backend-agnostic: runs on any Communicator.
#pragma once

#include <mpi.h>

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "collective.h"
#include "communicator.h"
#include "report.h"
#include "watchdog.h"

namespace tb {

// The communicators of `collectives --split` (nccl-tests' NCCL_TESTS_SPLIT), all measuring at once:
//   all    one communicator of every rank;
//   intra  one per node, of that node's ranks (what the links inside a node carry);
//   inter  one per local rank, of the ranks with that local rank on every node: one rank per node, every rank busy
//          at once, as in the inter-node phase of a hierarchical all-reduce (the nodes' NICs shared as they would be).
struct SplitPlan {
  std::string split = "all";
  int communicators = 1;  // how many measure at once
  int ranks = 1;          // ranks n of each
  int nodes = 1;          // nodes each spans
};

struct SweepOptions {
  std::vector<uint64_t> sizes;                 // requested sizes in bytes (S before rounding to elements)
  std::vector<const CollectiveDef*> ops;
  DataType type = DataType::kFloat32;
  ReduceOp reduce_op = ReduceOp::kSum;
  int root = 0;
  int iters = 20;
  int warmup = 5;
  int check_iters = 1;                         // verified runs per size and mode; 0 skips verification
  int aggregate = 1;                           // operations issued together per timed iteration (--aggregate, as
                                               // nccl-tests' -m/--agg_iters): the time is divided by iters x aggregate
  int cuda_graph = 0;                          // > 0: the timed batch captured once into a CUDA graph and launched this
                                               // many times (--cuda-graph, nccl-tests' -G); the communicator must
                                               // CanCapture()
  bool out_of_place = true;
  bool in_place = true;
  Watchdog* watchdog = nullptr;                // guards every warm-up, timed batch and check
  std::function<bool()> stop_requested;        // asked on every rank between sizes; must agree across ranks
  std::function<void()> before_timed_batch;    // if set, called on every rank just before each timed batch,
                                               // under its watchdog guard (where the CLI injects test faults)
  // If set, called on every rank with the host image of its input (`elements` of `type`) after it is filled and
  // before a verified run uploads it (where the CLI injects a wrong value).
  std::function<void(void* input, size_t elements)> before_check;
  SplitPlan split;
  // With a split into several communicators: a communicator over all of their ranks, so that each size starts
  // together in every one and each row's times and wrong counts are over every rank of every communicator (the
  // time the slowest one's). MPI_COMM_NULL when the sweep's communicator is the only one.
  MPI_Comm across = MPI_COMM_NULL;
};

struct ModeResult {
  bool measured = false;
  double time_us = 0;            // max over ranks of each rank's mean time per operation
  double time_rank_min_us = 0;   // min over ranks of the same per-rank means
  double time_rank_avg_us = 0;
  double algbw_GBps = 0;         // size_bytes / time, GB = 1e9 bytes
  double busbw_GBps = 0;         // algbw * bus factor
  int64_t wrong = -1;            // wrong elements summed over ranks and check iterations; -1 = not checked
  std::string first_wrong;       // this rank's first wrong element ("element 17 = 5, expected 6"); "" when none
  std::string wrong_sources;     // data movement: the ranks whose data arrived wrong ("1", "0,2"); "" otherwise
                                 // (launch ranks: `across`'s numbers under a split)
  double nic_busbw_GBps = 0;     // per-NIC rate busbw x (k-1)/(n-1) (PerNicBusBw) when the communicator spans k > 1
                                 // nodes and the operation has one (HasPerNicRate); NaN otherwise
};

struct SizeResult {
  uint64_t size_bytes = 0;
  uint64_t count = 0;            // elements per the operation's count argument times what S counts (see counts)
  ModeResult out_of_place;
  ModeResult in_place;
};

struct OpResult {
  const CollectiveDef* def = nullptr;
  int n_ranks = 0;
  int nodes = 1;                 // nodes the communicator spans
  double bus_factor = 0;
  std::string backend = "mpi";       // the communicator's: "mpi" or "nccl"
  const char* verified_on = "host";  // where the buffers were filled and checked: "host" (MPI) or "device" (NCCL)
  std::vector<SizeResult> rows;
};

struct SweepResult {
  std::vector<OpResult> ops;
  bool complete = true;          // false when stopped early by a signal
  int64_t wrong_total = 0;
};

// The send and receive buffers the sweep of `def` allocates on `rank` of `n`: sized once for the largest size
// (rounded up to the 256 B alignment of the slots whose start rotates between iterations); filled and checked where
// they live, with no host copy.
struct BufferBytes {
  size_t send = 0;
  size_t recv = 0;
};
BufferBytes SweepBufferBytes(const CollectiveDef& def, const SweepOptions& options, int n, int rank);

// "1", "0,2": the ranks whose count is not zero (the senders whose data arrived wrong).
std::string RanksWithCounts(const std::vector<int64_t>& by_rank);

// Runs the sweep. `on_row` is called on every rank after each size (rank 0 prints). Collective over comm.
SweepResult RunSweep(Communicator& comm, const SweepOptions& options,
                     const std::function<void(const OpResult&, const SizeResult&)>& on_row);

// What busbw means for `op` as it ran: nccl-tests' algbw x factor, and on NCCL the ring-equivalent figure whatever
// algorithm NCCL chose (NCCL_ALGO, NCCL_NVLS_ENABLE as this process sees them; NVLS reduces in the switch).
std::string BusBwConvention(const OpResult& op);

// Console lines in nccl-tests' layout.
std::vector<std::string> SweepHeaderLines(const OpResult& op, const SweepOptions& options);
std::string SweepRowLine(const SizeResult& row, const OpResult& op, const SweepOptions& options);
std::vector<std::string> SweepFooterLines(const SweepResult& result);

// Writes collectives/<op> groups and the summary attributes (report schema v1, results/README.md).
void AddSweepToReport(Report& report, const SweepResult& result, const SweepOptions& options);

}  // namespace tb
