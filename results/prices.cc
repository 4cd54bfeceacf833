#include "prices.h"

#include <algorithm>
#include <cctype>
#include <charconv>
#include <cmath>
#include <cstdlib>
#include <fstream>
#include <set>
#include <sstream>

#include "error.h"
#include "paths.h"
#include "units.h"

namespace tb {
namespace {

// ---- TOML subset ---------------------------------------------------------------------------------------------

class LineParser {
 public:
  LineParser(const std::string& line, const std::string& file, int number)
      : text_(line), file_(file), number_(number) {}

  [[noreturn]] void Fail(const std::string& what) const {
    throw InputError(file_ + ":" + std::to_string(number_) + ": " + what);
  }

  void SkipSpaces() {
    while (at_ < text_.size() && (text_[at_] == ' ' || text_[at_] == '\t')) ++at_;
  }
  bool AtEnd() const { return at_ >= text_.size(); }
  char Peek(size_t ahead = 0) const { return at_ + ahead < text_.size() ? text_[at_ + ahead] : '\0'; }
  bool Consume(char c) {
    if (Peek() != c) return false;
    ++at_;
    return true;
  }
  bool StartsWith(const char* prefix) const { return text_.compare(at_, std::char_traits<char>::length(prefix), prefix) == 0; }

  // After a header or a value: only spaces and a comment may follow.
  void ExpectLineEnd(const char* after) {
    SkipSpaces();
    if (!AtEnd() && Peek() != '#') Fail(std::string("unexpected text after ") + after + ": '" + text_.substr(at_) + "'");
  }

  std::string Key() {
    SkipSpaces();
    std::string key;
    if (Peek() == '"') {
      key = BasicString();
    } else if (Peek() == '\'') {
      key = LiteralString();
    } else {
      while (!AtEnd() && (std::isalnum(static_cast<unsigned char>(Peek())) || Peek() == '_' || Peek() == '-')) key += text_[at_++];
      if (key.empty()) Fail(AtEnd() ? "expected a key" : "expected a key, found '" + std::string(1, Peek()) + "'");
    }
    SkipSpaces();
    if (Peek() == '.') Fail("dotted keys are not supported in price files (use a [table] header)");
    return key;
  }

  // "[[name]]" or "[name]"; returns the name.
  std::string Header(bool array) {
    at_ += array ? 2 : 1;
    const std::string name = Key();
    const char* close = array ? "]]" : "]";
    if (!StartsWith(close)) Fail(std::string("expected '") + close + "' to close the table header");
    at_ += array ? 2 : 1;
    ExpectLineEnd("the table header");
    return name;
  }

  TomlValue Value() {
    SkipSpaces();
    if (AtEnd()) Fail("missing value after '='");
    const char c = Peek();
    if (StartsWith("\"\"\"") || StartsWith("'''")) Fail("multi-line strings are not supported in price files");
    if (c == '"') return BasicString();
    if (c == '\'') return LiteralString();
    if (c == '[') Fail("arrays are not supported in price files");
    if (c == '{') Fail("inline tables are not supported in price files");
    std::string token;
    while (!AtEnd() && Peek() != ' ' && Peek() != '\t' && Peek() != '#') token += text_[at_++];
    if (token == "true") return true;
    if (token == "false") return false;
    return Number(token);
  }

 private:
  std::string BasicString() {
    ++at_;  // opening quote
    std::string value;
    while (true) {
      if (AtEnd()) Fail("unterminated string");
      const char c = text_[at_++];
      if (c == '"') return value;
      if (c != '\\') {
        value += c;
        continue;
      }
      if (AtEnd()) Fail("unterminated string");
      const char e = text_[at_++];
      switch (e) {
        case '"': value += '"'; break;
        case '\\': value += '\\'; break;
        case 'n': value += '\n'; break;
        case 't': value += '\t'; break;
        case 'r': value += '\r'; break;
        default: Fail(std::string("unsupported escape '\\") + e + "' in a string");
      }
    }
  }

  std::string LiteralString() {
    ++at_;
    const size_t close = text_.find('\'', at_);
    if (close == std::string::npos) Fail("unterminated string");
    std::string value = text_.substr(at_, close - at_);
    at_ = close + 1;
    return value;
  }

