#include "schema.h"

#include <algorithm>
#include <span>
#include <stdexcept>

namespace tb::schema {
namespace {

std::vector<const GroupSpec*>& Groups() {
  static std::vector<const GroupSpec*> groups;
  return groups;
}

const AttributeValue* FindAttribute(const Group* group, const Field& field, const std::string& key) {
  field.read = true;
  if (group == nullptr) return nullptr;
  auto it = group->attributes.find(key.empty() ? field.name : field.Named(key));
  return it == group->attributes.end() ? nullptr : &it->second;
}

}  // namespace

const char* TypeName(Type type) {
  switch (type) {
    case Type::kInt: return "int";
    case Type::kReal: return "double";
    case Type::kText: return "string";
  }
  return "?";
}

Field::Field(const char* name_, Type type_, const char* unit_, const char* description_)
    : name(name_), type(type_), unit(unit_), description(description_) {}

Field::Field(const char* name_, Type type_, const char* unit_, const char* description_,
             const std::vector<std::string>& keys_)
    : name(name_), type(type_), unit(unit_), description(description_), keys(keys_) {}

Field::~Field() = default;
GroupSpec::~GroupSpec() = default;
TableSpec::~TableSpec() = default;
MatrixSpec::~MatrixSpec() = default;

template <typename T>
AttributeField<T>::AttributeField(GroupSpec& group, const char* name_, const char* unit_, const char* description_)
    : Field(name_, TypeOf<T>(), unit_, description_) {
  group.attributes.push_back(this);
}

template <typename T>
ColumnField<T>::ColumnField(TableSpec& table, const char* name_, const char* unit_, const char* description_)
    : Field(name_, TypeOf<T>(), unit_, description_) {
  table.columns.push_back(this);
}

template <typename T>
ColumnField<T>::ColumnField(TableSpec& table, const char* name_, const char* unit_, const char* description_,
                            const std::vector<std::string>& keys_)
    : Field(name_, TypeOf<T>(), unit_, description_, keys_) {
  table.columns.push_back(this);
}

template struct AttributeField<int64_t>;
template struct AttributeField<double>;
template struct AttributeField<std::string>;
template struct ColumnField<int64_t>;
template struct ColumnField<double>;
template struct ColumnField<std::string>;

bool Field::HasPlaceholder() const { return name.find('<') != std::string::npos; }

std::string Field::Named(const std::string& key) const {
  const size_t open = name.find('<');
  const size_t close = name.find('>', open);
  if (open == std::string::npos || close == std::string::npos) {
    throw std::logic_error("report schema: field " + name + " has no placeholder for '" + key + "'");
  }
  std::string concrete = name.substr(0, open);
  concrete += key;
  concrete += name.substr(close + 1);
  return concrete;
}

std::vector<std::string> Field::Names() const {
  if (!HasPlaceholder()) return {name};
  std::vector<std::string> names;
  for (const std::string& key : keys) names.push_back(Named(key));
  return names;
}

GroupSpec::GroupSpec(const char* path_, const char* description_, bool declare)
    : path(path_), description(description_) {
  if (declare) Groups().push_back(this);
}

const Field* GroupSpec::FindAttribute(const std::string& name) const {
  for (const Field* field : attributes) {
    if (field->name == name) return field;
  }
  return nullptr;
}

const Field* GroupSpec::MatchAttribute(const std::string& name) const {
  if (const Field* field = FindAttribute(name)) return field;
  for (const Field* field : attributes) {
    if (!field->HasPlaceholder()) continue;
    if (!field->keys.empty()) {
      const std::vector<std::string> names = field->Names();
      if (std::find(names.begin(), names.end(), name) != names.end()) return field;
      continue;
    }
    const std::string prefix = field->name.substr(0, field->name.find('<'));
    const std::string suffix = field->name.substr(field->name.find('>') + 1);
    if (name.size() > prefix.size() + suffix.size() && name.starts_with(prefix) && name.ends_with(suffix)) {
      return field;
    }
  }
  return nullptr;
}

const std::vector<const GroupSpec*>& AllGroups() { return Groups(); }

namespace {

// "/train/k2" -> {"train", "k2"}; "/" -> {}.
std::vector<std::string> Segments(const std::string& path) {
  std::vector<std::string> parts;
  size_t start = 0;
  while (start < path.size()) {
    size_t end = path.find('/', start);
    if (end == std::string::npos) end = path.size();
    if (end > start) parts.push_back(path.substr(start, end - start));
    start = end + 1;
  }
  return parts;
}

// The declared group whose path `parts` are, a placeholder ("<point>") standing for any one part.
const GroupSpec* DeclaredAt(std::span<const std::string> parts) {
  for (const GroupSpec* spec : AllGroups()) {
    const std::vector<std::string> declared = Segments(spec->path);
    if (declared.size() != parts.size()) continue;
    bool same = true;
    for (size_t i = 0; i < parts.size() && same; ++i) same = declared[i].starts_with('<') || declared[i] == parts[i];
    if (same) return spec;
  }
  return nullptr;
}

}  // namespace

const GroupSpec* GroupSpecAt(const std::string& path) {
  const std::vector<std::string> parts = Segments(path);
  if (const GroupSpec* spec = DeclaredAt(parts)) return spec;
  // confirm and repeats/<repeat> hold groups laid out as the root holds them: a declared group's path, then a
  // declared path from the root.
  const std::span<const std::string> all(parts);
  for (size_t split = 1; split < parts.size(); ++split) {
    if (DeclaredAt(all.first(split)) == nullptr) continue;
    if (const GroupSpec* spec = DeclaredAt(all.subspan(split))) return spec;
  }
  return nullptr;
}

TableSpec::TableSpec(GroupSpec& group_, const char* name_, const char* description_)
    : group(&group_), name(name_), description(description_) {
  group_.tables.push_back(this);
}

MatrixSpec::MatrixSpec(GroupSpec& group_, const char* name_, const char* unit_, const char* description_)
    : group(&group_), name(name_), unit(unit_), description(description_) {
  group_.matrices.push_back(this);
}

namespace {

// "train/<point>" with key "k2" -> {"train", "k2"}; "/" -> {}.
std::vector<std::string> PathParts(const GroupSpec& spec, const std::string& key) {
  std::vector<std::string> parts;
  size_t start = 0;
  while (start < spec.path.size()) {
    size_t end = spec.path.find('/', start);
    if (end == std::string::npos) end = spec.path.size();
    std::string part = spec.path.substr(start, end - start);
    if (!part.empty() && part.front() == '<') {
      if (key.empty()) throw std::logic_error("report schema: group " + spec.path + " needs a name for " + part);
      part = key;
    }
    if (!part.empty()) parts.push_back(part);
    start = end + 1;
  }
  return parts;
}

}  // namespace

Group& GroupOf(Group& root, const GroupSpec& spec, const std::string& key) {
  Group* group = &root;
  for (const std::string& part : PathParts(spec, key)) group = &group->Child(part);
  return *group;
}

const Group* FindGroup(const Group& root, const GroupSpec& spec, const std::string& key) {
  const Group* group = &root;
  for (const std::string& part : PathParts(spec, key)) {
    group = group->FindChild(part);
    if (group == nullptr) return nullptr;
  }
  return group;
}

std::vector<std::pair<std::string, const Group*>> Instances(const Group& root, const GroupSpec& spec) {
  const size_t slash = spec.path.rfind('/');
  std::vector<std::pair<std::string, const Group*>> instances;
  if (slash == std::string::npos || spec.path[slash + 1] != '<') return instances;
  GroupSpec parent_path(spec.path.substr(0, slash).c_str(), "", false);
  const Group* parent = FindGroup(root, parent_path);
  if (parent == nullptr) return instances;
  for (const auto& [name, child] : parent->children()) instances.emplace_back(name, child.get());
  return instances;
}

Table& AddTable(Group& group, const TableSpec& spec) {
  Table& table = group.tables[spec.name];
  table.description = spec.description;
  return table;
}

void SetMatrix(Group& group, const MatrixSpec& spec, size_t rows, size_t cols, std::vector<double> values) {
  group.matrices[spec.name] = Matrix{spec.description, spec.unit, rows, cols, std::move(values)};
}

std::optional<double> Number(const Group* group, const Field& field, const std::string& key) {
  const AttributeValue* value = FindAttribute(group, field, key);
  if (value == nullptr) return std::nullopt;
  if (const auto* d = std::get_if<double>(value)) return *d;
  if (const auto* i = std::get_if<int64_t>(value)) return static_cast<double>(*i);
  return std::nullopt;
}

std::optional<AttributeValue> Value(const Group* group, const Field& field, const std::string& key) {
  const AttributeValue* value = FindAttribute(group, field, key);
  if (value == nullptr) return std::nullopt;
  return *value;
}

const Table* FindTable(const Group* group, const TableSpec& spec) {
  if (group == nullptr) return nullptr;
  auto it = group->tables.find(spec.name);
  return it == group->tables.end() ? nullptr : &it->second;
}

const Matrix* FindMatrix(const Group* group, const MatrixSpec& spec) {
  spec.read = true;
  if (group == nullptr) return nullptr;
  auto it = group->matrices.find(spec.name);
  return it == group->matrices.end() ? nullptr : &it->second;
}

const tb::Column* FindColumn(const Table& table, const Field& column, const std::string& key) {
  column.read = true;
  return table.Find(key.empty() ? column.name : column.Named(key));
}

}  // namespace tb::schema
