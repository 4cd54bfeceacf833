// CommandRun's GPU health (cli.h): the sampler's result into the report's gpu_health group.
#include "cli.h"
#include "gpu_health_section.h"
#include "schema.h"

namespace tb {

void CommandRun::RecordGpuHealth() {
  if (!gpu_health_ || gpu_health_recorded_) return;
  gpu_health_recorded_ = true;
  const GpuHealthReport health = gpu_health_->Finish();
  if (ctx_.world_rank == 0) AddGpuHealthToReport(schema::GroupOf(report_.root, schema::kGpuHealth), health);
}

// Rank 0 after a failure: the other ranks may never arrive at a gather, so only this node's GPUs are recorded.
void CommandRun::RecordGpuHealthOfThisNode() {
  if (!gpu_health_ || gpu_health_recorded_ || ctx_.world_rank != 0) return;
  gpu_health_recorded_ = true;
  AddGpuHealthToReport(schema::GroupOf(report_.root, schema::kGpuHealth), gpu_health_->FinishThisNode());
}

}  // namespace tb