  // Digits with single underscores between them: "1_000". Returns the digits, or "" when malformed.
  static std::string Digits(const std::string& text, size_t& at) {
    std::string digits;
    while (at < text.size()) {
      if (std::isdigit(static_cast<unsigned char>(text[at]))) {
        digits += text[at++];
      } else if (text[at] == '_' && !digits.empty() && at + 1 < text.size() &&
                 std::isdigit(static_cast<unsigned char>(text[at + 1]))) {
        ++at;
      } else {
        break;
      }
    }
    return digits;
  }

  TomlValue Number(const std::string& token) {
    if (token.empty()) Fail("missing value after '='");
    std::string bare = token;
    if (bare[0] == '+' || bare[0] == '-') bare = bare.substr(1);
    if (bare == "inf" || bare == "nan") Fail("'" + token + "': inf and nan are not accepted in price files");
    const bool year_month = bare.size() >= 7 && bare[4] == '-' &&
                            std::all_of(bare.begin(), bare.begin() + 4, [](char c) { return std::isdigit(static_cast<unsigned char>(c)); });
    if (token.find(':') != std::string::npos || year_month) {
      Fail("'" + token + "': dates and times are not supported in price files");
    }
    if (bare.size() > 1 && bare[0] == '0' && std::isalpha(static_cast<unsigned char>(bare[1])) && bare[1] != 'e' &&
        bare[1] != 'E') {
      Fail("'" + token + "': only decimal numbers are supported in price files");
    }
    // [sign] int [. digits] [e [sign] digits], each digit run with optional single underscores.
    size_t at = token[0] == '+' || token[0] == '-' ? 1 : 0;
    std::string canonical = token[0] == '-' ? "-" : "";
    const std::string whole = Digits(token, at);
    if (whole.empty()) Fail("'" + token + "' is not a value (strings need quotes: \"...\")");
    if (whole.size() > 1 && whole[0] == '0') Fail("'" + token + "': leading zeros are not allowed");
    canonical += whole;
    bool is_float = false;
    if (at < token.size() && token[at] == '.') {
      ++at;
      const std::string fraction = Digits(token, at);
      if (fraction.empty()) Fail("'" + token + "': a decimal point needs digits after it");
      canonical += "." + fraction;
      is_float = true;
    }
    if (at < token.size() && (token[at] == 'e' || token[at] == 'E')) {
      ++at;
      canonical += "e";
      if (at < token.size() && (token[at] == '+' || token[at] == '-')) canonical += token[at++];
      const std::string exponent = Digits(token, at);
      if (exponent.empty()) Fail("'" + token + "': an exponent needs digits");
      canonical += exponent;
      is_float = true;
    }
    if (at != token.size()) Fail("'" + token + "' is not a number (strings need quotes: \"...\")");
    if (!is_float) {
      int64_t value = 0;
      const auto [end, ec] = std::from_chars(canonical.data(), canonical.data() + canonical.size(), value);
      if (ec != std::errc() || end != canonical.data() + canonical.size()) Fail("'" + token + "' is out of range");
      return value;
    }
    const double value = std::strtod(canonical.c_str(), nullptr);
    if (!std::isfinite(value)) Fail("'" + token + "' is out of range");
    return value;
  }

  const std::string& text_;
  const std::string& file_;
  int number_;
  size_t at_ = 0;
};

// ---- GPU models ----------------------------------------------------------------------------------------------

// Upper-cased words of a device or model name, with '-', '_' and ',' as separators.
std::vector<std::string> NameWords(const std::string& name) {
  std::string text;
  for (char c : name) text += (c == '-' || c == '_' || c == ',') ? ' ' : static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  std::istringstream in(text);
  std::vector<std::string> words;
  for (std::string word; in >> word;) words.push_back(word);
  return words;
}

std::string Canonical(const std::string& name) {
  return JoinNames(NameWords(name), " ");
}

// ---- price file ----------------------------------------------------------------------------------------------

// Reads the typed fields of one table, rejecting unknown keys at the end.
class FieldReader {
 public:
  FieldReader(const TomlTable& table, const std::string& file, std::string where)
      : table_(table), file_(file), where_(std::move(where)) {}

  [[noreturn]] void Fail(int line, const std::string& what) const {
    throw InputError(file_ + ":" + std::to_string(line) + ": " + where_ + what);
  }
  int LineOf(const std::string& key) const {
    auto it = table_.entries.find(key);
    return it == table_.entries.end() ? table_.line : it->second.line;
  }
  const TomlEntry* Find(const std::string& key) {
    used_.insert(key);
    auto it = table_.entries.find(key);
    return it == table_.entries.end() ? nullptr : &it->second;
  }

