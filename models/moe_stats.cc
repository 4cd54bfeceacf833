#include "moe_stats.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <stdexcept>

#include "model_config.h"
#include "transformer.h"

namespace tb {

void MoeStepStats::Reset(int block_count, int expert_count) {
  *this = MoeStepStats{};
  blocks = block_count;
  experts = expert_count;
  assigned.assign(static_cast<size_t>(blocks) * experts, 0);
}

void MoeStepStats::AddBlock(int block, const std::vector<int64_t>& expert_choices, int64_t block_dropped,
                            double aux_loss) {
  if (block < 0 || block >= blocks || static_cast<int>(expert_choices.size()) != experts) {
    throw std::logic_error("MoeStepStats::AddBlock: block or expert count out of range");
  }
  for (int e = 0; e < experts; ++e) {
    assigned[static_cast<size_t>(block) * experts + e] += expert_choices[e];
    choices += expert_choices[e];
  }
  dropped += block_dropped;
  aux_loss_sum += aux_loss;
}

void MoeStepStats::Add(const MoeStepStats& other) {
  if (other.blocks != blocks || other.experts != experts) {
    throw std::logic_error("MoeStepStats::Add: another count of blocks or experts");
  }
  for (size_t i = 0; i < assigned.size(); ++i) assigned[i] += other.assigned[i];
  choices += other.choices;
  dropped += other.dropped;
  aux_loss_sum += other.aux_loss_sum;
  forwards += other.forwards;
  alltoall.dispatch_s += other.alltoall.dispatch_s;
  alltoall.combine_s += other.alltoall.combine_s;
  alltoall.dispatch_bytes += other.alltoall.dispatch_bytes;
  alltoall.combine_bytes += other.alltoall.combine_bytes;
  alltoall.inter_node_bytes += other.alltoall.inter_node_bytes;
}

double MoeStepStats::aux_loss() const {
  return forwards > 0 ? aux_loss_sum / forwards : std::numeric_limits<double>::quiet_NaN();
}

double MoeStepStats::max_over_mean() const {
  double worst = std::numeric_limits<double>::quiet_NaN();
  for (int b = 0; b < blocks; ++b) {
    const auto first = assigned.begin() + static_cast<ptrdiff_t>(b) * experts;
    int64_t sum = 0;
    for (auto it = first; it != first + experts; ++it) sum += *it;
    if (sum == 0) continue;
    const double ratio = static_cast<double>(*std::max_element(first, first + experts)) * experts / sum;
    worst = std::isnan(worst) ? ratio : std::max(worst, ratio);
  }
  return worst;
}

MoeStatsSource* MoeStatsOf(Transformer& model) {
  return MoeBlockCount(model.config()) > 0 ? dynamic_cast<MoeStatsSource*>(&model) : nullptr;
}

}  // namespace tb
