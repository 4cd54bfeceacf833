// validate's history directory: one JSON file per passing night (its identity and its figures), read back as the
// rolling expectation of the nights that follow.
#include <algorithm>
#include <cmath>
#include <filesystem>
#include <system_error>

#include <cctype>
#include <ctime>

#include "durable_file.h"
#include "error.h"
#include "json.h"
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

HistoryEntry ParseEntry(const std::string& file, const std::string& text) {
  Json doc;
  try {
    doc = Json::parse(text);
  } catch (const Json::parse_error&) {
    Bad(file, "not JSON: not a file validate wrote (remove it from the history directory)");
  }
  if (!doc.is_object() || doc.value("format", "") != kFormat) {
    Bad(file, std::string("not a history entry (no \"format\": \"") + kFormat + "\"): remove it from the history directory");
  }
  if (doc.value("version", 0) != kVersion) Bad(file, "history version " + doc.value("version", Json()).dump() + " is not supported");
  HistoryEntry e;
  e.file = file;
  try {
    e.run = doc.at("run").get<std::string>();
    e.start_utc = doc.at("start_utc").get<std::string>();
    e.identity = doc.at("identity").get<std::string>();
    for (const auto& [key, value] : doc.at("values").items()) e.values[key] = value.is_null() ? NAN : value.get<double>();
    for (const auto& [key, value] : doc.at("texts").items()) e.texts[key] = value.get<std::string>();
    e.counted = doc.value("counted", true);
    e.status = doc.value("status", std::string("complete"));
    const Json hours = doc.value("node_hours", Json());
    e.node_hours = hours.is_number() ? hours.get<double>() : NAN;
  } catch (const Json::exception& error) {
    Bad(file, std::string("damaged entry: ") + error.what());
  }
  return e;
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
    entries.push_back(ParseEntry(path, ReadTextFile(path, "history entry")));
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

std::string AddToHistory(const std::string& dir, const Report& report, const std::string& run_file,
                         const std::vector<Figure>& figures, int keep, bool counted) {
  const std::string* start = schema::Find(&report.root, schema::root::start_utc);
  const std::string identity = RunIdentity(report);
  for (const HistoryEntry& e : ReadHistory(dir)) {
    if (e.identity == identity && start && e.start_utc == *start) return "";
  }
  Json doc = {{"format", kFormat},
              {"version", kVersion},
              {"run", run_file},
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
  std::string path = (fs::path(dir) / (Stamp(start ? *start : "") + ".json")).string();
  for (int n = 2; fs::exists(path); ++n) path = (fs::path(dir) / (Stamp(start ? *start : "") + "-" + std::to_string(n) + ".json")).string();
  const std::string text = DumpJson(doc) + "\n";
  ReplaceFileDurably(path, text.data(), text.size());
  // The oldest nights of this configuration and kind (counted or not) beyond `keep` go.
  const std::vector<HistoryEntry> all = ReadHistory(dir);
  std::vector<HistoryEntry> mine;
  for (const HistoryEntry& e : all) {
    if (e.identity == identity && e.counted == counted) mine.push_back(e);
  }
  for (size_t i = 0; i + static_cast<size_t>(keep) < mine.size(); ++i) fs::remove(mine[i].file);
  return path;
}

}  // namespace tb
