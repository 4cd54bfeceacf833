// The outputs of trainbench over its records, as one interface (google/benchmark's reporters are the model): a
// reporter is told what is being reported (ReportContext), given the records (ReportRuns) and writes them
// (Finalize). The console text, CSV and JSON reporters take the views of runs (tables of cells,
// results/analysis/report_view.h) — `report` and `cost` give them theirs; the HDF5 reporter takes the Report model itself.
// Layouts are documented in results/README.md ("Exports of trainbench report").
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "comparability.h"
#include "report.h"
#include "report_view.h"

namespace tb {

// What is being reported: the command and the files it read (the runs' labels are their own).
struct ReportContextInfo {
  std::string command;  // "report", "cost"
  std::vector<std::string> files;
  // Several runs: what they hold fixed and what differs (comparability.h). Text: the warnings and the table above
  // the results; CSV: a `comparability` block; JSON: a `comparability` object.
  std::optional<Comparison> comparison = std::nullopt;
  // Text: every column of every table, as wide as it is, instead of what fits kConsoleWidth (--all-columns).
  bool all_columns = false;
  // Text: where the columns a console table leaves out are, said in the line that names them.
  std::string left_out_hint = "in the JSON export";
};

// The text of a comparison: one "# warning: runs differ in ..." line per warned difference, then the table of
// variables (a column per run, and `differs`); values too wide for a column are printed under it. Every line fits
// kConsoleWidth.
std::vector<std::string> ComparisonLines(const Comparison& comparison);

// The three steps every output goes through; `Runs` is what it writes: the views of runs, or a Report.
template <typename Runs>
class Reporter {
 public:
  virtual ~Reporter() = default;
  virtual void ReportContext(const ReportContextInfo& context) = 0;
  // May be called more than once; the runs accumulate.
  virtual void ReportRuns(const Runs& runs) = 0;
  // Writes what was reported: the text for standard output, or "" for a reporter that writes a file.
  virtual std::string Finalize() = 0;
};

using ViewReporter = Reporter<std::vector<RunView>>;

// The view reporters' shared steps: the context kept, the runs accumulated; each one writes them its way.
class AccumulatingViewReporter : public ViewReporter {
 public:
  void ReportContext(const ReportContextInfo& context) override { context_ = context; }
  void ReportRuns(const std::vector<RunView>& runs) override { runs_.insert(runs_.end(), runs.begin(), runs.end()); }

 protected:
  ReportContextInfo context_;
  std::vector<RunView> runs_;
};

// Console text, every line within kConsoleWidth (console.h): headline tables side by side (a column per run, in
// blocks of runs when they are many), detail tables run by run with their headline columns (ViewColumn::console): a
// '#' line under a table's heading names the columns it leaves out, and a row's note and the text cells too wide for
// the console go on '#' lines under the row. With ReportContextInfo::all_columns, every column as wide as it is.
class TextReporter final : public AccumulatingViewReporter {
 public:
  std::string Finalize() override;
};

// One CSV block per table, every run's rows in it with a leading `run` column; blocks separated by a blank line
// (a CSV holds only tables: the context is not written).
class CsvReporter final : public AccumulatingViewReporter {
 public:
  std::string Finalize() override;
};

// One JSON object: the runs, each with its sections and tables (they name their files); numbers as numbers, NaN
// and infinities as null (nlohmann-json through DumpJson).
class JsonReporter final : public AccumulatingViewReporter {
 public:
  std::string Finalize() override;
};

// The HDF5 report (schema: results/README.md) of one Report, written by WriteReport to `path` at Finalize.
class Hdf5Reporter final : public Reporter<Report> {
 public:
  explicit Hdf5Reporter(std::string path) : path_(std::move(path)) {}
  void ReportContext(const ReportContextInfo& context) override;
  // The report to write (the last one given); it must outlive Finalize.
  void ReportRuns(const Report& report) override;
  std::string Finalize() override;

 private:
  std::string path_;
  const Report* report_ = nullptr;
};

// The formats of the view reporters, as --format takes them.
const std::vector<std::string>& ReportFormatNames();
// The reporter of one of ReportFormatNames(); throws std::invalid_argument for another name (--format is checked
// by its Choice flag before this).
std::unique_ptr<ViewReporter> MakeReporter(const std::string& format);
// The three steps in one call: `runs` written by MakeReporter(format) in `context`.
std::string ReportViews(const std::string& format, const ReportContextInfo& context, const std::vector<RunView>& runs);

// Building blocks, exposed for their tests (JSON text is written by DumpJson, json.h).
// A CSV field (RFC 4180): quoted, with quotes doubled, when it holds a comma, quote, line break or edge space.
std::string CsvField(const std::string& text);
// The shortest text that reads back as exactly `value`; "nan", "inf", "-inf" (read by strtod, Python, pandas).
std::string CsvNumber(double value);

}  // namespace tb
