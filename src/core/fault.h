// Fault injection for the failure-rule tests only: TRAINBENCH_TEST_FAULT="<kind>@rank=<r>" makes world rank r
// fail ("fail": throws a RuntimeError) or hang ("hang": sleeps forever) where a command puts the hook: before
// each timed batch of the collectives sweep (SweepOptions::before_timed_batch), at the start of p2p, and in
// train's first step under the step's watchdog guard (TrainLoopOptions::at_first_step), so that the tests can
// check that the other ranks abort cleanly, naming the operation they were stuck in, instead of hanging. Only the
// commands (src/cmd_*.cc) use it; the benchmarks themselves offer the hook points and know nothing of faults.
#pragma once

#include <functional>

namespace tb {

// Acts on TRAINBENCH_TEST_FAULT when it names this rank; otherwise returns at once.
void MaybeInjectFault(int world_rank);

// MaybeInjectFault(world_rank) as a hook, or an empty function when TRAINBENCH_TEST_FAULT is not set.
std::function<void()> TestFaultHook(int world_rank);

}  // namespace tb
