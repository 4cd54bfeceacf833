// Choosing among timed kernel candidates (cuBLASLt's algorithms for a matmul plan, cuDNN's execution plans for an
// attention graph): the host-side rules, CUDA-free so that tests/autotune_test.cc checks them on the CPU. The timing
// itself is in autotune_timing.h.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <optional>
#include <string>
#include <vector>

#include "transformer.h"

namespace tb::gpu {

// Candidates asked of cuBLASLt's heuristic per plan, and timed runs of each after one warm-up run.
inline constexpr int kAutotuneCandidates = 8;
inline constexpr int kAutotuneRepeats = 5;
// Medians within this fraction of the fastest count as tied, and the tie goes to the heuristic's order: repeated
// runs of one kernel on an H100 vary by about that much, and a choice that flips between runs on noise would make
// two runs of one configuration differ for no reason.
inline constexpr double kAutotuneTieMargin = 0.01;
// TRAINBENCH_AUTOTUNE=0 keeps the heuristic's first candidate everywhere (for comparison); anything else, or unset,
// times the candidates.
inline constexpr char kAutotuneVariable[] = "TRAINBENCH_AUTOTUNE";

inline bool AutotuneFromEnvironment() {
  const char* value = std::getenv(kAutotuneVariable);
  return value == nullptr || std::strcmp(value, "0") != 0;
}

// The median of `seconds` (the mean of the middle two for an even count); NaN when empty.
inline double MedianSeconds(std::vector<double> seconds) {
  if (seconds.empty()) return std::numeric_limits<double>::quiet_NaN();
  std::sort(seconds.begin(), seconds.end());
  const size_t middle = seconds.size() / 2;
  return seconds.size() % 2 == 1 ? seconds[middle] : 0.5 * (seconds[middle - 1] + seconds[middle]);
}

// The chosen candidate among `medians` (heuristic order; nullopt: the candidate failed to run): the first whose
// median is within `tie_margin` (a fraction) of the fastest, so ties go to the heuristic's order; -1 when none ran.
inline int ChooseFastest(const std::vector<std::optional<double>>& medians, double tie_margin = kAutotuneTieMargin) {
  double fastest = std::numeric_limits<double>::infinity();
  for (const std::optional<double>& median : medians) {
    if (median && *median < fastest) fastest = *median;
  }
  for (size_t i = 0; i < medians.size(); ++i) {
    if (medians[i] && *medians[i] <= fastest * (1.0 + tie_margin)) return static_cast<int>(i);
  }
  return -1;
}

// The record of one choice: `medians` as ChooseFastest took them, `chosen` its answer. A list without a timed
// candidate (autotuning off, or no scratch memory for it) is recorded as 0 candidates, chosen 0, NaN times.
inline KernelChoice MakeKernelChoice(std::string what, std::string shape,
                                     const std::vector<std::optional<double>>& medians, int chosen) {
  const double nan = std::numeric_limits<double>::quiet_NaN();
  KernelChoice choice{std::move(what), std::move(shape), static_cast<int>(medians.size()), std::max(chosen, 0), nan,
                      nan};
  if (chosen >= 0 && static_cast<size_t>(chosen) < medians.size() && medians[chosen]) {
    choice.chosen_s = *medians[chosen];
  }
  if (!medians.empty() && medians.front()) choice.first_s = *medians.front();
  return choice;
}

}  // namespace tb::gpu
