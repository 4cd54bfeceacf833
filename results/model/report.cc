#include "report.h"

#include "schema.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>

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

std::unique_ptr<Group> Group::Release(const std::string& name) {
  auto it = children_.find(name);
  if (it == children_.end()) return nullptr;
  std::unique_ptr<Group> child = std::move(it->second);
  children_.erase(it);
  return child;
}

void Group::Attach(const std::string& name, std::unique_ptr<Group> group) { children_[name] = std::move(group); }

std::string PointGroupName(const PointGroup& point) {
  std::string name = schema::kPointPrefix;  // (not "k" + ...: GCC 12 warns falsely about that concatenation)
  name += std::to_string(point.ranks);
  if (point.throttle_MBps > 0) {
    char rate[32];
    std::snprintf(rate, sizeof rate, "%g", point.throttle_MBps);
    name += schema::kThrottleMarker;
    name += rate;
  }
  return name;
}

std::optional<PointGroup> ParsePointGroupName(const std::string& name) {
  const char* kMarker = schema::kThrottleMarker;
  const size_t prefix = std::strlen(schema::kPointPrefix);
  const size_t marker = name.find(kMarker);
  if (name.compare(0, prefix, schema::kPointPrefix) != 0) return std::nullopt;
  const std::string ranks = name.substr(prefix, marker == std::string::npos ? std::string::npos : marker - prefix);
  if (ranks.empty() || ranks.size() > 9 ||
      !std::all_of(ranks.begin(), ranks.end(), [](char c) { return c >= '0' && c <= '9'; })) {
    return std::nullopt;
  }
  PointGroup point;
  point.ranks = std::stoll(ranks);
  if (marker == std::string::npos) return point;
  const std::string rate = name.substr(marker + std::strlen(kMarker));
  char* end = nullptr;
  point.throttle_MBps = std::strtod(rate.c_str(), &end);
  if (rate.empty() || *end != '\0' || !(point.throttle_MBps > 0)) return std::nullopt;
  return point;
}

}  // namespace tb
