// Memory fit: whether a model's per-GPU training state and activations fit in a GPU's memory, with the margin;
// calibrated by a measured peak when a report has one. The estimate itself comes from models/ (EstimateMemory);
// this layer only compares, calibrates and states the result.
#pragma once

#include <optional>
#include <string>

namespace tb {

// Bytes per GiB: GPU memory is sold and fitted in GiB (a datasheet's "80GB" of HBM is 80 GiB).
inline constexpr double kGiB = 1024.0 * 1024.0 * 1024.0;

// Per-GPU bytes of training: data parallel's (every rank holds the whole model), or a sharded mode's (ModeMemory).
struct MemoryBreakdown {
  double weights_bytes = 0;
  double gradients_bytes = 0;
  double optimizer_bytes = 0;
  double activations_bytes = 0;
  double working_bytes = 0;  // fsdp: the units gathered at once, their parameters and gradients
  double model_states_bytes() const { return weights_bytes + gradients_bytes + optimizer_bytes; }
  double total_bytes() const { return model_states_bytes() + activations_bytes + working_bytes; }
};

// `dp` under `mode` over `ranks`, as ZeRO counts it: dp unchanged; zero1 the optimizer state over the ranks; fsdp
// weights, gradients and optimizer state over the ranks, plus the units it holds at once (`gathered_parameters`:
// the embeddings, the final LayerNorm and two blocks), their parameters and gradients at dp's bytes per parameter
// (weights_bytes / parameters, and gradients_bytes / parameters). Activations are per rank in every mode. Throws
// InputError for another mode or ranks < 1.
// Tensor parallel T (> 1) first divides the model states by T (Megatron: each rank holds 1/T of the weights) and the
// mode then shards over ranks / T; activations are taken as given (EstimateMemory with T divides those that Megatron
// splits).
MemoryBreakdown ModeMemory(const MemoryBreakdown& dp, const std::string& mode, int ranks, double gathered_parameters,
                           double parameters, int tensor_parallel = 1);

// Measured / estimated peak of a run on a GPU: how far the estimate is from what the device really used (CUDA
// context, allocator caching and workspaces push it up; fused attention pulls activations down).
struct MemoryCalibration {
  double factor = 1;
  std::string source;  // "measured peak 30.1 GiB / estimate 27.4 GiB on run.h5"
};

// nullopt when the run measured no device memory (CPU backend: 0) or estimated none.
std::optional<MemoryCalibration> CalibrateMemory(double measured_peak_bytes, double estimated_bytes,
                                                 const std::string& run);

struct MemoryFit {
  MemoryBreakdown estimate;
  double calibration = 1;        // applied to the total
  double required_bytes = 0;     // estimate.total_bytes() x calibration
  double gpu_memory_bytes = 0;
  double margin_bytes = 0;       // gpu_memory - required; negative: short by that much
  bool fits = false;             // required <= gpu_memory
};

MemoryFit FitMemory(const MemoryBreakdown& estimate, double gpu_memory_bytes,
                    const std::optional<MemoryCalibration>& calibration);

}  // namespace tb
