// What a model's mixture-of-experts blocks did over some forwards (models/README.md, "Mixture of experts"): the
// choices each block sent to each expert, the ones dropped past an expert's capacity, and the auxiliary loss. A model
// with MoE blocks adds to it as it goes; the train loop takes it once per step (MoeStatsOf).
#pragma once

#include <cstdint>
#include <vector>

namespace tb {

class Transformer;

// Expert parallel's all-to-alls (all 0 without): host seconds in the dispatches and in the combines (forward's and
// backward's; the exchange of row counts in the dispatch's), the bytes of the token rows sent to other ranks in each
// (fp32 rows on the CPU, bf16 on the GPU; to itself not counted), and of both the bytes to ranks on other nodes.
struct AllToAllFigures {
  double dispatch_s = 0;
  double combine_s = 0;
  uint64_t dispatch_bytes = 0;
  uint64_t combine_bytes = 0;
  uint64_t inter_node_bytes = 0;
};

struct MoeStepStats {
  int blocks = 0;   // MoE blocks of the model (or of the stage held)
  int experts = 0;  // E
  // (blocks, E): choices routed to each expert, dropped ones included, summed over the forwards.
  std::vector<int64_t> assigned;
  int64_t choices = 0;  // N·K per block per forward, summed
  int64_t dropped = 0;  // choices past their expert's capacity, summed
  double aux_loss_sum = 0;  // per forward: Σ over the blocks of coef · E · Σ f_i · P_i; summed over the forwards
  int forwards = 0;
  AllToAllFigures alltoall;

  // Sized for `blocks` MoE blocks of `experts` experts, nothing counted.
  void Reset(int blocks, int experts);
  // Block `block`'s routing of one forward.
  void AddBlock(int block, const std::vector<int64_t>& expert_choices, int64_t block_dropped, double aux_loss);
  // Another's counts (of as many blocks and experts) added to these.
  void Add(const MoeStepStats& other);
  // The mean over the forwards of the blocks' summed aux loss (NaN before any forward).
  double aux_loss() const;
  // Load balance: per block, its busiest expert's choices over the block's mean (choices / E); the largest over the
  // blocks (1: every block perfectly balanced; NaN when nothing was routed).
  double max_over_mean() const;
};

// The MoE side of a model that has MoE blocks.
class MoeStatsSource {
 public:
  virtual ~MoeStatsSource() = default;
  // What the MoE blocks did since the previous call (then counted afresh).
  virtual MoeStepStats TakeMoeStats() = 0;
};

// `model`'s MoE side; null for a model without MoE blocks.
MoeStatsSource* MoeStatsOf(Transformer& model);

}  // namespace tb
