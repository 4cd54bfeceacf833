// Fault injection for the failure-rule tests only: TRAINBENCH_TEST_FAULT="<kind>@rank=<r>" makes rank r
// fail ("fail": throws a RuntimeError) or hang ("hang": sleeps forever) where a benchmark calls it (before
// the first timed batch of the collectives sweep; at the start of p2p; in train's first step, under the step's
// watchdog guard), so that the tests can check that the
// other ranks abort cleanly, naming the operation they were stuck in, instead of hanging.
#pragma once

namespace tb {

// Acts on TRAINBENCH_TEST_FAULT when it names this rank; otherwise returns at once.
void MaybeInjectFault(int world_rank);

}  // namespace tb
