// Every field the schema declares (results/model/schema.h) is written by a real run and read by the views or cost:
//   schema_coverage REPORT.h5 [REPORT.h5 ...]
// reads the reports (made by tests/schema_coverage_test.sh with every command), then lists each declared
// attribute, column, table and matrix that no report holds, and each one that neither `report`'s views nor cost's
// reader read, unless the schema lists it in kStoredOnly (kept for the user's own analysis). Exit 1 when any is
// found, 0 when every field is covered.
#include <algorithm>
#include <iostream>
#include <set>
#include <string>
#include <vector>

#include "error.h"
#include "report.h"
#include "report_view.h"
#include "run_measurement.h"
#include "schema.h"

namespace tb::schema {
namespace {

// The groups of `report` that `spec` stands for.
std::vector<const Group*> GroupsOf(const Report& report, const GroupSpec& spec) {
  std::vector<const Group*> groups;
  if (spec.path.find('<') != std::string::npos) {
    for (const auto& [name, group] : Instances(report.root, spec)) groups.push_back(group);
  } else if (const Group* group = FindGroup(report.root, spec)) {
    groups.push_back(group);
  }
  return groups;
}

// Whether `names` (attribute or column names) hold `field`: every fixed key's name, or any name an open
// placeholder ("<op>_peak_busbw_GBps") stands for.
template <typename Names>
bool Holds(const Names& has, const Field& field) {
  if (!field.HasPlaceholder() || !field.keys.empty()) {
    for (const std::string& name : field.Names()) {
      if (!has(name)) return false;
    }
    return true;
  }
  const std::string prefix = field.name.substr(0, field.name.find('<'));
  const std::string suffix = field.name.substr(field.name.find('>') + 1);
  return has.any([&](const std::string& name) {
    return name.size() > prefix.size() + suffix.size() && name.starts_with(prefix) && name.ends_with(suffix);
  });
}

struct AttributeNames {
  const Group& group;
  bool operator()(const std::string& name) const { return group.attributes.contains(name); }
  template <typename F>
  bool any(F match) const {
    return std::any_of(group.attributes.begin(), group.attributes.end(), [&](const auto& a) { return match(a.first); });
  }
};
struct ColumnNames {
  const Table& table;
  bool operator()(const std::string& name) const { return table.Find(name) != nullptr; }
  template <typename F>
  bool any(F match) const {
    return std::any_of(table.columns.begin(), table.columns.end(), [&](const Column& c) { return match(c.name); });
  }
};

// The declared fields, tables and matrices that no report holds, one line each.
std::vector<std::string> Unwritten(const std::vector<Report>& reports) {
  std::set<std::string> written;
  for (const Report& report : reports) {
    for (const GroupSpec* spec : AllGroups()) {
      for (const Group* group : GroupsOf(report, *spec)) {
        for (const Field* field : spec->attributes) {
          if (Holds(AttributeNames{*group}, *field)) written.insert(spec->path + " @" + field->name);
        }
        for (const TableSpec* table_spec : spec->tables) {
          const Table* table = FindTable(group, *table_spec);
          if (!table) continue;
          written.insert(spec->path + "/" + table_spec->name);
          for (const Field* column : table_spec->columns) {
            if (Holds(ColumnNames{*table}, *column)) written.insert(spec->path + "/" + table_spec->name + " ." + column->name);
          }
        }
        for (const MatrixSpec* matrix : spec->matrices) {
          if (group->matrices.contains(matrix->name)) written.insert(spec->path + "/" + matrix->name);
        }
      }
    }
  }
  std::vector<std::string> missing;
  auto need = [&](const std::string& what) {
    if (!written.contains(what)) missing.push_back("not written by any run: " + what);
  };
  const std::set<const Field*> gpu_only(kGpuOnly.begin(), kGpuOnly.end());
  const std::set<const TableSpec*> gpu_only_tables(kGpuOnlyTables.begin(), kGpuOnlyTables.end());
  for (const GroupSpec* spec : AllGroups()) {
    for (const Field* field : spec->attributes) {
      if (!gpu_only.contains(field)) need(spec->path + " @" + field->name);
    }
    for (const TableSpec* table : spec->tables) {
      if (gpu_only_tables.contains(table)) continue;
      need(spec->path + "/" + table->name);
      for (const Field* column : table->columns) need(spec->path + "/" + table->name + " ." + column->name);
    }
    for (const MatrixSpec* matrix : spec->matrices) need(spec->path + "/" + matrix->name);
  }
  return missing;
}

void ForgetReads() {
  for (const GroupSpec* spec : AllGroups()) {
    for (const Field* field : spec->attributes) field->read = false;
    for (const TableSpec* table : spec->tables) {
      for (const Field* column : table->columns) column->read = false;
    }
    for (const MatrixSpec* matrix : spec->matrices) matrix->read = false;
  }
}

// Fields that the views and cost's reader do not read, unless kept for analysis; kStoredOnly entries they do read.
std::vector<std::string> Unread() {
  const std::set<const Field*> stored(kStoredOnly.begin(), kStoredOnly.end());
  std::vector<std::string> problems;
  auto check = [&](const std::string& where, const Field& field) {
    const bool kept = stored.contains(&field);
    if (!field.read && !kept) problems.push_back("read by no view and not in kStoredOnly: " + where + field.name);
    if (field.read && kept) problems.push_back("in kStoredOnly but read by the views or cost: " + where + field.name);
  };
  for (const GroupSpec* spec : AllGroups()) {
    for (const Field* field : spec->attributes) check(spec->path + " @", *field);
    for (const TableSpec* table : spec->tables) {
      for (const Field* column : table->columns) check(spec->path + "/" + table->name + " .", *column);
    }
    for (const MatrixSpec* matrix : spec->matrices) {
      const bool kept = std::find(kStoredOnlyMatrices.begin(), kStoredOnlyMatrices.end(), matrix) !=
                        kStoredOnlyMatrices.end();
      if (!matrix->read && !kept) problems.push_back("read by no view and not kept: " + spec->path + "/" + matrix->name);
      if (matrix->read && kept) problems.push_back("in kStoredOnlyMatrices but read: " + spec->path + "/" + matrix->name);
    }
  }
  return problems;
}

}  // namespace
}  // namespace tb::schema

int main(int argc, char** argv) {
  using namespace tb;
  std::vector<Report> reports;
  try {
    for (int i = 1; i < argc; ++i) reports.push_back(ReadReport(argv[i]));
  } catch (const std::exception& e) {
    std::cerr << "schema_coverage: " << e.what() << "\n";
    return 2;
  }
  schema::ForgetReads();  // ReadReport's damage check is not a view
  for (size_t i = 0; i < reports.size(); ++i) {
    ViewReport(reports[i], argv[i + 1], ReportSectionNames());
    try {
      // A storage sweep has no scaling point to price: cost refuses it, after reading what it reads.
      if (schema::FindGroup(reports[i].root, schema::kTrain)) ReadRunMeasurement(reports[i], argv[i + 1]);
    } catch (const InputError&) {
    }
  }
  std::vector<std::string> problems = schema::Unwritten(reports);
  for (const std::string& line : schema::Unread()) problems.push_back(line);
  for (const std::string& line : problems) std::cout << "FAIL: " << line << "\n";
  std::cout << "schema_coverage: " << reports.size() << " reports, " << problems.size() << " problems\n";
  return problems.empty() ? 0 : 1;
}
