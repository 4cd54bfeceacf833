// Whether a report holds what it says it holds. The root attributes every command writes, and what the summary
// names: a `collectives/<op>` sweep for each <op>_peak_busbw_GBps, the p2p matrices, a `train/<point>` group for
// each measured point (and its `io/<point>` group when the run read data or took checkpoints). A report that
// lacks one (a deleted `train/k2` while the summary lists k2, a missing root `status`) is damaged: ReadReport
// refuses it, so `report` and `cost` read only whole reports.
#pragma once

#include <string>

#include "report.h"

namespace tb {

// The first thing `report` claims but lacks, as one line ("damaged: ..."); empty when the report is whole.
std::string FindReportDamage(const Report& report);

}  // namespace tb
