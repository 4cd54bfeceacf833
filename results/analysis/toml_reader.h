// Reading TOML files (toml++, TOML 1.0) the way every trainbench input file is read: a syntax error or a bad field
// is one InputError line naming the file, the line and the key ("prices.toml:12: offering 'x': usd_per_gpu_hour
// must be > 0, got -1"), and unknown keys are refused. Shared by price files (prices.h) and validate's policy
// files (validate.h). Internal to results/analysis: it includes toml++.
#pragma once

#include <toml++/toml.h>

#include <cmath>
#include <cstdint>
#include <optional>
#include <set>
#include <string>

#include "error.h"

namespace tb {

int NodeLine(const toml::node& node);
// "FILE:LINE: ".
std::string At(const std::string& file, int line);
// "an array", "a date", ...: what a value of the wrong kind is, for its error.
std::string KindOf(const toml::node& node);
// The document; a syntax error is "FILE:LINE: not valid TOML: <toml++'s words> (column C)".
toml::table ParseToml(const std::string& text, const std::string& file);
// The text of the input file `path` (a regular file: InputFileProblem's rules); `what` names it in errors
// ("cannot read price file 'p.toml': no such file").
std::string ReadTextFile(const std::string& path, const std::string& what);

// Reads the typed fields of one table, rejecting unknown keys at the end.
class FieldReader {
 public:
  FieldReader(const toml::table& table, const std::string& file, std::string where)
      : table_(table), file_(file), where_(std::move(where)) {}

  [[noreturn]] void Fail(int line, const std::string& what) const { throw InputError(At(file_, line) + where_ + what); }
  int TableLine() const { return NodeLine(table_); }
  int LineOf(const std::string& key) const {
    const toml::node* node = table_.get(key);
    return node ? NodeLine(*node) : TableLine();
  }
  const toml::node* Find(const std::string& key) {
    used_.insert(key);
    return table_.get(key);
  }

  std::optional<std::string> OptionalString(const std::string& key) {
    const toml::node* node = Find(key);
    if (!node) return std::nullopt;
    if (!node->is_string()) WrongKind(key, *node, "a string in quotes");
    return node->as_string()->get();
  }
  std::string String(const std::string& key) {
    std::optional<std::string> value = OptionalString(key);
    if (!value) Fail(TableLine(), "missing " + key);
    if (value->empty()) Fail(LineOf(key), key + " must not be empty");
    return *value;
  }
  std::optional<double> OptionalNumber(const std::string& key) {
    const toml::node* node = Find(key);
    if (!node) return std::nullopt;
    if (const auto* i = node->as_integer()) return static_cast<double>(i->get());
    if (!node->is_floating_point()) WrongKind(key, *node, "a number");
    const double value = node->as_floating_point()->get();
    if (!std::isfinite(value)) Fail(NodeLine(*node), key + " must be a finite number, got " + Text(value));
    return value;
  }
  // A number >= 0 (> 0 when `positive`); required.
  double Number(const std::string& key, bool positive) {
    std::optional<double> value = OptionalNumber(key);
    if (!value) Fail(TableLine(), "missing " + key);
    CheckSign(key, *value, positive);
    return *value;
  }
  void CheckSign(const std::string& key, double value, bool positive) const {
    if (positive ? !(value > 0) : !(value >= 0)) {
      Fail(LineOf(key), key + " must be " + (positive ? "> 0" : ">= 0") + ", got " + Text(value));
    }
  }
  int64_t Integer(const std::string& key) {
    const toml::node* node = Find(key);
    if (!node) Fail(TableLine(), "missing " + key);
    if (!node->is_integer()) WrongKind(key, *node, "a whole number");
    return node->as_integer()->get();
  }
  std::optional<bool> OptionalBool(const std::string& key) {
    const toml::node* node = Find(key);
    if (!node) return std::nullopt;
    if (!node->is_boolean()) WrongKind(key, *node, "true or false");
    return node->as_boolean()->get();
  }
  void RejectUnknown(const std::string& accepted) const {
    for (const auto& [key, node] : table_) {
      if (!used_.contains(std::string(key.str()))) {
        Fail(NodeLine(node), "unknown key '" + std::string(key.str()) + "' (accepted: " + accepted + ")");
      }
    }
  }

 private:
  [[noreturn]] void WrongKind(const std::string& key, const toml::node& node, const std::string& wanted) const {
    Fail(NodeLine(node), key + " must be " + wanted + " (got " + KindOf(node) + ")");
  }
  static std::string Text(double value);

  const toml::table& table_;
  const std::string& file_;
  std::string where_;
  std::set<std::string> used_;
};


}  // namespace tb
