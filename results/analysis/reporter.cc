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

std::string Join(const std::vector<std::string>& parts, const std::string& separator) {
  std::string text;
  for (const std::string& part : parts) text += (text.empty() ? "" : separator) + part;
  return text;
}

void Append(std::vector<std::string>& lines, std::vector<std::string> more) {
  for (std::string& line : more) lines.push_back(std::move(line));
}

// A column of a console table, and what it may give up to fit the console.
struct GridColumn {
  std::string title, unit, group;
  bool left = false;     // left-aligned (names)
  bool movable = false;  // a cell too wide for the console moves out of the table, kMoved in its place
  bool keep = false;     // never left out to fit (nor is the first column)
  size_t widest_cell = std::string::npos;  // a movable cell wider than this moves out whatever the room
  size_t floor = 0;                        // a movable column is never narrower (its numbers stay)
};

constexpr std::string_view kMoved = "(below)";

// Cells as text, a row per line.
struct Grid {
  std::vector<GridColumn> columns;
  std::vector<std::vector<std::string>> rows;
};

// A Grid laid out: its header lines and a line per row; per row the cells that moved out (column, text, in column
// order); the columns left out to fit. `widths` are the shown columns'.
struct GridText {
  std::vector<std::string> header;
  std::vector<std::string> rows;
  std::vector<std::vector<std::pair<size_t, std::string>>> moved;
  std::vector<size_t> left_out;
  std::vector<size_t> widths;
};

// The widths of the `shown` columns (the first a character wider: the header's '#' takes one), the last column of a
// group widened where the group's heading needs it.
std::vector<size_t> Widths(const Grid& grid, const std::vector<size_t>& shown) {
  std::vector<size_t> widths;
  for (size_t i = 0; i < shown.size(); ++i) {
    const GridColumn& column = grid.columns[shown[i]];
    size_t width = std::max(column.title.size(), column.unit.size()) + (i == 0 ? 1 : 0);
    for (const std::vector<std::string>& row : grid.rows) width = std::max(width, row[shown[i]].size());
    widths.push_back(width);
  }
  for (size_t i = 0; i < shown.size();) {
    const std::string& group = grid.columns[shown[i]].group;
    size_t end = i + 1, span = widths[i] + 1;
    for (; end < shown.size() && !group.empty() && grid.columns[shown[end]].group == group; ++end) {
      span += widths[end] + 1;
    }
    // A heading wider than its columns widens them, the extra shared out from the last one.
    const size_t extra = !group.empty() && span < group.size() + 1 ? group.size() + 1 - span : 0;
    for (size_t k = 0; k < extra; ++k) ++widths[end - 1 - k % (end - i)];
    i = end;
  }
  return widths;
}

size_t LineWidth(const std::vector<size_t>& widths) {
  size_t total = 0;
  for (size_t width : widths) total += width + 1;
  return total;
}

// A Grid being fitted to the console: its cells (kMoved where one moved out), the columns shown and their widths,
// and what moved out or was left out.
class GridFit {
 public:
  explicit GridFit(const Grid& grid) : grid_(grid), cells_(grid) {
    out_.moved.resize(grid.rows.size());
    for (size_t c = 0; c < grid.columns.size(); ++c) {
      shown_.push_back(c);
      const GridColumn& column = grid.columns[c];
      if (column.movable && column.widest_cell != std::string::npos) Move(c, column.widest_cell);
    }
    widths_ = Widths(cells_, shown_);
  }

  // The widest movable columns give, evenly: their cells move out above the highest level that frees enough room,
  // each column down to its floor.
  void MoveToFit(size_t width) {
    while (LineWidth(widths_) > width) {
      const size_t excess = LineWidth(widths_) - width;
      size_t level = *std::max_element(widths_.begin(), widths_.end());
      while (level > 0 && Gain(level) < excess) --level;
      if (Gain(level) == 0) return;
      for (size_t i = 0; i < shown_.size(); ++i) {
        if (grid_.columns[shown_[i]].movable) Move(shown_[i], std::max(level, Floor(i)));
      }
      std::vector<size_t> narrower = Widths(cells_, shown_);
      if (narrower == widths_) return;  // a group's heading holds the columns as wide: LeaveOutToFit does the rest
      widths_ = std::move(narrower);
    }
  }

