// `train --repeats N`: one point's measured phase run N times, each after its own warm-up. Each repeat's headline
// figures, the repeat at the median throughput (whose steps and tables the point's group keeps), and the spread of
// every figure over the repeats: median, min, max and coefficient of variation. Pure functions, tested on the CPU.
#pragma once

#include <cstddef>
#include <string>
#include <vector>

#include "report.h"
#include "train_summary.h"

namespace tb {

// One repeat's headline figures (results/README.md, train/<point>/repeats).
struct RepeatFigures {
  double tokens_per_s = 0;
  double step_s = 0;
  double mfu_peak = 0;                // NaN without a peak
  double mfu_measured_gemm = 0;
  double comm_exposed_s = 0;
  double data_wait_share = 0;         // StepTotals over every rank's measured steps
  double checkpoint_stall_share = 0;
  double checkpoint_write_GBps = 0;   // NaN without checkpoints
};

// The figures of a point as one repeat measured them; `io_point` is its io/<point> group (nullptr without I/O),
// whose checkpoints table gives the write rate: every checkpoint's bytes over the sum of each checkpoint's slowest
// slice write time.
RepeatFigures FiguresOf(const ScalingPoint& point, const std::vector<RankSteps>& ranks, const Group* io_point);

// A figure over the repeats that measured it (NaN values left out). median: of an even count the mean of the middle
// two; cv = sample standard deviation / mean (NaN for fewer than two values or a zero mean). count 0: all NaN.
struct Spread {
  size_t count = 0;
  double median = 0, min = 0, max = 0, cv = 0;
};
Spread SpreadOf(const std::vector<double>& values);

// The figures' names, in the repeats table's order (schema::point::kSpreadFigures).
const std::vector<std::string>& RepeatFigureNames();

// The repeat at the median tokens/s: of an even count the slower of the middle two (so the point's figures are one
// repeat's, and never flatter the run). `repeats` must not be empty.
size_t MedianRepeat(const std::vector<RepeatFigures>& repeats);

// Into train/<point>: the repeats attribute, median_repeat (1-based), the repeats table and the spread table.
void AddRepeatsToReport(Group& point_group, const std::vector<RepeatFigures>& repeats, size_t median);

// The console line under a point's: "#   over 3 repeats (figures above: repeat 2, the median): tokens/s median
// 8787 (min 8500, max 9000, CV 2.3%); step_s ...", or "#   1 run: spread unknown (--repeats N measures it)".
std::string SpreadLine(const std::vector<RepeatFigures>& repeats, size_t median);

}  // namespace tb
