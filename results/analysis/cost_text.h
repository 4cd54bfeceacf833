// The console text of `trainbench cost` (results/README.md, "trainbench cost"): the header, each run as measured, its
// fitted projection and its projection onto each offering's fabric, the memory fit, the cost table and the decision
// lines. Renders a CostRun (cost_analysis.h); computes nothing of its own.
#pragma once

#include <string>
#include <vector>

#include "cost_analysis.h"

namespace tb {

// Every line up to the decision: header, runs, projections, memory fit, the cost table and its notes.
std::vector<std::string> CostTextLines(const CostRun& c);

// "# cheapest: ...", "# fastest: ..." and, with a deadline, the cheapest within it (or that none meets it): the
// answer in words, printed after CostTextLines (even with --quiet) and opening the HTML page. Empty without rows.
std::vector<std::string> DecisionLines(const CostRun& c);

// "$1,234,567" above $100, "$12.34" below; "n/a" for a value that is not finite.
std::string Usd(double value);

}  // namespace tb
