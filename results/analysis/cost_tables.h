// The figures of `trainbench cost` as tables of cells (results/README.md, "CSV and JSON output"): what the CSV and JSON
// reporters (reporter.h) write and the HTML page is drawn from. Each table and column is declared in cost_schema.h;
// the builders fill them through those declarations from a CostRun (cost_analysis.h) and compute nothing of their own.
#pragma once

#include <vector>

#include "cost_analysis.h"
#include "report_view.h"

namespace tb {

// The views of one `cost` command: a view per training report (labelled as given: cost.run, cost.points, and where
// they apply cost.layouts and cost.rows), then one of the whole command (labelled with the price file, or
// "--model NAME") for cost.decision and cost.memory.
std::vector<RunView> CostViews(const CostRun& c);

}  // namespace tb
