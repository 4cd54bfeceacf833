// What `trainbench cost` needs from the training models (models/): the memory of --model, and of a run's model at each
// tensor-parallel size the fabrics could use. The cost library (results/analysis/cost_analysis.h) does not link the
// models; this adapter computes their figures and hands them over as numbers (MemoryCheck, RunModelFacts).
#pragma once

#include <string>
#include <vector>

#include "cost_analysis.h"

namespace tb {

// --model and the flags that shape it.
struct ModelFlags {
  std::string name;       // a preset
  int layers = 0;         // 0: the preset's
  int micro_batch = 0;    // 0: 1
  int seq = 0;            // 0: the preset's
  std::string parallel = "dp";
  int ranks = 1;
  int tensor_parallel = 1;
  int pipeline_parallel = 1;
  int micro_batches = 0;  // 0: as many as stages (1F1B's fewest)
  int expert_parallel = 1;  // an MoE preset's experts over EP of the ranks
};

// --model's estimate per GPU in its mode, before calibration. Throws InputError for an unknown preset, or a shape,
// mode or rank count the models cannot take.
MemoryCheck ModelMemoryCheck(const ModelFlags& flags);

// A run's model: its memory as its report states it (when `own_memory`: without --model; with stages, each stage's)
// and its figures at each tensor-parallel size in `tp_sizes`, and in each of `pp_sizes` pipeline stages at each, at the
// micro-batch of `priced` (none when the report lacks the model's shape).
RunModelFacts RunModelFactsOf(const RunMeasurement& m, const MeasuredPoint& priced, bool own_memory,
                              const std::vector<int>& tp_sizes, const std::vector<int>& pp_sizes);

}  // namespace tb
