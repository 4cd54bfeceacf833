#include "report.h"

namespace tb {

size_t Column::rows() const {
  return std::visit([](const auto& column_values) { return column_values.size(); }, values);
}

Table& Table::Add(std::string name, std::string unit, std::vector<int64_t> values) {
  columns.push_back(Column{std::move(name), std::move(unit), std::move(values)});
  return *this;
}

Table& Table::Add(std::string name, std::string unit, std::vector<double> values) {
  columns.push_back(Column{std::move(name), std::move(unit), std::move(values)});
  return *this;
}

Table& Table::Add(std::string name, std::string unit, std::vector<std::string> values) {
  columns.push_back(Column{std::move(name), std::move(unit), std::move(values)});
  return *this;
}

const Column* Table::Find(const std::string& name) const {
  for (const Column& column : columns) {
    if (column.name == name) return &column;
  }
  return nullptr;
}

// The first column decides: a table whose columns disagree is rejected when written, not here.
size_t Table::rows() const { return columns.empty() ? 0 : columns.front().rows(); }

Group::Group(const Group& other) : attributes(other.attributes), tables(other.tables), matrices(other.matrices) {
  for (const auto& [name, child] : other.children_) children_.emplace(name, std::make_unique<Group>(*child));
}

Group& Group::operator=(const Group& other) {
  if (this != &other) *this = Group(other);
  return *this;
}

Group& Group::Child(const std::string& name) {
  std::unique_ptr<Group>& child = children_[name];
  if (!child) child = std::make_unique<Group>();
  return *child;
}

const Group* Group::FindChild(const std::string& name) const {
  auto it = children_.find(name);
  return it == children_.end() ? nullptr : it->second.get();
}

}  // namespace tb
