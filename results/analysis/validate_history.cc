// validate's history directory: one JSON file per passing night (its identity and its figures), read back as the
// rolling expectation of the nights that follow.
#include <algorithm>
#include <cmath>
#include <filesystem>
#include <system_error>

#include <cctype>
#include <cstdio>
#include <ctime>

#include "durable_file.h"
#include "error.h"
#include "json.h"
#include "paths.h"
#include "schema.h"
#include "toml_reader.h"
#include "validate.h"

namespace tb {
namespace {

namespace fs = std::filesystem;
constexpr const char* kFormat = "trainbench.history";
constexpr int kVersion = 1;

[[noreturn]] void Bad(const std::string& file, const std::string& what) {
  throw InputError("history '" + file + "': " + what);
}

// The typed reading of an entry's fields: each wrong type or value is one line naming the file and the field.
class EntryReader {
 public:
  EntryReader(const std::string& file, const Json& doc) : file_(file), doc_(doc) {}

  const Json* Find(const std::string& key) const {
    auto it = doc_.find(key);
    return it == doc_.end() ? nullptr : &*it;
  }
  std::string Text(const std::string& key, std::optional<std::string> fallback = std::nullopt) const {
    const Json* value = Find(key);
    if (!value && fallback) return *fallback;
    if (!value || !value->is_string()) Wrong(key, "a string");
    return value->get<std::string>();
  }
  bool Flag(const std::string& key, bool fallback) const {
    const Json* value = Find(key);
    if (!value) return fallback;
    if (!value->is_boolean()) Wrong(key, "true or false");
    return value->get<bool>();
  }
  // A number >= 0, or null (NaN); absent: NaN.
  double NonNegative(const std::string& key) const {
    const Json* value = Find(key);
    if (!value || value->is_null()) return NAN;
    if (!value->is_number() || !(value->get<double>() >= 0)) Wrong(key, "a number >= 0 or null");
    return value->get<double>();
  }
  const Json& Object(const std::string& key) const {
    const Json* value = Find(key);
    if (!value || !value->is_object()) Wrong(key, "an object");
    return *value;
  }
  // `value`: the offending value when it is not a top-level field (a member of "values").
  [[noreturn]] void Wrong(const std::string& key, const std::string& want, const Json* value = nullptr) const {
    if (!value) value = Find(key);
    Bad(file_, "damaged entry: \"" + key + "\" must be " + want + ", got " +
                   (value ? std::string(value->type_name()) + " " + Shorten(value->dump()) : std::string("nothing")));
  }

