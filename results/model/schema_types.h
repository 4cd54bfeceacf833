// The building blocks of the report schema (schema.h): a declared group, table, matrix, attribute or column
// with its name, type, unit and one-line description, and typed access to a Report through those declarations.
// Declaring a field registers it with its table or group, so the list of everything a report holds (for the
// README's tables and the coverage test) is the declarations themselves.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <type_traits>
#include <vector>

#include "report.h"

namespace tb::schema {

enum class Type { kInt, kReal, kText };
const char* TypeName(Type type);  // "int", "double", "string"

template <typename T>
constexpr Type TypeOf() {
  if constexpr (std::is_same_v<T, int64_t>) {
    return Type::kInt;
  } else if constexpr (std::is_same_v<T, double>) {
    return Type::kReal;
  } else {
    static_assert(std::is_same_v<T, std::string>, "a report field is int64_t, double or std::string");
    return Type::kText;
  }
}

// One attribute or column. A name may hold one placeholder in angle brackets ("<op>_peak_busbw_GBps"): the field
// stands for every name it takes (Named("all_reduce")), listed in `keys` where the set is fixed.
//
// The declarations' constructors take C strings and are defined in schema.cc: schema.h declares several hundred
// fields, each initialised in every file that includes it, so what each initialisation compiles to is kept to a
// call (a std::string built inline at each one made every such file take seconds longer to compile).
struct Field {
  Field(const char* name, Type type, const char* unit, const char* description);
  Field(const char* name, Type type, const char* unit, const char* description, const std::vector<std::string>& keys);
  ~Field();
  Field(const Field&) = delete;
  Field& operator=(const Field&) = delete;

  std::string name;
  Type type;
  std::string unit;  // "s", "GB/s", "fraction" (0..1), "" for counts, flags and text
  std::string description;
  std::vector<std::string> keys;  // the placeholder's values, when fixed (stall budget parts)

  bool HasPlaceholder() const;
  // The name with its placeholder replaced by `key` ("all_reduce" -> "all_reduce_peak_busbw_GBps").
  std::string Named(const std::string& key) const;
  // Every concrete name: the name itself, or one per key (empty for an open placeholder such as <op>).
  std::vector<std::string> Names() const;

  // Set when code reads the field through these declarations (for the test that every field is read).
  mutable std::atomic<bool> read{false};
};

class TableSpec;
struct MatrixSpec;

// A group of the report; `path` names it from the root, with a placeholder for groups that repeat
// ("train/<point>", "collectives/<op>").
class GroupSpec {
 public:
  // `declare` false: a path only (a lookup), not a group of the schema.
  GroupSpec(const char* path, const char* description, bool declare = true);
  ~GroupSpec();
  GroupSpec(const GroupSpec&) = delete;
  GroupSpec& operator=(const GroupSpec&) = delete;

  // The declared attribute named `name` exactly (no placeholder); nullptr when there is none.
  const Field* FindAttribute(const std::string& name) const;
  // The declared attribute a group's attribute `name` is: the one named so, or the one whose placeholder stands for it
  // ("all_reduce_peak_busbw_GBps" is <op>_peak_busbw_GBps); nullptr when there is none.
  const Field* MatchAttribute(const std::string& name) const;

  std::string path;
  std::string description;
  std::vector<const Field*> attributes;
  std::vector<const TableSpec*> tables;
  std::vector<const MatrixSpec*> matrices;
};

// Every declared group, in declaration order.
const std::vector<const GroupSpec*>& AllGroups();
// The declared group a report's group at `path` is ("/", "summary", "train/k2" is train/<point>), also under a group
// that holds the root's layout ("repeats/r1/train/k2", "confirm/summary"); nullptr when none is declared.
const GroupSpec* GroupSpecAt(const std::string& path);

class TableSpec {
 public:
  TableSpec(GroupSpec& group, const char* name, const char* description);
  ~TableSpec();
  TableSpec(const TableSpec&) = delete;
  TableSpec& operator=(const TableSpec&) = delete;

  const GroupSpec* group;
  std::string name;
  std::string description;
  std::vector<const Field*> columns;
};

struct MatrixSpec {
  MatrixSpec(GroupSpec& group, const char* name, const char* unit, const char* description);
  ~MatrixSpec();
  MatrixSpec(const MatrixSpec&) = delete;
  MatrixSpec& operator=(const MatrixSpec&) = delete;

