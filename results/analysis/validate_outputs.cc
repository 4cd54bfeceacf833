#include "validate_outputs.h"

#include <cmath>
#include <map>

#include "console.h"
#include "schema.h"
#include "units.h"

namespace tb {
namespace {

namespace sc = schema;

std::string RootText(const Report& report, const schema::TextAttribute& field) {
  const std::string* value = sc::Find(&report.root, field);
  return value ? *value : "";
}

// The host a check concerns, else rank 0's.
std::string HostOf(const Check& c, const Report& report) {
  if (!c.figure.subject.host.empty()) return c.figure.subject.host;
  const Table* ranks = sc::FindTable(sc::FindGroup(report.root, sc::kTopology), sc::topology::kRanks);
  const std::vector<std::string>* hosts = ranks ? sc::Values(*ranks, sc::topology::ranks::host) : nullptr;
  return hosts && !hosts->empty() ? hosts->front() : "unknown";
}

Cell NumberCell(double value) { return std::isfinite(value) ? Cell(value) : Cell(); }

// ---- JUnit ---------------------------------------------------------------------------------------------------

std::string Xml(const std::string& text) {
  std::string out;
  for (char c : text) {
    switch (c) {
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '"': out += "&quot;"; break;
      case '\'': out += "&apos;"; break;
      default:
        // XML 1.0 has no other control characters than tab and line breaks.
        if (static_cast<unsigned char>(c) >= 0x20 || c == '\t' || c == '\n' || c == '\r') out += c;
    }
  }
  return out;
}

std::string Expected(const Check& c) {
  return c.expected ? Format("%.6g", *c.expected) + " " + c.figure.unit + " (" + c.source + ")" : "none";
}

std::string TestCase(const Check& c, const Report& report) {
  std::string text = "    <testcase classname=\"" + Xml(HostOf(c, report)) + "\" name=\"" + Xml(c.figure.key) +
                     "\" time=\"0\">\n";
  const std::string detail = "measured " + (std::isfinite(c.figure.value) ? Format("%.6g", c.figure.value) : c.figure.text) +
                             " " + c.figure.unit + ", expected " + Expected(c) + ": " + c.message;
  if (c.verdict == Verdict::kFail) {
    text += "      <failure type=\"fail\" message=\"" + Xml(detail) + "\">" + Xml(c.figure.title) + "</failure>\n";
  } else if (c.verdict == Verdict::kUnknown) {
    text += "      <skipped message=\"" + Xml("unknown: " + c.message) + "\"/>\n";
  } else {
    text += "      <system-out>" + Xml(std::string(VerdictName(c.verdict)) + ": " + detail) + "</system-out>\n";
  }
  return text + "    </testcase>\n";
}

// ---- Prometheus ----------------------------------------------------------------------------------------------

std::string Label(const std::string& text) {
  std::string out;
  for (char c : text) {
    if (c == '\\') {
      out += "\\\\";
    } else if (c == '"') {
      out += "\\\"";
    } else if (c == '\n') {
      out += "\\n";
    } else {
      out += c;
    }
  }
  return out;
}

// A unit as Prometheus names it, with the factor to its base unit.
std::pair<std::string, double> BaseUnit(const std::string& unit) {
  static const std::map<std::string, std::pair<std::string, double>> units = {
      {"GB/s", {"bytes_per_second", 1e9}}, {"MB/s", {"bytes_per_second", 1e6}}, {"s", {"seconds", 1}},
      {"us", {"seconds", 1e-6}},          {"fraction", {"ratio", 1}},          {"tokens/s", {"tokens_per_second", 1}},
      {"elements", {"elements", 1}},       {"pairs", {"pairs", 1}}};
  auto it = units.find(unit);
  return it == units.end() ? std::pair<std::string, double>{"", 1} : it->second;
}

std::string CheckLabels(const Check& c, const Report& report) {
  const Subject& s = c.figure.subject;
  return "{check=\"" + Label(c.figure.key) + "\",family=\"" + Label(c.figure.family) + "\",host=\"" +
         Label(HostOf(c, report)) + "\",gpu=\"" + Label(s.gpu) + "\",rank=\"" + Label(s.rank) + "\",link=\"" +
         Label(s.link) + "\"}";
}

std::string Prometheus(double value) {
  if (std::isnan(value)) return "NaN";
  if (std::isinf(value)) return value > 0 ? "+Inf" : "-Inf";
  return Format("%.17g", value);
}

// The HELP and TYPE lines of a gauge, then its samples.
std::string Gauge(const std::string& name, const std::string& help, const std::vector<std::string>& samples) {
  if (samples.empty()) return "";
  std::string text = "# HELP " + name + " " + help + "\n# TYPE " + name + " gauge\n";
  for (const std::string& sample : samples) text += name + sample + "\n";
  return text;
}

int StatusValue(Verdict verdict) {
  switch (verdict) {
    case Verdict::kPass: return 0;
    case Verdict::kWarn: return 1;
    case Verdict::kFail: return 2;
    case Verdict::kUnknown: return 3;
  }
  return 3;
}

}  // namespace

RunView ValidateView(const std::string& run_file, const Report& report, const std::vector<Check>& checks) {
  std::map<Verdict, int64_t> counts;
  for (const Check& c : checks) ++counts[c.verdict];
  ViewTable summary{"validate", "summary", "validation", true,
                    {{"run", ""}, {"identity", ""}, {"verdict", ""}, {"checks", ""}, {"pass", ""}, {"warn", ""},
                     {"fail", ""}, {"unknown", ""}},
                    {}};
  summary.rows.push_back({run_file, RunIdentity(report), std::string(VerdictName(OverallVerdict(checks))),
                          static_cast<int64_t>(checks.size()), counts[Verdict::kPass], counts[Verdict::kWarn],
                          counts[Verdict::kFail], counts[Verdict::kUnknown]});
  // On the console a row per check (its key whole), its message on a line under it with the tolerance, where the
  // expectation came from and the GPU.
  ViewTable table{"validate", "checks", "checks", false,
                  {{"verdict", "", 2, false, nullptr, "", Console::kWhole},
                   {"state", "", 2, false, nullptr, "", Console::kWhole},
                   {"family", "", 2, false, nullptr, "", Console::kWhole},
                   {"check", "", 2, false, nullptr, "", Console::kWhole},
                   {"rank", "", 2, false, nullptr, "", Console::kWhole}, {"host", ""},
                   {"gpu", "", 2, false, nullptr, "", Console::kAside}, {"measured", "", -1},
                   {"expected", "", -1, false, nullptr, "", Console::kWhole},
                   {"unit", "", 2, false, nullptr, "", Console::kWhole},
                   {"tolerance", "", 3, false, nullptr, "", Console::kAside},
                   {"source", "", 2, false, nullptr, "", Console::kAside},
                   {"message", "", 2, false, nullptr, "", Console::kNote}},
                  {}};
  for (const Check& c : checks) {
    const Subject& s = c.figure.subject;
    const Cell measured = c.figure.is_text ? Cell(c.figure.text) : NumberCell(c.figure.value);
    table.rows.push_back({std::string(VerdictName(c.verdict)), std::string(CheckState(c)), c.figure.family,
                          c.figure.key, s.rank, s.host, s.gpu,
                          measured, c.expected ? NumberCell(*c.expected) : Cell(), c.figure.unit,
                          c.expected ? Cell(c.tolerance) : Cell(), c.source, c.message});
  }
  return RunView{run_file, {summary, table}};
}

std::string JunitXml(const Report& report, const std::vector<Check>& checks) {
  std::map<std::string, std::vector<const Check*>> families;
  for (const Check& c : checks) families[c.figure.family].push_back(&c);
  auto count = [](const std::vector<const Check*>& list, Verdict v) {
    return std::to_string(std::count_if(list.begin(), list.end(), [v](const Check* c) { return c->verdict == v; }));
  };
  std::vector<const Check*> all;
  for (const Check& c : checks) all.push_back(&c);
  const std::string stamp = RootText(report, sc::root::start_utc);
  // Names that stay the same night after night (a CI system keys its test history on them): the report's path,
  // which changes every night, is in no name.
  std::string text = "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<testsuites name=\"trainbench validate\" tests=\"" + std::to_string(checks.size()) + "\" failures=\"" + count(all, Verdict::kFail) +
                     "\" errors=\"0\" skipped=\"" + count(all, Verdict::kUnknown) + "\" time=\"0\">\n";
  for (const auto& [family, list] : families) {
    text += "  <testsuite name=\"" + Xml(family) + "\" tests=\"" + std::to_string(list.size()) + "\" failures=\"" +
            count(list, Verdict::kFail) + "\" errors=\"0\" skipped=\"" + count(list, Verdict::kUnknown) +
            "\" time=\"0\" timestamp=\"" + Xml(stamp.substr(0, stamp.size() - (stamp.ends_with("Z") ? 1 : 0))) + "\">\n";
    for (const Check* c : list) text += TestCase(*c, report);
    text += "  </testsuite>\n";
  }
  return text + "</testsuites>\n";
}

std::string PrometheusText(const Report& report, const std::vector<Check>& checks) {
  const Group* topology = sc::FindGroup(report.root, sc::kTopology);
  auto version = [&](const schema::TextAttribute& field) {
    const std::string* v = sc::Find(topology, field);
    return v ? *v : "";
  };
  const std::string host = checks.empty() ? "unknown" : HostOf(Check{}, report);
  std::string text = Gauge("trainbench_info", "The run validated and its versions (value 1).",
                           {"{host=\"" + Label(host) + "\",tool_version=\"" +
                            Label(RootText(report, sc::root::tool_version)) + "\",cuda_driver=\"" +
                            Label(version(sc::topology::cuda_driver)) + "\",cuda_runtime=\"" +
                            Label(version(sc::topology::cuda_runtime)) + "\",nccl=\"" + Label(version(sc::topology::nccl)) +
                            "\",mpi=\"" + Label(version(sc::topology::mpi_library)) + "\"} 1"});
  text += Gauge("trainbench_validate_verdict", "The run's verdict: 0 pass, 1 warn, 2 fail.",
                {"{host=\"" + Label(host) + "\"} " + std::to_string(StatusValue(OverallVerdict(checks)))});
  std::vector<std::string> status;
  std::map<std::string, std::vector<std::string>> measured, expected;
  for (const Check& c : checks) {
    const std::string labels = CheckLabels(c, report);
    status.push_back(labels + " " + std::to_string(StatusValue(c.verdict)));
    const auto [unit, factor] = BaseUnit(c.figure.unit);
    if (c.figure.is_text) continue;
    const std::string suffix = unit.empty() ? "" : "_" + unit;
    measured[suffix].push_back(labels + " " + Prometheus(c.figure.value * factor));
    if (c.expected) expected[suffix].push_back(labels + " " + Prometheus(*c.expected * factor));
  }
  text += Gauge("trainbench_check_status", "Verdict of each check: 0 pass, 1 warn, 2 fail, 3 unknown.", status);
  for (const auto& [suffix, samples] : measured) {
    text += Gauge("trainbench_check_measured" + suffix, "The figure each check measured, in base units.", samples);
  }
  for (const auto& [suffix, samples] : expected) {
    text += Gauge("trainbench_check_expected" + suffix, "The figure each check expected, in base units.", samples);
  }
  return text;
}

}  // namespace tb
