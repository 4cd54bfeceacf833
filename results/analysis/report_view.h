// What `trainbench report` shows of a report: each section (config, topology, collectives, p2p, train, io,
// gpu_health) turned into plain tables of cells, ready for the text, CSV and JSON exports
// (results/analysis/reporter.h). Pure functions of a
// Report, so that every figure can be checked on hand-built reports.
#pragma once

#include <cstdint>
#include <string>
#include <variant>
#include <vector>

#include "report.h"
#include "schema_types.h"

namespace tb {

// A value or nothing (the report lacks it). Doubles may be NaN ("not measured", e.g. MFU without a peak).
using Cell = std::variant<std::monostate, int64_t, double, std::string>;

struct ViewColumn {
  std::string name;      // as in the exports: "tokens_per_s"
  std::string unit;      // "tokens/s", "" for counts and text
  int decimals = 2;      // text only: digits after the point for doubles; -1: 4 significant digits (1.5e+14)
  bool percent = false;  // text only: a fraction (unit "fraction", 0..1) shown as a percentage
  // The report field the column shows (results/model/schema.h) and the key of its placeholder; nullptr for a column the
  // view computes (a count, a list, a maximum over ranks).
  const schema::Field* field = nullptr;
  std::string key = {};
};

struct ViewTable {
  std::string section;  // "train"
  std::string name;     // "points"; exports name the table "<section>.<name>"
  std::string title;    // a line for people: "training, per scaling point"
  // One row that describes the whole run (headline figures): shown side by side, one column per run.
  // Otherwise a detail table with any number of rows, shown run by run.
  bool per_run = false;
  std::vector<ViewColumn> columns;
  std::vector<std::vector<Cell>> rows;  // each row has one cell per column

  std::string FullName() const { return section + "." + name; }
};

// The sections in the order they are shown; --sections takes these names.
const std::vector<std::string>& ReportSectionNames();

// The tables of one section of `report`; empty when the report has nothing for it (a collectives run has no
// train section). Throws std::invalid_argument for a name not in ReportSectionNames().
std::vector<ViewTable> ViewSection(const Report& report, const std::string& section);

// One report, as the exports see it.
struct RunView {
  std::string label;  // the file as given on the command line
  std::vector<ViewTable> tables;
};

// The chosen sections of `report`, in ReportSectionNames() order.
RunView ViewReport(const Report& report, const std::string& label, const std::vector<std::string>& sections);

}  // namespace tb