  std::optional<std::string> OptionalString(const std::string& key) {
    const TomlEntry* entry = Find(key);
    if (!entry) return std::nullopt;
    if (!std::holds_alternative<std::string>(entry->value)) Fail(entry->line, key + " must be a string in quotes");
    return std::get<std::string>(entry->value);
  }
  std::string String(const std::string& key) {
    std::optional<std::string> value = OptionalString(key);
    if (!value) Fail(table_.line, "missing " + key);
    if (value->empty()) Fail(LineOf(key), key + " must not be empty");
    return *value;
  }
  std::optional<double> OptionalNumber(const std::string& key) {
    const TomlEntry* entry = Find(key);
    if (!entry) return std::nullopt;
    if (const auto* i = std::get_if<int64_t>(&entry->value)) return static_cast<double>(*i);
    if (const auto* d = std::get_if<double>(&entry->value)) return *d;
    Fail(entry->line, key + " must be a number");
  }
  // A number >= 0 (> 0 when `positive`); required.
  double Number(const std::string& key, bool positive) {
    std::optional<double> value = OptionalNumber(key);
    if (!value) Fail(table_.line, "missing " + key);
    CheckSign(key, *value, positive);
    return *value;
  }
  void CheckSign(const std::string& key, double value, bool positive) const {
    if (positive ? !(value > 0) : !(value >= 0)) {
      std::ostringstream text;
      text << key << " must be " << (positive ? "> 0" : ">= 0") << ", got " << value;
      Fail(LineOf(key), text.str());
    }
  }
  int64_t Integer(const std::string& key) {
    const TomlEntry* entry = Find(key);
    if (!entry) Fail(table_.line, "missing " + key);
    const auto* value = std::get_if<int64_t>(&entry->value);
    if (!value) Fail(entry->line, key + " must be a whole number");
    return *value;
  }
  std::optional<bool> OptionalBool(const std::string& key) {
    const TomlEntry* entry = Find(key);
    if (!entry) return std::nullopt;
    const auto* value = std::get_if<bool>(&entry->value);
    if (!value) Fail(entry->line, key + " must be true or false");
    return *value;
  }
  void RejectUnknown(const std::string& accepted) const {
    for (const auto& [key, entry] : table_.entries) {
      if (!used_.contains(key)) Fail(entry.line, "unknown key '" + key + "' (accepted: " + accepted + ")");
    }
  }

