// Expert parallel's dispatch plan, shared by the CPU MoE layer (cpu_moe.cc) and the CUDA one (cuda/moe_layer.cu):
// where a rank's token rows go and where the rows it receives come from, worked out on the host from the routing's
// block starts and one exchange of row counts (models/README.md, "Mixture of experts").
//
// Rank p of an expert group of EP ranks holds experts [p·E/EP, (p+1)·E/EP). A rank's kept choices are gathered expert
// after expert (the routing's compact layout), so the rows for rank p are one contiguous block; the ranks tell each
// other how many rows each of their local experts gets, and a receiver regroups what it received expert by expert
// (each local expert's rows from rank 0 first, then rank 1's, ...).
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "clock.h"
#include "op_times.h"

#include "moe_stats.h"  // AllToAllFigures

namespace tb {

class Communicator;

// Where an MoE layer's experts are, and what its all-to-alls moved and took (added to by the layers as they run).
struct MoeExperts {
  Communicator* group = nullptr;  // expert parallel over its ranks; null: every expert here
  std::vector<bool> remote_node;  // per rank of the group: whether it is on another node (empty: none is)
  AllToAllFigures figures;        // the all-to-alls so far
  OpTimes* op_times = nullptr;    // train --op-times (set by the model): the exchanges marked as comm_model's waits
};

// Runs `exchange`, one of expert parallel's exchanges waited for on the host, adding its seconds to `seconds`
// (experts.figures.dispatch_s or combine_s); under --op-times, marked as comm_model's wait.
template <class Exchange>
void TimeExchange(MoeExperts& experts, double& seconds, Exchange&& exchange) {
  MarkWait(experts.op_times, [&] {
    const double start = NowSeconds();
    exchange();
    seconds += NowSeconds() - start;
  });
}

// The all-to-alls' layout, in elements (rows · C), one count and offset per rank of the group, and the rows.
struct MoeDispatchLayout {
  std::vector<size_t> send_counts, send_offsets, recv_counts, recv_offsets;
  std::vector<int32_t> recv_rows;  // (EP, E_local) rows from each rank for each local expert
  std::vector<int> expert_row;     // per received row (in received order): its row among the expert rows
  std::vector<int> expert_begin;   // (E_local + 1) local expert e's rows start at expert_begin[e]
};

// The layout for this rank's compact block starts (E + 1: expert e's kept rows are [block_begin[e], block_begin[e +
// 1])). The row counts are exchanged over the group's host communicator (an MPI all-to-all of E_local ints per rank,
// whichever backend moves the rows), its seconds added to experts.figures.dispatch_s. Expert rows: local expert e's
// from expert_begin[e], right after expert e - 1's (rows_per_expert 0), or at e · rows_per_expert (a padded layout,
// which must have room: rows_per_expert >= what any expert receives).
MoeDispatchLayout PlanDispatch(const std::vector<int>& block_begin, MoeExperts& experts, int local_experts,
                               int channels, int rows_per_expert = 0);

// The bytes of `counts` (elements of `element_bytes`) that go to ranks other than this one; those to other nodes are
// added to experts.figures.inter_node_bytes.
uint64_t RemoteBytes(const std::vector<size_t>& counts, size_t element_bytes, MoeExperts& experts);

}  // namespace tb
