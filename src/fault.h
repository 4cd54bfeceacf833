// Fault injection for the failure-rule tests only: TRAINBENCH_TEST_FAULT="<kind>@rank=<r>" makes rank r
// fail ("fail": throws a RuntimeError) or hang ("hang": sleeps inside a guarded operation) at the start of
// a benchmark, so that the tests can check that other ranks abort cleanly instead of hanging.
#pragma once

namespace tb {

// Acts on TRAINBENCH_TEST_FAULT when it names this rank; otherwise returns at once.
void MaybeInjectFault(int world_rank);

}  // namespace tb
