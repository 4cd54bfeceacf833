// The energy of a training point (train/<point> energy_J): the GPU health sampler's energy counters marked around
// the point's measured steps.
#pragma once

#include "gpu_health.h"
#include "train_loop.h"

namespace tb {

// Marks span.begin when made (no warm-up step may run: none asked for, or a resume past them) and again when the last
// warm-up step has ended, where the measured steps begin. Call AfterStep after each step, and mark span.end when the
// loop returns.
class MeasuredStepsEnergy {
 public:
  MeasuredStepsEnergy(const GpuHealthSampler& sampler, EnergySpan& span, int warmup_steps);
  void AfterStep(const StepRecord& record);

 private:
  const GpuHealthSampler* sampler_;
  EnergySpan* span_;
  int warmup_steps_;
};

}  // namespace tb
