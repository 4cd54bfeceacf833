#include "schema_doc.h"

#include <cctype>
#include <set>
#include <string>

#include "schema.h"

namespace tb::schema {
namespace {

std::string Code(const std::string& text) { return "`" + text + "`"; }

// Markdown table cells may not hold a bare '|'.
std::string Cell(const std::string& text) {
  std::string out;
  for (char c : text) {
    if (c == '|') out += '\\';
    out += c;
  }
  return out;
}

std::string FieldRows(const std::vector<const Field*>& fields) {
  std::string text;
  for (const Field* field : fields) {
    std::string meaning = field->description;
    if (!field->keys.empty()) {
      std::string keys;
      for (const std::string& key : field->keys) keys += (keys.empty() ? "" : ", ") + Code(key);
      meaning += " (for each of " + keys + ")";
    }
    text += "| " + Code(field->name) + " | " + TypeName(field->type) + " | " + Cell(field->unit) + " | " +
            Cell(meaning) + " |\n";
  }
  return text;
}

// A description as a sentence: its first letter upper-case.
std::string Sentence(std::string text) {
  if (!text.empty()) text[0] = static_cast<char>(std::toupper(static_cast<unsigned char>(text[0])));
  return text;
}

std::string GroupMarkdown(const GroupSpec& group) {
  std::string text = "#### " + Code(group.path) + "\n\n" + Sentence(group.description) + ".\n";
  if (!group.attributes.empty()) {
    text += "\n| Attribute | Type | Unit | Meaning |\n|---|---|---|---|\n" + FieldRows(group.attributes);
  }
  for (const TableSpec* table : group.tables) {
    text += "\nTable " + Code(table->name) + ": " + table->description + ".\n\n";
    text += "| Column | Type | Unit | Meaning |\n|---|---|---|---|\n" + FieldRows(table->columns);
  }
  for (const MatrixSpec* matrix : group.matrices) {
    text += "\nMatrix " + Code(matrix->name) + " (double, " + matrix->unit + ", n_ranks x n_ranks): " + matrix->description + ".\n";
  }
  return text;
}

// "train/<point>" -> "train_point", "gpu_health" as it is, "/" -> "root": a Python identifier for a group.
std::string PythonName(const std::string& path) {
  if (path == "/") return "root";
  std::string name;
  for (char c : path) {
    if (std::isalnum(static_cast<unsigned char>(c)) || c == '_') {
      name += c;
    } else if (c == '/' && !name.empty()) {
      name += '_';
    }
  }
  return name;
}

// A Python identifier for a field: its name without the placeholder ("<op>_peak_busbw_GBps" -> "peak_busbw_GBps").
std::string PythonField(const Field& field) {
  if (!field.HasPlaceholder()) return field.name;
  std::string name = field.name.substr(0, field.name.find('<')) + field.name.substr(field.name.find('>') + 1);
  while (!name.empty() && name.front() == '_') name.erase(0, 1);
  while (!name.empty() && name.back() == '_') name.pop_back();
  return name;
}

// One line per field; a name an earlier field of the list already took gets its placeholder's word in front
// ("<kind>_p50" after "<part>_p50": "kind_p50"), so that no field hides another.
std::string PythonFields(const std::vector<const Field*>& fields, const std::string& indent) {
  std::string text;
  std::set<std::string> taken;
  for (const Field* field : fields) {
    std::string name = PythonField(*field);
    if (!taken.insert(name).second) {
      const size_t open = field->name.find('<');
      name = field->name.substr(open + 1, field->name.find('>') - open - 1) + "_" + name;
      taken.insert(name);
    }
    text += indent + name + " = \"" + field->name + "\"\n";
  }
  return text;
}

}  // namespace

std::string SchemaMarkdown() {
  std::string text;
  for (const GroupSpec* group : AllGroups()) text += (text.empty() ? "" : "\n") + GroupMarkdown(*group);
  return text;
}

std::string SchemaPython() {
  std::string text =
      "# Generated from results/model/schema.h by tests/schema_doc (tests/schema_doc_test.sh --update); do not edit.\n"
      "# The names of every group, table, attribute and column of a trainbench report, for plots.py.\n\n\n"
      "def name(field, key):\n"
      "    \"\"\"The name of a field with a placeholder for one key: name(summary.peak_busbw_GBps, \"all_reduce\").\"\"\"\n"
      "    return field[:field.index(\"<\")] + key + field[field.index(\">\") + 1:]\n"
      "\n\n"
      "POINT_PREFIX = \"" + std::string(kPointPrefix) + "\"\n"
      "THROTTLE_MARKER = \"" + std::string(kThrottleMarker) + "\"\n"
      "\n\n"
      "def point_ranks(group_name):\n"
      "    \"\"\"The rank count of a scaling point's group (\"k8\" -> 8); None for a storage sweep's point\n"
      "    (\"k8_throttle200\") or any other name, as ParsePointGroupName (report.h) reads them.\"\"\"\n"
      "    digits = group_name[len(POINT_PREFIX):]\n"
      "    if not group_name.startswith(POINT_PREFIX) or THROTTLE_MARKER in group_name:\n"
      "        return None\n"
      "    return int(digits) if digits.isascii() and digits.isdigit() and len(digits) <= 9 else None\n";
  for (const GroupSpec* group : AllGroups()) {
    text += "\n\nclass " + PythonName(group->path) + ":\n";
    text += "    \"\"\"" + Code(group->path) + "\"\"\"\n";
    text += "    path = \"" + group->path + "\"\n";
    text += PythonFields(group->attributes, "    ");
    for (const MatrixSpec* matrix : group->matrices) text += "    " + matrix->name + " = \"" + matrix->name + "\"\n";
    for (const TableSpec* table : group->tables) {
      text += "\n    class " + table->name + ":\n";
      text += "        table = \"" + table->name + "\"\n";
      text += PythonFields(table->columns, "        ");
    }
  }
  return text;
}

}  // namespace tb::schema
