#include "phase_clock.h"

#include "clock.h"

namespace tb {
namespace {

class HostPhaseClock : public PhaseClock {
 public:
  void Mark() override { marks_.push_back(NowSeconds()); }
  std::vector<double> Intervals() override {
    std::vector<double> intervals;
    for (size_t i = 1; i < marks_.size(); ++i) intervals.push_back(marks_[i] - marks_[i - 1]);
    marks_.clear();
    return intervals;
  }

 private:
  std::vector<double> marks_;
};

}  // namespace

std::unique_ptr<PhaseClock> MakeHostPhaseClock() { return std::make_unique<HostPhaseClock>(); }

}  // namespace tb
