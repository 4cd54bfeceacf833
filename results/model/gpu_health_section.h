// The `gpu_health` group of a report (schema in results/README.md), from the GPU health sampler's gathered result.
#pragma once

#include "gpu_health.h"
#include "report.h"

namespace tb {

void AddGpuHealthToReport(Group& gpu_health_group, const GpuHealthReport& health);

}  // namespace tb
