#include "moe_dispatch.h"

#include <mpi.h>

#include <stdexcept>

#include "communicator.h"
#include "error.h"

namespace tb {
namespace {

size_t At(int64_t row, int64_t width) { return static_cast<size_t>(row) * static_cast<size_t>(width); }

}  // namespace

MoeDispatchLayout PlanDispatch(const std::vector<int>& block_begin, MoeExperts& experts, int local_experts,
                               int channels, int rows_per_expert) {
  Communicator& group = *experts.group;
  const int ranks = group.size();
  if (static_cast<int>(block_begin.size()) != ranks * local_experts + 1) {
    throw std::logic_error("PlanDispatch: block starts for another number of experts");
  }
  MoeDispatchLayout d;
  std::vector<int32_t> send_rows(At(ranks, local_experts));
  d.send_counts.assign(ranks, 0);
  d.send_offsets.assign(ranks, 0);
  for (int p = 0; p < ranks; ++p) {
    const int first = block_begin[p * local_experts], end = block_begin[(p + 1) * local_experts];
    d.send_offsets[p] = At(first, channels);
    d.send_counts[p] = At(end - first, channels);
    for (int e = 0; e < local_experts; ++e) {
      const int expert = p * local_experts + e;
      send_rows[At(p, local_experts) + e] = block_begin[expert + 1] - block_begin[expert];
    }
  }
  d.recv_rows.assign(send_rows.size(), 0);
  TimeExchange(experts, experts.figures.dispatch_s, [&] {
    TB_CHECK_MPI(MPI_Alltoall(send_rows.data(), local_experts, MPI_INT32_T, d.recv_rows.data(), local_experts,
                              MPI_INT32_T, group.host_comm()));
  });
  // Received: rank after rank, each rank's rows local expert after local expert.
  d.recv_counts.assign(ranks, 0);
  d.recv_offsets.assign(ranks, 0);
  std::vector<int> first_row(ranks + 1, 0);  // of each rank's received rows
  for (int p = 0; p < ranks; ++p) {
    int rows = 0;
    for (int e = 0; e < local_experts; ++e) rows += d.recv_rows[At(p, local_experts) + e];
    first_row[p + 1] = first_row[p] + rows;
    d.recv_offsets[p] = At(first_row[p], channels);
    d.recv_counts[p] = At(rows, channels);
  }
  // Expert rows: local expert after local expert, each one's from rank 0 first.
  d.expert_row.assign(first_row[ranks], -1);
  d.expert_begin.assign(local_experts + 1, 0);
  for (int e = 0; e < local_experts; ++e) {
    int row = rows_per_expert > 0 ? e * rows_per_expert : d.expert_begin[e];
    for (int p = 0; p < ranks; ++p) {
      int received = first_row[p];
      for (int before = 0; before < e; ++before) received += d.recv_rows[At(p, local_experts) + before];
      for (int i = 0; i < d.recv_rows[At(p, local_experts) + e]; ++i) d.expert_row[received + i] = row++;
    }
    if (rows_per_expert > 0 && row > (e + 1) * rows_per_expert) {
      throw std::logic_error("PlanDispatch: an expert received more rows than its padded block holds");
    }
    d.expert_begin[e + 1] = rows_per_expert > 0 ? (e + 1) * rows_per_expert : row;
  }
  return d;
}

uint64_t RemoteBytes(const std::vector<size_t>& counts, size_t element_bytes, MoeExperts& experts) {
  const int self = experts.group->rank();
  uint64_t bytes = 0;
  for (size_t p = 0; p < counts.size(); ++p) {
    if (static_cast<int>(p) == self) continue;
    bytes += counts[p] * element_bytes;
    if (p < experts.remote_node.size() && experts.remote_node[p]) {
      experts.figures.inter_node_bytes += counts[p] * element_bytes;
    }
  }
  return bytes;
}

}  // namespace tb