 private:
  static std::string Shorten(const std::string& text) { return text.size() <= 40 ? text : text.substr(0, 37) + "..."; }
  const std::string& file_;
  const Json& doc_;
};

HistoryEntry ParseEntry(const std::string& file, const std::string& text) {
  Json doc;
  try {
    doc = Json::parse(text);
  } catch (const Json::parse_error&) {
    Bad(file, "not JSON: not a file validate wrote (remove it from the history directory)");
  }
  const Json* format = doc.is_object() ? &doc["format"] : nullptr;
  if (!format || !format->is_string() || format->get<std::string>() != kFormat) {
    Bad(file, std::string("not a history entry (no \"format\": \"") + kFormat + "\"): remove it from the history directory");
  }
  const EntryReader r(file, doc);
  const Json* version = r.Find("version");
  if (!version || !version->is_number_integer() || version->get<int64_t>() != kVersion) {
    Bad(file, "history version " + (version ? version->dump() : std::string("(none)")) + " is not supported");
  }
  HistoryEntry e;
  e.file = file;
  e.run = r.Text("run");
  e.start_utc = r.Text("start_utc");
  e.identity = r.Text("identity");
  e.run_key = r.Text("run_key", "");
  for (const auto& [key, value] : r.Object("values").items()) {
    if (!value.is_null() && !value.is_number()) r.Wrong("values." + key, "a number or null", &value);
    e.values[key] = value.is_null() ? NAN : value.get<double>();
  }
  for (const auto& [key, value] : r.Object("texts").items()) {
    if (!value.is_string()) r.Wrong("texts." + key, "a string", &value);
    e.texts[key] = value.get<std::string>();
  }
  e.counted = r.Flag("counted", true);
  e.status = r.Text("status", "complete");
  if (e.status != "complete" && e.status != "interrupted" && e.status != "failed") {
    r.Wrong("status", "\"complete\", \"interrupted\" or \"failed\"");
  }
  e.node_hours = r.NonNegative("node_hours");
  return e;
}

// The history entry of `report`, if `e` is one: the same run key, or for an entry from before run keys the same
// configuration and start.
bool SameRun(const HistoryEntry& e, const std::string& run_key, const std::string& identity, const std::string& start) {
  return e.run_key.empty() ? e.identity == identity && e.start_utc == start : e.run_key == run_key;
}

// "2026-12-01T17:35:00Z" -> "20261201T173500Z": a file name that sorts by time.
std::string Stamp(const std::string& utc) {
  std::string stamp;
  for (char c : utc) {
    if (std::isalnum(static_cast<unsigned char>(c))) stamp += c;
  }
  return stamp.empty() ? "unknown" : stamp;
}

// Nodes x wall time of the run in hours; NaN when the report lacks its times or nodes.
double NodeHours(const Report& report) {
  const std::string* start = schema::Find(&report.root, schema::root::start_utc);
  const std::string* end = schema::Find(&report.root, schema::root::end_utc);
  const int64_t* nodes = schema::Find(&report.root, schema::root::n_nodes);
  if (!start || !end || !nodes) return NAN;
  const std::optional<double> a = UtcSeconds(*start), b = UtcSeconds(*end);
  if (!a || !b || *b < *a || *nodes < 1) return NAN;
  return static_cast<double>(*nodes) * (*b - *a) / 3600.0;
}

}  // namespace

std::optional<double> UtcSeconds(const std::string& utc) {
  std::tm tm{};
  const char* end = strptime(utc.c_str(), "%Y-%m-%dT%H:%M:%SZ", &tm);
  if (end == nullptr || *end != '\0') return std::nullopt;
  return static_cast<double>(timegm(&tm));
}

FailureHistory ReadFailureHistory(const std::string& dir) {
  FailureHistory h;
  h.dir = dir;
  for (const HistoryEntry& e : ReadHistory(dir)) {
    if (std::isnan(e.node_hours)) continue;
    ++h.runs;
    h.node_hours += e.node_hours;
    if (e.status == "failed" || e.status == "interrupted") ++h.failures;
  }
  return h;
}

std::vector<HistoryEntry> ReadHistory(const std::string& dir) {
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) throw InputError("--history '" + dir + "': not a directory (create it first)");
  std::vector<HistoryEntry> entries;
  for (const fs::directory_entry& item : fs::directory_iterator(dir, ec)) {
    const std::string path = item.path().string();
    const std::string name = item.path().filename().string();
    if (name.rfind(".tmp.", 0) == 0 || name.find(".json.tmp.") != std::string::npos) continue;  // a write in progress
    if (item.path().extension() != ".json") Bad(path, "not a history entry (only *.json files validate wrote belong here)");
    // A concurrent validate may prune an entry between the listing and the read: it is gone, not damaged.
    if (InputFileProblem(path) == "no such file") continue;
    std::string text;
    try {
      text = ReadTextFile(path, "history entry");
    } catch (const InputError&) {
      if (InputFileProblem(path) == "no such file") continue;
      throw;
    }
    entries.push_back(ParseEntry(path, text));
  }
  if (ec) throw InputError("--history '" + dir + "': cannot list it: " + ec.message());
  std::sort(entries.begin(), entries.end(), [](const HistoryEntry& a, const HistoryEntry& b) {
    return a.start_utc != b.start_utc ? a.start_utc < b.start_utc : a.file < b.file;
  });
  return entries;
}

std::vector<HistoryEntry> HistoryOf(const std::vector<HistoryEntry>& all, const std::string& identity, int nights) {
  std::vector<HistoryEntry> mine;
  for (const HistoryEntry& e : all) {
    if (e.identity == identity && e.counted) mine.push_back(e);
  }
  if (static_cast<int>(mine.size()) > nights) mine.erase(mine.begin(), mine.end() - nights);
  return mine;
}

std::vector<std::string> ExpectationFiles::Given() const {
  std::vector<std::string> given;
  for (const std::string* path : {&policy, &baseline, &history}) {
    if (!path->empty()) given.push_back(*path);
  }
  return given;
}

