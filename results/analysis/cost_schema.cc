#include "cost_schema.h"

namespace tb::cost_schema {
namespace {

std::vector<const Table*>& Registry() {
  static std::vector<const Table*> tables;
  return tables;
}

// Markdown table cells may not hold a bare '|'.
std::string MarkdownCell(const std::string& text) {
  std::string out;
  for (char c : text) {
    if (c == '|') out += '\\';
    out += c;
  }
  return out;
}

}  // namespace

Table::Table(const char* name, const char* title, bool per_run, const char* view, const char* rows)
    : name(name), title(title), per_run(per_run), view(view), rows(rows) {
  Registry().push_back(this);
}

Column::Column(Table& table, const char* name, const char* unit, const char* description)
    : table(&table), name(name), unit(unit), description(description) {
  table.columns.push_back(this);
}

const std::vector<const Table*>& AllTables() { return Registry(); }

std::string CostSchemaMarkdown() {
  std::string text;
  for (const Table* table : AllTables()) {
    if (!text.empty()) text += "\n";
    text += "Table `" + table->FullName() + "`: " + table->title + ". View: " + table->view + "; a row: " + table->rows +
            ".\n\n";
    text += "| Column | Unit | Meaning |\n|---|---|---|\n";
    for (const Column* column : table->columns) {
      text += "| `" + column->name + "` | " + MarkdownCell(column->unit) + " | " + MarkdownCell(column->description) +
              " |\n";
    }
  }
  return text;
}

}  // namespace tb::cost_schema
