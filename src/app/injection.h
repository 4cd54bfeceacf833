// The commands' side of --inject (src/core/inject.h): the one option declaration, and the hooks the commands
// hand the benchmarks (which know nothing of faults). The communicator faults are collectives/
// injecting_communicator.h.
#pragma once

#include <boost/program_options.hpp>

#include <cstddef>
#include <functional>
#include <string>
#include <vector>

#include "communicator.h"
#include "inject.h"

namespace tb {

// Adds --inject KIND (repeatable or comma-separated) to a command's options, documented as a test feature.
void AddInjectOption(boost::program_options::options_description& options, std::vector<std::string>* specs);

// Sleeps rank `rank`'s slow-rank milliseconds; empty when the plan does not slow it.
std::function<void()> SlowRankHook(const InjectionPlan& plan, int rank);

// `first`, then `second` (either may be empty; empty when both are).
std::function<void()> BothHooks(std::function<void()> first, std::function<void()> second);

// SweepOptions::before_check on a wrong-value rank: sets element 0 of its input to a value that no reduction of the
// sweep's inputs (0..3) reaches, so every operation that uses the input gets a wrong element: 1000, or -1000
// under min. Empty on the other ranks.
std::function<void(void*, size_t)> WrongValueHook(const InjectionPlan& plan, int rank, DataType type, ReduceOp op);

}  // namespace tb
