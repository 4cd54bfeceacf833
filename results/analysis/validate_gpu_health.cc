// validate's GPU health checks (family gpu_health, results/README.md "Validation"): one check per GPU of the
// report's gpu_health/devices table, judged within the run; a CUDA run without that data is unknown.
#include <algorithm>
#include <cmath>
#include <set>

#include "console.h"
#include "schema.h"
#include "validate_internal.h"

namespace tb {
namespace {

namespace sc = schema;
namespace dev = sc::gpu_health::devices;
const double kNaN = std::nan("");

// One row of gpu_health/devices, read through the schema (NaN, "" or -1 where the table lacks a column).
struct Row {
  const Table& table;
  size_t row;
  double Real(const sc::RealColumn& c) const {
    const std::vector<double>* v = sc::Values(table, c);
    return v && row < v->size() ? (*v)[row] : kNaN;
  }
  std::string Text(const sc::TextColumn& c) const {
    const std::vector<std::string>* v = sc::Values(table, c);
    return v && row < v->size() ? (*v)[row] : "";
  }
  int64_t Int(const sc::IntColumn& c) const {
    const std::vector<int64_t>* v = sc::Values(table, c);
    return v && row < v->size() ? (*v)[row] : -1;
  }
};

// What one GPU's figures say: problems by severity, and what NVML did not report.
struct Findings {
  std::vector<std::string> fails, warns, missing, notes;
  void Add(Verdict verdict, std::string what) { (verdict == Verdict::kFail ? fails : warns).push_back(std::move(what)); }
};

std::string Count(double value) { return Format("%.0f", value); }

void JudgeEcc(const Row& r, Findings& f) {
  const double uncorrected = r.Real(dev::ecc_uncorrected_volatile), corrected = r.Real(dev::ecc_corrected_volatile);
  if (std::isnan(uncorrected) || std::isnan(corrected)) f.missing.push_back("ECC counts");
  if (uncorrected > 0) f.Add(Verdict::kFail, Count(uncorrected) + " uncorrected ECC errors");
  if (corrected > 0) f.Add(Verdict::kWarn, Count(corrected) + " corrected ECC errors");
}

// Page retirement (before Ampere) or row remapping (Ampere on): a GPU has one of them.
void JudgeMemoryRepair(const Row& r, Findings& f) {
  const double retire_pending = r.Real(dev::retired_pages_pending), remap_pending = r.Real(dev::remap_pending);
  if (std::isnan(retire_pending) && std::isnan(remap_pending)) f.missing.push_back("page retirement and row remapping");
  if (retire_pending > 0) f.Add(Verdict::kFail, "a page retirement is pending (it takes effect at the next driver load)");
  if (remap_pending > 0) f.Add(Verdict::kFail, "a row remap is pending (it takes effect at the next GPU reset)");
  if (r.Real(dev::remap_failure) > 0) f.Add(Verdict::kFail, "a row remap failed");
}

// A link below its generation or width while the GPU worked has trained down: it moves data slower than it can.
void JudgePcie(const Row& r, Findings& f) {
  if (r.Int(dev::busy_samples) <= 0) {
    // A GPU no rank used idles, and idle links train down: its link cannot be judged, and need not be.
    if (r.Text(dev::ranks).empty()) {
      f.notes.push_back("PCIe not judged (idle: no rank used it)");
    } else {
      f.missing.push_back("PCIe link under load (no busy sample)");
    }
    return;
  }
  const double gen = r.Real(dev::pcie_gen_current), gen_max = r.Real(dev::pcie_gen_max);
  const double width = r.Real(dev::pcie_width_current), width_max = r.Real(dev::pcie_width_max);
  if (std::isnan(gen) || std::isnan(gen_max) || std::isnan(width) || std::isnan(width_max)) {
    f.missing.push_back("PCIe generation and width");
  }
  if (gen < gen_max) f.Add(Verdict::kWarn, "PCIe gen " + Count(gen) + " of " + Count(gen_max) + " while busy (downtrained)");
  if (width < width_max) {
    f.Add(Verdict::kWarn, "PCIe x" + Count(width) + " of x" + Count(width_max) + " while busy (downtrained)");
  }
}

// Clock event reasons: the hardware slowing the GPU down fails; thermal slowdown warns; the power cap, idling and
// application clocks are normal operation.
void JudgeClockEvents(const Row& r, Findings& f) {
  const std::string reasons = r.Text(dev::clock_event_reasons);
  if (reasons.empty() || reasons == "not supported") {
    f.missing.push_back("clock event reasons");
    return;
  }
  std::set<std::string> seen;
  for (size_t start = 0; start <= reasons.size();) {
    const size_t comma = std::min(reasons.find(',', start), reasons.size());
    seen.insert(reasons.substr(start, comma - start));
    start = comma + 1;
  }
  for (const char* reason : {"hw_slowdown", "hw_power_brake_slowdown"}) {
    if (seen.contains(reason)) f.Add(Verdict::kFail, std::string("clock event ") + reason);
  }
  for (const char* reason : {"sw_thermal_slowdown", "hw_thermal_slowdown"}) {
    if (seen.contains(reason)) f.Add(Verdict::kWarn, std::string("clock event ") + reason);
  }
}

std::string Joined(const std::vector<std::string>& items) {
  std::string text;
  for (const std::string& item : items) {
    if (!text.empty()) text += "; ";
    text += item;
  }
  return text;
}

Check JudgeDevice(const Row& r) {
  Findings f;
  JudgeEcc(r, f);
  JudgeMemoryRepair(r, f);
  JudgePcie(r, f);
  JudgeClockEvents(r, f);
  if (!r.Text(dev::nvml_errors).empty()) f.Add(Verdict::kWarn, "NVML errors: " + r.Text(dev::nvml_errors));
  const std::string index = std::to_string(r.Int(dev::index));
  Subject s{r.Text(dev::ranks), r.Text(dev::host), "GPU " + index + " " + r.Text(dev::name) + " (" +
                                                       r.Text(dev::pci_bus_id) + ")", ""};
  Figure fig = MakeFigure("gpu_health." + s.host + ".gpu" + index, "gpu_health",
                          "health of " + s.gpu + " on " + s.host, "", Better::kLower, kNaN, s);
  fig.is_text = true;
  Check c;
  c.verdict = !f.fails.empty() ? Verdict::kFail : !f.warns.empty() ? Verdict::kWarn
            : !f.missing.empty() ? Verdict::kUnknown : Verdict::kPass;
  std::vector<std::string> said = f.fails;
  said.insert(said.end(), f.warns.begin(), f.warns.end());
  if (!f.missing.empty()) said.push_back("not reported by NVML: " + Joined(f.missing));
  said.insert(said.end(), f.notes.begin(), f.notes.end());
  fig.text = said.empty() ? "healthy" : Joined(said);
  c.message = s.host + " " + s.gpu + ": " + (said.empty() ? "no ECC error, no pending repair, PCIe at its maximum, "
                                                            "no thermal or hardware slowdown" : fig.text);
  c.source = "NVML health rules (results/README.md, Validation)";
  c.figure = std::move(fig);
  return c;
}

// An unknown check for a host (or the whole run, host "") whose GPUs have no health data.
Check NoData(const std::string& host, const std::string& why) {
  Subject s{"", host, "", ""};
  Figure fig = MakeFigure(host.empty() ? "gpu_health" : "gpu_health." + host, "gpu_health",
                          "GPU health" + (host.empty() ? std::string() : " on " + host), "", Better::kLower, kNaN, s);
  fig.is_text = true;
  fig.text = why;
  Check c;
  c.figure = std::move(fig);
  c.message = "no GPU health data: " + why;
  return c;
}

// The hosts whose ranks ran on GPUs.
std::set<std::string> GpuHosts(const Report& report) {
  std::set<std::string> hosts;
  const Table* ranks = sc::FindTable(sc::FindGroup(report.root, sc::kTopology), sc::topology::kRanks);
  const auto* host = ranks ? sc::Values(*ranks, sc::topology::ranks::host) : nullptr;
  const auto* gpu = ranks ? sc::Values(*ranks, sc::topology::ranks::gpu_index) : nullptr;
  for (size_t i = 0; host && gpu && i < host->size() && i < gpu->size(); ++i) {
    if ((*gpu)[i] >= 0) hosts.insert((*host)[i]);
  }
  return hosts;
}

}  // namespace

void AddGpuHealthChecks(const Report& report, std::vector<Check>& checks) {
  const Group* health = sc::FindGroup(report.root, sc::kGpuHealth);
  const Table* devices = sc::FindTable(health, sc::gpu_health::kDevices);
  std::set<std::string> sampled;
  for (size_t i = 0; devices && i < devices->rows(); ++i) {
    checks.push_back(JudgeDevice(Row{*devices, i}));
    sampled.insert(checks.back().figure.subject.host);
  }
  // Without data a CPU run has nothing to judge; a run on GPUs has GPUs nobody looked at.
  const std::string* backend = sc::Find(&report.root, sc::root::backend);
  if (!backend || *backend != "nccl") return;
  if (!health) {
    checks.push_back(NoData("", "the report has no gpu_health group (written before trainbench recorded GPU health)"));
    return;
  }
  const std::string* source = sc::Find(health, sc::gpu_health::source);
  for (const std::string& host : GpuHosts(report)) {
    if (!sampled.contains(host)) checks.push_back(NoData(host, source ? *source : "(no source recorded)"));
  }
}

}  // namespace tb
