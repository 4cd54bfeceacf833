#include "memory_fit.h"

#include "console.h"
#include "error.h"

#include <string>

namespace tb {

std::optional<MemoryCalibration> CalibrateMemory(double measured_peak_bytes, double estimated_bytes,
                                                 const std::string& run) {
  if (!(measured_peak_bytes > 0) || !(estimated_bytes > 0)) return std::nullopt;
  return MemoryCalibration{measured_peak_bytes / estimated_bytes,
                           Format("measured peak %.2f GiB / estimate %.2f GiB on %s", measured_peak_bytes / kGiB,
                                  estimated_bytes / kGiB, run.c_str())};
}

MemoryBreakdown ModeMemory(const MemoryBreakdown& dp, const std::string& mode, int ranks, double gathered_parameters,
                           double parameters, int tensor_parallel) {
  if (ranks < 1) throw InputError("a parallel mode needs at least 1 rank, got " + std::to_string(ranks));
  if (tensor_parallel < 1 || ranks % tensor_parallel != 0) {
    throw InputError("tensor parallel " + std::to_string(tensor_parallel) + " does not divide " +
                     std::to_string(ranks) + " ranks");
  }
  MemoryBreakdown m = dp;
  for (double* states : {&m.weights_bytes, &m.gradients_bytes, &m.optimizer_bytes}) *states /= tensor_parallel;
  ranks /= tensor_parallel;
  gathered_parameters /= tensor_parallel;
  if (mode == "dp") return m;
  m.optimizer_bytes /= ranks;
  if (mode == "zero1") return m;
  if (mode != "fsdp") throw InputError("unknown parallel mode '" + mode + "' (dp, zero1, fsdp)");
  m.weights_bytes /= ranks;
  m.gradients_bytes /= ranks;
  if (parameters > 0) m.working_bytes = gathered_parameters * (dp.weights_bytes + dp.gradients_bytes) / parameters;
  return m;
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
