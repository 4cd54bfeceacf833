#include "train_energy.h"

namespace tb {

MeasuredStepsEnergy::MeasuredStepsEnergy(const GpuHealthSampler& sampler, EnergySpan& span, int warmup_steps)
    : sampler_(&sampler), span_(&span), warmup_steps_(warmup_steps) {
  span.begin = sampler.MarkEnergy();
}

void MeasuredStepsEnergy::AfterStep(const StepRecord& record) {
  if (record.warmup && record.step + 1 == warmup_steps_) span_->begin = sampler_->MarkEnergy();
}

}  // namespace tb
