#include "suite_profile.h"

#include <algorithm>
#include <map>
#include <set>

#include "console.h"
#include "error.h"
#include "suite_profiles.h"  // generated from launch/suite/*.toml
#include "toml_reader.h"
#include "units.h"

namespace tb {
namespace {

constexpr const char* kTopKeys = "suite, collectives, p2p, train, data, cpu";
constexpr int kMaxRepeats = 100;

struct BuiltIn {
  const char* name;
  const char* text;
};
const BuiltIn kBuiltIns[] = {{"quick", kSuiteProfileQuick}, {"nightly", kSuiteProfileNightly}};

const toml::table* Section(FieldReader& reader, const std::string& key, const std::string& where) {
  const toml::node* node = reader.Find(key);
  if (!node) return nullptr;
  if (!node->is_table()) reader.Fail(NodeLine(*node), where + key + " must be a table ([" + key + "])");
  return node->as_table();
}

// A scalar as a flag's value: the string itself, a number in decimal.
std::string ScalarWord(const toml::node& node, const std::string& key, const FieldReader& reader) {
  if (const auto* text = node.as_string()) return text->get();
  if (const auto* number = node.as_integer()) return std::to_string(number->get());
  if (const auto* real = node.as_floating_point()) {
    if (!std::isfinite(real->get())) reader.Fail(NodeLine(node), key + " must be a finite number");
    return Format("%.17g", real->get());
  }
  reader.Fail(NodeLine(node), key + " must be a string, a number, true/false or an array of them (got " +
                                  KindOf(node) + ")");
}

// The words of one key: "--key value", "--key" for true, nothing for false, "--key a,b" for an array.
std::vector<std::string> KeyWords(const std::string& key, const toml::node& node, const FieldReader& reader) {
  std::string flag = "--" + key;
  std::replace(flag.begin(), flag.end(), '_', '-');
  if (const auto* flag_value = node.as_boolean()) return flag_value->get() ? std::vector<std::string>{flag} : std::vector<std::string>{};
  if (const auto* array = node.as_array()) {
    std::vector<std::string> items;
    for (const toml::node& item : *array) {
      if (item.is_array() || item.is_table()) reader.Fail(NodeLine(item), key + ": an array of scalars, not nested");
      items.push_back(ScalarWord(item, key, reader));
    }
    if (items.empty()) reader.Fail(NodeLine(node), key + " must not be an empty array");
    return {flag, JoinNames(items, ",")};
  }
  return {flag, ScalarWord(node, key, reader)};
}

// The table's keys, with those of the CPU override replacing them: key -> node.
std::map<std::string, const toml::node*> Merged(const toml::table* table, const toml::table* cpu_override) {
  std::map<std::string, const toml::node*> keys;
  for (const toml::table* t : {table, cpu_override}) {
    if (!t) continue;
    for (const auto& [key, node] : *t) keys[std::string(key.str())] = &node;
  }
  return keys;
}

std::vector<std::string> PhaseWords(const toml::table* table, const toml::table* cpu_override,
                                    const FieldReader& reader) {
  std::vector<std::string> words;
  for (const auto& [key, node] : Merged(table, cpu_override)) {
    if (node->is_table()) reader.Fail(NodeLine(*node), key + " must be an option's value, not a table");
    for (std::string& word : KeyWords(key, *node, reader)) words.push_back(std::move(word));
  }
  return words;
}

void ReadSuiteTable(const toml::table* table, const std::string& file, SuiteProfile& p) {
  p.phases = SuitePhaseNames();
  if (!table) return;
  FieldReader r(*table, file, "[suite] ");
  if (const toml::node* node = r.Find("phases")) {
    const toml::array* array = node->as_array();
    if (!array || array->empty()) r.Fail(NodeLine(*node), "phases must be a non-empty array of phase names");
    p.phases.clear();
    for (const toml::node& item : *array) {
      const std::string name = item.is_string() ? item.as_string()->get() : "";
      const std::vector<std::string>& known = SuitePhaseNames();
      if (std::find(known.begin(), known.end(), name) == known.end()) {
        r.Fail(NodeLine(item), "phases: unknown phase " + (item.is_string() ? "'" + name + "'" : KindOf(item)) +
                                   " (accepted: " + JoinNames(known, ", ") + ")");
      }
      if (std::find(p.phases.begin(), p.phases.end(), name) != p.phases.end()) {
        r.Fail(NodeLine(item), "phases: '" + name + "' is listed twice");
      }
      p.phases.push_back(name);
    }
  }
  if (r.Find("repeats")) {
    const int64_t repeats = r.Integer("repeats");
    if (repeats < 1 || repeats > kMaxRepeats) {
      r.Fail(r.LineOf("repeats"), "repeats must be 1.." + std::to_string(kMaxRepeats) + ", got " + std::to_string(repeats));
    }
    p.repeats = static_cast<int>(repeats);
  }
  r.RejectUnknown("phases, repeats");
}

void ReadDataTable(const toml::table* table, const toml::table* cpu_override, const std::string& file,
                   SuiteProfile& p) {
  p.data_tokens = "4M";
  p.data_shard_tokens = "1M";
  for (const toml::table* t : {table, cpu_override}) {
    if (!t) continue;
    FieldReader r(*t, file, t == table ? "[data] " : "[cpu.data] ");
    for (const char* key : {"tokens", "shard_tokens"}) {
      const toml::node* node = r.Find(key);
      if (!node) continue;
      if (!node->is_string() && !node->is_integer()) r.Fail(NodeLine(*node), std::string(key) + " must be a token count (\"4M\" or 4000000)");
      (std::string(key) == "tokens" ? p.data_tokens : p.data_shard_tokens) = ScalarWord(*node, key, r);
    }
    r.RejectUnknown("tokens, shard_tokens");
  }
}

}  // namespace

const std::vector<std::string>& SuitePhaseNames() {
  static const std::vector<std::string> names = {"collectives", "p2p", "train"};
  return names;
}

std::string BuiltInProfileNames() {
  std::vector<std::string> names;
  for (const BuiltIn& b : kBuiltIns) names.push_back(b.name);
  return JoinNames(names, ", ");
}

SuiteProfile ParseSuiteProfile(const std::string& text, const std::string& file, bool cpu) {
  const toml::table document = ParseToml(text, file);
  FieldReader top(document, file, "");
  SuiteProfile p;
  p.name = file;
  ReadSuiteTable(Section(top, "suite", ""), file, p);
  const toml::table* cpu_tables = Section(top, "cpu", "");
  std::optional<FieldReader> cpu_reader;
  if (cpu_tables) cpu_reader.emplace(*cpu_tables, file, "[cpu] ");
  auto cpu_section = [&](const std::string& name) {
    return cpu_reader ? Section(*cpu_reader, name, "cpu.") : nullptr;
  };
  for (const std::string& phase : SuitePhaseNames()) {
    const toml::table* table = Section(top, phase, "");
    const toml::table* cpu_table = cpu_section(phase);
    const bool listed = std::find(p.phases.begin(), p.phases.end(), phase) != p.phases.end();
    if ((table || cpu_table) && !listed) {
      top.Fail(NodeLine(table ? *table : *cpu_table), "[" + phase + "] is given but [suite] phases does not list " + phase);
    }
    if (!listed) continue;
    p.lines[phase] = table ? NodeLine(*table) : 0;
    p.args[phase] = PhaseWords(table, cpu ? cpu_table : nullptr, top);
  }
  ReadDataTable(Section(top, "data", ""), cpu ? cpu_section("data") : nullptr, file, p);
  if (cpu_reader) {
    if (!cpu) cpu_section("data");  // read, so that it is not refused as unknown
    cpu_reader->RejectUnknown("collectives, p2p, train, data");
  }
  top.RejectUnknown(kTopKeys);
  return p;
}

SuiteProfile ReadSuiteProfile(const std::string& name_or_file, bool cpu) {
  for (const BuiltIn& b : kBuiltIns) {
    if (name_or_file == b.name) {
      SuiteProfile p = ParseSuiteProfile(b.text, std::string(b.name) + ".toml", cpu);
      p.name = b.name;
      return p;
    }
  }
  if (name_or_file.find('/') == std::string::npos && name_or_file.find(".toml") == std::string::npos) {
    throw InputError("--profile '" + name_or_file + "': not a built-in profile (" + BuiltInProfileNames() +
                     ") nor a .toml file");
  }
  return ParseSuiteProfile(ReadTextFile(name_or_file, "profile"), name_or_file, cpu);
}

}  // namespace tb
