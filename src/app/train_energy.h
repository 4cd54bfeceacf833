// The energy of a training point (train/<point> energy_J): the GPU health sampler's energy counters marked around
// the point's measured steps.
#pragma once

#include "gpu_health.h"
#include "train_loop.h"

namespace tb {

// Marks span.begin now and again when the last warm-up step has ended (where the measured steps begin), by
// wrapping loop.on_step; call it last before RunTrainingSteps, and mark span.end when it returns.
void MarkMeasuredSteps(TrainLoopOptions& loop, const GpuHealthSampler& sampler, EnergySpan& span);

}  // namespace tb