  // Columns left out from the right, but for the first one and those kept whole, until the rest fit.
  void LeaveOutToFit(size_t width) {
    while (LineWidth(widths_) > width) {
      size_t i = shown_.size();
      while (i > 1 && grid_.columns[shown_[i - 1]].keep) --i;
      if (i <= 1) return;
      out_.left_out.insert(out_.left_out.begin(), shown_[i - 1]);
      shown_.erase(shown_.begin() + static_cast<std::ptrdiff_t>(i - 1));
      widths_ = Widths(cells_, shown_);
    }
  }

  GridText Text() {
    std::sort(out_.left_out.begin(), out_.left_out.end());
    for (std::vector<std::pair<size_t, std::string>>& moved : out_.moved) {
      std::erase_if(moved, [&](const auto& m) { return std::ranges::find(shown_, m.first) == shown_.end(); });
      std::sort(moved.begin(), moved.end());
    }
    std::vector<TextTable::ColumnSpec> specs;
    for (size_t i = 0; i < shown_.size(); ++i) {
      const GridColumn& column = grid_.columns[shown_[i]];
      const size_t title_width = widths_[i] - (i == 0 ? 1 : 0);
      specs.push_back({column.left ? PadRight(column.title, title_width) : column.title,
                       column.left && !column.unit.empty() ? PadRight(column.unit, title_width) : column.unit,
                       static_cast<int>(widths_[i]), column.group});
    }
    const TextTable table(specs);
    out_.header = table.HeaderLines();
    for (const std::vector<std::string>& row : cells_.rows) {
      std::vector<std::string> line;
      for (size_t i = 0; i < shown_.size(); ++i) {
        line.push_back(grid_.columns[shown_[i]].left ? PadRight(row[shown_[i]], widths_[i]) : row[shown_[i]]);
      }
      out_.rows.push_back(table.Row(line));
    }
    out_.widths = widths_;
    return out_;
  }

 private:
  // Column c's cells wider than `limit` move out of the table.
  void Move(size_t c, size_t limit) {
    for (size_t r = 0; r < cells_.rows.size(); ++r) {
      if (cells_.rows[r][c].size() <= limit || cells_.rows[r][c] == kMoved) continue;
      out_.moved[r].emplace_back(c, grid_.rows[r][c]);
      cells_.rows[r][c] = kMoved;
    }
  }
  // The narrowest shown column i may get: its title and unit, kMoved, and its numbers stay.
  size_t Floor(size_t i) const {
    const GridColumn& column = grid_.columns[shown_[i]];
    return std::max({column.title.size(), column.unit.size(), kMoved.size(), column.floor}) + (i == 0 ? 1 : 0);
  }
  // The characters the movable columns free when no cell is wider than `level`.
  size_t Gain(size_t level) const {
    size_t freed = 0;
    for (size_t i = 0; i < shown_.size(); ++i) {
      const size_t keep = std::max(level, Floor(i));
      if (grid_.columns[shown_[i]].movable && widths_[i] > keep) freed += widths_[i] - keep;
    }
    return freed;
  }

  const Grid& grid_;
  Grid cells_;
  std::vector<size_t> shown_, widths_;
  GridText out_;
};

// `grid` laid out in `width` characters (0: as wide as it is): movable cells too wide move out, then columns that
// still do not fit are left out.
GridText Fit(const Grid& grid, size_t width) {
  GridFit fit(grid);
  if (width > 0) {
    fit.MoveToFit(width);
    fit.LeaveOutToFit(width);
  }
  return fit.Text();
}

// Values longer than this (command lines, fallback reasons) would widen a run's column for every field: they are
// printed under the table instead.
constexpr size_t kWideValue = 40;
// A run's column is at least this wide before runs are shown in blocks: numbers and short names fit.
constexpr size_t kRunColumn = 12;