ValidateInputs ReadValidateInputs(const Report& report, const ExpectationFiles& files) {
  ValidateInputs inputs;
  if (!files.policy.empty()) inputs.policy = ReadValidatePolicy(files.policy);
  if (!files.baseline.empty()) {
    inputs.baseline = ReadReport(files.baseline);
    inputs.baseline_file = files.baseline;
  }
  if (!files.history.empty()) {
    std::vector<HistoryEntry> all = ReadHistory(files.history);
    std::erase_if(all, [&](const HistoryEntry& e) { return IsEntryOf(e, report); });
    inputs.history = HistoryOf(all, RunIdentity(report), inputs.policy.history_nights);
  }
  return inputs;
}

std::string RunKey(const Report& report) {
  if (const std::string* id = schema::Find(&report.root, schema::root::run_id); id && !id->empty()) return *id;
  // A report from before run_id: a digest of what tells runs apart (FNV-1a, 64 bits).
  uint64_t hash = 1469598103934665603ull;
  auto mix = [&hash](const std::string& text) {
    for (unsigned char c : text + '\n') hash = (hash ^ c) * 1099511628211ull;
  };
  for (const schema::TextAttribute* field : {&schema::root::command_line, &schema::root::start_utc,
                                             &schema::root::end_utc, &schema::root::status,
                                             &schema::root::status_reason}) {
    const std::string* text = schema::Find(&report.root, *field);
    mix(text ? *text : "");
  }
  mix(RunIdentity(report));
  for (const Figure& f : ExtractFigures(report)) mix(f.key + "=" + (f.is_text ? f.text : Json(f.value).dump()));
  char digest[17];
  std::snprintf(digest, sizeof digest, "%016llx", static_cast<unsigned long long>(hash));
  return std::string("digest-") + digest;
}

bool IsEntryOf(const HistoryEntry& entry, const Report& report) {
  const std::string* start = schema::Find(&report.root, schema::root::start_utc);
  return SameRun(entry, RunKey(report), RunIdentity(report), start ? *start : "");
}

std::string AddToHistory(const std::string& dir, const Report& report, const std::string& run_file,
                         const std::vector<Figure>& figures, int keep, bool counted) {
  const std::string* start = schema::Find(&report.root, schema::root::start_utc);
  const std::string identity = RunIdentity(report);
  const std::string key = RunKey(report);
  for (const HistoryEntry& e : ReadHistory(dir)) {
    if (SameRun(e, key, identity, start ? *start : "")) return "";
  }
  Json doc = {{"format", kFormat},
              {"version", kVersion},
              {"run", run_file},
              {"run_key", key},
              {"start_utc", start ? *start : ""},
              {"identity", identity},
              {"values", Json::object()},
              {"texts", Json::object()},
              {"counted", counted}};
  const std::string* status = schema::Find(&report.root, schema::root::status);
  doc["status"] = status ? *status : "complete";
  const double node_hours = NodeHours(report);
  doc["node_hours"] = std::isfinite(node_hours) ? Json(node_hours) : Json();
  for (const Figure& f : figures) {
    if (f.is_text) {
      doc["texts"][f.key] = f.text;
    } else {
      doc["values"][f.key] = std::isfinite(f.value) ? Json(f.value) : Json();
    }
  }
  // One name per run (its start, for the order, and its key): concurrent validates of different runs never write
  // the same file, and of the same run exactly one creates it.
  const std::string path = (fs::path(dir) / (Stamp(start ? *start : "") + "-" + key + ".json")).string();
  const std::string text = DumpJson(doc) + "\n";
  if (!CreateFileDurably(path, text.data(), text.size())) return "";
  // The oldest nights of this configuration and kind (counted or not) beyond `keep` go; one a concurrent validate
  // removed first is gone already.
  std::vector<HistoryEntry> mine;
  for (const HistoryEntry& e : ReadHistory(dir)) {
    if (e.identity == identity && e.counted == counted) mine.push_back(e);
  }
  std::error_code ignored;
  for (size_t i = 0; i + static_cast<size_t>(keep) < mine.size(); ++i) fs::remove(mine[i].file, ignored);
  return path;
}

}  // namespace tb
