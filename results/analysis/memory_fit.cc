#include "memory_fit.h"

#include "console.h"

namespace tb {

std::optional<MemoryCalibration> CalibrateMemory(double measured_peak_bytes, double estimated_bytes,
                                                 const std::string& run) {
  if (!(measured_peak_bytes > 0) || !(estimated_bytes > 0)) return std::nullopt;
  constexpr double kGiB = 1024.0 * 1024.0 * 1024.0;
  return MemoryCalibration{measured_peak_bytes / estimated_bytes,
                           Format("measured peak %.2f GiB / estimate %.2f GiB on %s", measured_peak_bytes / kGiB,
                                  estimated_bytes / kGiB, run.c_str())};
}

MemoryFit FitMemory(const MemoryBreakdown& estimate, double gpu_memory_bytes,
                    const std::optional<MemoryCalibration>& calibration) {
  MemoryFit fit;
  fit.estimate = estimate;
  fit.calibration = calibration ? calibration->factor : 1.0;
  fit.required_bytes = estimate.total_bytes() * fit.calibration;
  fit.gpu_memory_bytes = gpu_memory_bytes;
  fit.margin_bytes = gpu_memory_bytes - fit.required_bytes;
  fit.fits = fit.margin_bytes >= 0;
  return fit;
}

}  // namespace tb