// A row of a table with a column per run: what comes before the runs' cells (a field and its unit; a variable), the
// runs' cells, what comes after (differs); `name` names the row in the lines under the table.
struct RunRow {
  std::string name;
  std::vector<std::string> lead, runs, tail;
};

// A table with a column per run ("run 1", ...) between `lead` and `tail` columns, in blocks of as many runs as fit
// kConsoleWidth (`fit`; else one block): a value too wide for its column is printed under its block as
// "# <name>, run N: value".
std::vector<std::string> RunColumnLines(const std::vector<GridColumn>& lead, const std::vector<GridColumn>& tail,
                                        const std::vector<RunRow>& rows, size_t run_count, bool fit) {
  Grid frame{lead, {}};
  frame.columns.insert(frame.columns.end(), tail.begin(), tail.end());
  for (const RunRow& row : rows) {
    std::vector<std::string>& cells = frame.rows.emplace_back(row.lead);
    cells.insert(cells.end(), row.tail.begin(), row.tail.end());
  }
  std::vector<size_t> all(frame.columns.size());
  for (size_t c = 0; c < all.size(); ++c) all[c] = c;
  const size_t taken = LineWidth(Widths(frame, all));
  const size_t room = kConsoleWidth > taken + kRunColumn + 1 ? kConsoleWidth - taken : kRunColumn + 1;
  const size_t fitting = fit ? std::max<size_t>(1, room / (kRunColumn + 1)) : std::max<size_t>(1, run_count);
  const size_t blocks = std::max<size_t>(1, (run_count + fitting - 1) / fitting);
  const size_t per_block = std::max<size_t>(1, (run_count + blocks - 1) / blocks);  // the blocks about as wide

  std::vector<std::string> lines;
  for (size_t block = 0; block < blocks; ++block) {
    const size_t first = std::min(run_count, block * per_block), last = std::min(run_count, first + per_block);
    Grid grid{lead, {}};
    for (size_t run = first; run < last; ++run) {
      grid.columns.push_back({"run " + std::to_string(run + 1), "", "", false, true, false, kWideValue});
    }
    grid.columns.insert(grid.columns.end(), tail.begin(), tail.end());
    for (const RunRow& row : rows) {
      std::vector<std::string>& cells = grid.rows.emplace_back(row.lead);
      cells.insert(cells.end(), row.runs.begin() + static_cast<std::ptrdiff_t>(first),
                   row.runs.begin() + static_cast<std::ptrdiff_t>(last));
      cells.insert(cells.end(), row.tail.begin(), row.tail.end());
    }
    const GridText text = Fit(grid, fit ? kConsoleWidth : 0);
    if (blocks > 1) lines.push_back(Format("# runs %zu-%zu of %zu", first + 1, last, run_count));
    Append(lines, text.header);
    Append(lines, text.rows);
    for (size_t r = 0; r < rows.size(); ++r) {
      for (const auto& [column, value] : text.moved[r]) {
        const size_t run = first + column - lead.size() + 1;
        Append(lines, WrapLines(value, "# " + rows[r].name + ", run " + std::to_string(run) + ": ", "#   "));
      }
    }
  }
  return lines;
}

// The two columns before the runs' in a side-by-side table: the field, its unit.
const std::vector<GridColumn> kFieldColumns = {{"field", "", "", true}, {"", "", ""}};

void SideBySide(const MergedTable& m, size_t run_count, bool all_columns, std::vector<std::string>& lines) {
  std::vector<RunRow> rows;
  for (size_t c = 0; c < m.columns.size(); ++c) {
    RunRow row{m.columns[c].name, {m.columns[c].name, UnitText(m.columns[c])}, std::vector<std::string>(run_count, "-"),
               {}};
    bool any = false;
    for (const MergedTable::Part& part : m.parts) {
      const Cell& cell = part.rows.front()[c];
      any = any || !std::holds_alternative<std::monostate>(cell);
      row.runs[part.run] = CellText(cell, m.columns[c]);
    }
    if (any) rows.push_back(std::move(row));
  }
  Append(lines, WrapLines(m.first->title, "# " + m.first->FullName() + ": ", "#   "));
  Append(lines, RunColumnLines(kFieldColumns, {}, rows, run_count, !all_columns));
}

