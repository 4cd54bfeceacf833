// Whether runs put side by side by `report` or `cost` can be compared: the variables a fair comparison holds
// fixed (model and its shape, tool version, data, precision, batch shape, ranks per node, warm-up and measured
// steps, CUDA, cuDNN, NCCL and MPI versions), each run's value, and which differ. A difference in one of them is
// warned about ("runs differ in micro_batch (8 vs 4): throughput is not comparable"); a difference in what a
// comparison is about (device, nodes, interconnect, parallel layout) is shown and not warned. Pure functions of
// the reports (results/README.md, "Comparability", lists the variables and where each is read).
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "report.h"

namespace tb {

struct ComparedVariable {
  std::string name;                 // "micro_batch"
  std::vector<std::string> values;  // one per run, as text; "" where a run does not record it
  bool warned = false;              // a difference makes the figures not comparable (else: what is compared)
  std::string consequence;          // warned variables: "throughput is not comparable"
  bool differs = false;             // two runs of one command that record it hold different values
};

struct Comparison {
  std::vector<std::string> runs;  // the runs' labels, as given
  std::vector<ComparedVariable> variables;  // those at least one run records, in a fixed order
  // Each run's command: a variable differs only between runs of one command (a suite's collectives and train
  // reports are shown together, not compared).
  std::vector<std::string> commands;
};

// The comparison of `reports` (labels[i] names reports[i]); both the same size.
Comparison CompareRuns(const std::vector<const Report*>& reports, const std::vector<std::string>& labels);

// One line per warned difference, in the variables' order: "runs differ in micro_batch (8 vs 4): throughput is
// not comparable" (each distinct value once, in run order).
std::vector<std::string> ComparisonWarnings(const Comparison& comparison);

// A variable's `differs` cell in the exports: "no", "yes: not comparable" (warned) or "yes: compared".
std::string DifferenceText(const ComparedVariable& variable);

// Several reports: their comparison, checked by RequireComparable when `require` (--require-comparable); nullopt
// for one report (nothing to compare).
std::optional<Comparison> CompareReports(const std::vector<Report>& reports, const std::vector<std::string>& labels,
                                         bool require);

// --require-comparable: InputError "runs are not comparable (--require-comparable): <first warning>[; N more]"
// when any warned variable differs.
void RequireComparable(const Comparison& comparison);

}  // namespace tb
