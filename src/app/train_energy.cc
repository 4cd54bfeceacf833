#include "train_energy.h"

#include <utility>

namespace tb {

void MarkMeasuredSteps(TrainLoopOptions& loop, const GpuHealthSampler& sampler, EnergySpan& span) {
  span.begin = sampler.MarkEnergy();  // no warm-up step runs (none asked for, or a resume past them)
  loop.on_step = [on_step = std::move(loop.on_step), warmup_steps = loop.warmup_steps, &sampler,
                  &span](const StepRecord& r) {
    if (on_step) on_step(r);
    if (r.warmup && r.step + 1 == warmup_steps) span.begin = sampler.MarkEnergy();
  };
}

}  // namespace tb