// "# 28 more columns (HINT): a, b, ...": as many names as fit one line.
std::string LeftOutLine(const std::vector<std::string>& names, const std::string& hint) {
  std::string line = Format("# %zu more column%s (%s): ", names.size(), names.size() == 1 ? "" : "s", hint.c_str());
  for (size_t i = 0; i < names.size(); ++i) {
    const std::string part = (i == 0 ? "" : ", ") + names[i];
    const size_t reserve = i + 1 == names.size() ? 0 : std::string(", ...").size();
    if (line.size() + part.size() + reserve > kConsoleWidth) return line + (i == 0 ? "..." : ", ...");
    line += part;
  }
  return line;
}

// What the console shows of one run's rows of a detail table, as a Grid: the columns in it (indexes into the
// table's), its note and aside columns, and the columns it leaves out.
struct DetailLayout {
  Grid grid;
  std::vector<size_t> in_grid, notes, asides;
  std::vector<std::string> left_out;
};

DetailLayout LayOutDetail(const MergedTable& m, const MergedTable::Part& part, bool all_columns) {
  DetailLayout layout;
  for (size_t c = 0; c < m.columns.size(); ++c) {
    // Columns no row of this run fills (a resume field in a run that did not resume) are left out, unnamed.
    bool filled = false, text = false;
    size_t fixed = 0;  // the widest cell that is not text (a number stays in its column)
    for (const std::vector<Cell>& row : part.rows) {
      filled = filled || !std::holds_alternative<std::monostate>(row[c]);
      text = text || std::holds_alternative<std::string>(row[c]);
      if (!std::holds_alternative<std::string>(row[c])) fixed = std::max(fixed, CellText(row[c], m.columns[c]).size());
    }
    if (!filled) continue;
    const ViewColumn& column = m.columns[c];
    const Console console = all_columns ? Console::kHeadline : column.console;
    if (console == Console::kDetail) {
      layout.left_out.push_back(column.name);
    } else if (console == Console::kNote) {
      layout.notes.push_back(c);
    } else if (console == Console::kAside) {
      layout.asides.push_back(c);
    } else {
      const bool grouped = !all_columns && !column.group.empty();
      // The first column names the row: it stays whole.
      const bool first = layout.in_grid.empty();
      layout.grid.columns.push_back({grouped ? column.label : column.name, UnitText(column),
                                     grouped ? column.group : "", false,
                                     !first && text && console == Console::kHeadline,
                                     first || console == Console::kWhole, std::string::npos, fixed});
      layout.in_grid.push_back(c);
    }
  }
  for (const std::vector<Cell>& row : part.rows) {
    std::vector<std::string>& cells = layout.grid.rows.emplace_back();
    for (size_t c : layout.in_grid) cells.push_back(CellText(row[c], m.columns[c]));
  }
  return layout;
}

// The '#' lines under row `r`: its notes, then its asides and the cells that moved out of the table, as
// "name: value" (in parentheses after a note), indented under the table's second column.
std::vector<std::string> NoteLines(const MergedTable& m, const DetailLayout& layout, const GridText& text, size_t r,
                                   const std::vector<Cell>& row) {
  std::vector<std::string> notes, asides;
  for (size_t c : layout.notes) {
    const std::string note = CellText(row[c], m.columns[c]);
    if (note != "-") notes.push_back(note);
  }
  for (size_t c : layout.asides) {
    const std::string aside = CellText(row[c], m.columns[c]);
    if (aside != "-") asides.push_back(m.columns[c].name + ": " + aside);
  }
  for (const auto& [column, value] : text.moved[r]) {
    asides.push_back(m.columns[layout.in_grid[column]].name + ": " + value);
  }
  if (notes.empty() && asides.empty()) return {};
  // Wrapped a clause at a time: the note's ("a; b"), then the asides'.
  std::vector<std::string> clauses = Clauses(Join(notes, "; "));
  for (size_t i = 0; i + 1 < asides.size(); ++i) asides[i] += ";";
  if (!notes.empty() && !asides.empty()) {
    asides.front() = "(" + asides.front();
    asides.back() += ")";
  }
  clauses.insert(clauses.end(), asides.begin(), asides.end());
  const size_t first_width = text.widths.empty() ? 1 : text.widths.front();
  const std::string indent = "#" + std::string(std::min<size_t>(first_width, 40), ' ');
  return WrapClauses(clauses, indent, indent);
}

