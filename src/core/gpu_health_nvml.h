// The NVML side of the GPU health sampler (gpu_health.h): this node's GPUs as NVML lists them, and one reading of
// each. Internal to core.
#pragma once

#include <string>
#include <vector>

#include "gpu_health.h"
#include "nvml_library.h"

namespace tb {

class NvmlGpus {
 public:
  // Opens NVML and every GPU it lists; why() says why there is nothing to sample ("" when there is).
  NvmlGpus();

  const std::string& why() const { return why_; }
  size_t size() const { return devices_.size(); }
  // What does not change while the run goes on: index, PCI bus id, name, UUID, the link's and clock's maxima.
  GpuHealthDevice Identity(size_t gpu) const;
  GpuSample Sample(size_t gpu) const;
  // The energy counter of `gpu` (J), NaN when NVML gives none.
  double EnergyJ(size_t gpu) const;

 private:
  const nvml::Library& nvml_;
  std::vector<nvml::nvmlDevice_t> devices_;
  std::string why_;
};

}  // namespace tb
