#include "reporter.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <map>
#include <stdexcept>

#include "console.h"
#include "json.h"

namespace tb {
namespace {

// One table over every run that has it: the union of the runs' columns (a collectives report with two ops and one
// with three give different headline columns), each run's rows laid out on that union.
struct MergedTable {
  const ViewTable* first = nullptr;  // section, name, title and per_run come from the first run that has it
  std::vector<ViewColumn> columns;
  struct Part {
    size_t run;
    std::vector<std::vector<Cell>> rows;
  };
  std::vector<Part> parts;
};

size_t SectionIndex(const std::string& section) {
  const std::vector<std::string>& names = ReportSectionNames();
  return static_cast<size_t>(std::find(names.begin(), names.end(), section) - names.begin());
}

std::vector<MergedTable> Merge(const std::vector<RunView>& runs) {
  std::vector<MergedTable> merged;
  std::map<std::string, size_t> index_of;
  for (size_t run = 0; run < runs.size(); ++run) {
    for (const ViewTable& table : runs[run].tables) {
      auto [it, added] = index_of.emplace(table.FullName(), merged.size());
      if (added) merged.push_back(MergedTable{&table, {}, {}});
      MergedTable& m = merged[it->second];
      std::vector<size_t> position;
      for (const ViewColumn& column : table.columns) {
        auto found = std::find_if(m.columns.begin(), m.columns.end(),
                                  [&](const ViewColumn& c) { return c.name == column.name; });
        position.push_back(static_cast<size_t>(found - m.columns.begin()));
        if (found == m.columns.end()) m.columns.push_back(column);
      }
      MergedTable::Part part{run, {}};
      for (const std::vector<Cell>& row : table.rows) {
        std::vector<Cell>& laid_out = part.rows.emplace_back();
        for (size_t i = 0; i < row.size(); ++i) {
          if (laid_out.size() <= position[i]) laid_out.resize(position[i] + 1);
          laid_out[position[i]] = row[i];
        }
      }
      m.parts.push_back(std::move(part));
    }
  }
  for (MergedTable& m : merged) {
    for (MergedTable::Part& part : m.parts) {
      for (std::vector<Cell>& row : part.rows) row.resize(m.columns.size());
    }
  }
  // Sections in their documented order whatever the first run held; tables within a section as they came.
  std::stable_sort(merged.begin(), merged.end(), [](const MergedTable& a, const MergedTable& b) {
    return SectionIndex(a.first->section) < SectionIndex(b.first->section);
  });
  return merged;
}

std::string ShortestDouble(double value) {
  char buffer[64];
  auto result = std::to_chars(buffer, buffer + sizeof buffer, value);
  return std::string(buffer, result.ptr);
}

// --- text ---------------------------------------------------------------------------------------------------

std::string CellText(const Cell& cell, const ViewColumn& column) {
  if (const auto* i = std::get_if<int64_t>(&cell)) return std::to_string(*i);
  if (const auto* s = std::get_if<std::string>(&cell)) return s->empty() ? "-" : *s;
  if (const auto* d = std::get_if<double>(&cell)) {
    if (std::isinf(*d)) return *d > 0 ? "inf" : "-inf";
    if (column.percent) return FormatFixed(*d * 100, column.decimals);
    if (column.decimals < 0) return std::isnan(*d) ? "N/A" : Format("%.4g", *d);
    return FormatFixed(*d, column.decimals);
  }
  return "-";
}

std::string UnitText(const ViewColumn& column) {
  if (column.percent) return "(%)";
  return column.unit.empty() ? "" : "(" + column.unit + ")";
}

std::string PadRight(const std::string& text, size_t width) {
  return text.size() >= width ? text : text + std::string(width - text.size(), ' ');
}

// A fixed-width table whose columns are as wide as their widest cell; the first column is left-aligned (names).
std::vector<std::string> TextBlock(const std::vector<std::string>& titles, const std::vector<std::string>& units,
                                   const std::vector<std::vector<std::string>>& rows, bool left_first) {
  std::vector<size_t> widths(titles.size());
  for (size_t c = 0; c < titles.size(); ++c) {
    widths[c] = std::max(titles[c].size(), units[c].size()) + (c == 0 ? 1 : 0);
    for (const std::vector<std::string>& row : rows) widths[c] = std::max(widths[c], row[c].size());
  }
  std::vector<TextTable::ColumnSpec> specs;
  for (size_t c = 0; c < titles.size(); ++c) {
    std::string title = titles[c], unit = units[c];
    if (c == 0 && left_first) {
      title = PadRight(title, widths[c] - 1);
      if (!unit.empty()) unit = PadRight(unit, widths[c] - 1);
    }
    specs.push_back({title, unit, static_cast<int>(widths[c])});
  }
  TextTable table(specs);
  std::vector<std::string> lines = table.HeaderLines();
  for (std::vector<std::string> row : rows) {
    if (left_first) row[0] = PadRight(row[0], widths[0]);
    lines.push_back(table.Row(row));
  }
  return lines;
}

// Values longer than this (command lines, fallback reasons) would widen a run's column for every field: they are
// printed under the table instead.
constexpr size_t kWideValue = 40;

// The text of a value; one too wide for a column goes under the table ("(below)" in its cell).
std::string NarrowText(const std::string& value, const std::string& where, std::vector<std::string>& wide) {
  if (value.size() <= kWideValue) return value.empty() ? "-" : value;
  wide.push_back("# " + where + ": " + value);
  return "(below)";
}

void SideBySide(const MergedTable& m, size_t run_count, std::vector<std::string>& lines) {
  std::vector<std::string> titles = {"field", ""}, units = {"", ""};
  for (size_t run = 0; run < run_count; ++run) {
    titles.push_back("run " + std::to_string(run + 1));
    units.push_back("");
  }
  std::vector<std::vector<std::string>> rows;
  std::vector<std::string> wide;
  for (size_t c = 0; c < m.columns.size(); ++c) {
    std::vector<std::string> row = {m.columns[c].name, UnitText(m.columns[c])};
    row.resize(2 + run_count, "-");
    bool any = false;
    for (const MergedTable::Part& part : m.parts) {
      const Cell& cell = part.rows.front()[c];
      any = any || !std::holds_alternative<std::monostate>(cell);
      row[2 + part.run] =
          NarrowText(CellText(cell, m.columns[c]), Format("%s, run %zu", m.columns[c].name.c_str(), part.run + 1), wide);
    }
    if (any) rows.push_back(std::move(row));
  }
  lines.push_back("# " + m.first->FullName() + ": " + m.first->title);
  for (std::string& line : TextBlock(titles, units, rows, true)) lines.push_back(std::move(line));
  for (std::string& line : wide) lines.push_back(std::move(line));
}

void RunByRun(const MergedTable& m, const std::vector<RunView>& runs, std::vector<std::string>& lines) {
  for (const MergedTable::Part& part : m.parts) {
    if (&part != &m.parts.front()) lines.push_back("#");
    const std::string heading = "# " + m.first->FullName() + ": " + m.first->title + ", run " +
                                std::to_string(part.run + 1) + " (" + runs[part.run].label + ")";
    if (part.rows.empty()) {
      lines.push_back(heading + ": none");
      continue;
    }
    lines.push_back(heading);
    // Columns no row of this run fills (a resume field in a run that did not resume) are left out.
    std::vector<size_t> shown;
    for (size_t c = 0; c < m.columns.size(); ++c) {
      for (const std::vector<Cell>& row : part.rows) {
        if (!std::holds_alternative<std::monostate>(row[c])) {
          shown.push_back(c);
          break;
        }
      }
    }
    std::vector<std::string> titles, units;
    for (size_t c : shown) {
      titles.push_back(m.columns[c].name);
      units.push_back(UnitText(m.columns[c]));
    }
    std::vector<std::vector<std::string>> rows;
    for (const std::vector<Cell>& row : part.rows) {
      std::vector<std::string>& text = rows.emplace_back();
      for (size_t c : shown) text.push_back(CellText(row[c], m.columns[c]));
    }
    for (std::string& line : TextBlock(titles, units, rows, false)) lines.push_back(std::move(line));
  }
}

// --- CSV and JSON ---------------------------------------------------------------------------------------------

std::string CsvCell(const Cell& cell) {
  if (const auto* i = std::get_if<int64_t>(&cell)) return std::to_string(*i);
  if (const auto* d = std::get_if<double>(&cell)) return CsvNumber(*d);
  if (const auto* s = std::get_if<std::string>(&cell)) return CsvField(*s);
  return "";
}

std::string CsvLine(const std::vector<std::string>& fields) {
  std::string line;
  for (size_t i = 0; i < fields.size(); ++i) line += (i ? "," : "") + fields[i];
  return line + "\n";
}

Json JsonCell(const Cell& cell) {
  if (const auto* i = std::get_if<int64_t>(&cell)) return *i;
  if (const auto* d = std::get_if<double>(&cell)) return *d;  // NaN and infinities are written as null
  if (const auto* s = std::get_if<std::string>(&cell)) return *s;
  return nullptr;
}

Json JsonRow(const ViewTable& table, const std::vector<Cell>& row) {
  Json object = Json::object();
  for (size_t c = 0; c < table.columns.size(); ++c) object[table.columns[c].name] = JsonCell(row[c]);
  return object;
}

// A headline table is one object, a detail table an array of row objects.
Json JsonTable(const ViewTable& table) {
  if (table.per_run) return JsonRow(table, table.rows.front());
  Json rows = Json::array();
  for (const std::vector<Cell>& row : table.rows) rows.push_back(JsonRow(table, row));
  return rows;
}

// The units of every table's columns that have one, by table.
Json JsonUnits(const std::vector<RunView>& runs) {
  Json units = Json::object();
  for (const MergedTable& m : Merge(runs)) {
    Json& table = units[m.first->FullName()] = Json::object();
    for (const ViewColumn& column : m.columns) {
      if (!column.unit.empty()) table[column.name] = column.unit;
    }
  }
  return units;
}

Json JsonRun(const RunView& run) {
  Json object = {{"file", run.label}};
  for (const ViewTable& table : run.tables) object[table.section][table.name] = JsonTable(table);
  return object;
}

// A row per run and variable: run, variable, value, differs, warned (the block of a CSV export).
std::string ComparisonCsv(const Comparison& comparison) {
  std::string text = "# comparability\n# units,,,,\n" + CsvLine({"run", "variable", "value", "differs", "warned"});
  for (size_t run = 0; run < comparison.runs.size(); ++run) {
    for (const ComparedVariable& variable : comparison.variables) {
      text += CsvLine({CsvField(comparison.runs[run]), variable.name, CsvField(variable.values[run]),
                       variable.differs ? "1" : "0", variable.differs && variable.warned ? "1" : "0"});
    }
  }
  return text;
}

// {"runs": [labels], "warnings": [...], "variables": [{name, values (null: not recorded), held_fixed (a fair
// comparison holds it fixed), differs, warned (held fixed and differs), consequence}]}.
Json ComparisonJson(const Comparison& comparison) {
  Json variables = Json::array();
  for (const ComparedVariable& variable : comparison.variables) {
    Json values = Json::array();
    for (const std::string& value : variable.values) values.push_back(value.empty() ? Json(nullptr) : Json(value));
    variables.push_back({{"name", variable.name}, {"values", values}, {"held_fixed", variable.warned},
                         {"differs", variable.differs}, {"warned", variable.differs && variable.warned},
                         {"consequence", variable.consequence}});
  }
  return {{"runs", comparison.runs}, {"warnings", ComparisonWarnings(comparison)}, {"variables", variables}};
}

}  // namespace

std::string CsvField(const std::string& text) {
  // A leading '#' would read as one of our comment lines when the field starts a line.
  const bool quote = text.find_first_of(",\"\r\n") != std::string::npos ||
                     (!text.empty() && (text.front() == ' ' || text.back() == ' ' || text.front() == '#'));
  if (!quote) return text;
  std::string out = "\"";
  for (char c : text) {
    if (c == '"') out += '"';
    out += c;
  }
  return out + "\"";
}

std::string CsvNumber(double value) {
  if (std::isnan(value)) return "nan";
  if (std::isinf(value)) return value > 0 ? "inf" : "-inf";
  return ShortestDouble(value);
}

std::vector<std::string> ComparisonLines(const Comparison& comparison) {
  std::vector<std::string> lines;
  for (const std::string& warning : ComparisonWarnings(comparison)) lines.push_back("# warning: " + warning);
  std::vector<std::string> titles = {"variable"}, units = {""}, wide;
  for (size_t run = 0; run < comparison.runs.size(); ++run) {
    titles.push_back("run " + std::to_string(run + 1));
    units.push_back("");
  }
  titles.push_back("differs");
  units.push_back("");
  std::vector<std::vector<std::string>> rows;
  for (const ComparedVariable& variable : comparison.variables) {
    std::vector<std::string>& row = rows.emplace_back(std::vector<std::string>{variable.name});
    for (size_t run = 0; run < variable.values.size(); ++run) {
      row.push_back(NarrowText(variable.values[run], Format("%s, run %zu", variable.name.c_str(), run + 1), wide));
    }
    row.push_back(DifferenceText(variable));
  }
  lines.push_back("# comparability: what the runs held fixed (differs 'yes: not comparable' is warned about; "
                  "'yes: compared' is what a comparison is about: device, nodes, interconnect, parallel layout)");
  for (std::string& line : TextBlock(titles, units, rows, true)) lines.push_back(std::move(line));
  for (std::string& line : wide) lines.push_back(std::move(line));
  return lines;
}

std::string TextReporter::Finalize() {
  const std::vector<RunView>& runs = runs_;
  std::vector<std::string> lines = {Format("# trainbench %s: %zu run%s", context_.command.c_str(), runs.size(),
                                           runs.size() == 1 ? "" : "s")};
  for (size_t run = 0; run < runs.size(); ++run) lines.push_back(Format("#   run %zu: %s", run + 1, runs[run].label.c_str()));
  if (context_.comparison) {
    lines.push_back("");
    for (std::string& line : ComparisonLines(*context_.comparison)) lines.push_back(std::move(line));
  }
  for (const MergedTable& m : Merge(runs)) {
    lines.push_back("");
    if (m.first->per_run) {
      SideBySide(m, runs.size(), lines);
    } else {
      RunByRun(m, runs, lines);
    }
  }
  std::string text;
  for (const std::string& line : lines) text += line + "\n";
  return text;
}

std::string CsvReporter::Finalize() {
  std::string text = context_.comparison ? ComparisonCsv(*context_.comparison) : "";
  for (const MergedTable& m : Merge(runs_)) {
    if (!text.empty()) text += "\n";
    text += "# " + m.first->FullName() + "\n";
    std::vector<std::string> units = {"# units"}, names = {"run"};
    for (const ViewColumn& column : m.columns) {
      units.push_back(CsvField(column.unit));
      names.push_back(CsvField(column.name));
    }
    text += CsvLine(units) + CsvLine(names);
    for (const MergedTable::Part& part : m.parts) {
      for (const std::vector<Cell>& row : part.rows) {
        std::vector<std::string> fields = {CsvField(runs_[part.run].label)};
        for (const Cell& cell : row) fields.push_back(CsvCell(cell));
        text += CsvLine(fields);
      }
    }
  }
  return text;
}

std::string JsonReporter::Finalize() {
  Json doc = {{"format", "trainbench.report.export"}, {"version", 1}, {"units", JsonUnits(runs_)}, {"runs", Json::array()}};
  for (const RunView& run : runs_) doc["runs"].push_back(JsonRun(run));
  if (context_.comparison) doc["comparability"] = ComparisonJson(*context_.comparison);
  return DumpJson(doc) + "\n";
}

void Hdf5Reporter::ReportContext(const ReportContextInfo&) {}  // the Report holds its own command and context

void Hdf5Reporter::ReportRuns(const Report& report) { report_ = &report; }

std::string Hdf5Reporter::Finalize() {
  if (!report_) throw std::logic_error("Hdf5Reporter::Finalize: no report given");
  WriteReport(*report_, path_);
  return "";
}

const std::vector<std::string>& ReportFormatNames() {
  static const std::vector<std::string> names = {"text", "csv", "json"};
  return names;
}

std::unique_ptr<ViewReporter> MakeReporter(const std::string& format) {
  if (format == "text") return std::make_unique<TextReporter>();
  if (format == "csv") return std::make_unique<CsvReporter>();
  if (format == "json") return std::make_unique<JsonReporter>();
  throw std::invalid_argument("MakeReporter: no reporter for format '" + format + "'");
}

std::string ReportViews(const std::string& format, const ReportContextInfo& context, const std::vector<RunView>& runs) {
  std::unique_ptr<ViewReporter> reporter = MakeReporter(format);
  reporter->ReportContext(context);
  reporter->ReportRuns(runs);
  return reporter->Finalize();
}

}  // namespace tb