void RunByRun(const MergedTable& m, const std::vector<RunView>& runs, const ReportContextInfo& context,
              std::vector<std::string>& lines) {
  for (const MergedTable::Part& part : m.parts) {
    if (&part != &m.parts.front()) lines.push_back("#");
    std::string heading = "# " + m.first->FullName() + ": " + m.first->title + ", run " + std::to_string(part.run + 1);
    // The run's file when it fits: the runs are listed by number at the top.
    if (heading.size() + runs[part.run].label.size() + 3 <= kConsoleWidth) heading += " (" + runs[part.run].label + ")";
    if (part.rows.empty()) heading += ": none";
    Append(lines, WrapLines(heading.substr(2), "# ", "#   "));
    if (part.rows.empty()) continue;
    const DetailLayout layout = LayOutDetail(m, part, context.all_columns);
    const GridText text = Fit(layout.grid, context.all_columns ? 0 : kConsoleWidth);
    std::vector<std::string> left_out = layout.left_out;
    for (size_t column : text.left_out) left_out.push_back(m.columns[layout.in_grid[column]].name);
    if (!left_out.empty()) lines.push_back(LeftOutLine(left_out, context.left_out_hint));
    Append(lines, text.header);
    for (size_t r = 0; r < part.rows.size(); ++r) {
      lines.push_back(text.rows[r]);
      Append(lines, NoteLines(m, layout, text, r, part.rows[r]));
    }
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
  for (const std::string& warning : ComparisonWarnings(comparison)) {
    Append(lines, WrapLines(warning, "# warning: ", "#   "));
  }
  std::vector<RunRow> rows;
  for (const ComparedVariable& variable : comparison.variables) {
    RunRow& row = rows.emplace_back(RunRow{variable.name, {variable.name}, {}, {DifferenceText(variable)}});
    for (const std::string& value : variable.values) row.runs.push_back(value.empty() ? "-" : value);
  }
  Append(lines, WrapLines("what the runs held fixed (differs 'yes: not comparable' is warned about; 'yes: compared' is "
                          "what a comparison is about: device, nodes, interconnect, parallel layout)",
                          "# comparability: ", "#   "));
  Append(lines,
         RunColumnLines({{"variable", "", "", true}}, {{"differs", "", ""}}, rows, comparison.runs.size(), true));
  return lines;
}

std::string TextReporter::Finalize() {
  const std::vector<RunView>& runs = runs_;
  std::vector<std::string> lines = {Format("# trainbench %s: %zu run%s", context_.command.c_str(), runs.size(),
                                           runs.size() == 1 ? "" : "s")};
  for (size_t run = 0; run < runs.size(); ++run) {
    Append(lines, WrapLines(runs[run].label, Format("#   run %zu: ", run + 1), "#     "));
    for (const std::string& note : runs[run].notes) Append(lines, WrapLines(note, "#     ", "#       "));
  }
  if (context_.comparison) {
    lines.push_back("");
    Append(lines, ComparisonLines(*context_.comparison));
  }
  for (const MergedTable& m : Merge(runs)) {
    lines.push_back("");
    if (m.first->per_run) {
      SideBySide(m, runs.size(), context_.all_columns, lines);
    } else {
      RunByRun(m, runs, context_, lines);
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
