// How a model's work is timed: timestamps taken in the order of the work it issues, so that a phase (train's step
// phases, --op-times' kinds of work) is timed where its work runs.
#pragma once

#include <memory>
#include <vector>

namespace tb {

// Timestamps in the order of the work a model issues: the host clock for the CPU reference, CUDA events on the
// model's stream for CUDA, so that a phase is timed where its work runs (README.md, "One training step").
class PhaseClock {
 public:
  virtual ~PhaseClock() = default;
  // A timestamp after all work issued so far.
  virtual void Mark() = 0;
  // Waits for the last mark; returns the seconds between consecutive marks since the previous call (one fewer
  // than the marks), and starts over.
  virtual std::vector<double> Intervals() = 0;
  // A profiler's named range from here to the next Range call (null: none opens): NVTX on a GPU, nothing on the CPU.
  virtual void Range(const char* name) { (void)name; }
};

// The host-clock PhaseClock: marks are taken when Mark() is called.
std::unique_ptr<PhaseClock> MakeHostPhaseClock();

}  // namespace tb