 private:
  const TomlTable& table_;
  const std::string& file_;
  std::string where_;
  std::set<std::string> used_;
};

constexpr const char* kOfferingKeys =
    "name, gpu, gpus_per_node, usd_per_gpu_hour, usd_per_node_hour, gpu_memory_gib, storage_usd_per_gb_month, "
    "egress_usd_per_gb, mtbf_node_hours, restart_hours";
constexpr const char* kAssumptionKeys =
    "checkpoint_size_gb, checkpoints_kept, dataset_gb, egress_gb, checkpoint_interval_hours, young_daly_interval";

Offering ReadOffering(const TomlTable& table, const std::string& file, size_t index) {
  FieldReader probe(table, file, "");
  const std::optional<std::string> name = probe.OptionalString("name");
  std::string where = "offering '";
  where += name ? *name : '#' + std::to_string(index + 1);
  where += "': ";
  FieldReader r(table, file, where);
  Offering o;
  o.line = table.line;
  o.name = r.String("name");
  const std::string gpu = r.String("gpu");
  o.gpu = FindGpuModel(gpu, file + ":" + std::to_string(r.LineOf("gpu")) + ": offering '" + o.name + "'").name;
  const int64_t per_node = r.Integer("gpus_per_node");
  if (per_node <= 0 || per_node > 1024) r.Fail(r.LineOf("gpus_per_node"), "gpus_per_node must be 1..1024");
  o.gpus_per_node = static_cast<int>(per_node);
  o.usd_per_gpu_hour = r.OptionalNumber("usd_per_gpu_hour");
  o.usd_per_node_hour = r.OptionalNumber("usd_per_node_hour");
  if (o.usd_per_gpu_hour.has_value() == o.usd_per_node_hour.has_value()) {
    r.Fail(table.line, o.usd_per_gpu_hour ? "give usd_per_gpu_hour or usd_per_node_hour, not both"
                                          : "missing price: give usd_per_gpu_hour or usd_per_node_hour");
  }
  if (o.usd_per_gpu_hour) r.CheckSign("usd_per_gpu_hour", *o.usd_per_gpu_hour, true);
  if (o.usd_per_node_hour) r.CheckSign("usd_per_node_hour", *o.usd_per_node_hour, true);
  const std::optional<double> memory = r.OptionalNumber("gpu_memory_gib");
  if (memory) r.CheckSign("gpu_memory_gib", *memory, true);
  o.gpu_memory_gib = memory.value_or(FindGpuModel(o.gpu, "").memory_gib);
  o.storage_usd_per_gb_month = r.Number("storage_usd_per_gb_month", false);
  o.egress_usd_per_gb = r.Number("egress_usd_per_gb", false);
  o.mtbf_node_hours = r.Number("mtbf_node_hours", true);
  o.restart_hours = r.Number("restart_hours", false);
  r.RejectUnknown(kOfferingKeys);
  return o;
}

CostAssumptions ReadAssumptions(const TomlTable& table, const std::string& file) {
  FieldReader r(table, file, "[assumptions] ");
  CostAssumptions a;
  if (const TomlEntry* size = r.Find("checkpoint_size_gb")) {
    if (const auto* text = std::get_if<std::string>(&size->value)) {
      if (*text != "measured") r.Fail(size->line, "checkpoint_size_gb must be \"measured\" or a number of GB");
    } else {
      a.checkpoint_size = CheckpointSizeSource::kGigabytes;
      a.checkpoint_gb = r.Number("checkpoint_size_gb", false);
    }
  }
  if (table.entries.contains("checkpoints_kept")) {
    const int64_t kept = r.Integer("checkpoints_kept");
    if (kept < 0 || kept > 1000000) r.Fail(r.LineOf("checkpoints_kept"), "checkpoints_kept must be 0..1000000");
    a.checkpoints_kept = static_cast<int>(kept);
  }
  if (table.entries.contains("dataset_gb")) a.dataset_gb = r.Number("dataset_gb", false);
  if (table.entries.contains("egress_gb")) a.egress_gb = r.Number("egress_gb", false);
  if (table.entries.contains("checkpoint_interval_hours")) {
    a.checkpoint_interval_hours = r.Number("checkpoint_interval_hours", true);
  }
  a.young_daly_interval = r.OptionalBool("young_daly_interval").value_or(false);
  r.RejectUnknown(kAssumptionKeys);
  return a;
}

}  // namespace

TomlDocument ParseToml(const std::string& text, const std::string& file) {
  TomlDocument doc;
  TomlTable* current = &doc.root;
  std::istringstream in(text);
  std::string line;
  for (int number = 1; std::getline(in, line); ++number) {
    if (!line.empty() && line.back() == '\r') line.pop_back();
    LineParser p(line, file, number);
    p.SkipSpaces();
    if (p.AtEnd() || p.Peek() == '#') continue;
    if (p.Peek() == '[') {
      const bool array = p.Peek(1) == '[';
      const std::string name = p.Header(array);
      if (array) {
        if (doc.tables.contains(name)) p.Fail("[[" + name + "]] reuses the name of the table [" + name + "]");
        std::vector<TomlTable>& list = doc.table_arrays[name];
        list.push_back(TomlTable{number, {}});
        current = &list.back();
      } else {
        if (doc.tables.contains(name)) p.Fail("table [" + name + "] defined twice");
        if (doc.table_arrays.contains(name)) p.Fail("[" + name + "] reuses the name of the array [[" + name + "]]");
        current = &doc.tables[name];
        current->line = number;
      }
      continue;
    }
    const std::string key = p.Key();
    if (!p.Consume('=')) p.Fail("expected '=' after the key '" + key + "'");
    TomlValue value = p.Value();
    p.ExpectLineEnd("the value");
    if (current->entries.contains(key)) {
      p.Fail("duplicate key '" + key + "' (first on line " + std::to_string(current->entries[key].line) + ")");
    }
    current->entries[key] = TomlEntry{std::move(value), number};
  }
  return doc;
}

const std::vector<GpuModel>& KnownGpuModels() {
  // Memory as sold, in GiB (a datasheet's "80GB" of HBM is 80 GiB); the more specific names first.
  static const std::vector<GpuModel> models = {
      {"B200", {"B200"}, {}, 180},
      {"GH200", {"GH200"}, {}, 96},
      {"H200 NVL", {"H200", "NVL"}, {}, 141},
      {"H200 SXM", {"H200"}, {"NVL"}, 141},
      {"H100 NVL", {"H100", "NVL"}, {}, 94},
      {"H100 PCIe", {"H100", "PCIE"}, {}, 80},
      {"H100 SXM", {"H100"}, {"PCIE", "NVL"}, 80},
      {"A100 SXM 80GB", {"A100", "SXM4", "80GB"}, {}, 80},
      {"A100 SXM 40GB", {"A100", "SXM4", "40GB"}, {}, 40},
      {"A100 PCIe 80GB", {"A100", "PCIE", "80GB"}, {}, 80},
      {"A100 PCIe 40GB", {"A100", "PCIE", "40GB"}, {}, 40},
      {"L40S", {"L40S"}, {}, 48},
      {"L4", {"L4"}, {}, 24},
      {"A10G", {"A10G"}, {}, 24},
      {"V100 32GB", {"V100", "32GB"}, {}, 32},
      {"V100 16GB", {"V100", "16GB"}, {}, 16},
  };
  return models;
}

std::optional<GpuModel> MatchGpuModel(const std::string& device_name) {
  const std::vector<std::string> words = NameWords(device_name);
  auto has = [&](const std::string& w) { return std::find(words.begin(), words.end(), w) != words.end(); };
  for (const GpuModel& model : KnownGpuModels()) {
    if (std::all_of(model.required.begin(), model.required.end(), has) &&
        std::none_of(model.excluded.begin(), model.excluded.end(), has)) {
      return model;
    }
  }
  return std::nullopt;
}

const GpuModel& FindGpuModel(const std::string& name, const std::string& where) {
  const std::string wanted = Canonical(name);
  for (const GpuModel& model : KnownGpuModels()) {
    if (Canonical(model.name) == wanted) return model;
  }
  throw InputError(where + ": unknown GPU '" + name + "' (known: " + KnownGpuModelNames() + ")");
}

std::string KnownGpuModelNames() {
  std::vector<std::string> names;
  for (const GpuModel& model : KnownGpuModels()) names.push_back(model.name);
  return JoinNames(names, ", ");
}

double Offering::NodeHourUsd() const {
  return usd_per_node_hour ? *usd_per_node_hour : *usd_per_gpu_hour * gpus_per_node;
}

PriceFile ParsePriceFile(const std::string& text, const std::string& path) {
  const TomlDocument doc = ParseToml(text, path);
  PriceFile prices;
  prices.path = path;
  for (const auto& [key, entry] : doc.root.entries) {
    throw InputError(path + ":" + std::to_string(entry.line) + ": key '" + key +
                     "' outside a table (price files hold [assumptions] and [[offering]] tables)");
  }
  for (const auto& [name, table] : doc.tables) {
    if (name != "assumptions") {
      throw InputError(path + ":" + std::to_string(table.line) + ": unknown table [" + name +
                       "] (accepted: [assumptions], [[offering]])");
    }
    prices.assumptions = ReadAssumptions(table, path);
  }
  for (const auto& [name, list] : doc.table_arrays) {
    if (name != "offering") {
      throw InputError(path + ":" + std::to_string(list.front().line) + ": unknown table [[" + name +
                       "]] (accepted: [assumptions], [[offering]])");
    }
    std::set<std::string> names;
    for (size_t i = 0; i < list.size(); ++i) {
      Offering offering = ReadOffering(list[i], path, i);
      if (!names.insert(offering.name).second) {
        throw InputError(path + ":" + std::to_string(offering.line) + ": offering name '" + offering.name +
                         "' used twice");
      }
      prices.offerings.push_back(std::move(offering));
    }
  }
  if (prices.offerings.empty()) throw InputError(path + ": no [[offering]] tables: nothing to price");
  return prices;
}

PriceFile ReadPriceFile(const std::string& path) {
  const std::string problem = InputFileProblem(path);
  if (!problem.empty()) throw InputError("cannot read price file '" + path + "': " + problem);
  std::ifstream in(path, std::ios::binary);
  if (!in) throw InputError("cannot read price file '" + path + "': no such file or not readable");
  std::ostringstream text;
  text << in.rdbuf();
  if (in.bad()) throw InputError("cannot read price file '" + path + "': read error");
  return ParsePriceFile(text.str(), path);
}

}  // namespace tb
