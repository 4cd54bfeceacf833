#include "injection.h"

#include "collective.h"

namespace tb {

void AddInjectOption(boost::program_options::options_description& options, std::vector<std::string>* specs) {
  options.add_options()("inject", boost::program_options::value(specs)->composing(),
                        "test feature, off unless given: inject a fault (repeatable or comma-separated): "
                        "slow-rank=R:MS, slow-link=A-B:US, wrong-value=R, hang=R, io-stall=MS; the report is "
                        "marked (injected_faults)");
}

std::function<void()> SlowRankHook(const InjectionPlan& plan, int rank) {
  const double ms = plan.SlowRankMs(rank);
  if (ms <= 0) return {};
  return [ms] { SleepMilliseconds(ms); };
}

std::function<void()> BothHooks(std::function<void()> first, std::function<void()> second) {
  if (!first) return second;
  if (!second) return first;
  return [first, second] {
    first();
    second();
  };
}

std::function<void(void*, size_t)> WrongValueHook(const InjectionPlan& plan, int rank, DataType type, ReduceOp op) {
  if (!plan.WrongValue(rank)) return {};
  const double wrong = op == ReduceOp::kMin ? -1000 : 1000;
  return [type, wrong](void* input, size_t elements) {
    if (elements > 0) StoreElement(type, input, 0, wrong);
  };
}

}  // namespace tb