  const GroupSpec* group;
  std::string name;
  std::string unit;
  std::string description;
  mutable std::atomic<bool> read{false};
};

template <typename T>
struct AttributeField : Field {
  AttributeField(GroupSpec& group, const char* name, const char* unit, const char* description);
};

template <typename T>
struct ColumnField : Field {
  ColumnField(TableSpec& table, const char* name, const char* unit, const char* description);
  ColumnField(TableSpec& table, const char* name, const char* unit, const char* description,
              const std::vector<std::string>& keys);
};

// Instantiated once, in schema.cc.
extern template struct AttributeField<int64_t>;
extern template struct AttributeField<double>;
extern template struct AttributeField<std::string>;
extern template struct ColumnField<int64_t>;
extern template struct ColumnField<double>;
extern template struct ColumnField<std::string>;

using IntAttribute = AttributeField<int64_t>;
using RealAttribute = AttributeField<double>;
using TextAttribute = AttributeField<std::string>;
using IntColumn = ColumnField<int64_t>;
using RealColumn = ColumnField<double>;
using TextColumn = ColumnField<std::string>;

// ---- groups ---------------------------------------------------------------------------------------------------

// The group `spec` stands for under `root` (created when missing), `key` filling a repeated group's placeholder
// (GroupOf(root, kTrainPoint, "k2") is /train/k2).
Group& GroupOf(Group& root, const GroupSpec& spec, const std::string& key = "");
// The same without creating anything; nullptr when the report lacks it.
const Group* FindGroup(const Group& root, const GroupSpec& spec, const std::string& key = "");
// A repeated group's instances under `root` (every child of "train" for "train/<point>"), by name.
std::vector<std::pair<std::string, const Group*>> Instances(const Group& root, const GroupSpec& spec);

// ---- writing --------------------------------------------------------------------------------------------------

template <typename T, typename V>
void Set(Group& group, const AttributeField<T>& field, V&& value) {
  group.Set(field.name, T(std::forward<V>(value)));
}
// A field whose name has a placeholder, for one key: Set(summary, peak_busbw, "all_reduce", 12.5).
template <typename T, typename V>
void Set(Group& group, const AttributeField<T>& field, const std::string& key, V&& value) {
  group.Set(field.Named(key), T(std::forward<V>(value)));
}

// The table `spec` of `group`, created empty with the declared description.
Table& AddTable(Group& group, const TableSpec& spec);

template <typename T>
void AddColumn(Table& table, const ColumnField<T>& column, std::vector<T> values) {
  table.Add(column.name, column.unit, std::move(values));
}
template <typename T>
void AddColumn(Table& table, const ColumnField<T>& column, const std::string& key, std::vector<T> values) {
  table.Add(column.Named(key), column.unit, std::move(values));
}

// A table written from records: each column declared with how a record gives its value, then Write() builds the
// table of `spec` from a vector of records (a row per record), each column typed as its field.
template <typename Record>
class RecordTable {
 public:
  explicit RecordTable(const TableSpec& spec) : spec_(spec) {}

  template <typename T, typename Get>
  RecordTable& Column(const ColumnField<T>& field, Get get, std::string key = "") {
    writers_.push_back([&field, get, key](Table& table, const std::vector<Record>& rows) {
      std::vector<T> values;
      values.reserve(rows.size());
      for (const Record& row : rows) values.push_back(T(get(row)));
      table.Add(key.empty() ? field.name : field.Named(key), field.unit, std::move(values));
    });
    return *this;
  }

  Table& Write(Group& group, const std::vector<Record>& rows) const {
    Table& table = AddTable(group, spec_);
    for (const auto& write : writers_) write(table, rows);
    return table;
  }

 private:
  const TableSpec& spec_;
  std::vector<std::function<void(Table&, const std::vector<Record>&)>> writers_;
};

void SetMatrix(Group& group, const MatrixSpec& spec, size_t rows, size_t cols, std::vector<double> values);

// ---- reading --------------------------------------------------------------------------------------------------

// The attribute's value when `group` has it with the declared type; nullptr otherwise.
template <typename T>
const T* Find(const Group* group, const AttributeField<T>& field, const std::string& key = "") {
  field.read = true;
  if (group == nullptr) return nullptr;
  auto it = group->attributes.find(key.empty() ? field.name : field.Named(key));
  return it == group->attributes.end() ? nullptr : std::get_if<T>(&it->second);
}

// A numeric attribute (int or double) as a double; nullopt when missing or text.
std::optional<double> Number(const Group* group, const Field& field, const std::string& key = "");
// The attribute as written (any type), for views that show it as it is; nullopt when missing.
std::optional<AttributeValue> Value(const Group* group, const Field& field, const std::string& key = "");

const Table* FindTable(const Group* group, const TableSpec& spec);
const Matrix* FindMatrix(const Group* group, const MatrixSpec& spec);
// The column's values when `table` has it with the declared type; nullptr otherwise.
template <typename T>
const std::vector<T>* Values(const Table& table, const ColumnField<T>& column) {
  column.read = true;
  const tb::Column* c = table.Find(column.name);
  return c ? std::get_if<std::vector<T>>(&c->values) : nullptr;
}
// The column by its field, any type (views copy cells as written); nullptr when the table lacks it.
const tb::Column* FindColumn(const Table& table, const Field& column, const std::string& key = "");

}  // namespace tb::schema
