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

// Where the console text shows a column of a detail table (DESIGN.md: console tables fit 120 columns, headline
// columns on screen, all columns in CSV/JSON). CSV and JSON show every column, in the table's order; so does the text
// with --all-columns. Headline tables (one row per run) show every field.
enum class Console {
  kHeadline,  // a column of the console table; a text cell too wide for the console moves under its row
  kWhole,     // a headline column kept whole, never moved or left out (a check's key, its verdict)
  kNote,      // the row's free text (a message, an error): on a '#' line of its own under the row
  kAside,     // after the note, in parentheses as "name: value" (where an expectation came from)
  kDetail,    // not on the console: the table's '#' line names it and says where it is
};

struct ViewColumn {
  std::string name;      // as in the exports: "tokens_per_s"
  std::string unit;      // "tokens/s", "" for counts and text
  int decimals = 2;      // text only: digits after the point for doubles; -1: 4 significant digits (1.5e+14)
  bool percent = false;  // text only: a fraction (unit "fraction", 0..1) shown as a percentage
  // The report field the column shows (results/model/schema.h) and the key of its placeholder; nullptr for a column the
  // view computes (a count, a list, a maximum over ranks).
  const schema::Field* field = nullptr;
  std::string key = {};
  Console console = Console::kHeadline;
  // Text only: a heading over neighbouring columns of one key ("out_of_place", "compute") and this column's title
  // under it ("busbw_GBps", "p50"); "" = no heading, and the name as title.
  std::string group = {};
  std::string label = {};
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
  // What the text says of the whole run under its label (the emulated fabric); CSV and JSON have it in the tables.
  std::vector<std::string> notes = {};
};

// The GPU link types topology/gpu_links holds, each once, comma-separated ("NVLink x18 via NVSwitch"); "" when it
// holds none (the CPU backend, one GPU per node, a report without the table).
std::string GpuLinkKinds(const Report& report);

// The fabric a run emulated instead of its node's own: "pcie" (kEmulatedPcie) after --emulate-pcie, "" otherwise
// (also for reports before the root attribute emulated_fabric). Cost reads it to label a measured intra-node fabric
// taken from such a report as emulated.
std::string EmulatedFabricOf(const Report& report);

// The intra-node fabric a run measured, in words: GpuLinkKinds, or for an emulated run "PCIe emulated on " them
// ("PCIe emulated on no GPU pair (one GPU per node)" without any).
std::string IntraNodeFabric(const Report& report);

// "intra-node fabric: PCIe emulated on NVLink x18 via NVSwitch (NCCL_P2P_DISABLE=1, NCCL_NVLS_ENABLE=0)": what the
// header of an emulated run and `report` say of it; "" when the run did not emulate.
std::string EmulatedFabricLine(const Report& report);

// The chosen sections of `report`, in ReportSectionNames() order.
RunView ViewReport(const Report& report, const std::string& label, const std::vector<std::string>& sections);

}  // namespace tb
